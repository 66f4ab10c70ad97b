r"""BCE and gBCE (gSASRec) over a row's valid negatives, Keras 3 front: `bce_loss`, `gbce_loss`,
`gbce_beta` and the layer `GBCELoss`.

The formulas are ``tfrs_logq.core.bce``'s, evaluated with ``keras.ops`` in float32: the Keras 3
twin of ``tfrs_logq.tf_keras.gbce`` (same arguments, checks and results). Masked negatives never
reach softplus (no NaN from them); s_p = -inf or a valid negative at +inf gives +inf.
"""

from typing import Any, Dict, Optional

import keras
from keras import ops

from tfrs_logq.core import bce as bce_core
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3 import losses as losses_lib
from tfrs_logq.keras3._tensors import Tensor

__all__ = ["gbce_beta", "gbce_loss", "bce_loss", "GBCELoss"]


def gbce_beta(num_negatives: int, num_items: int, t: float) -> float:
  """beta = alpha (t (1 - 1/alpha) + 1/alpha) = 1 - t (1 - alpha), alpha = min(k / (|I| - 1), 1).

  Args:
    num_negatives: k >= 1 uniform negatives per positive.
    num_items: |I| >= 2 items in the catalog.
    t: calibration in [0, 1] (0: beta = 1, plain BCE; 1: beta = alpha).
  """
  return bce_core.gbce_beta(num_negatives, num_items, t)


def gbce_loss(
  positive_scores: Tensor,
  negative_scores: Tensor,
  *,
  beta: float,
  valid_mask: Optional[Tensor] = None,
  check_scores: bool = False,
) -> losses_lib.LossOutput:
  """L = beta * softplus(-s_p) + sum_{i valid} softplus(s_i)  (gBCE, ``tfrs_logq.core.bce``).

  Args:
    positive_scores: [A] s_p.
    negative_scores: [A, N] s_i.
    beta: in (0, 1] (:func:`gbce_beta`); 1 is BCE.
    valid_mask: optional bool [A, N]; invalid negatives (accidental hits, padding) are left out.
    check_scores: raise ValueError on non-finite concrete scores (eager only).

  Returns:
    LossOutput(loss [A] float32, weight 1, num_valid [A] int32).
  """
  beta = bce_core.check_beta(beta)
  s_p = _tensors.as_float32(positive_scores, "positive_scores")
  s_n = _tensors.as_float32(negative_scores, "negative_scores")
  if valid_mask is not None:
    valid_mask = ops.convert_to_tensor(valid_mask)
  losses_lib.check_shapes(s_p, s_n, None, None, valid_mask)
  if check_scores:
    losses_lib.check_finite_scores(s_p, s_n)
  valid = ops.ones_like(s_n, dtype="bool") if valid_mask is None else valid_mask
  loss, num_valid = bce_core.gbce(ops, s_p, s_n, valid, beta)
  return losses_lib.LossOutput(loss=loss, weight=ops.ones_like(loss), num_valid=num_valid)


def bce_loss(
  positive_scores: Tensor,
  negative_scores: Tensor,
  valid_mask: Optional[Tensor] = None,
  *,
  check_scores: bool = False,
) -> losses_lib.LossOutput:
  """BCE: L = softplus(-s_p) + sum_{i valid} softplus(s_i) (:func:`gbce_loss` with beta = 1)."""
  return gbce_loss(
    positive_scores, negative_scores, beta=1.0, valid_mask=valid_mask, check_scores=check_scores
  )


@keras.saving.register_keras_serializable(package="tfrs_logq")
class GBCELoss(keras.layers.Layer):
  """Keras 3 layer computing :func:`gbce_loss`: L = beta softplus(-s_p) + sum_i softplus(s_i).

  ``call(positive_scores, negative_scores, valid_mask=None)`` returns a ``LossOutput``; beta = 1
  is BCE, :func:`gbce_beta` gives gSASRec's beta. The dtype policy is fixed to float32.

  Args:
    beta: in (0, 1].
    check_scores: raise ValueError on non-finite concrete scores (eager only).
  """

  def __init__(self, beta: float = 1.0, check_scores: bool = False, **kwargs: Any) -> None:
    kwargs["dtype"] = "float32"
    super().__init__(**kwargs)
    self.beta = bce_core.check_beta(beta)
    self.check_scores = bool(check_scores)
    self.built = True

  def call(
    self, positive_scores: Tensor, negative_scores: Tensor, valid_mask: Optional[Tensor] = None
  ) -> losses_lib.LossOutput:
    return gbce_loss(
      positive_scores,
      negative_scores,
      beta=self.beta,
      valid_mask=valid_mask,
      check_scores=self.check_scores,
    )

  def compute_output_spec(self, positive_scores: Tensor, *args: Any, **kwargs: Any) -> Any:
    rows = positive_scores.shape[:1]
    return losses_lib.LossOutput(
      keras.KerasTensor(rows, "float32"),
      keras.KerasTensor(rows, "float32"),
      keras.KerasTensor(rows, "int32"),
    )

  def get_config(self) -> Dict[str, Any]:
    return {**super().get_config(), "beta": self.beta, "check_scores": self.check_scores}
