"""Log sampling probabilities on the Keras 3 path (``keras.ops``): checks, conversion and Q'.

Same conventions as ``tfrs_logq.tf_keras.log_q`` (formulas in ``tfrs_logq.core.log_q``): Q(d) is the
per-draw probability of one negative slot, everything passes **log Q**, nothing is clipped, and

    log Q'(d) = log Q(d) - log(1 - Q(p)) = log Q(d) - log1mexp(log Q(p)).

Value checks run where values are concrete (see ``tfrs_logq.keras3._tensors``) and raise
ValueError (the tf-keras path raises tf.errors.InvalidArgumentError at run time).
"""

from typing import Optional

from keras import ops

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import log_q as log_q_core
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3._tensors import Tensor

MIN_ONE_MINUS_Q = log_q_core.MIN_ONE_MINUS_Q

__all__ = [
  "MIN_ONE_MINUS_Q",
  "log1mexp",
  "validate_log_q",
  "probability_to_log_q",
  "resolve_log_q",
  "log_q_prime",
]


def log1mexp(x: Tensor, min_one_minus_p: float = MIN_ONE_MINUS_Q) -> Tensor:
  """log(1 - exp(x)) for x <= 0, stable, 1 - exp(x) floored at ``min_one_minus_p``."""
  return log_q_core.log1mexp(ops, _tensors.as_float32(x, "x"), min_one_minus_p)


def validate_log_q(log_q: Tensor, name: str = "log_q") -> Tensor:
  """float32 log Q after checking it is a finite log-probability (TypeError / ValueError)."""
  log_q = _tensors.as_float32(log_q, name)
  _tensors.check_log_q(log_q, name, core_checks.LOG_Q_SLACK)
  return log_q


def probability_to_log_q(probability: Tensor, name: str = "sampling probability") -> Tensor:
  """log Q from probabilities in (0, 1] (checked, never clipped), capped at 0."""
  probability = _tensors.as_float32(probability, name)
  _tensors.check_probability(probability, name, core_checks.LOG_Q_SLACK)
  return log_q_core.log_q_from_probability(ops, probability)


def resolve_log_q(
  probability: Optional[Tensor] = None,
  log_probability: Optional[Tensor] = None,
  name: str = "candidate_sampling_probability",
) -> Optional[object]:
  """float32 log Q from exactly one of probability / log_probability (None if neither)."""
  return core_checks.resolve_log_q(
    probability, log_probability, name, probability_to_log_q, validate_log_q
  )


def log_q_prime(negative_log_q: Tensor, positive_log_q: Tensor) -> Tensor:
  """log Q'(d) = log Q(d) - log(1 - Q(p)): [N] or [A, N] against [A] -> [A, N] float32."""
  return log_q_core.log_q_prime(
    ops,
    _tensors.as_float32(negative_log_q, "negative_log_q"),
    _tensors.as_float32(positive_log_q, "positive_log_q"),
  )
