"""Containers shared by every dataset reader: `SequenceData`, `EvalSplit`, `DataFormatError`.

Conventions (all readers):
* Item ids are 1..num_items; 0 is padding and never a real item.
* User ids are 1..num_users (for grouping queries of one user); 0 is never used.
* Every sequence is int64 and oldest first.
* Rated-item filtering at evaluation uses `EvalSplit.inputs`: the items already in a query's input
  history are the "rated" items removed from the ranking (the paper's protocol). `EvalSplit.rated`
  is an alias for that list.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Optional

import numpy as np


class DataFormatError(ValueError):
  """A malformed data file. The message names the file and (when known) the 1-based line."""

  def __init__(self, path, line: Optional[int], message: str):
    self.path = str(path)
    self.line = line
    where = f"{self.path}, line {line}" if line is not None else self.path
    super().__init__(f"{where}: {message}")


def _as_int64_list(seqs, what: str) -> list:
  out = []
  for k, s in enumerate(seqs):
    a = np.asarray(s)
    if a.ndim != 1:
      raise ValueError(f"{what}[{k}] must be 1-D, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
      raise ValueError(f"{what}[{k}] must hold integer ids, got dtype {a.dtype}")
    out.append(a.astype(np.int64, copy=False))
  return out


def _check_ids(seqs, num_items: int, what: str) -> None:
  for k, s in enumerate(seqs):
    if s.size and (s.min() < 1 or s.max() > num_items):
      bad = s[(s < 1) | (s > num_items)][0]
      raise ValueError(f"{what}[{k}] holds item id {bad} outside 1..{num_items}")


@dataclasses.dataclass
class EvalSplit:
  """Evaluation queries: one held-out target per query.

  Attributes:
    inputs: per query, the history before the target (int64, oldest first). The items in it are
      the query's rated items, removed from the ranking at evaluation ("filter rated").
    targets: int64 [num_queries], the held-out next item of each query.
    user_ids: int64 [num_queries], the user of each query (1-based; for grouping).
    timestamps: optional int64 [num_queries], the time of each target interaction.
  """

  inputs: list
  targets: np.ndarray
  user_ids: np.ndarray
  timestamps: Optional[np.ndarray] = None

  def __post_init__(self):
    self.inputs = _as_int64_list(self.inputs, "inputs")
    self.targets = np.asarray(self.targets, dtype=np.int64).reshape(-1)
    self.user_ids = np.asarray(self.user_ids, dtype=np.int64).reshape(-1)
    n = len(self.inputs)
    if self.targets.shape[0] != n or self.user_ids.shape[0] != n:
      raise ValueError(
        f"EvalSplit: {n} inputs, {self.targets.shape[0]} targets and "
        f"{self.user_ids.shape[0]} user_ids must be equal in number"
      )
    if self.timestamps is not None:
      self.timestamps = np.asarray(self.timestamps, dtype=np.int64).reshape(-1)
      if self.timestamps.shape[0] != n:
        raise ValueError(f"EvalSplit: {self.timestamps.shape[0]} timestamps for {n} queries")

  @property
  def num_queries(self) -> int:
    return len(self.inputs)

  @property
  def rated(self) -> list:
    """Items filtered from each query's ranking: exactly the query's input history."""
    return self.inputs

  def validate(self, num_items: int) -> None:
    """Raises ValueError when an input or target id is outside 1..num_items."""
    _check_ids(self.inputs, num_items, "inputs")
    if self.targets.size and (self.targets.min() < 1 or self.targets.max() > num_items):
      raise ValueError(f"targets hold ids outside 1..{num_items}")


@dataclasses.dataclass
class SequenceData:
  """A sequential-recommendation dataset: training sequences and evaluation queries.

  Attributes:
    name: dataset name (as given to `train.data.load`).
    num_items: catalog size; item ids are 1..num_items, 0 is padding.
    train_sequences: per training user, the items oldest first (int64).
    val: validation queries.
    test: test queries.
    item_counts: int64 [num_items + 1]; item_counts[i] = number of occurrences of item i in
      `train_sequences` (index 0 = 0).
    timestamps: optional, per training user, the timestamps parallel to `train_sequences`.
    metadata: free-form facts (source files, split sizes, id maps, generator parameters).
    user_ids: int64 [len(train_sequences)], the user id of each training sequence (1-based);
      defaults to 1..len(train_sequences).
  """

  name: str
  num_items: int
  train_sequences: list
  val: EvalSplit
  test: EvalSplit
  item_counts: np.ndarray
  timestamps: Optional[list] = None
  metadata: dict = dataclasses.field(default_factory=dict)
  user_ids: Optional[np.ndarray] = None

  def __post_init__(self):
    self.num_items = int(self.num_items)
    if self.num_items < 1:
      raise ValueError(f"num_items must be >= 1, got {self.num_items}")
    self.train_sequences = _as_int64_list(self.train_sequences, "train_sequences")
    if self.user_ids is None:
      self.user_ids = np.arange(1, len(self.train_sequences) + 1, dtype=np.int64)
    self.user_ids = np.asarray(self.user_ids, dtype=np.int64).reshape(-1)
    if self.user_ids.shape[0] != len(self.train_sequences):
      raise ValueError(
        f"{self.user_ids.shape[0]} user_ids for {len(self.train_sequences)} training sequences"
      )
    self.item_counts = np.asarray(self.item_counts, dtype=np.int64).reshape(-1)
    if self.item_counts.shape[0] != self.num_items + 1:
      raise ValueError(
        f"item_counts has shape {self.item_counts.shape}, expected "
        f"[{self.num_items + 1}] (index 0 = padding)"
      )
    if self.timestamps is not None:
      self.timestamps = [np.asarray(t, dtype=np.int64) for t in self.timestamps]
      if len(self.timestamps) != len(self.train_sequences) or any(
        t.shape != s.shape for t, s in zip(self.timestamps, self.train_sequences)
      ):
        raise ValueError("timestamps must parallel train_sequences (same count and lengths)")

  @property
  def num_users(self) -> int:
    """Largest user id seen in training or evaluation (user ids are 1-based)."""
    m = [int(self.user_ids.max()) if self.user_ids.size else 0]
    for split in (self.val, self.test):
      if split.user_ids.size:
        m.append(int(split.user_ids.max()))
    return max(m)

  @property
  def num_train_interactions(self) -> int:
    return int(sum(s.size for s in self.train_sequences))

  def validate(self) -> None:
    """Checks every id range and that item_counts matches the training sequences."""
    _check_ids(self.train_sequences, self.num_items, "train_sequences")
    self.val.validate(self.num_items)
    self.test.validate(self.num_items)
    expected = count_items(self.train_sequences, self.num_items)
    if not np.array_equal(expected, self.item_counts):
      raise ValueError("item_counts does not match the training sequences")


def count_items(sequences, num_items: int) -> np.ndarray:
  """item_counts[i] = occurrences of item i in `sequences`; int64 [num_items + 1], [0] = 0."""
  if not sequences:
    return np.zeros(num_items + 1, np.int64)
  flat = np.concatenate([np.asarray(s, np.int64) for s in sequences])
  counts = np.bincount(flat, minlength=num_items + 1).astype(np.int64)
  if counts.shape[0] > num_items + 1:
    raise ValueError(f"item id {flat.max()} exceeds num_items={num_items}")
  counts[0] = 0
  return counts


def summary(data: SequenceData) -> dict[str, Any]:
  """Size facts of a dataset, for logs."""
  return dict(
    name=data.name,
    num_items=data.num_items,
    num_users=data.num_users,
    train_sequences=len(data.train_sequences),
    train_interactions=data.num_train_interactions,
    val_queries=data.val.num_queries,
    test_queries=data.test.num_queries,
  )


def fingerprint(data: SequenceData) -> dict[str, Any]:
  """What identifies a dataset's content: its sizes and a SHA-256 digest of the item counts and
  the validation / test targets. Recorded in exports, so that evaluation can refuse other data."""
  digest = hashlib.sha256()
  for array in (
    data.item_counts,
    data.val.targets,
    data.test.targets,
    np.array([sum(s.size for s in data.test.inputs)], np.int64),
  ):
    digest.update(np.ascontiguousarray(array, np.int64).tobytes())
  return dict(summary(data), digest=digest.hexdigest())
