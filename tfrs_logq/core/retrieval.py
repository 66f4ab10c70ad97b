r"""The retrieval task's shared steps (``tfrs_logq.tf_keras.Retrieval`` and its Keras 3 twin
``tfrs_logq.keras3.retrieval.Retrieval``): the in-batch block, the sampler block joined after it,
the selection and the reduction.

    in-batch valid:  valid[a, c] = (id_c != p_a) with candidate ids masked (c = a included),
                     (c != a) without; AND score_mask[a, c]
    positives:       s_p[a] = s[a, a],  log Q(p_a) = log Q(c = a)
    sampler block:   log Q_s(d) - (log(1 - Q_s(p)) - log(1 - Q_b(p)))   corrected, q_prime exact
                     log Q_s(d)                                          otherwise
                     (so that the loss's one Q' step, - log(1 - Q_b(p)), gives the block its own
                     proposal's Q'; ``tfrs_logq.core.cross_batch.rebased_block_log_q``)
    join:            [in-batch | sampler] along N (log Q kept [C + N] when both are [N], else
                     [A, C + N]; a block without log Q, correction none, gets zeros)
    hardest k:       keep[a, i] = valid[a, i] and l_i >= (k-th largest valid l of row a)
                     (l = s - log Q, or s under ``none``; ties with the k-th value are all kept;
                     log Q' is a per-row shift of log Q, so it ranks the same)
    weights:         L_a <- 0 where weight_a = 0 (even for L_a = +inf), weight_a L_a otherwise
    reduction:       sum_a L_a | sum_a L_a / A | [A]

``loss_reduction`` maps TFRS's ``loss`` argument (a CategoricalCrossentropy(from_logits=True),
used for its reduction only) onto a reduction: sum -> sum, sum_over_batch_size / auto / mean ->
mean, none -> none.
"""

import math
from typing import Any, Mapping, Optional, Tuple

from tfrs_logq.core import cross_batch
from tfrs_logq.core.ops import Ops, Tensor

__all__ = [
  "REDUCTIONS",
  "LOSS_REDUCTIONS",
  "loss_reduction",
  "in_batch_valid",
  "positives",
  "sampled_block_log_q",
  "join_blocks",
  "keep_hardest",
  "weighted_reduction",
]

REDUCTIONS = ("sum", "mean", "none")

# A Keras loss's reduction -> the task's (tf-keras: Reduction.*; Keras 3: its reduction names).
LOSS_REDUCTIONS = {
  "sum": "sum",
  "sum_over_batch_size": "mean",
  "auto": "mean",
  "mean": "mean",
  "none": "none",
  None: "none",
}


def loss_reduction(config: Mapping[str, Any], reduction: Optional[str]) -> str:
  """The task's reduction of a CategoricalCrossentropy with ``config`` and ``reduction``;
  ValueError unless from_logits without label smoothing and a reduction of `LOSS_REDUCTIONS`."""
  if not config.get("from_logits", False) or config.get("label_smoothing", 0.0):
    raise ValueError(
      "`loss` must be CategoricalCrossentropy(from_logits=True) without label smoothing"
    )
  if reduction not in LOSS_REDUCTIONS:
    raise ValueError(
      f"`loss` reduction must be one of {sorted(map(str, LOSS_REDUCTIONS))}, got {reduction!r}"
    )
  return LOSS_REDUCTIONS[reduction]


def in_batch_valid(
  ops: Ops,
  num_queries: Tensor,
  num_candidates: Tensor,
  hit_valid: Optional[Tensor] = None,
  score_mask: Optional[Tensor] = None,
) -> Tensor:
  """bool [A, C]: ``hit_valid`` (id_c != p_a, which leaves column a out too) or, without ids,
  c != a; AND ``score_mask``."""
  if hit_valid is None:
    hit_valid = ops.not_equal(
      ops.expand_dims(ops.arange(num_queries), 1), ops.expand_dims(ops.arange(num_candidates), 0)
    )
  if score_mask is None:
    return hit_valid
  return ops.logical_and(hit_valid, ops.cast(score_mask, "bool"))


def positives(
  ops: Ops, scores: Tensor, log_q: Optional[Tensor], num_queries: Tensor
) -> Tuple[Tensor, Optional[Tensor]]:
  """(s_p [A] = scores[a, a], log Q(p) [A] = log_q[:A], None without log Q)."""
  diagonal = ops.expand_dims(ops.arange(num_queries), 1)
  positive_scores = ops.squeeze(ops.take_along_axis(scores, diagonal, axis=-1), 1)
  return positive_scores, None if log_q is None else log_q[:num_queries]


def sampled_block_log_q(
  ops: Ops,
  correction: str,
  q_prime: str,
  block_log_q: Tensor,
  block_positive_log_q: Optional[Tensor],
  positive_log_q: Optional[Tensor],
  valid: Optional[Tensor] = None,
) -> Tensor:
  """The sampler block's log Q for the loss (module docstring): rebased onto the in-batch
  block's Q_b(p) under corrected / exact ([A, N]; ValueError without the sampler's Q_s(p);
  entries not ``valid`` keep their own log Q, the rule of ``join_blocks``' rebase),
  ``block_log_q`` unchanged otherwise."""
  if correction != "corrected" or q_prime != "exact":
    return block_log_q
  if block_positive_log_q is None:
    raise ValueError(
      "correction='corrected' with q_prime='exact' needs the "
      "negative_sampler's positive_log_q (Q(p) under its proposal), got None"
    )
  return cross_batch.rebased_block_log_q(
    ops, block_log_q, block_positive_log_q, positive_log_q, valid
  )


def _rank(x: Tensor) -> Optional[int]:
  try:
    return len(x.shape)
  except (TypeError, ValueError):  # a tf.Tensor of unknown rank
    return None


def join_blocks(
  ops: Ops, *blocks: Tuple[Tensor, Optional[Tensor], Tensor]
) -> Tuple[Tensor, Tensor, Tensor]:
  """(scores [A, N], log Q [N] or [A, N] (None: zeros), valid [A, N]) blocks -> one along N.

  log Q stays [sum N] when every block's is [N] and is broadcast to [A, N_b] per block otherwise;
  valid is broadcast to its block's scores."""
  scores = [s for s, _, _ in blocks]
  log_qs = [ops.zeros_like(s[0]) if lq is None else lq for s, lq, _ in blocks]
  if all(_rank(lq) == 1 for lq in log_qs):
    log_q = ops.concatenate(log_qs, axis=0)
  else:
    log_q = ops.concatenate([lq + ops.zeros_like(s) for lq, s in zip(log_qs, scores)], axis=1)
  valid = [
    ops.logical_and(ops.cast(v, "bool"), ops.ones_like(s, dtype="bool"))
    for s, (_, _, v) in zip(scores, blocks)
  ]
  return ops.concatenate(scores, axis=1), log_q, ops.concatenate(valid, axis=1)


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
