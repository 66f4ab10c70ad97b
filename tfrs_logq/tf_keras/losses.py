r"""Per-example sampled softmax with none / standard / standard_no_positive / corrected logQ,
tf-keras front: `sampled_softmax_loss` and its layer `SampledSoftmaxLoss`.

The notation, the four formulas (w, P̂, Q', the ratio floor) and their limits are written once,
in ``tfrs_logq.core.sampled_softmax``; this module computes them on TensorFlow
(``tfrs_logq.core.ops.tf_ops``), as ``tfrs_logq.keras3.losses`` does with ``keras.ops``, and adds
the input conversion, the checks and the layer. Full softmax is ``full_softmax.py``, BCE and gBCE
``gbce.py`` (the file names of the Keras 3 front).

Losses are computed in float32 whatever the input dtype (float16 / bfloat16 inputs and
mixed-precision models are safe) with a masked, max-shifted log-sum-exp: huge logits stay finite,
masked entries never produce NaN gradients, and a row with no valid negative gives 0.
"""

import importlib
import warnings
from typing import Any, Dict, NamedTuple, Optional, Tuple

from tfrs_logq.tf_keras import log_q as log_q_lib

import tensorflow as tf

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import sampled_softmax as sampled_softmax_core
from tfrs_logq.core.ops import tf_ops

__all__ = [
  "CORRECTIONS",
  "Q_PRIME_MODES",
  "LOSSES",
  "LossOutput",
  "masked_logsumexp",
  "sampled_softmax_loss",
  "SampledSoftmaxLoss",
]

CORRECTIONS = core_checks.CORRECTIONS
Q_PRIME_MODES = core_checks.Q_PRIME_MODES
LOSSES = core_checks.LOSSES

_OPS = tf_ops()


class LossOutput(NamedTuple):
  """Per-example results.

  Attributes:
    loss: [A] float32 per-example loss (before sample weights / reduction).
    weight: [A] float32 the weight w = sg(1 - P̂) for ``corrected``; 1 for the other losses
      (0 for rows without a valid negative under ``corrected``).
    num_valid: [A] int32 number of valid negatives n of each row.
  """

  loss: tf.Tensor
  weight: tf.Tensor
  num_valid: tf.Tensor


# One validation of (correction, q_prime, ratio_floor) for the tf-keras and Keras 3 paths.
_check_correction = core_checks.check_correction


def masked_logsumexp(x: tf.Tensor, valid: tf.Tensor) -> tf.Tensor:
  """LSE over the valid entries of each row of x [A, N] (a few elementwise passes over [A, N]).

  Invalid entries (and entries equal to -inf, which add exp(-inf) = 0) are replaced by -1e30
  before a stop-gradient row-max shift, so huge values are stable and excluded entries get
  exactly zero gradient (through tf.where). A row with a valid +inf entry returns +inf with zero
  gradient (never inf - inf); NaN entries propagate. Rows with no valid entry return about -1e30
  (finite, never NaN); callers that need 0 there test n > 0.
  """
  return sampled_softmax_core.masked_logsumexp(
    _OPS, tf.convert_to_tensor(x), tf.convert_to_tensor(valid)
  )


def _scores(positive_scores: tf.Tensor, negative_scores: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """Float scores as float32 [A] and [A, N] (TypeError / ValueError on bad dtypes / ranks)."""
  s_p = tf.convert_to_tensor(positive_scores)
  s_n = tf.convert_to_tensor(negative_scores)
  for name, t in (("positive_scores", s_p), ("negative_scores", s_n)):
    if not t.dtype.is_floating:
      raise TypeError(f"{name} must be floating, got {t.dtype}")
  if s_p.shape.rank is not None and s_p.shape.rank != 1:
    raise ValueError(f"positive_scores must be [A], got shape {s_p.shape}")
  if s_n.shape.rank is not None and s_n.shape.rank != 2:
    raise ValueError(f"negative_scores must be [A, N], got shape {s_n.shape}")
  if not s_p.shape[:1].is_compatible_with(s_n.shape[:1]):
    raise ValueError(
      f"positive_scores {s_p.shape} and negative_scores {s_n.shape} disagree on the number of rows"
    )
  return tf.cast(s_p, tf.float32), tf.cast(s_n, tf.float32)


def _valid_mask(valid_mask: Optional[tf.Tensor], s_n: tf.Tensor) -> Tuple[tf.Tensor, list]:
  if valid_mask is None:
    return tf.ones_like(s_n, dtype=tf.bool), []
  valid_mask = tf.convert_to_tensor(valid_mask)
  if valid_mask.dtype != tf.bool:
    raise TypeError(f"valid_mask must be boolean, got {valid_mask.dtype}")
  if not valid_mask.shape.is_compatible_with(s_n.shape):
    raise ValueError(f"valid_mask {valid_mask.shape} does not match negative_scores {s_n.shape}")
  return valid_mask, [
    tf.debugging.assert_equal(
      tf.shape(valid_mask), tf.shape(s_n), message="valid_mask must be [A, N]"
    )
  ]


def _check_log_q_shapes(
  s_p: tf.Tensor,
  s_n: tf.Tensor,
  negative_log_q: Optional[tf.Tensor],
  positive_log_q: Optional[tf.Tensor],
) -> list:
  """Static shape checks where shapes are known; dynamic asserts otherwise."""
  a, n = tf.shape(s_p)[0], tf.shape(s_n)[1]
  checks = [
    tf.debugging.assert_equal(
      tf.shape(s_n)[0], a, message="negative_scores must have one row per positive score"
    ),
    tf.debugging.assert_positive(
      a, message="empty batch: there are no queries (positive_scores is empty)"
    ),
  ]
  if negative_log_q is not None:
    rank = negative_log_q.shape.rank
    if rank not in (1, 2):
      raise ValueError(f"negative_log_q must be [N] or [A, N], got shape {negative_log_q.shape}")
    if not negative_log_q.shape[-1:].is_compatible_with(s_n.shape[-1:]) or (
      rank == 2 and not negative_log_q.shape.is_compatible_with(s_n.shape)
    ):
      raise ValueError(
        f"negative_log_q {negative_log_q.shape} does not match negative_scores {s_n.shape}"
      )
    checks.append(
      tf.debugging.assert_equal(
        tf.shape(negative_log_q)[-1], n, message="negative_log_q must have N columns"
      )
    )
    if rank == 2:
      checks.append(
        tf.debugging.assert_equal(
          tf.shape(negative_log_q)[0], a, message="negative_log_q must have A rows"
        )
      )
  if positive_log_q is not None:
    if positive_log_q.shape.rank is not None and positive_log_q.shape.rank != 1:
      raise ValueError(f"positive_log_q must be [A], got shape {positive_log_q.shape}")
    if not positive_log_q.shape.is_compatible_with(s_p.shape):
      raise ValueError(
        f"positive_log_q {positive_log_q.shape} does not match positive_scores {s_p.shape}"
      )
    checks.append(
      tf.debugging.assert_equal(
        tf.shape(positive_log_q)[0], a, message="positive_log_q must be [A]"
      )
    )
  return checks


def _assert_finite(
  s_p: tf.Tensor, s_n: tf.Tensor, check_scores: bool
) -> Tuple[tf.Tensor, tf.Tensor]:
  if not check_scores:
    return s_p, s_n
  return (
    tf.debugging.assert_all_finite(s_p, "positive_scores has NaN or inf"),
    tf.debugging.assert_all_finite(s_n, "negative_scores has NaN or inf"),
  )


def sampled_softmax_loss(
  positive_scores: tf.Tensor,
  negative_scores: tf.Tensor,
  negative_log_q: Optional[tf.Tensor] = None,
  *,
  correction: str,
  positive_log_q: Optional[tf.Tensor] = None,
  valid_mask: Optional[tf.Tensor] = None,
  q_prime: str = "exact",
  check_scores: bool = False,
  ratio_floor: float = 0.0,
) -> LossOutput:
  """Per-example sampled-softmax loss with the chosen logQ correction (formulas:
  ``tfrs_logq.core.sampled_softmax``).

  Args:
    positive_scores: [A] s_p (already divided by the temperature).
    negative_scores: [A, N] s_i.
    negative_log_q: [N] (negatives shared by all rows) or [A, N] (per-row / query-dependent
      proposals such as MIDX) per-draw log Q(d_i). Not needed for ``none``.
    correction: ``none`` | ``standard`` | ``standard_no_positive`` | ``corrected``.
    positive_log_q: [A] log Q(p); needed by ``standard`` and by ``corrected`` with
      ``q_prime="exact"``.
    valid_mask: [A, N] bool, True where negative i takes part in row's loss. Masking the
      negatives equal to the positive (accidental hits) is the caller's job
      (``tfrs_logq.tf_keras.accidental_hits.accidental_hit_mask``); ``corrected`` assumes it was
      done.
    q_prime: ``exact`` (log Q' = log Q - log(1 - Q(p))) or ``proxy`` (log Q' ~ log Q).
    check_scores: Also assert that the scores are finite (one more pass over [A, N] in the
      forward and backward pass: off by default, on for debugging a model that produces NaN).
    ratio_floor: r in [0, 1); r > 0 clamps the ratio inside the log of ``corrected`` as the
      paper's released script does with r = 1e-10 (``tfrs_logq.core.sampled_softmax``); 0
      (default) = off.

  Returns:
    LossOutput(loss [A], weight [A], num_valid [A]).

  Raises:
    ValueError / TypeError: unknown correction, missing log Q, bad shapes or dtypes;
    tf.errors.InvalidArgumentError at run time for a non-finite or > 0 log Q.
  """
  ratio_floor = _check_correction(correction, q_prime, ratio_floor)
  s_p, s_n = _scores(positive_scores, negative_scores)
  if negative_log_q is not None:
    negative_log_q = log_q_lib.validate_log_q(negative_log_q, "negative_log_q")
  if positive_log_q is not None:
    positive_log_q = log_q_lib.validate_log_q(positive_log_q, "positive_log_q")
  needs_negative_q, needs_positive_q = core_checks.needs_log_q(correction, q_prime)
  if needs_negative_q and negative_log_q is None:
    raise ValueError(f"correction={correction!r} needs negative_log_q")
  if needs_positive_q and positive_log_q is None:
    raise ValueError(f"correction={correction!r} (q_prime={q_prime!r}) needs positive_log_q")
  valid_mask, checks = _valid_mask(valid_mask, s_n)
  checks += _check_log_q_shapes(s_p, s_n, negative_log_q, positive_log_q)
  with tf.control_dependencies(checks):
    s_p = tf.identity(s_p)
  s_p, s_n = _assert_finite(s_p, s_n, check_scores)
  loss, weight, num_valid = sampled_softmax_core.sampled_softmax(
    _OPS,
    s_p,
    s_n,
    negative_log_q if needs_negative_q else None,
    positive_log_q if needs_positive_q else None,
    valid_mask,
    correction,
    q_prime,
    ratio_floor,
  )
  return LossOutput(loss=loss, weight=weight, num_valid=num_valid)


class SampledSoftmaxLoss(tf.keras.layers.Layer):
  """Keras layer computing `sampled_softmax_loss` (per-example, float32; the formulas:
  ``tfrs_logq.core.sampled_softmax``). ``call(positive_scores, negative_scores,
  negative_log_q=None, positive_log_q=None, valid_mask=None)`` returns a `LossOutput`. The layer
  always computes in float32 (its dtype policy is fixed to float32 so mixed-precision models are
  safe).

  Args:
    correction: one of `CORRECTIONS`.
    q_prime: ``exact`` or ``proxy``.
    ratio_floor: the paper script's clamp of ``corrected`` (0 = off).
    check_scores: assert that every score is finite.
  """

  def __init__(
    self,
    correction: str = "corrected",
    q_prime: str = "exact",
    ratio_floor: float = 0.0,
    check_scores: bool = False,
    **kwargs: Any,
  ) -> None:
    kwargs["dtype"] = "float32"
    super().__init__(**kwargs)
    self.ratio_floor = _check_correction(correction, q_prime, ratio_floor)
    self.correction = correction
    self.q_prime = q_prime
    self.check_scores = bool(check_scores)

  def call(
    self,
    positive_scores: tf.Tensor,
    negative_scores: tf.Tensor,
    negative_log_q: Optional[tf.Tensor] = None,
    positive_log_q: Optional[tf.Tensor] = None,
    valid_mask: Optional[tf.Tensor] = None,
  ) -> LossOutput:
    return sampled_softmax_loss(
      positive_scores,
      negative_scores,
      negative_log_q,
      correction=self.correction,
      positive_log_q=positive_log_q,
      valid_mask=valid_mask,
      q_prime=self.q_prime,
      check_scores=self.check_scores,
      ratio_floor=self.ratio_floor,
    )

  def get_config(self) -> Dict[str, Any]:
    return {
      **super().get_config(),
      "correction": self.correction,
      "q_prime": self.q_prime,
      "ratio_floor": self.ratio_floor,
      "check_scores": self.check_scores,
    }


# Names this module held before full softmax and gBCE got their own files (the Keras 3 layout).
_MOVED = {
  "full_softmax_loss": "full_softmax",
  "FullSoftmaxLoss": "full_softmax",
  "bce_loss": "gbce",
  "gbce_loss": "gbce",
  "gbce_beta": "gbce",
  "GBCELoss": "gbce",
}


def __getattr__(name: str) -> Any:
  """The names that moved to ``full_softmax`` / ``gbce``, with a DeprecationWarning."""
  if name in _MOVED:
    where = f"tfrs_logq.tf_keras.{_MOVED[name]}"
    warnings.warn(
      f"{__name__}.{name} has moved to {where}.{name}", DeprecationWarning, stacklevel=2
    )
    return getattr(importlib.import_module(where), name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
