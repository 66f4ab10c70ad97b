"""tf.data pipelines over `SequenceData`: SASRec windows, two-tower pairs, evaluation arrays.

Design: all training items are kept in ONE flat int64 tensor; an example is an index into it,
and each batch's windows are built with one vectorised gather (no per-example Python, no
[examples x max_len] matrix in memory). Shuffling is a full uniform permutation per epoch,
`tf.random.experimental.stateless_shuffle(range(n), seed=[seed, 2 * epoch])`, so the stream is
a pure function of `seed` (deterministic across runs and parallelism). Negatives are drawn in
the training step by the library's samplers, not here. Batches span epoch boundaries when
`repeat=True` (like `repeat().batch()`), and `batch_size` is the GLOBAL batch.

SASRec windows (SASRec convention): for a training sequence s_1..s_n, only the last
max_len + 1 items are used; with m = min(n - 1, max_len),
    inputs  = [0]*(max_len - m) + s[n-m-1 : n-1]
    targets = [0]*(max_len - m) + s[n-m   : n]
so targets[t] is the item following inputs[t], and 0 marks padding in both. Sequences with
fewer than 2 items have no target and are skipped.

Two-tower pairs: one example per training interaction s_j (j >= min_history, 0-based), with
    history = the last max_len items of s_1..s_{j-1} (left-padded with 0), item_id = s_j,
    user_id = the sequence's user id.
"""

from __future__ import annotations

from typing import Optional

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import tensorflow as tf

from train.data.batches import check_positive as _check_positive
from train.data.batches import flatten as _flatten
from train.data.batches import sasrec_sequences
from train.data.padding import left_pad
from train.data.records import EvalSplit, SequenceData


def _index_stream(num_examples: int, *, seed: int, shuffle: bool, repeat: bool) -> tf.data.Dataset:
  """Example indices 0..n-1, a fresh stateless permutation per epoch when shuffling (``seed``:
  an int, or an int64 scalar tensor such as a parameter-server worker's own random seed)."""
  epochs = tf.data.Dataset.range(2**62 if repeat else 1)
  n = tf.constant(num_examples, tf.int64)

  def one_epoch(epoch):
    idx = tf.range(n, dtype=tf.int64)
    if shuffle:
      idx = tf.random.experimental.stateless_shuffle(
        idx,
        seed=tf.stack(
          [tf.cast(tf.convert_to_tensor(seed, dtype_hint=tf.int64), tf.int64), 2 * epoch]
        ),
      )
    return tf.data.Dataset.from_tensor_slices(idx)

  return epochs.flat_map(one_epoch)


def _left_padded_windows(
  flat: tf.Tensor, first: tf.Tensor, end: tf.Tensor, length: int
) -> tf.Tensor:
  """[B, length]: flat[max(first, end-length) : end] right-aligned, 0 elsewhere."""
  idx = end[:, None] - length + tf.range(length, dtype=tf.int64)[None, :]
  valid = idx >= first[:, None]
  return tf.where(valid, tf.gather(flat, tf.maximum(idx, 0)), tf.zeros_like(idx))


def _finish(ds: tf.data.Dataset) -> tf.data.Dataset:
  options = tf.data.Options()
  options.deterministic = True
  return ds.prefetch(tf.data.AUTOTUNE).with_options(options)


def sasrec_train_dataset(
  data: SequenceData,
  *,
  batch_size: int,
  max_len: int = 200,
  seed: int = 0,
  shuffle: bool = True,
  repeat: bool = True,
  drop_remainder: Optional[bool] = None,
) -> tf.data.Dataset:
  """SASRec training batches (see module docstring for the window formula).

  Yields dicts:
    "inputs":  int64 [B, max_len], left-padded with 0;
    "targets": int64 [B, max_len], the next item at each position, 0 where padding.
  Negatives are not drawn here: the library's samplers (`tfrs_logq.tf_keras.negatives`) draw them in
  the training step. `drop_remainder` defaults to `repeat` (static batch shapes for an endless
  stream; with repeat=False the last partial batch is kept). B = batch_size is the global batch.
  """
  _check_positive(batch_size=batch_size, max_len=max_len)
  flat_np, starts_np, ends_np = sasrec_sequences(data)
  flat = tf.constant(flat_np)
  starts = tf.constant(starts_np)
  ends = tf.constant(ends_np)
  drop = repeat if drop_remainder is None else drop_remainder

  def make_batch(step, idx):
    first, end = tf.gather(starts, idx), tf.gather(ends, idx)
    return {
      "inputs": _left_padded_windows(flat, first, end - 1, max_len),
      "targets": _left_padded_windows(flat, first + 1, end, max_len),
    }

  ds = _index_stream(len(starts_np), seed=seed, shuffle=shuffle, repeat=repeat)
  ds = ds.batch(batch_size, drop_remainder=drop).enumerate()
  ds = ds.map(make_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return _finish(ds)


def two_tower_train_dataset(
  data: SequenceData,
  *,
  batch_size: int,
  max_len: int = 200,
  seed: int = 0,
  shuffle: bool = True,
  repeat: bool = True,
  min_history: int = 1,
  drop_remainder: Optional[bool] = None,
) -> tf.data.Dataset:
  """Two-tower training pairs, one per training interaction (see module docstring).

  Yields dicts: "user_id" int64 [B]; "history" int64 [B, max_len] left-padded with 0;
  "item_id" int64 [B]. Interactions with fewer than `min_history`
  earlier items of their user are skipped (min_history=0 keeps all; an empty history is all 0).
  """
  _check_positive(batch_size=batch_size, max_len=max_len)
  if min_history < 0:
    raise ValueError(f"min_history must be >= 0, got {min_history}")
  flat_np, starts_np, _ = _flatten(data.train_sequences)
  lengths = np.array([s.size for s in data.train_sequences], np.int64)
  flat_start_np = np.repeat(starts_np, lengths)
  flat_user_np = np.repeat(data.user_ids, lengths)
  positions_np = np.flatnonzero(np.arange(flat_np.size) - flat_start_np >= min_history)
  if positions_np.size == 0:
    raise ValueError(f"{data.name}: no training interaction with >= {min_history} earlier items")
  flat, flat_start = tf.constant(flat_np), tf.constant(flat_start_np)
  flat_user, positions = tf.constant(flat_user_np), tf.constant(positions_np.astype(np.int64))
  drop = repeat if drop_remainder is None else drop_remainder

  def make_batch(step, idx):
    pos = tf.gather(positions, idx)
    return {
      "user_id": tf.gather(flat_user, pos),
      "history": _left_padded_windows(flat, tf.gather(flat_start, pos), pos, max_len),
      "item_id": tf.gather(flat, pos),
    }

  ds = _index_stream(int(positions_np.size), seed=seed, shuffle=shuffle, repeat=repeat)
  ds = ds.batch(batch_size, drop_remainder=drop).enumerate()
  ds = ds.map(make_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return _finish(ds)


def eval_arrays(split: EvalSplit, max_len: int = 200) -> dict:
  """Evaluation queries as numpy arrays.

  Returns dict:
    "inputs": int64 [Q, max_len], `train.data.padding.left_pad(split.inputs, max_len)`;
    "targets": int64 [Q]; "user_ids": int64 [Q];
    "history_lengths": int64 [Q], full input length (before truncation);
    "rated_values", "rated_row_splits": the FULL input histories in CSR form (row q is
      rated_values[rated_row_splits[q]:rated_row_splits[q+1]]), the items to filter from
      query q's ranking (they can be longer than max_len);
    "timestamps": int64 [Q] when the split has them.
  """
  _check_positive(max_len=max_len)
  flat, starts, ends = _flatten(split.inputs)
  out = dict(
    inputs=left_pad(split.inputs, max_len),
    targets=split.targets.copy(),
    user_ids=split.user_ids.copy(),
    history_lengths=(ends - starts).astype(np.int64),
    rated_values=flat,
    rated_row_splits=np.concatenate([[0], ends]).astype(np.int64),
  )
  if split.timestamps is not None:
    out["timestamps"] = split.timestamps.copy()
  return out


def rated_mask(split: EvalSplit, num_items: int, rows=None) -> np.ndarray:
  """bool [q, num_items + 1]: True where item i is in query q's input (column 0 = padding,
  always True so padding is never recommended). `rows`: optional query indices."""
  rows = np.arange(split.num_queries) if rows is None else np.asarray(rows).reshape(-1)
  mask = np.zeros((rows.size, num_items + 1), bool)
  mask[:, 0] = True
  for r, q in enumerate(rows):
    mask[r, split.inputs[q]] = True
  return mask


def eval_dataset(split: EvalSplit, *, batch_size: int, max_len: int = 200) -> tf.data.Dataset:
  """Batches of {"inputs" [b, max_len], "targets" [b], "user_ids" [b], "query_index" [b]}
  in query order (no shuffling, last batch kept); query_index indexes `split` (e.g. for
  `rated_mask(split, num_items, rows=query_index)`)."""
  _check_positive(batch_size=batch_size)
  arrays = eval_arrays(split, max_len)
  ds = tf.data.Dataset.from_tensor_slices(
    {
      "inputs": arrays["inputs"],
      "targets": arrays["targets"],
      "user_ids": arrays["user_ids"],
      "query_index": np.arange(split.num_queries, dtype=np.int64),
    }
  )
  return _finish(ds.batch(batch_size))
