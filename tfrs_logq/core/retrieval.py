r"""The retrieval task's selection and reduction (``tfrs_logq.tf_keras.Retrieval`` and its
Keras 3 twin ``tfrs_logq.keras3.retrieval.Retrieval``).

    hardest k:   keep[a, i] = valid[a, i] and l_i >= (k-th largest valid l of row a)
                 (l = s - log Q, or s under ``none``; ties with the k-th value are all kept;
                 log Q' is a per-row shift of log Q, so it ranks the same)
    weights:     L_a <- 0 where weight_a = 0 (even for L_a = +inf), weight_a L_a otherwise
    reduction:   sum_a L_a | sum_a L_a / A | [A]
"""

import math
from typing import Optional

from tfrs_logq.core.ops import Ops, Tensor

__all__ = ["REDUCTIONS", "keep_hardest", "weighted_reduction"]

REDUCTIONS = ("sum", "mean", "none")


def keep_hardest(ops: Ops, logits: Tensor, valid: Tensor, k: int) -> Tensor:
  """valid AND (at least the k-th largest valid logit of the row); k <= N."""
  masked = ops.where(valid, logits, -math.inf)
  kth_largest = ops.top_k(masked, k=k, sorted=True)[0][:, -1:]
  return ops.logical_and(valid, masked >= kth_largest)


def weighted_reduction(
  ops: Ops,
  per_example: Tensor,
  sample_weight: Optional[Tensor],
  reduction: str,
  num_queries: Tensor,
) -> Tensor:
  """Per-example losses [A] times float32 ``sample_weight`` [A] (None: 1), reduced."""
  if sample_weight is not None:
    # A zero-weight row contributes exactly 0, even when its loss is +inf (0 * inf = NaN).
    per_example = ops.where(
      ops.equal(sample_weight, 0.0), ops.zeros_like(per_example), per_example * sample_weight
    )
  if reduction == "sum":
    return ops.sum(per_example)
  if reduction == "mean":
    return ops.sum(per_example) / ops.cast(num_queries, "float32")
  return per_example
