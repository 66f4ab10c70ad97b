r"""Accidental hits: negatives whose id equals the row's positive id, and their logit.

    valid[a, i]  = (d_i != p_a)                       negatives [N] (shared) or [A, N]
    duplicate    = (id_c == p_a) and label[a, c] = 0  (RemoveAccidentalHits)
    out[a, c]    = lowest(dtype) where duplicate, logits[a, c] otherwise
    lowest(dtype) = dtype.min / 100 (float16: -6e4): finite with room to spare, e^lowest = 0

(the formulas of `hit_mask`, `remove_hits` and `lowest_logit`).
"""

from tfrs_logq.core.ops import Ops, Tensor

__all__ = ["lowest_logit", "hit_mask", "remove_hits"]

_LOWEST = {
  "float16": -6.0e4,
  "bfloat16": -3.3895313892515355e36,
  "float32": -3.4028234663852886e36,
  "float64": -1.7976931348623157e306,
}


def lowest_logit(dtype_name: str) -> float:
  """dtype.min / 100 (float16: -6e4) for a float dtype name."""
  return _LOWEST[dtype_name]


def hit_mask(ops: Ops, positive_ids: Tensor, negative_ids: Tensor) -> Tensor:
  """[A, N] bool, True where negative i of row a is a real negative (positive_ids [A],
  negative_ids [N] or [A, N] of the same dtype)."""
  if len(negative_ids.shape) == 1:
    negative_ids = ops.expand_dims(negative_ids, 0)
  return ops.not_equal(ops.expand_dims(positive_ids, 1), negative_ids)


def remove_hits(
  ops: Ops,
  logits: Tensor,
  labels: Tensor,
  candidate_ids: Tensor,
  positive_ids: Tensor,
  lowest: Tensor,
) -> Tensor:
  """``lowest`` (a tensor of the logits' dtype) where a candidate shares the positive's id and
  is not the labelled positive, the logits elsewhere (ids broadcast against the labels)."""
  duplicate = ops.logical_and(
    ops.equal(candidate_ids, positive_ids), ops.logical_not(ops.cast(labels, "bool"))
  )
  return ops.where(duplicate, lowest, logits)
