"""Accidental hits on the Keras 3 path: negatives whose id equals the row's positive id.

    valid[a, i] = (negative_ids[(a,) i] != positive_ids[a])

``RemoveAccidentalHits`` has keras-rs's signature, ``call(logits, labels, candidate_ids)``, and
actually removes the hits: their logits become the lowest finite value of the logits' dtype
(dtype.min / 100; -6e4 in float16), so exp() of them is 0 and nothing overflows to -inf / NaN.
keras-rs 0.4's layer adds ``smallest_normal / 100`` (about 1e-40) to them, which changes nothing.
"""

from typing import Any

import keras
from keras import ops

from tfrs_logq.core import accidental_hits as hits_core
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3._tensors import Tensor

__all__ = ["accidental_hit_mask", "lowest_logit", "RemoveAccidentalHits"]


def lowest_logit(dtype: Any) -> float:
  """dtype.min / 100 (float16: -6e4): finite, and exp of it is 0 in every dtype."""
  return hits_core.lowest_logit(keras.backend.standardize_dtype(dtype))


def accidental_hit_mask(positive_ids: Tensor, negative_ids: Tensor) -> Tensor:
  """[A, N] bool, True where negative i of row a is a real negative (id != the positive's).

  Args:
    positive_ids: integer [A].
    negative_ids: integer [N] (shared) or [A, N] (per row).
  """
  positive_ids = _tensors.as_ids(positive_ids, "positive_ids")
  negative_ids = _tensors.as_ids(negative_ids, "negative_ids")
  _tensors.check_rank(positive_ids, 1, "positive_ids")
  _tensors.check_rank(negative_ids, (1, 2), "negative_ids")
  if len(negative_ids.shape) == 2:
    _tensors.check_same_dim(positive_ids, 0, negative_ids, 0, "positive_ids vs negative_ids rows")
  if _tensors.dtype_of(positive_ids) != _tensors.dtype_of(negative_ids):
    negative_ids = ops.cast(negative_ids, _tensors.dtype_of(positive_ids))
  return hits_core.hit_mask(ops, positive_ids, negative_ids)


@keras.saving.register_keras_serializable(package="tfrs_logq")
class RemoveAccidentalHits(keras.layers.Layer):
  """Drop-in for ``keras_rs.layers.RemoveAccidentalHits`` that works in every float dtype.

  ``call(logits [..., C], labels [..., C] one-hot, candidate_ids [C] or [..., C])`` returns the
  logits with every candidate that shares the positive's id (other than the positive itself)
  set to :func:`lowest_logit` of the logits' dtype. The logits keep their dtype (the layer
  does not autocast).
  """

  def __init__(self, **kwargs: Any) -> None:
    kwargs.setdefault("autocast", False)
    super().__init__(**kwargs)
    self.built = True

  def call(self, logits: Tensor, labels: Tensor, candidate_ids: Tensor) -> Tensor:
    logits = ops.convert_to_tensor(logits)
    labels = ops.convert_to_tensor(labels)
    candidate_ids = _tensors.as_ids(candidate_ids, "candidate_ids")
    if tuple(labels.shape) != tuple(logits.shape):
      raise ValueError(
        f"labels {tuple(labels.shape)} and logits {tuple(logits.shape)} must have the same shape"
      )
    rank, id_rank = len(labels.shape), len(candidate_ids.shape)
    if id_rank > rank or tuple(candidate_ids.shape) != tuple(labels.shape[rank - id_rank :]):
      raise ValueError(
        f"candidate_ids {tuple(candidate_ids.shape)} must match the last "
        f"dimensions of labels {tuple(labels.shape)}"
      )
    ids = ops.broadcast_to(candidate_ids, ops.shape(labels))
    positive = ops.expand_dims(ops.argmax(labels, axis=-1), -1)
    positive_ids = ops.take_along_axis(ids, positive, axis=-1)
    lowest = ops.cast(lowest_logit(logits.dtype), logits.dtype)
    return hits_core.remove_hits(ops, logits, labels, ids, positive_ids, lowest)
