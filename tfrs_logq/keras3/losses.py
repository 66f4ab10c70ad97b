r"""Per-example sampled softmax with none / standard / standard_no_positive / corrected logQ,
Keras 3 front: `sampled_softmax_loss` and its layer `SampledSoftmaxLoss`.

The notation, the four formulas and their limits are written once, in
``tfrs_logq.core.sampled_softmax``; this module evaluates them with ``keras.ops`` (JAX,
TensorFlow, PyTorch), as ``tfrs_logq.tf_keras.losses`` does on TensorFlow, with the same
arguments and results. Inputs are cast to float32 whatever their dtype (mixed precision is safe),
log Q is never clipped, and the masked, max-shifted log-sum-exp keeps huge logits finite.
"""

from typing import Any, Dict, NamedTuple, Optional, Sequence

import keras
from keras import ops

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import sampled_softmax as sampled_softmax_core
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3 import log_q as log_q_lib
from tfrs_logq.keras3._tensors import Tensor

__all__ = [
  "CORRECTIONS",
  "Q_PRIME_MODES",
  "LOSSES",
  "LossOutput",
  "sampled_softmax_loss",
  "masked_logsumexp",
  "SampledSoftmaxLoss",
]

CORRECTIONS = core_checks.CORRECTIONS
Q_PRIME_MODES = core_checks.Q_PRIME_MODES
LOSSES = core_checks.LOSSES


class LossOutput(NamedTuple):
  """loss [A] float32, weight [A] float32 (w; 1 except under ``corrected``), num_valid [A]."""

  loss: object
  weight: object
  num_valid: object


def masked_logsumexp(x: Tensor, valid: Tensor) -> Tensor:
  """LSE over the valid entries of each row of x [A, N] (about -1e30 for an empty row)."""
  return sampled_softmax_core.masked_logsumexp(
    ops, _tensors.as_float32(x, "x"), ops.cast(valid, "bool")
  )


def check_shapes(
  positive_scores: Tensor,
  negative_scores: Tensor,
  negative_log_q: Optional[Tensor],
  positive_log_q: Optional[Tensor],
  valid_mask: Optional[Tensor],
) -> None:
  _tensors.check_rank(positive_scores, 1, "positive_scores")
  _tensors.check_rank(negative_scores, 2, "negative_scores")
  _tensors.check_same_dim(
    positive_scores, 0, negative_scores, 0, "positive_scores vs negative_scores rows"
  )
  if positive_scores.shape[0] == 0:
    raise ValueError("empty batch: there are no queries (positive_scores is empty)")
  if negative_log_q is not None:
    _tensors.check_rank(negative_log_q, (1, 2), "negative_log_q")
    _tensors.check_same_dim(
      negative_log_q, -1, negative_scores, -1, "negative_log_q vs negative_scores columns"
    )
    if len(negative_log_q.shape) == 2:
      _tensors.check_same_dim(
        negative_log_q, 0, negative_scores, 0, "negative_log_q vs negative_scores rows"
      )
  if positive_log_q is not None:
    _tensors.check_rank(positive_log_q, 1, "positive_log_q")
    _tensors.check_same_dim(
      positive_log_q, 0, positive_scores, 0, "positive_log_q vs positive_scores"
    )
  if valid_mask is not None:
    if _tensors.dtype_of(valid_mask) != "bool":
      raise TypeError(f"valid_mask must be boolean, got {_tensors.dtype_of(valid_mask)}")
    _tensors.check_rank(valid_mask, 2, "valid_mask")
    _tensors.check_same_dim(valid_mask, 0, negative_scores, 0, "valid_mask rows")
    _tensors.check_same_dim(valid_mask, 1, negative_scores, 1, "valid_mask columns")


def check_finite_scores(
  *named_scores: Any, names: Sequence[str] = ("positive_scores", "negative_scores")
) -> None:
  """ValueError when a concrete score is NaN or +-inf (``check_scores=True``; eager only)."""
  for name, value in zip(names, named_scores):
    concrete = _tensors.concrete(value)
    if concrete is not None and not bool((abs(concrete) < float("inf")).all()):
      raise ValueError(f"{name} has NaN or inf")


def sampled_softmax_loss(
  positive_scores: Tensor,
  negative_scores: Tensor,
  negative_log_q: Optional[Tensor] = None,
  *,
  correction: str,
  positive_log_q: Optional[Tensor] = None,
  valid_mask: Optional[Tensor] = None,
  q_prime: str = "exact",
  check_scores: bool = False,
  ratio_floor: float = 0.0,
) -> LossOutput:
  """Per-example sampled-softmax loss with the chosen logQ correction (formulas:
  ``tfrs_logq.core.sampled_softmax``).

  Arguments, shapes and results are those of ``tfrs_logq.tf_keras.losses.sampled_softmax_loss``:
  positive_scores [A], negative_scores [A, N], negative_log_q [N] or [A, N] (per-draw log Q),
  positive_log_q [A], valid_mask bool [A, N] (mask accidental hits with
  ``tfrs_logq.keras3.accidental_hits.accidental_hit_mask``), q_prime ``exact`` | ``proxy``.
  ``check_scores`` raises ValueError on non-finite concrete scores (eager only);
  ``ratio_floor`` r > 0 (``corrected`` only) clamps as the paper's script: -w max(s_p -
  max(Z, log r), log r).

  Returns:
    LossOutput(loss [A] float32, weight [A] float32, num_valid [A] int32).
  """
  ratio_floor = core_checks.check_correction(correction, q_prime, ratio_floor)
  s_p = _tensors.as_float32(positive_scores, "positive_scores")
  s_n = _tensors.as_float32(negative_scores, "negative_scores")
  if negative_log_q is not None:
    negative_log_q = log_q_lib.validate_log_q(negative_log_q, "negative_log_q")
  if positive_log_q is not None:
    positive_log_q = log_q_lib.validate_log_q(positive_log_q, "positive_log_q")
  if valid_mask is not None:
    valid_mask = ops.convert_to_tensor(valid_mask)
  needs_negative_q, needs_positive_q = core_checks.needs_log_q(correction, q_prime)
  if needs_negative_q and negative_log_q is None:
    raise ValueError(f"correction={correction!r} needs negative_log_q")
  if needs_positive_q and positive_log_q is None:
    raise ValueError(f"correction={correction!r} (q_prime={q_prime!r}) needs positive_log_q")
  check_shapes(s_p, s_n, negative_log_q, positive_log_q, valid_mask)
  if check_scores:
    check_finite_scores(s_p, s_n)
  if valid_mask is None:
    valid_mask = ops.ones_like(s_n, dtype="bool")
  loss, weight, num_valid = sampled_softmax_core.sampled_softmax(
    ops,
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


@keras.saving.register_keras_serializable(package="tfrs_logq")
class SampledSoftmaxLoss(keras.layers.Layer):
  """Keras 3 layer computing :func:`sampled_softmax_loss` (per-example, always float32).

  ``call(positive_scores, negative_scores, negative_log_q=None, positive_log_q=None,
  valid_mask=None)`` returns a :class:`LossOutput`. The dtype policy is fixed to float32 so a
  mixed_float16 / mixed_bfloat16 model is safe. Arguments of ``tfrs_logq.tf_keras.losses
  .SampledSoftmaxLoss`` (``check_scores``: ValueError on non-finite concrete scores).
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
    self.ratio_floor = core_checks.check_correction(correction, q_prime, ratio_floor)
    self.correction = correction
    self.q_prime = q_prime
    self.check_scores = bool(check_scores)
    self.built = True

  def call(
    self,
    positive_scores: Tensor,
    negative_scores: Tensor,
    negative_log_q: Optional[Tensor] = None,
    positive_log_q: Optional[Tensor] = None,
    valid_mask: Optional[Tensor] = None,
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

  def compute_output_spec(
    self, positive_scores: Tensor, negative_scores: Tensor, *args: Any, **kwargs: Any
  ) -> Any:
    rows = positive_scores.shape[:1]
    return LossOutput(
      keras.KerasTensor(rows, "float32"),
      keras.KerasTensor(rows, "float32"),
      keras.KerasTensor(rows, "int32"),
    )

  def get_config(self) -> Dict[str, Any]:
    return {
      **super().get_config(),
      "correction": self.correction,
      "q_prime": self.q_prime,
      "ratio_floor": self.ratio_floor,
      "check_scores": self.check_scores,
    }
