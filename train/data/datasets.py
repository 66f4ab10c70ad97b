"""`load(name, data_path, split=...)`: one entry point for every dataset reader.

    data = load("synthetic")                                   # embedded default, no download
    data = load("gsasrec", "/data/steam")                      # any folder in the gSASRec layout
    data = load("ml1m")                                        # gsasrec at <data root>/ml1m
    data = load("movielens_raw", "/path/ratings.dat", split="temporal")
    data = load("tfds", tfds_name="movielens/1m-ratings", data_dir="~/tensorflow_datasets")
    data = load("sequences", "sequences.txt")                  # `user item item ...` per line
    data = load("interactions", "clicks.csv", split="temporal")   # user,item[,timestamp]

The data root is $TFRS_LOGQ_DATA, else ../shared/data beside a repository checkout.
"""

from __future__ import annotations

import os
import pathlib

from train.data.gsasrec import load_gsasrec
from train.data.movielens import load_movielens_raw
from train.data.records import SequenceData
from train.data.synthetic import load_synthetic
from train.data.user_files import load_interactions, load_sequences

__all__ = ["DATASETS", "SPLITS", "default_data_root", "load"]

DATASETS = ("synthetic", "gsasrec", "ml1m", "movielens_raw", "tfds", "sequences", "interactions")
SPLITS = ("leave_one_out", "temporal")


def default_data_root() -> pathlib.Path:
  """$TFRS_LOGQ_DATA, else ../shared/data beside the repository root (a checkout)."""
  env = os.environ.get("TFRS_LOGQ_DATA")
  if env:
    return pathlib.Path(env)
  return pathlib.Path(__file__).resolve().parents[3] / "shared" / "data"


def load(
  name: str, data_path=None, *, split: str = "leave_one_out", seed: int = 0, **kwargs
) -> SequenceData:
  """Loads a dataset by name.

  Args:
    name: "synthetic" (generator, see train.data.synthetic; kwargs = SyntheticConfig fields),
      "gsasrec" (any folder in the gSASRec leave-one-out layout, e.g. the paper's ML-1M, Steam or
      Gowalla files; data_path required; leave-one-out only),
      "ml1m" (gsasrec with data_path defaulting to <data root>/ml1m),
      "movielens_raw" (ratings.dat or u.data file, or a folder holding one; data_path defaults
      to <data root>/ml-100k; kwargs min_count=5, iterate_core=True, temporal_fraction=0.1,
      num_val_users, drop_unseen_targets, drop_empty_history),
      "tfds" (kwargs tfds_name="movielens/100k-ratings", data_dir (or data_path), download),
      "sequences" / "interactions" (a user's own files, `train.data.user_files`; data_path
      required; kwargs min_count=1, num_val_users, temporal_fraction, ...).
    data_path: file or folder of the data (see above).
    split: "leave_one_out" or "temporal" (global time split; not for the gSASRec files, which
      have no timestamps: use movielens_raw with ratings.dat).
    seed: generator seed for "synthetic" (the real datasets are deterministic).

  Returns:
    SequenceData.
  """
  if split not in SPLITS:
    raise ValueError(f"unknown split {split!r}: expected one of {SPLITS}")
  if name == "synthetic":
    if data_path is not None:
      raise ValueError("the synthetic dataset takes no data_path")
    return load_synthetic(split=split, seed=seed, **kwargs)
  if name in ("gsasrec", "ml1m"):
    if split != "leave_one_out":
      raise ValueError(
        f"{name} (gSASRec files) has no timestamps, only split='leave_one_out'; "
        "use load('movielens_raw', '<dir>/ratings.dat', split='temporal')"
      )
    if kwargs:
      raise TypeError(f"unexpected arguments for {name}: {sorted(kwargs)}")
    if name == "ml1m":
      return load_gsasrec(data_path or default_data_root() / "ml1m", name="ml1m")
    if data_path is None:
      raise ValueError("the gsasrec dataset needs data_path (a folder in the gSASRec layout)")
    return load_gsasrec(data_path)
  if name == "movielens_raw":
    return load_movielens_raw(data_path or default_data_root() / "ml-100k", split=split, **kwargs)
  if name == "tfds":
    from train.data.tfds import load_tfds

    if data_path is not None:
      if "data_dir" in kwargs:
        raise ValueError("pass data_dir or data_path, not both")
      kwargs["data_dir"] = data_path
    return load_tfds(split=split, **kwargs)
  if name in ("sequences", "interactions"):
    if data_path is None:
      raise ValueError(f"the {name} dataset needs data_path (the file)")
    reader = load_sequences if name == "sequences" else load_interactions
    return reader(data_path, split=split, **kwargs)
  raise ValueError(f"unknown dataset {name!r}: expected one of {DATASETS}")
