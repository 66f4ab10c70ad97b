r"""BCE and gBCE (gSASRec) over a row's valid negatives, tf-keras front: `bce_loss`,
`gbce_loss`, `gbce_beta` and the layer `GBCELoss`.

The formulas (beta from the sampling rate and the calibration t) are ``tfrs_logq.core.bce``'s,
computed here in float32 on TensorFlow; the Keras 3 twin is ``tfrs_logq.keras3.gbce``. gSASRec
uses t = 0.75 with k = 256 negatives.
"""

from typing import Any, Dict, Optional

from tfrs_logq.tf_keras.losses import LossOutput, _assert_finite, _scores, _valid_mask

import tensorflow as tf

from tfrs_logq.core import bce as bce_core
from tfrs_logq.core.ops import tf_ops

__all__ = ["gbce_beta", "gbce_loss", "bce_loss", "GBCELoss"]

_OPS = tf_ops()


def gbce_beta(num_negatives: int, num_items: int, t: float) -> float:
  """beta = alpha (t (1 - 1/alpha) + 1/alpha) = 1 - t (1 - alpha), alpha = min(k / (|I| - 1), 1).

  Args:
    num_negatives: k >= 1 uniform negatives per positive.
    num_items: |I| >= 2 items in the catalog.
    t: calibration in [0, 1] (0: beta = 1, plain BCE; 1: beta = alpha).
  """
  return bce_core.gbce_beta(num_negatives, num_items, t)


def gbce_loss(
  positive_scores: tf.Tensor,
  negative_scores: tf.Tensor,
  *,
  beta: float,
  valid_mask: Optional[tf.Tensor] = None,
  check_scores: bool = False,
) -> LossOutput:
  """L = beta * softplus(-s_p) + sum_{i valid} softplus(s_i)  (gBCE, ``tfrs_logq.core.bce``).

  Args:
    positive_scores: [A] s_p.
    negative_scores: [A, N] s_i.
    beta: in (0, 1] (`gbce_beta`); 1 is BCE.
    valid_mask: optional bool [A, N]; invalid negatives (accidental hits, padding) are left out.
    check_scores: assert that every score is finite.

  Returns:
    LossOutput(loss [A], weight 1, num_valid [A]).
  """
  beta = bce_core.check_beta(beta)
  s_p, s_n = _scores(positive_scores, negative_scores)
  valid, checks = _valid_mask(valid_mask, s_n)
  if s_p.shape[0] == 0:
    raise ValueError("empty batch: there are no queries (positive_scores is empty)")
  checks.append(
    tf.debugging.assert_positive(
      tf.shape(s_p)[0], message="empty batch: there are no queries (positive_scores is empty)"
    )
  )
  with tf.control_dependencies(checks):
    s_p = tf.identity(s_p)
  s_p, s_n = _assert_finite(s_p, s_n, check_scores)
  loss, num_valid = bce_core.gbce(_OPS, s_p, s_n, valid, beta)
  return LossOutput(loss=loss, weight=tf.ones_like(loss), num_valid=num_valid)


def bce_loss(
  positive_scores: tf.Tensor,
  negative_scores: tf.Tensor,
  valid_mask: Optional[tf.Tensor] = None,
  *,
  check_scores: bool = False,
) -> LossOutput:
  """BCE: L = softplus(-s_p) + sum_{i valid} softplus(s_i) (`gbce_loss` with beta = 1)."""
  return gbce_loss(
    positive_scores, negative_scores, beta=1.0, valid_mask=valid_mask, check_scores=check_scores
  )


class GBCELoss(tf.keras.layers.Layer):
  """Keras layer computing `gbce_loss`: L = beta softplus(-s_p) + sum_{i valid} softplus(s_i).

  ``call(positive_scores, negative_scores, valid_mask=None)`` returns a `LossOutput`; beta = 1 is
  BCE, `gbce_beta` gives gSASRec's beta.

  Args:
    beta: in (0, 1].
    check_scores: assert that every score is finite.
  """

  def __init__(self, beta: float = 1.0, check_scores: bool = False, **kwargs: Any) -> None:
    kwargs["dtype"] = "float32"
    super().__init__(**kwargs)
    self.beta = bce_core.check_beta(beta)
    self.check_scores = bool(check_scores)

  def call(
    self,
    positive_scores: tf.Tensor,
    negative_scores: tf.Tensor,
    valid_mask: Optional[tf.Tensor] = None,
  ) -> LossOutput:
    return gbce_loss(
      positive_scores,
      negative_scores,
      beta=self.beta,
      valid_mask=valid_mask,
      check_scores=self.check_scores,
    )

  def get_config(self) -> Dict[str, Any]:
    return {**super().get_config(), "beta": self.beta, "check_scores": self.check_scores}
