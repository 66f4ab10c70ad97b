"""Raw MovieLens readers: `ratings.dat` (ML-1M/10M: `user::movie::rating::timestamp`) and
`u.data` (ML-100K: tab-separated `user item rating timestamp`).

Pipeline: parse (every rating counts as an interaction, whatever its value) -> k-core filter
(5-core, iterated to a fixed point by default; see `train.data.splits`) -> renumber users and
items 1..n -> `split="leave_one_out"` or `split="temporal"` (global, `temporal_fraction` = 0.1).
"""

from __future__ import annotations

import pathlib

from train.data.readers import read_ratings
from train.data.records import SequenceData
from train.data.splits import build_sequence_data

RATING_FILES = ("ratings.dat", "u.data")


def resolve_ratings_file(data_path) -> pathlib.Path:
  """A ratings file, or a folder holding ratings.dat or u.data."""
  path = pathlib.Path(data_path)
  if path.is_dir():
    for name in RATING_FILES:
      if (path / name).is_file():
        return path / name
    raise FileNotFoundError(f"no ratings file in {path}: expected one of {RATING_FILES}")
  if not path.is_file():
    raise FileNotFoundError(f"data file not found: {path}")
  return path


def load_movielens_raw(
  data_path,
  *,
  split: str = "leave_one_out",
  name: str = "movielens_raw",
  min_count: int = 5,
  iterate_core: bool = True,
  temporal_fraction: float = 0.1,
  **split_kwargs,
) -> SequenceData:
  """Loads raw MovieLens ratings and splits them (see module docstring).

  split_kwargs: `num_val_users`, `val_seed` (leave-one-out), `drop_unseen_targets`,
  `drop_empty_history` (temporal); see `train.data.splits.build_sequence_data`.
  """
  path = resolve_ratings_file(data_path)
  r = read_ratings(path)
  return build_sequence_data(
    name,
    r["user"],
    r["item"],
    r["timestamp"],
    split=split,
    min_count=min_count,
    iterate_core=iterate_core,
    temporal_fraction=temporal_fraction,
    metadata=dict(source=str(path), format="movielens_raw"),
    **split_kwargs,
  )
