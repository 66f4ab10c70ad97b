"""SamplingProbabilityCorrection: replaces ``tfrs.layers.loss.SamplingProbablityCorrection``.

    corrected_logits[a, c] = logits[a, c] - log Q(c)

TFRS computes ``logits - log(clip(Q, 1e-6, 1))``: the clip silently distorts every tail item
with Q < 1e-6 (common in catalogs of millions) and hides invalid input. This layer accepts
probabilities (``from_log=False``) or log-probabilities (``from_log=True``), never clips, and
raises on Q <= 0, Q > 1 or NaN. The subtraction happens in float32 and the result is cast back
to the logits' dtype. ``epsilon=1e-6`` clips as TFRS does (to reproduce it). The Keras 3 twin is
``tfrs_logq.keras3.logq_correction.SamplingProbabilityCorrection`` (same arguments);
``LogQCorrection`` is this layer's deprecated former name.

For the positive-excluded proposal Q' of the corrected loss use
``tfrs_logq.tf_keras.log_q.log_q_prime`` or ``tfrs_logq.tf_keras.losses.sampled_softmax_loss``
directly.
"""

import warnings
from typing import Any, Dict, Optional

from tfrs_logq.tf_keras import log_q as log_q_lib

import tensorflow as tf

from tfrs_logq.core import checks as core_checks

__all__ = ["SamplingProbabilityCorrection", "LogQCorrection"]


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class SamplingProbabilityCorrection(tf.keras.layers.Layer):
  """Subtracts log Q from logits, without clipping by default:

      call(logits [A, C], q [C] or [A, C]) = logits - log Q     (float32, cast back)

  ``from_log=False``: q is Q, checked 0 < Q <= 1 and not NaN (``InvalidArgumentError``);
  ``from_log=True``: q is log Q, checked finite and <= 0. Replaces
  ``tfrs.layers.loss.SamplingProbablityCorrection``, which clips Q at 1e-6.

  Args:
    epsilon: None (default): no clipping. A float in (0, 1): clip Q to [epsilon, 1] first, as
      TFRS does (1e-6 there).
    from_log: the second argument of ``call`` is log Q instead of Q.
  """

  def __init__(
    self, epsilon: Optional[float] = None, from_log: bool = False, **kwargs: Any
  ) -> None:
    super().__init__(**kwargs)
    self.epsilon = core_checks.check_clip_epsilon(epsilon, from_log)
    self.from_log = bool(from_log)

  def call(self, logits: tf.Tensor, candidate_sampling_probability: tf.Tensor) -> tf.Tensor:
    logits = tf.convert_to_tensor(logits)
    if self.from_log:
      log_q = log_q_lib.validate_log_q(
        candidate_sampling_probability, "log candidate_sampling_probability"
      )
    else:
      q = candidate_sampling_probability
      if self.epsilon is not None:
        q = tf.clip_by_value(tf.cast(q, tf.float32), self.epsilon, 1.0)
      log_q = log_q_lib.probability_to_log_q(q, "candidate_sampling_probability")
    if log_q.shape.rank not in (None, 1, 2):
      raise ValueError(f"sampling probabilities must be [C] or [A, C], got {log_q.shape}")
    if not log_q.shape[-1:].is_compatible_with(logits.shape[-1:]):
      raise ValueError(f"sampling probabilities {log_q.shape} do not match logits {logits.shape}")
    out = tf.cast(logits, tf.float32) - log_q
    return tf.cast(out, logits.dtype)

  def get_config(self) -> Dict[str, Any]:
    return {**super().get_config(), "epsilon": self.epsilon, "from_log": self.from_log}


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class LogQCorrection(SamplingProbabilityCorrection):
  """Deprecated name of `SamplingProbabilityCorrection` (kept so that saved models load)."""

  def __init__(self, *args: Any, **kwargs: Any) -> None:
    warnings.warn(
      "LogQCorrection is now SamplingProbabilityCorrection (tfrs_logq.tf_keras), the name of "
      "its Keras 3 twin; the old name will be removed",
      DeprecationWarning,
      stacklevel=2,
    )
    super().__init__(*args, **kwargs)
