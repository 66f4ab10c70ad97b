"""Accidental hits: negatives whose id equals the row's positive id.

    valid[a, i] = (d_i != p_a)          (``accidental_hit_mask``, shared [N] or per-row [A, N])

A negative d_i with d_i == p is not a negative at all: for the corrected loss it must be
masked (negatives are drawn from Q', which excludes p), and every variant should mask it.
``RemoveAccidentalHits`` is the logits-level drop-in for TFRS's layer of the same name.
"""

import tensorflow as tf

from tfrs_logq.core import accidental_hits as hits_core
from tfrs_logq.core.ops import tf_ops

__all__ = ["accidental_hit_mask", "RemoveAccidentalHits", "lowest_logit"]

_OPS = tf_ops()


def _check_ids(ids: tf.Tensor, name: str) -> tf.Tensor:
  ids = tf.convert_to_tensor(ids)
  if not (ids.dtype.is_integer or ids.dtype == tf.string):
    raise TypeError(f"{name} must be integer or string ids, got {ids.dtype}")
  return ids


def lowest_logit(dtype: tf.DType) -> float:
  """A large negative logit that is finite in ``dtype`` with room to spare.

  Not ``dtype.min`` itself: ``logit - max`` downstream would overflow to -inf. float16 has
  little range, so it gets -6e4 (exp of it is 0 in every dtype anyway).
  """
  return hits_core.lowest_logit(tf.as_dtype(dtype).name)


def accidental_hit_mask(positive_ids: tf.Tensor, negative_ids: tf.Tensor) -> tf.Tensor:
  """valid[a, i] = (negative_ids[(a,) i] != positive_ids[a]).

  Args:
    positive_ids: [A] ids of each row's positive.
    negative_ids: [N] (shared) or [A, N] (per row) ids of the negatives; same dtype.

  Returns:
    [A, N] bool, True where the negative is a real negative (not the positive).
  """
  positive_ids = _check_ids(positive_ids, "positive_ids")
  negative_ids = _check_ids(negative_ids, "negative_ids")
  if positive_ids.dtype != negative_ids.dtype:
    if positive_ids.dtype.is_integer and negative_ids.dtype.is_integer:
      negative_ids = tf.cast(negative_ids, positive_ids.dtype)
    else:
      raise TypeError(
        f"positive_ids ({positive_ids.dtype}) and negative_ids "
        f"({negative_ids.dtype}) must have the same dtype"
      )
  if positive_ids.shape.rank not in (None, 1):
    raise ValueError(f"positive_ids must be [A], got shape {positive_ids.shape}")
  if negative_ids.shape.rank not in (1, 2):
    raise ValueError(f"negative_ids must be [N] or [A, N], got shape {negative_ids.shape}")
  return hits_core.hit_mask(_OPS, positive_ids, negative_ids)


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class RemoveAccidentalHits(tf.keras.layers.Layer):
  """Drop-in for ``tfrs.layers.loss.RemoveAccidentalHits`` that works in every float dtype.

  ``call(labels [A, C] one-hot, logits [A, C], candidate_ids [C])`` returns

      out[a, c] = lowest   if candidate_ids[c] == candidate_ids[argmax_c labels[a]] and
                              labels[a, c] == 0   (a candidate sharing the positive's id)
      out[a, c] = logits[a, c]   otherwise,

  with ``lowest`` a large negative value that stays finite in the logits' dtype
  (``lowest_logit``; TFRS adds a float32 constant that overflows to -inf in float16 and can turn
  into NaN downstream).
  """

  def call(self, labels: tf.Tensor, logits: tf.Tensor, candidate_ids: tf.Tensor) -> tf.Tensor:
    logits = tf.convert_to_tensor(logits)
    candidate_ids = _check_ids(candidate_ids, "candidate_ids")
    positive_index = tf.math.argmax(labels, axis=1)
    positive_ids = tf.gather(candidate_ids, positive_index)
    lowest = tf.constant(lowest_logit(logits.dtype), logits.dtype)
    return hits_core.remove_hits(
      _OPS, logits, labels, candidate_ids[tf.newaxis, :], positive_ids[:, tf.newaxis], lowest
    )
