"""Datasets and tf.data pipelines shared by the training and evaluation binaries.

    data = load("synthetic")                                   # embedded default, no download
    data = load("ml1m")                                        # gSASRec leave-one-out files
    data = load("movielens_raw", "/path/ratings.dat", split="temporal")
    data = load("tfds", tfds_name="movielens/1m-ratings", data_dir="~/tensorflow_datasets")
    ds = sasrec_train_dataset(data, batch_size=128, max_len=200, seed=0)
    q = eval_arrays(data.test, max_len=200)

Conventions: item ids 1..num_items, 0 = padding; sequences oldest first; rated-item filtering
uses each query's input (`EvalSplit.inputs`, alias `EvalSplit.rated`). Malformed files raise
`DataFormatError` (a ValueError) naming the file and line; missing ones `FileNotFoundError`.

Modules: records (containers), readers (parsers), splits (k-core, leave-one-out,
temporal), gsasrec, movielens, tfds, synthetic, pipelines.
"""

from __future__ import annotations

import os
import pathlib

from train.data.gsasrec import load_gsasrec
from train.data.movielens import load_movielens_raw
from train.data.pipelines import eval_arrays
from train.data.pipelines import eval_dataset
from train.data.pipelines import rated_mask
from train.data.pipelines import sasrec_train_dataset
from train.data.pipelines import two_tower_train_dataset
from train.data.splits import build_sequence_data
from train.data.splits import k_core_mask
from train.data.synthetic import SyntheticCatalog
from train.data.synthetic import SyntheticConfig
from train.data.synthetic import load_synthetic
from train.data.records import DataFormatError
from train.data.records import EvalSplit
from train.data.records import SequenceData
from train.data.records import count_items
from train.data.records import summary

__all__ = [
    "DATASETS", "DataFormatError", "EvalSplit", "SequenceData", "SyntheticCatalog",
    "SyntheticConfig", "build_sequence_data", "count_items", "default_data_root",
    "eval_arrays", "eval_dataset", "k_core_mask", "load", "rated_mask",
    "sasrec_train_dataset", "summary", "synthetic_catalog", "two_tower_train_dataset",
]

DATASETS = ("synthetic", "ml1m", "movielens_raw", "tfds")


def default_data_root() -> pathlib.Path:
  """$TFRS_LOGQ_DATA, else ../shared/data beside the repository root."""
  env = os.environ.get("TFRS_LOGQ_DATA")
  if env:
    return pathlib.Path(env)
  return pathlib.Path(__file__).resolve().parents[3] / "shared" / "data"


def load(name: str, data_path=None, *, split: str = "leave_one_out", seed: int = 0,
         **kwargs) -> SequenceData:
  """Loads a dataset by name.

  Args:
    name: "synthetic" (generator, see train.data.synthetic; kwargs = SyntheticConfig fields),
      "ml1m" (gSASRec files; data_path defaults to <data root>/ml1m; leave-one-out only),
      "movielens_raw" (ratings.dat or u.data file, or a folder holding one; data_path defaults
      to <data root>/ml-100k; kwargs min_count=5, iterate_core=True, temporal_fraction=0.1,
      num_val_users, drop_unseen_targets, drop_empty_history),
      "tfds" (kwargs tfds_name="movielens/100k-ratings", data_dir (or data_path), download).
    data_path: file or folder of the data (see above).
    split: "leave_one_out" or "temporal" (global time split; not for "ml1m", which has no
      timestamps: use movielens_raw with ratings.dat).
    seed: generator seed for "synthetic" (the real datasets are deterministic).

  Returns:
    SequenceData.
  """
  if split not in ("leave_one_out", "temporal"):
    raise ValueError(f"unknown split {split!r}: expected 'leave_one_out' or 'temporal'")
  if name == "synthetic":
    if data_path is not None:
      raise ValueError("the synthetic dataset takes no data_path")
    return load_synthetic(split=split, seed=seed, **kwargs)
  if name == "ml1m":
    if split != "leave_one_out":
      raise ValueError("ml1m (gSASRec files) has no timestamps, only split='leave_one_out'; "
                       "use load('movielens_raw', '<dir>/ratings.dat', split='temporal')")
    if kwargs:
      raise TypeError(f"unexpected arguments for ml1m: {sorted(kwargs)}")
    return load_gsasrec(data_path or default_data_root() / "ml1m", name="ml1m")
  if name == "movielens_raw":
    return load_movielens_raw(data_path or default_data_root() / "ml-100k", split=split,
                              **kwargs)
  if name == "tfds":
    from train.data.tfds import load_tfds  # pylint: disable=g-import-not-at-top
    if data_path is not None:
      if "data_dir" in kwargs:
        raise ValueError("pass data_dir or data_path, not both")
      kwargs["data_dir"] = data_path
    return load_tfds(split=split, **kwargs)
  raise ValueError(f"unknown dataset {name!r}: expected one of {DATASETS}")


def synthetic_catalog(data: SequenceData) -> SyntheticCatalog:
  """The generator behind a synthetic dataset (true popularity and next-item softmax)."""
  catalog = data.metadata.get("catalog")
  if not isinstance(catalog, SyntheticCatalog):
    raise ValueError(f"dataset {data.name!r} was not generated synthetically")
  return catalog
