r"""Per-query training losses of the models: full softmax, BCE and gBCE (sampled softmax lives in
`tfrs_logq.losses`; `sampled_softmax` here is a thin call of it).

Every function returns `tfrs_logq.losses.LossOutput(loss [A], weight [A], num_valid [A])`; the
training step sums ``loss`` over the A queries of the global batch and divides by A.

Notation: s_p = <q, c_p> / T (positive score), s_i = <q, c_{d_i}> / T (negative scores),
sigma = logistic sigmoid, softplus(x) = log(1 + e^x), so -log sigma(x) = softplus(-x) and
-log(1 - sigma(x)) = softplus(x).

* full softmax (all items 1..|I|, id 0 = padding excluded):
      L = -s_p + log sum_{d=1}^{|I|} exp(s_d)
* BCE (SASRec, Kang & McAuley 2018; one uniform negative per position in the original):
      L = -log sigma(s_p) - sum_{i valid} log(1 - sigma(s_i))
* gBCE (gSASRec, Petrov & Macdonald, RecSys 2023, Eq. "generalised BCE"):
      L = -log(sigma(s_p)^beta) - sum_{i valid} log(1 - sigma(s_i))
        = beta * softplus(-s_p) + sum_{i valid} softplus(s_i)
  with the negative sampling rate alpha = k / (|I| - 1) (k uniform negatives per positive) and
  the calibration parameter t in [0, 1]:
      beta = alpha * (t * (1 - 1/alpha) + 1/alpha) = 1 - t * (1 - alpha)
  t = 0 gives beta = 1 (plain BCE), t = 1 gives beta = alpha (fully calibrated). gSASRec uses
  t = 0.75 and k = 256.

The gSASRec reference code averages BCE over the 1 + k logits of a row; here a row's loss is the
sum (the formula above). The two differ by the constant factor 1 / (1 + k), which Adam removes.
"""

from __future__ import annotations

import tfrs_logq  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

from tfrs_logq import losses as logq_losses
from tfrs_logq.losses import LossOutput

LOSSES = ("full_softmax", "sampled_softmax", "bce", "gbce")


def _ones_weight(x):
  return tf.ones([tf.shape(x)[0]], tf.float32)


def _check_scores(positive_scores, negative_scores, valid_mask):
  s_p = tf.convert_to_tensor(positive_scores)
  s_n = tf.convert_to_tensor(negative_scores)
  if not (s_p.dtype.is_floating and s_n.dtype.is_floating):
    raise TypeError("scores must be floating point")
  if s_p.shape.rank != 1 or s_n.shape.rank != 2:
    raise ValueError(f"positive_scores must be [A] and negative_scores [A, N], got "
                     f"{s_p.shape} and {s_n.shape}")
  if not s_p.shape[:1].is_compatible_with(s_n.shape[:1]):
    raise ValueError(f"positive_scores {s_p.shape} and negative_scores {s_n.shape} differ in A")
  s_p, s_n = tf.cast(s_p, tf.float32), tf.cast(s_n, tf.float32)
  if valid_mask is None:
    valid_mask = tf.ones_like(s_n, tf.bool)
  valid_mask = tf.convert_to_tensor(valid_mask)
  if valid_mask.dtype != tf.bool:
    raise TypeError(f"valid_mask must be bool, got {valid_mask.dtype}")
  return s_p, s_n, tf.broadcast_to(valid_mask, tf.shape(s_n))


def full_softmax_loss(queries, positive_ids, item_table, *, temperature: float = 1.0
                      ) -> LossOutput:
  """L = -s_p + logsumexp_{d=1..|I|} s_d over the whole catalog (row 0 of the table = padding).

  Args:
    queries: float [A, d].
    positive_ids: int [A] in 1..|I|.
    item_table: float [|I| + 1, d] (row 0 is padding and never scored).
    temperature: T > 0.
  """
  if not temperature > 0:
    raise ValueError(f"temperature must be > 0, got {temperature}")
  q = tf.cast(tf.convert_to_tensor(queries), tf.float32)
  table = tf.cast(tf.convert_to_tensor(item_table), tf.float32)
  ids = tf.cast(tf.convert_to_tensor(positive_ids), tf.int64)
  if q.shape.rank != 2 or table.shape.rank != 2 or ids.shape.rank != 1:
    raise ValueError(f"expected queries [A, d], item_table [V, d], positive_ids [A]; got "
                     f"{q.shape}, {table.shape}, {ids.shape}")
  checks = [tf.debugging.assert_positive(ids, message="positive ids must be >= 1 (0 = padding)"),
            tf.debugging.assert_less(ids, tf.shape(table, out_type=tf.int64)[0],
                                     message="positive ids must be <= num_items")]
  with tf.control_dependencies(checks):
    logits = tf.matmul(q, table[1:], transpose_b=True) / temperature     # [A, |I|]
  s_p = tf.gather(logits, ids - 1, batch_dims=1)
  loss = tf.reduce_logsumexp(logits, axis=1) - s_p
  n = tf.fill([tf.shape(q)[0]], tf.shape(table)[0] - 2)
  return LossOutput(loss=loss, weight=_ones_weight(q), num_valid=n)


def bce_loss(positive_scores, negative_scores, valid_mask=None) -> LossOutput:
  """L = softplus(-s_p) + sum_{i valid} softplus(s_i)  (= -log sigma(s_p) - sum log(1-sigma(s_i)))."""
  return gbce_loss(positive_scores, negative_scores, beta=1.0, valid_mask=valid_mask)


def gbce_beta(num_negatives: int, num_items: int, t: float) -> float:
  """beta = alpha (t (1 - 1/alpha) + 1/alpha), alpha = k / (|I| - 1)  (gSASRec)."""
  if num_items < 2:
    raise ValueError(f"gBCE needs num_items >= 2, got {num_items}")
  if not 0 < num_negatives:
    raise ValueError(f"gBCE needs num_negatives >= 1, got {num_negatives}")
  if not 0.0 <= t <= 1.0:
    raise ValueError(f"gBCE t must be in [0, 1], got {t}")
  alpha = min(num_negatives / (num_items - 1), 1.0)
  return alpha * (t * (1.0 - 1.0 / alpha) + 1.0 / alpha)


def gbce_loss(positive_scores, negative_scores, *, beta: float, valid_mask=None) -> LossOutput:
  """L = beta * softplus(-s_p) + sum_{i valid} softplus(s_i)  (gBCE, module docstring)."""
  if not 0.0 < beta <= 1.0:
    raise ValueError(f"beta must be in (0, 1], got {beta}")
  s_p, s_n, valid = _check_scores(positive_scores, negative_scores, valid_mask)
  neg = tf.reduce_sum(tf.where(valid, tf.math.softplus(s_n), 0.0), axis=1)
  loss = beta * tf.math.softplus(-s_p) + neg
  return LossOutput(loss=loss, weight=_ones_weight(s_p),
                    num_valid=tf.reduce_sum(tf.cast(valid, tf.int32), axis=1))


def sampled_softmax(scored, *, correction: str, q_prime: str = "exact") -> LossOutput:
  """`tfrs_logq.losses.sampled_softmax_loss` on `tfrs_logq.negatives.ScoredCandidates`."""
  return logq_losses.sampled_softmax_loss(**scored.loss_kwargs(), correction=correction,
                                          q_prime=q_prime)
