"""Log sampling probabilities: validation, conversion, the positive-excluded proposal Q' and
the inclusion probability of a deduplicated pool.

Conventions: Q(d) is the *per-draw* probability that one negative slot holds item d, so
sum_d Q(d) = 1 over the catalog. Everything in this package passes **log Q**, never a clipped Q:
tail items of large catalogs have Q far below TFRS's 1e-6 clip.

    Q'(d) = Q(d) / (1 - Q(p))          the proposal with the row's positive p excluded
    log Q'(d) = log Q(d) - log(1 - Q(p)) = log Q(d) - log1mexp(log Q(p))
    pi(d) = 1 - (1 - Q(d))^B           P(d is in a pool of B i.i.d. draws), deduplicated pools
    log pi(d) = log1mexp(B * log1mexp(log Q(d)))

The formulas are ``tfrs_logq.core.log_q``'s (the one implementation of log(1 - exp(x)) and the
one floor ``MIN_ONE_MINUS_Q`` of 1 - Q(p): a positive that holds the whole stream must not give
log 0), evaluated with TensorFlow; this module adds the tensor conversion and the run-time
checks.
"""

from typing import Optional, Union

import tensorflow as tf

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import log_q as log_q_core
from tfrs_logq.core.ops import tf_ops

__all__ = [
  "MIN_ONE_MINUS_Q",
  "log1mexp",
  "validate_log_q",
  "probability_to_log_q",
  "resolve_log_q",
  "log_q_prime",
  "log_inclusion_probability",
]

_OPS = tf_ops()
# A log-probability may exceed 0 by float rounding (e.g. log(count / total) with count ==
# total); anything above this is a caller error.
_LOG_Q_SLACK = core_checks.LOG_Q_SLACK

MIN_ONE_MINUS_Q = log_q_core.MIN_ONE_MINUS_Q
"""Floor of 1 - Q(p) in log(1 - Q(p)): Q(p) = 1 gives log(1e-6), not -inf."""


def log1mexp(x: tf.Tensor, min_one_minus_p: float = MIN_ONE_MINUS_Q) -> tf.Tensor:
  """log(1 - exp(x)) for x <= 0, accurate everywhere (Maechler 2012).

  Uses log(-expm1(x)) for x > -ln 2 and log1p(-exp(x)) below; each branch only sees inputs in
  its own range, so neither the value nor the gradient of the unused branch can be NaN.
  1 - exp(x) is floored at ``min_one_minus_p`` (default `MIN_ONE_MINUS_Q`), so that Q(p) = 1 (a
  one-item catalog) gives a large finite value instead of -inf; ``min_one_minus_p=0`` turns the
  floor off (then x = 0 gives -inf).
  """
  return log_q_core.log1mexp(_OPS, tf.convert_to_tensor(x), min_one_minus_p)


def validate_log_q(log_q: tf.Tensor, name: str = "log_q") -> tf.Tensor:
  """Checks that log Q is a finite log-probability (Q in (0, 1]); returns it as float32.

  Raises:
    TypeError: not a floating tensor.
    tf.errors.InvalidArgumentError: NaN, +-inf (Q = 0 is not a proposal that sampled the
      item) or > 0 (Q > 1), at run time.
  """
  log_q = tf.convert_to_tensor(log_q)
  if not log_q.dtype.is_floating:
    raise TypeError(f"{name} must be a floating tensor of log-probabilities, got {log_q.dtype}")
  log_q = tf.cast(log_q, tf.float32)
  checks = [
    tf.debugging.assert_all_finite(
      log_q, f"{name} has NaN or inf: every sampled negative needs 0 < Q <= 1"
    ),
    tf.debugging.assert_less_equal(
      log_q,
      tf.constant(_LOG_Q_SLACK, tf.float32),
      message=f"{name} > 0: a sampling probability above 1",
    ),
  ]
  with tf.control_dependencies(checks):
    return tf.identity(log_q)


def probability_to_log_q(probability: tf.Tensor, name: str = "sampling probability") -> tf.Tensor:
  """log Q from probabilities, after checking 0 < Q <= 1 and no NaN (no clipping).

  Raises:
    TypeError: not a floating tensor.
    tf.errors.InvalidArgumentError: a probability <= 0, > 1 or NaN, at run time.
  """
  probability = tf.convert_to_tensor(probability)
  if not probability.dtype.is_floating:
    raise TypeError(f"{name} must be a floating tensor, got {probability.dtype}")
  probability = tf.cast(probability, tf.float32)
  checks = [
    tf.debugging.assert_all_finite(probability, f"{name} has NaN or inf"),
    tf.debugging.assert_positive(probability, message=f"{name} must be > 0"),
    tf.debugging.assert_less_equal(
      probability, tf.constant(1.0 + _LOG_Q_SLACK, tf.float32), message=f"{name} must be <= 1"
    ),
  ]
  with tf.control_dependencies(checks):
    return log_q_core.log_q_from_probability(_OPS, probability)


def resolve_log_q(
  probability: Optional[tf.Tensor] = None,
  log_probability: Optional[tf.Tensor] = None,
  name: str = "candidate_sampling_probability",
) -> Optional[tf.Tensor]:
  """Returns validated float32 log Q from exactly one of probability / log_probability."""
  return core_checks.resolve_log_q(
    probability, log_probability, name, probability_to_log_q, validate_log_q
  )


def log_q_prime(negative_log_q: tf.Tensor, positive_log_q: tf.Tensor) -> tf.Tensor:
  """log Q'(d) = log Q(d) - log(1 - Q(p)), per row.

  Args:
    negative_log_q: [N] (shared) or [A, N] log Q of the negatives.
    positive_log_q: [A] log Q of each row's positive.

  Returns:
    [A, N] float32.
  """
  return log_q_core.log_q_prime(
    _OPS, tf.cast(negative_log_q, tf.float32), tf.cast(positive_log_q, tf.float32)
  )


def log_inclusion_probability(log_q: tf.Tensor, num_draws: Union[int, tf.Tensor]) -> tf.Tensor:
  """log pi(d) = log(1 - (1 - Q(d))^B): the log probability that d is in a pool of B draws.

  Computed as ``log1mexp(B * log1mexp(log Q))`` without floors, so pi = B Q (1 - O(B Q)) stays
  accurate for tiny B Q and saturates at 1 for B Q >> 1. Where Q < 1e-13 (1 - Q rounds to 1 in
  float32) the first-order value log B + log Q is used (relative error B Q / 2).

  Args:
    log_q: float log Q(d), any shape; -inf (Q = 0) gives -inf.
    num_draws: B >= 1, the number of i.i.d. draws of the pool (scalar, may be a tensor).

  Returns:
    float32, the shape of ``log_q``.
  """
  return log_q_core.log_inclusion_probability(
    _OPS, tf.cast(log_q, tf.float32), tf.cast(num_draws, tf.float32)
  )
