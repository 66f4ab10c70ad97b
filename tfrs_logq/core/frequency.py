r"""Update and read formulas of the streaming estimators of Q(d) (exact counts, hash array).

Exact counts (#d the count of item d, N = sum_d #d, m = ``min_count``, D the catalog)::

    Q(d)          = min(max(#d, m) / max(N, 1), 1)            (N > 0);   1 / |D|  (N = 0)
    log(1 - Q(p)) = log max(N - max(#p, m), m) - log max(N, 1) (N > 0);
                    log max(1 - 1/|D|, MIN_ONE_MINUS_Q)        (N = 0)

Hash array (Yi et al. 2019, Algorithms 2 and 3, extended to c hits per step and a per-draw
output; derivation in ``tfrs_logq.tf_keras.frequency.hash_array``). Per bucket: A = step of the last
hit (0: never), B = moving estimate of steps per hit, k = hits since the first sighting (capped at
J = floor(1/alpha)); a bucket hit c times in step t, g = t - A steps after its last hit::

    k       = K (warmup);  J if K > 0 else 0 (no warm-up: the fixed-alpha EMA)
    w       = prod_{j=k+1}^{k+c} (1 - max(alpha, 1/j))
            = k / max(k, min(k + c, J), 1) * (1 - alpha)^{max(0, k + c - max(k, J))}
    B      <- w B + (1 - w) g / max(c, 1)
    k      <- min(k + c, J)   (0 at the first sighting, A = 0)
    n̄     <- (1 - r) n̄ + r n,   r = max(alpha, 1 / max(t, 1))   (n ids in the step)

read at step t (pending gap: a bucket not hit for g steps reads as if hit once now)::

    B'      = max(B, w_1 B + (1 - w_1)(t - A)),  w_1 = w(k, c = 1)       (pending_gap)
    B'      = max(t, 1)                                                  (A = 0)
    B̂(d)   = max over the hash functions of B'
    log Q(d) = min(-log B̂(d) - log max(n̄, 1), 0)

The fronts pass the counters in their own integer / float dtypes (the tf-keras front int64 and
float64 where exactness matters, Keras 3 int32 / float32); the formulas keep them.
"""

import math
from typing import Optional, TypedDict

from tfrs_logq.core import log_q as log_q_lib
from tfrs_logq.core.ops import Ops, Tensor

__all__ = [
  "DEFAULTS",
  "exact_log_q",
  "exact_log_one_minus_q",
  "prior_hits",
  "gap_weight",
  "updated_gap",
  "updated_hits",
  "updated_ids_per_step",
  "read_steps_per_hit",
  "hash_array_log_q",
]


class Defaults(TypedDict):
  """The types of `DEFAULTS`."""

  min_count: float
  num_buckets: int
  num_hashes: int
  alpha: float
  warmup: bool
  pending_gap: bool
  conservative: bool
  half_life: Optional[float]


DEFAULTS: Defaults = dict(
  min_count=1.0,
  num_buckets=2**22,
  num_hashes=2,
  alpha=1e-3,
  warmup=True,
  pending_gap=True,
  conservative=False,
  half_life=None,
)
"""The estimators' constructor defaults, on both fronts, and `python -m train`'s flag defaults:
m (exact counts and count-min), the hash array's H, its number of hash functions, alpha, warm-up
and pending gap, and count-min's conservative update and half-life (None: no decay)."""


def exact_log_q(ops: Ops, count: Tensor, total: Tensor, min_count: float, num_items: int) -> Tensor:
  """log Q(d) of exact counts (float ``count`` [...], float scalar ``total``)."""
  floored = ops.maximum(count, min_count)
  counted = ops.log(ops.minimum(floored / ops.maximum(total, 1.0), 1.0))
  return ops.where(total > 0, counted, -math.log(num_items))


def exact_log_one_minus_q(
  ops: Ops, count: Tensor, total: Tensor, min_count: float, num_items: int
) -> Tensor:
  """log(1 - Q(p)) of exact counts: N - #p floored at min_count ("as if one other item had been
  counted") so it stays finite."""
  floored = ops.maximum(count, min_count)
  counted = ops.log(ops.maximum(total - floored, min_count)) - ops.log(ops.maximum(total, 1.0))
  uniform = math.log(max(1.0 - 1.0 / num_items, log_q_lib.MIN_ONE_MINUS_Q))
  return ops.where(total > 0, counted, uniform)


def prior_hits(ops: Ops, hits: Tensor, warmup: bool, warmup_hits: int) -> Tensor:
  """k: the stored hits K with the warm-up; without it J after the second sighting (K > 0),
  0 before (dtype of ``hits``)."""
  if warmup:
    return hits
  return ops.where(hits > 0, ops.full_like(hits, warmup_hits), ops.zeros_like(hits))


def gap_weight(ops: Ops, k: Tensor, c: Tensor, alpha: float, warmup_hits: int) -> Tensor:
  """w = prod_{j=k+1}^{k+c} (1 - max(alpha, 1/j)) in closed form, float32 (k, c >= 0, integer
  or float tensors of one dtype)."""
  running = ops.cast(k, "float32") / ops.cast(
    ops.maximum(ops.maximum(k, ops.minimum(k + c, warmup_hits)), 1), "float32"
  )
  ema_hits = ops.maximum(k + c - ops.maximum(k, warmup_hits), 0)
  return running * ops.power(1.0 - alpha, ops.cast(ema_hits, "float32"))


def updated_gap(
  ops: Ops,
  gap: Tensor,
  k: Tensor,
  hits: Tensor,
  steps_since: Tensor,
  alpha: float,
  warmup_hits: int,
) -> Tensor:
  """B <- w B + (1 - w) g / max(c, 1) (float32 ``gap`` and ``steps_since`` g; k, c = hits)."""
  w = gap_weight(ops, k, hits, alpha, warmup_hits)
  per_hit = steps_since / ops.cast(ops.maximum(hits, 1), "float32")
  return w * gap + (1.0 - w) * per_hit


def updated_hits(ops: Ops, k: Tensor, hits: Tensor, last: Tensor, warmup_hits: int) -> Tensor:
  """k <- min(k + c, J), 0 at a bucket's first sighting (``last`` = 0)."""
  new = ops.minimum(k + hits, warmup_hits)
  return ops.where(ops.equal(last, 0), ops.zeros_like(new), new)


def updated_ids_per_step(
  ops: Ops, ids_per_step: Tensor, num_ids: Tensor, step: Tensor, alpha: float
) -> Tensor:
  """n̄ <- (1 - r) n̄ + r n, r = max(alpha, 1 / max(t, 1)) (float32 n̄ and n; t the new step)."""
  rate = ops.maximum(alpha, 1.0 / ops.cast(ops.maximum(step, 1), "float32"))
  return (1.0 - rate) * ids_per_step + rate * num_ids


def read_steps_per_hit(
  ops: Ops,
  gap: Tensor,
  last: Tensor,
  step: Tensor,
  k: Tensor,
  alpha: float,
  warmup_hits: int,
  pending_gap: bool,
) -> Tensor:
  """B̂ = max over hash functions (axis 0) of B as read at step t (pending gap, A = 0 floor).

  Args:
    gap: float32 [m, ...] B of each id's bucket per hash function.
    last: integer [m, ...] A.
    step: t (float32 scalar).
    k: [m, ...] hits k of the buckets (as the update counts them).
  """
  if pending_gap:
    w1 = gap_weight(ops, k, ops.ones_like(k), alpha, warmup_hits)
    g = step - ops.cast(last, "float32")
    gap = ops.maximum(gap, w1 * gap + (1.0 - w1) * g)
  gap = ops.where(ops.equal(last, 0), ops.maximum(step, 1.0), gap)
  return ops.max(gap, axis=0)


def hash_array_log_q(ops: Ops, steps_per_hit: Tensor, ids_per_step: Tensor) -> Tensor:
  """log Q(d) = min(-log B̂(d) - log max(n̄, 1), 0)."""
  return ops.minimum(-ops.log(steps_per_hit) - ops.log(ops.maximum(ids_per_step, 1.0)), 0.0)
