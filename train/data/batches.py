"""SASRec training batches in numpy, for `python -m train.keras3` (no tf.data, no TensorFlow).

The same stream as `train.data.pipelines.sasrec_train_dataset` (windows, batch order, batches
spanning epochs of the index stream) from the same permutation of the sequences with >= 2 items:
stream epoch e is the permutation of 0..n-1 drawn from the seed pair (seed, 2 e), by

    "tensorflow": tf.random.experimental.stateless_shuffle(range(n), seed=[seed, 2 e]), the
                  tf.data pipeline's own permutation (TensorFlow imported on first use), so a
                  Keras 3 run sees python -m train's batches for the same --seed;
    "numpy":      numpy.random.default_rng([seed, 2 e]).permutation(n), where TensorFlow is not
                  installed (another order than python -m train's; deterministic in the seed).

Windows (module docstring of `train.data.pipelines`): with m = min(n - 1, max_len),
inputs = [0]*(max_len - m) + s[n-m-1 : n-1], targets = [0]*(max_len - m) + s[n-m : n].
"""

from __future__ import annotations

import importlib.util
from typing import Dict, Iterator

import numpy as np

from train.data.records import SequenceData

__all__ = [
  "SHUFFLE_RNGS",
  "check_positive",
  "check_shuffle_rng",
  "flatten",
  "permutation",
  "sasrec_batches",
  "sasrec_sequences",
  "tensorflow_installed",
]

SHUFFLE_RNGS = ("tensorflow", "numpy")


def check_positive(**kwargs) -> None:
  """Raises ValueError naming the first argument that is not a positive integer."""
  for name, value in kwargs.items():
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
      raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_shuffle_rng(rng: str) -> str:
  """Raises ValueError for a generator not in SHUFFLE_RNGS; returns ``rng``."""
  if rng not in SHUFFLE_RNGS:
    raise ValueError(f"shuffle rng must be one of {SHUFFLE_RNGS}, got {rng!r}")
  return rng


def flatten(sequences) -> tuple:
  """Concatenates sequences: (flat int64 [F], starts [S], ends [S]) with ends exclusive."""
  lengths = np.array([s.size for s in sequences], np.int64)
  ends = np.cumsum(lengths)
  starts = ends - lengths
  flat = np.concatenate(sequences).astype(np.int64) if lengths.sum() else np.zeros(0, np.int64)
  return flat, starts, ends


def sasrec_sequences(data: SequenceData) -> tuple:
  """`flatten` of the training sequences with >= 2 items (the others have no target): the
  examples of both SASRec streams (this module's and `pipelines.sasrec_train_dataset`)."""
  seqs = [s for s in data.train_sequences if s.size >= 2]
  if not seqs:
    raise ValueError(f"{data.name}: no training sequence with >= 2 items")
  return flatten(seqs)


def tensorflow_installed() -> bool:
  """Whether TensorFlow can be imported (checked without importing it)."""
  try:
    return importlib.util.find_spec("tensorflow") is not None
  except ImportError:
    return False


def permutation(n: int, seed: int, stream_epoch: int, rng: str) -> np.ndarray:
  """int64 [n]: epoch ``stream_epoch`` of the index stream of seed ``seed`` (module doc)."""
  if check_shuffle_rng(rng) == "numpy":
    return np.random.default_rng([int(seed), 2 * int(stream_epoch)]).permutation(n)
  try:
    import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

    import tensorflow as tf
  except ImportError as e:
    raise ImportError(
      "the 'tensorflow' shuffle (python -m train's batch order) needs "
      "TensorFlow; without it use --shuffle_rng=numpy"
    ) from e
  return tf.random.experimental.stateless_shuffle(
    tf.range(n, dtype=tf.int64), seed=tf.constant([int(seed), 2 * int(stream_epoch)], tf.int64)
  ).numpy()


def _windows(flat: np.ndarray, first: np.ndarray, end: np.ndarray, length: int) -> np.ndarray:
  """[B, length]: flat[max(first, end - length) : end] right-aligned, 0 elsewhere."""
  idx = end[:, None] - length + np.arange(length, dtype=np.int64)[None, :]
  return np.where(idx >= first[:, None], flat[np.maximum(idx, 0)], 0).astype(np.int64)


def sasrec_batches(
  data: SequenceData,
  *,
  batch_size: int,
  max_len: int,
  seed: int,
  num_batches: int,
  rng: str = "tensorflow",
) -> Iterator[Dict[str, np.ndarray]]:
  """The first ``num_batches`` full batches {"inputs", "targets"} int64 [B, max_len] of the
  stream of ``seed`` (`sasrec_train_dataset(..., seed=seed)`'s batches with ``rng`` =
  "tensorflow")."""
  check_positive(batch_size=batch_size, max_len=max_len)
  flat, starts, ends = sasrec_sequences(data)
  pending, stream_epoch = np.zeros(0, np.int64), 0
  for _ in range(num_batches):
    while pending.size < batch_size:
      pending = np.concatenate([pending, permutation(starts.size, seed, stream_epoch, rng)])
      stream_epoch += 1
    idx, pending = pending[:batch_size], pending[batch_size:]
    first, end = starts[idx], ends[idx]
    yield {
      "inputs": _windows(flat, first, end - 1, max_len),
      "targets": _windows(flat, first + 1, end, max_len),
    }
