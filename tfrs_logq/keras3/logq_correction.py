"""SamplingProbabilityCorrection: keras-rs's layer of that name, without the clip, Keras 3.

    corrected_logits[..., c] = logits[..., c] - log Q(c)

A keras-rs model changes one line (the import): the constructor and ``call(logits,
candidate_sampling_probability)`` keep keras-rs's names and spelling. What changes:

* no clipping by default: keras-rs computes ``logits - log(clip(Q, epsilon=1e-6, 1))``, which
  silently distorts every tail item with Q < 1e-6 (common in catalogs of millions). Here
  ``epsilon=None`` never clips and rejects Q <= 0, Q > 1 and NaN where values are concrete
  (eager); ``epsilon=<float>`` restores keras-rs's clip for models that relied on it;
* ``from_log=True`` takes log Q directly (Q below float32's range, no log of a tiny number);
* the subtraction is done in float32 and cast back to the logits' dtype (mixed precision).

Q may be [C] (one value per candidate column, broadcast over rows), [A, C] or any shape that
broadcasts against the logits. For the positive-excluded proposal Q' of the corrected loss use
``tfrs_logq.keras3.log_q.log_q_prime``, ``tfrs_logq.keras3.losses`` or the ``Retrieval`` task.
"""

from typing import Any, Dict, Optional

import keras
from keras import ops

from tfrs_logq.core import checks as core_checks
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3 import log_q as log_q_lib
from tfrs_logq.keras3._tensors import Tensor

__all__ = ["SamplingProbabilityCorrection"]


@keras.saving.register_keras_serializable(package="tfrs_logq")
class SamplingProbabilityCorrection(keras.layers.Layer):
  """``call(logits, candidate_sampling_probability)`` -> logits - log Q (module docstring).

  Args:
    epsilon: None (default): no clipping. A float: clip Q to [epsilon, 1] first, as keras-rs.
    from_log: ``candidate_sampling_probability`` holds log Q instead of Q.
  """

  def __init__(
    self, epsilon: Optional[float] = None, from_log: bool = False, **kwargs: Any
  ) -> None:
    kwargs.setdefault("autocast", False)
    super().__init__(**kwargs)
    self.epsilon = core_checks.check_clip_epsilon(epsilon, from_log)
    self.from_log = bool(from_log)
    self.built = True

  def call(self, logits: Tensor, candidate_sampling_probability: Tensor) -> Tensor:
    logits = ops.convert_to_tensor(logits)
    if self.from_log:
      log_q = log_q_lib.validate_log_q(
        candidate_sampling_probability, "log candidate_sampling_probability"
      )
    elif self.epsilon is not None:
      q = _tensors.as_float32(candidate_sampling_probability, "candidate_sampling_probability")
      log_q = ops.log(ops.clip(q, self.epsilon, 1.0))
    else:
      log_q = log_q_lib.probability_to_log_q(
        candidate_sampling_probability, "candidate_sampling_probability"
      )
    if (
      log_q.shape
      and logits.shape
      and log_q.shape[-1] not in (None, 1)
      and (logits.shape[-1] not in (None, log_q.shape[-1]))
    ):
      raise ValueError(
        f"sampling probabilities {tuple(log_q.shape)} do not match logits {tuple(logits.shape)}"
      )
    out = _tensors.as_float32(logits, "logits") - log_q
    return ops.cast(out, logits.dtype)

  def get_config(self) -> Dict[str, Any]:
    return {**super().get_config(), "epsilon": self.epsilon, "from_log": self.from_log}
