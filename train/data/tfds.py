"""TensorFlow Datasets MovieLens ratings (`movielens/100k-ratings`, `movielens/1m-ratings`, ...).

Reads the already prepared dataset from `data_dir` (no download unless `download=True`), then
applies the same k-core filtering, renumbering and split as the raw readers
(`train.data.splits.build_sequence_data`). String ids that are all decimal integers keep their
numeric order when renumbered; other strings are ordered as bytes.
"""

from __future__ import annotations

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np

from train.data.records import SequenceData
from train.data.splits import build_sequence_data


def _ids_to_int(values: np.ndarray) -> np.ndarray:
  if values.dtype.kind in "iu":
    return values.astype(np.int64)
  strings = np.array([v.decode() if isinstance(v, bytes) else str(v) for v in values])
  try:
    return strings.astype(np.int64)
  except ValueError:
    _, inverse = np.unique(strings, return_inverse=True)
    return inverse.astype(np.int64) + 1


def load_tfds(
  *,
  tfds_name: str = "movielens/100k-ratings",
  data_dir=None,
  download: bool = False,
  split: str = "leave_one_out",
  min_count: int = 5,
  iterate_core: bool = True,
  temporal_fraction: float = 0.1,
  **split_kwargs,
) -> SequenceData:
  """Loads a TFDS MovieLens ratings dataset (features user_id, movie_id, timestamp)."""
  import tensorflow_datasets as tfds

  if not tfds_name.startswith("movielens/") or not tfds_name.endswith("-ratings"):
    raise ValueError(f"tfds_name must be a movielens/*-ratings dataset, got {tfds_name!r}")
  try:
    ds = tfds.load(tfds_name, split="train", data_dir=data_dir, download=download)
  except Exception as e:  # tfds raises assorted errors for a missing preparation
    raise FileNotFoundError(
      f"TFDS dataset {tfds_name!r} not available in data_dir={data_dir!r} ({e}); prepare it "
      "with `tfds build` or pass download=True"
    ) from e
  users, items, times = [], [], []
  ds = ds.map(lambda x: (x["user_id"], x["movie_id"], x["timestamp"])).batch(65536)
  for u, i, t in tfds.as_numpy(ds):
    users.append(u)
    items.append(i)
    times.append(t)
  if not users:
    raise ValueError(f"TFDS dataset {tfds_name!r} is empty")
  return build_sequence_data(
    "tfds",
    _ids_to_int(np.concatenate(users)),
    _ids_to_int(np.concatenate(items)),
    np.concatenate(times).astype(np.int64),
    split=split,
    min_count=min_count,
    iterate_core=iterate_core,
    temporal_fraction=temporal_fraction,
    metadata=dict(source=f"tfds:{tfds_name}", format="tfds", data_dir=str(data_dir)),
    **split_kwargs,
  )
