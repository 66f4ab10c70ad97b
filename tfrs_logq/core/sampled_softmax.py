r"""Sampled softmax with none / standard / standard_no_positive / corrected logQ; full softmax.

The formulas of the retrieval losses, written once here (the fronts' docstrings point to it).

Notation (one meaning everywhere): a row is a query u with positive p; s_p = s(u, p) is the
positive score, s_i = s(u, d_i) the scores of its negatives d_1..d_N, log Q(d_i) their per-draw
log sampling probabilities and log Q(p) the positive's; ``valid[i]`` says whether negative i takes
part (False for padding, accidental hits d_i == p, score masks), n is the number of valid
negatives of the row; softplus(x) = log(1 + e^x), sigma the logistic sigmoid, sg stop-gradient.

    LSE_valid(x) = log sum_{i valid} e^{x_i}     (max-shifted; ~ -1e30 for a row with n = 0)

``none`` (plain sampled softmax, positive in the denominator)::

    L = -(s_p - log(e^{s_p} + sum_i e^{s_i}))                           = softplus(LSE s_i - s_p)

``standard`` (Yi et al. 2019, TFRS: log Q subtracted from every column, the positive's too)::

    L = softplus(LSE_i(s_i - log Q(d_i)) - (s_p - log Q(p)))

``standard_no_positive`` (Yang et al. 2020: the positive is not corrected)::

    L = softplus(LSE_i(s_i - log Q(d_i)) - s_p)

``corrected`` (Khrylchenko et al. 2025: the positive leaves the denominator, the negatives are
importance-weighted with the proposal Q' that excludes p)::

    log Q'(d) = log Q(d) - log(1 - Q(p))   (q_prime="exact";  = log Q(d) for "proxy")
    Z  = LSE_i(s_i - log Q'(d_i))          = LSE_i(s_i - log Q(d_i)) + log(1 - Q(p))
    P̂ = sigma(s_p - (Z - log n))
    w  = sg(1 - P̂)                        = sg(sigma((Z - log n) - s_p))
    L  = -w (s_p - Z)
    ratio_floor r > 0:  L = -w max(s_p - max(Z, log r), log r)

P̂ = e^{s_p} / (e^{s_p} + (1/n) sum_i e^{s_i - log Q'(d_i)}) estimates P(p | u) (appendix B:
(1/n) sum_i e^{s_i} / Q'(d_i) estimates sum_{d != p} e^{s_d}). The gradient of the bracket
(s_p - Z) does not depend on the scale of Q' (a constant shift of log Q' cancels), but w does:
Q must be the per-draw probability of one negative slot, summing to 1 over the catalog.
``q_prime="proxy"`` (log Q' = log Q) is the paper's industrial setup. The ratio floor (off by
default) reproduces the clamp of the paper's released corrected script, R = e^{s_p} /
max(sum_i e^{s_i - log Q'_i}, r), loss -w log max(R, r), r = 1e-10: a row with s_p - Z < log r
contributes the constant -w log r and no gradient; w is not clamped.

Full softmax over a table of candidates is ``none`` with every candidate but p a valid
negative: L = -s_p + log sum_d e^{s_d} = softplus(LSE_{d != p} s_d - s_p).

Limits. A row with n = 0 gives L = 0 (and w = 0 under ``corrected``). Infinite scores give the
limit of the formula where it exists: s_p = +inf gives 0; s_p = -inf or a valid negative at
+inf gives +inf (the ratio floor: -w log r); negatives at -inf drop out of the sums; s_p = +inf
with a negative at +inf has no limit (NaN). Wherever the loss is finite its gradients are
finite: masked entries and entries at -inf are replaced by -1e30 before a stop-gradient row-max
shift, and a row holding +inf is evaluated on constants. The formulas compute in the inputs'
float dtype; the fronts pass float32 (fp16 / bf16 inputs are cast first).
"""

import math
from typing import Optional, Tuple

from tfrs_logq.core import checks
from tfrs_logq.core import log_q as log_q_lib
from tfrs_logq.core.ops import Ops, Tensor

__all__ = [
  "MASKED_LOGIT",
  "masked_logsumexp",
  "softmax_with_positive",
  "corrected",
  "sampled_softmax",
]

MASKED_LOGIT = -1e30
"""Stands for an excluded entry inside the LSE (finite: never inf - inf)."""


def masked_logsumexp(ops: Ops, x: Tensor, valid: Tensor) -> Tensor:
  """LSE over the valid entries of each row of x [A, N] (a few elementwise passes over [A, N]).

  Invalid entries (and entries at -inf, which add e^-inf = 0) become -1e30 before a
  stop-gradient row-max shift, so huge values are stable and excluded entries get exactly zero
  gradient. A row with a valid +inf entry returns +inf with zero gradient (never inf - inf); NaN
  entries propagate; a row with no valid entry returns about -1e30 (callers test n > 0).
  """
  keep = ops.logical_and(valid, ops.not_equal(x, -math.inf))
  masked = ops.where(keep, x, MASKED_LOGIT)
  row_max = ops.max(masked, axis=1, keepdims=True)
  row_inf = ops.equal(row_max, math.inf)
  # Rows holding +inf are evaluated on constants (value replaced by +inf below): no NaN gradient.
  safe = ops.where(row_inf, ops.where(ops.equal(masked, math.inf), 0.0, MASKED_LOGIT), masked)
  shift = ops.stop_gradient(ops.where(ops.isfinite(row_max), row_max, 0.0))
  lse = ops.squeeze(shift, 1) + ops.log(ops.sum(ops.exp(safe - shift), axis=1))
  return ops.where(ops.squeeze(row_inf, 1), math.inf, lse)


def softmax_with_positive(
  ops: Ops, positive_logit: Tensor, logits: Tensor, valid: Tensor, has_negatives: Tensor
) -> Tensor:
  """L = log(e^{l_p} + sum_{i valid} e^{l_i}) - l_p = softplus(LSE_valid(l_i) - l_p), 0 where
  ``has_negatives`` is False: ``none``, ``standard``, ``standard_no_positive`` and full softmax.

  No [A, N + 1] copy; finite limits for l_p = +inf (0) and LSE = -inf (0).
  """
  loss = ops.softplus(masked_logsumexp(ops, logits, valid) - positive_logit)
  return ops.where(has_negatives, loss, ops.zeros_like(loss))


def corrected(
  ops: Ops,
  s_p: Tensor,
  s_n: Tensor,
  negative_log_q: Tensor,
  positive_log_q: Optional[Tensor],
  valid: Tensor,
  num_valid: Tensor,
  ratio_floor: float = 0.0,
) -> Tuple[Tensor, Tensor]:
  """(L [A], w [A]) of ``corrected`` (module docstring); ``positive_log_q`` None = ``proxy``.

  Q' is a per-row shift of the LSE: Z = LSE_i(s_i - log Q(d_i)) + log(1 - Q(p)).
  """
  has_negatives = num_valid > 0
  lse = masked_logsumexp(ops, s_n - negative_log_q, valid)
  if positive_log_q is not None:
    lse = lse + log_q_lib.log1mexp(ops, positive_log_q)
  log_n = ops.log(ops.cast(ops.maximum(num_valid, 1), "float32"))
  # 1 - P̂ = 1 - sigma(s_p - (Z - log n)) = sigma((Z - log n) - s_p)
  weight = ops.stop_gradient(ops.sigmoid((lse - log_n) - s_p))
  weight = ops.where(has_negatives, weight, ops.zeros_like(weight))
  if ratio_floor > 0:
    log_floor = math.log(ratio_floor)
    term = ops.maximum(s_p - ops.maximum(lse, log_floor), log_floor)
  else:
    term = s_p - lse
  # w = 0 (n = 0, or s_p = +inf where term = +inf) contributes exactly 0, never 0 * inf; a NaN
  # weight (s_p and a negative both +inf: no limit) propagates.
  active = ops.logical_and(has_negatives, ops.not_equal(weight, 0.0))
  loss = ops.where(
    active, -weight * ops.where(active, term, ops.zeros_like(term)), ops.zeros_like(term)
  )
  return loss, weight


def sampled_softmax(
  ops: Ops,
  s_p: Tensor,
  s_n: Tensor,
  negative_log_q: Tensor,
  positive_log_q: Optional[Tensor],
  valid: Tensor,
  correction: str,
  q_prime: str = "exact",
  ratio_floor: float = 0.0,
) -> Tuple[Tensor, Tensor, Tensor]:
  """Per-row loss, weight and n of the four corrections (module docstring).

  Args:
    ops: the array namespace (``tfrs_logq.core.ops``).
    s_p: float [A] positive scores.
    s_n: float [A, N] negative scores.
    negative_log_q: float [N] or [A, N] (unused by ``none``).
    positive_log_q: float [A] (used by ``standard`` and by ``corrected`` + ``exact``).
    valid: bool [A, N].
    correction, q_prime, ratio_floor: checked by the caller (``checks.check_correction``).

  Returns:
    (loss [A], weight [A], num_valid [A] int32), in the inputs' float dtype.
  """
  num_valid = ops.sum(ops.cast(valid, "int32"), axis=1)
  has_negatives = num_valid > 0
  if correction == "corrected":
    loss, weight = corrected(
      ops,
      s_p,
      s_n,
      negative_log_q,
      positive_log_q if q_prime == "exact" else None,
      valid,
      num_valid,
      ratio_floor,
    )
    return loss, weight, num_valid
  if correction == "none":
    logits, pos_logit = s_n, s_p
  elif correction == "standard":
    logits, pos_logit = s_n - negative_log_q, s_p - positive_log_q
  elif correction == "standard_no_positive":
    logits, pos_logit = s_n - negative_log_q, s_p
  else:
    raise ValueError(f"correction must be one of {checks.CORRECTIONS}, got {correction!r}")
  loss = softmax_with_positive(ops, pos_logit, logits, valid, has_negatives)
  return loss, ops.ones_like(loss), num_valid
