"""LogQCorrection: the layer that replaces ``tfrs.layers.loss.SamplingProbablityCorrection``.

    corrected_logits[a, c] = logits[a, c] - log Q(c)

TFRS computes ``logits - log(clip(Q, 1e-6, 1))``: the clip silently distorts every tail item
with Q < 1e-6 (common in catalogs of millions) and hides invalid input. This layer accepts
probabilities (``from_log=False``) or log-probabilities (``from_log=True``), never clips, and
raises on Q <= 0, Q > 1 or NaN. The subtraction happens in float32 and the result is cast back
to the logits' dtype.

For the positive-excluded proposal Q' of the corrected loss use
``tfrs_logq.log_q.log_q_prime`` or ``tfrs_logq.losses.sampled_softmax_loss`` directly.
"""

import tfrs_logq  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

from tfrs_logq import log_q as log_q_lib

__all__ = ["LogQCorrection"]


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class LogQCorrection(tf.keras.layers.Layer):
  """Subtracts log Q from logits, without clipping:

      call(logits [A, C], q [C] or [A, C]) = logits - log Q     (float32, cast back)

  ``from_log=False``: q is Q, checked 0 < Q <= 1 and not NaN (``InvalidArgumentError``);
  ``from_log=True``: q is log Q, checked finite and <= 0. Replaces
  ``tfrs.layers.loss.SamplingProbablityCorrection``, which clips Q at 1e-6.

  Args:
    from_log: the second argument of ``call`` is log Q instead of Q.
  """

  def __init__(self, from_log: bool = False, **kwargs):
    super().__init__(**kwargs)
    self.from_log = bool(from_log)

  def call(self, logits: tf.Tensor, candidate_sampling_probability: tf.Tensor) -> tf.Tensor:
    logits = tf.convert_to_tensor(logits)
    if self.from_log:
      log_q = log_q_lib.validate_log_q(
        candidate_sampling_probability, "log candidate_sampling_probability"
      )
    else:
      log_q = log_q_lib.probability_to_log_q(
        candidate_sampling_probability, "candidate_sampling_probability"
      )
    if log_q.shape.rank not in (None, 1, 2):
      raise ValueError(f"sampling probabilities must be [C] or [A, C], got {log_q.shape}")
    if not log_q.shape[-1:].is_compatible_with(logits.shape[-1:]):
      raise ValueError(f"sampling probabilities {log_q.shape} do not match logits {logits.shape}")
    out = tf.cast(logits, tf.float32) - log_q
    return tf.cast(out, logits.dtype)

  def get_config(self):
    return {**super().get_config(), "from_log": self.from_log}
