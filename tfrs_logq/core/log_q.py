r"""Log sampling probabilities: log(1 - e^x), the positive-excluded proposal Q', inclusion.

Q(d) is the per-draw probability that one negative slot holds item d (sum_d Q(d) = 1). Work in
log space: log Q in, never a clipped Q.

    log1mexp(x)  = log(1 - e^x)                       x <= 0; 1 - e^x floored at m (default
                                                      MIN_ONE_MINUS_Q = 1e-6; m = 0: no floor)
    log Q'(d)    = log Q(d) - log(1 - Q(p))           Q'(d) = Q(d) / (1 - Q(p)), per row
                 = log Q(d) - log1mexp(log Q(p))
    log pi(d)    = log(1 - (1 - Q(d))^B)              P(d in a pool of B i.i.d. draws)
                 = log1mexp(B log1mexp(log Q(d)))     (log B + log Q(d) where log Q < -30)
    log Q        = min(log q, 0)                      from a probability q in (0, 1]

log1mexp uses log(-expm1(x)) above -ln 2 and log1p(-e^x) below (Maechler 2012); each branch
sees only its own range, so neither the value nor the gradient of the unused branch is NaN.
"""

import math

from tfrs_logq.core.ops import Ops, Tensor

__all__ = [
  "MIN_ONE_MINUS_Q",
  "log1mexp",
  "log_q_prime",
  "log_inclusion_probability",
  "log_q_from_probability",
]

MIN_ONE_MINUS_Q = 1e-6
"""Floor of 1 - Q(p) in log(1 - Q(p)): Q(p) = 1 (a one-item catalog, a positive that holds the
whole stream) gives log(1e-6), not -inf."""


def log1mexp(ops: Ops, x: Tensor, min_one_minus_p: float = MIN_ONE_MINUS_Q) -> Tensor:
  """log(1 - exp(x)) for x <= 0, 1 - exp(x) floored at ``min_one_minus_p`` (0: no floor)."""
  if not 0.0 <= min_one_minus_p < 1.0:
    raise ValueError(f"min_one_minus_p must be in [0, 1), got {min_one_minus_p!r}")
  x = ops.minimum(x, math.log1p(-min_one_minus_p))
  log_half = -math.log(2.0)
  near_one = x > log_half
  hi = ops.where(near_one, x, log_half)
  lo = ops.where(near_one, log_half, x)
  return ops.where(near_one, ops.log(-ops.expm1(hi)), ops.log1p(-ops.exp(lo)))


def log_q_prime(
  ops: Ops,
  negative_log_q: Tensor,
  positive_log_q: Tensor,
  min_one_minus_p: float = MIN_ONE_MINUS_Q,
) -> Tensor:
  """log Q'(d) = log Q(d) - log(1 - Q(p)): [N] or [A, N] against [A] -> [A, N]."""
  return negative_log_q - ops.expand_dims(log1mexp(ops, positive_log_q, min_one_minus_p), -1)


def log_inclusion_probability(ops: Ops, log_q: Tensor, num_draws: Tensor) -> Tensor:
  """log pi(d) = log(1 - (1 - Q(d))^B) for float log Q (-inf gives -inf) and float B >= 1.

  No floors, so pi = B Q (1 - O(B Q)) stays accurate for tiny B Q and saturates at 1 for
  B Q >> 1; where Q < 1e-13 (1 - Q rounds to 1 in float32) the first-order value log B + log Q
  is used (relative error B Q / 2).
  """
  log_1mq = log1mexp(ops, ops.minimum(log_q, 0.0), min_one_minus_p=0.0)  # log(1 - Q) <= 0
  exact = log1mexp(ops, num_draws * log_1mq, min_one_minus_p=0.0)
  return ops.where(log_q < -30.0, ops.log(num_draws) + log_q, exact)


def log_q_from_probability(ops: Ops, probability: Tensor) -> Tensor:
  """log Q = min(log q, 0) (q checked to be in (0, 1] by the front, never clipped)."""
  return ops.minimum(ops.log(probability), 0.0)
