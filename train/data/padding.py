"""The one encoding of a history for a query model: its last max_len items, left-padded with 0.

For a history h_1..h_n (oldest first) and length L, with m = min(n, L):

    encoded = [0] * (L - m) + [h_{n-m+1}, ..., h_n]

so the newest item is always in the last column. `left_pad` encodes a list of histories (numpy;
evaluation, export checks), `fit_length` re-encodes an already left-padded batch of any width
(TensorFlow, imported on its first call so that the numpy encoding loads without it; inside
the serving SavedModels). The training windows of `train.data.pipelines`
are the same encoding, gathered from one flat tensor.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

__all__ = ["fit_length", "left_pad"]


def left_pad(histories: Sequence, max_len: Optional[int] = None) -> np.ndarray:
  """int64 [Q, max_len]: the last max_len items of each history, left-padded with 0.

  Args:
    histories: Q one-dimensional integer sequences, oldest first.
    max_len: L; default the longest history's length (at least 1), i.e. nothing is cut.
  """
  rows = [np.asarray(h).reshape(-1) for h in histories]
  for k, r in enumerate(rows):
    if r.size and r.dtype.kind not in "iu":
      raise TypeError(f"histories[{k}] must hold integer ids, got dtype {r.dtype}")
  lengths = np.array([r.size for r in rows], np.int64)
  if max_len is None:
    max_len = max(1, int(lengths.max(initial=0)))
  if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or max_len < 1:
    raise ValueError(f"max_len must be a positive integer, got {max_len!r}")
  ends = np.cumsum(lengths)
  starts = ends - lengths
  flat = np.concatenate(rows).astype(np.int64) if lengths.sum() else np.zeros(1, np.int64)
  idx = ends[:, None] - int(max_len) + np.arange(int(max_len))[None, :]
  return np.where(idx >= starts[:, None], flat[np.maximum(idx, 0)], 0).astype(np.int64)


def fit_length(history, max_len: int):
  """int64 tf.Tensor [B, max_len] from a left-padded int [B, L] batch of any width L (see module
  doc)."""
  import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

  import tensorflow as tf

  history = tf.convert_to_tensor(history)
  width = tf.shape(history)[1]
  history = history[:, tf.maximum(width - max_len, 0) :]
  history = tf.pad(history, [[0, 0], [max_len - tf.shape(history)[1], 0]])
  return tf.ensure_shape(history, [None, max_len])
