"""`DataConfig`: which dataset a run uses, recorded whole in checkpoints' metadata and exports.

Its settings are flags of the training and evaluation binaries (`train.config_flags`):
--dataset, --data_path, --split, --tfds_name and the synthetic generator's --synthetic_users,
--synthetic_items, --synthetic_min_len, --synthetic_max_len, --synthetic_seed. The synthetic world
is a pure function of these settings (not of the training --seed), so runs with different
training seeds see the same data and an export can be evaluated on exactly its own world.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from train.config_flags import coerce, setting
from train.data.datasets import DATASETS, SPLITS, load
from train.data.records import SequenceData
from train.data.splits import check_training_sequences

__all__ = ["DataConfig"]


@dataclasses.dataclass
class DataConfig:
  """The data settings of a run (see module docstring); validated on construction."""

  dataset: str = setting(
    "synthetic",
    "synthetic (embedded generator with a known next-item distribution), "
    "gsasrec (any folder in the gSASRec leave-one-out layout, --data_path), ml1m (gsasrec at "
    "<data root>/ml1m), movielens_raw (ratings.dat / u.data via --data_path), tfds "
    "(movielens/*-ratings, --tfds_name), sequences (a file of lines 'user item item ...', "
    "oldest first; --data_path), interactions (a CSV/TSV table user,item[,timestamp], header "
    "or not; --data_path).",
    choices=DATASETS,
  )
  data_path: Optional[str] = setting(
    None,
    "File or folder of the dataset (default: <data root>/ml1m for ml1m, "
    "<data root>/ml-100k for movielens_raw; the TFDS data_dir for tfds; required for gsasrec). "
    "The data root is $TFRS_LOGQ_DATA, else ../shared/data beside the repository.",
  )
  split: str = setting(
    "leave_one_out",
    "Evaluation split: leave_one_out (last item of each user) or temporal (global time split).",
    choices=SPLITS,
  )
  tfds_name: str = setting("movielens/100k-ratings", "TFDS dataset name (--dataset=tfds).")
  val_users: int = setting(
    0,
    "sequences / interactions / movielens_raw, leave_one_out: validate on this many users "
    "drawn as gSASRec does (numpy RandomState(42).choice over user ids); their training "
    "sequence loses its last two items, the others' only the last. 0 = every user.",
  )
  min_count: int = setting(
    1,
    "sequences / interactions: k-core filter (every user and item keeps >= min_count "
    "interactions, iterated); 1 = keep everything.",
  )
  synthetic_users: int = setting(2000, "Synthetic dataset: number of users.")
  synthetic_items: int = setting(1000, "Synthetic dataset: number of items.")
  synthetic_min_len: int = setting(30, "Synthetic dataset: shortest sequence.")
  synthetic_max_len: int = setting(70, "Synthetic dataset: longest sequence.")
  synthetic_seed: int = setting(
    0, "Synthetic dataset: generator seed (the world; independent of the training --seed)."
  )

  def __post_init__(self):
    coerce(self)
    self.validate()

  def validate(self) -> "DataConfig":
    """Raises ValueError for settings that cannot work together."""
    if self.dataset == "synthetic":
      if self.data_path is not None:
        raise ValueError("the synthetic dataset takes no data_path")
      for name in ("synthetic_users", "synthetic_items", "synthetic_min_len", "synthetic_max_len"):
        if getattr(self, name) < 1:
          raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
      if self.synthetic_min_len > self.synthetic_max_len:
        raise ValueError(
          f"synthetic_min_len={self.synthetic_min_len} > synthetic_max_len={self.synthetic_max_len}"
        )
    if self.dataset in ("gsasrec", "ml1m") and self.split != "leave_one_out":
      raise ValueError(
        f"dataset {self.dataset} (gSASRec files, no timestamps) has only the "
        "leave_one_out split; use movielens_raw with ratings.dat for temporal"
      )
    if self.val_users < 0 or self.min_count < 1:
      raise ValueError(
        f"val_users must be >= 0 and min_count >= 1, got {self.val_users}, {self.min_count}"
      )
    if self.val_users and (
      self.split != "leave_one_out"
      or self.dataset not in ("sequences", "interactions", "movielens_raw")
    ):
      raise ValueError(
        "val_users samples validation users of the leave_one_out split of "
        "sequences / interactions / movielens_raw"
      )
    if self.min_count != 1 and self.dataset not in ("sequences", "interactions"):
      raise ValueError(
        "min_count applies to sequences / interactions (movielens_raw is always 5-core)"
      )
    if self.dataset in ("sequences", "interactions") and not self.data_path:
      raise ValueError(f"dataset {self.dataset} needs data_path (the file)")
    if self.dataset == "sequences" and self.split != "leave_one_out":
      raise ValueError("a sequence file has no timestamps: only the leave_one_out split")
    if self.dataset == "gsasrec" and not self.data_path:
      raise ValueError("dataset gsasrec needs data_path (a folder in the gSASRec layout)")
    return self

  def load_kwargs(self) -> dict:
    """Keyword arguments of `train.data.load` for this dataset (besides name and data_path)."""
    kwargs = dict(split=self.split)
    if self.dataset == "synthetic":
      kwargs.update(
        seed=self.synthetic_seed,
        num_users=self.synthetic_users,
        num_items=self.synthetic_items,
        min_len=self.synthetic_min_len,
        max_len=self.synthetic_max_len,
      )
    elif self.dataset == "tfds":
      kwargs.update(tfds_name=self.tfds_name)
    if self.val_users:
      kwargs.update(num_val_users=self.val_users)
    if self.dataset in ("sequences", "interactions"):
      kwargs.update(min_count=self.min_count)
    return kwargs

  @property
  def reads_with_tensorflow(self) -> bool:
    """Whether `load` imports TensorFlow (the TFDS reader); the other readers are numpy only,
    so the binaries read them before importing TensorFlow or JAX."""
    return self.dataset == "tfds"

  def load(self) -> SequenceData:
    """The dataset these settings describe; ValueError when no training sequence has the 2
    items a model learns from (`train.data.splits.check_training_sequences`)."""
    data = load(self.dataset, self.data_path, **self.load_kwargs())
    check_training_sequences(data, split=self.split, val_users=self.val_users)
    return data

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)
