r"""Per-example sampled-softmax losses with none / standard / corrected logQ.

Notation (one meaning everywhere): for a row (query u with positive p),
s_p = s(u, p) is the positive score, s_i = s(u, d_i) the scores of its negatives d_1..d_N,
log Q(d_i) their per-draw log sampling probabilities, and ``valid[i]`` says whether negative i
takes part (False for padding, accidental hits d_i == p, score masks). n is the number of valid
negatives of the row. LSE is log-sum-exp over the valid negatives only.

``none`` (plain sampled softmax, positive in the denominator)::

    L = -(s_p - log(exp(s_p) + sum_i exp(s_i)))

``standard`` (Yi et al. 2019, as ``tfrs.tasks.Retrieval`` does it: log Q subtracted from every
column, the positive's included; the positive stays in the denominator)::

    L = -((s_p - log Q(p)) - log(exp(s_p - log Q(p)) + sum_i exp(s_i - log Q(d_i))))

``standard_no_positive`` (Yang et al. 2020; the positive is not corrected)::

    L = -(s_p - log(exp(s_p) + sum_i exp(s_i - log Q(d_i))))

``corrected`` (Khrylchenko et al. 2025, §3.3 and appendix B: the positive is not a Monte Carlo
sample, so it leaves the denominator, and the negatives are importance-weighted with the
proposal Q' that excludes p)::

    log Q'(d) = log Q(d) - log(1 - Q(p))          (q_prime="exact")
    log Q'(d) = log Q(d)                          (q_prime="proxy", the paper's industrial setup)
    Z  = LSE_i (s_i - log Q'(d_i))
    P̂ = exp(s_p) / (exp(s_p) + (1/n) sum_i exp(s_i - log Q'(d_i))) = sigmoid(s_p - (Z - log n))
    w  = stop_gradient(1 - P̂)
    L  = -w * (s_p - Z)

The gradient of the bracket (s_p - Z) does not depend on the absolute scale of Q' (a constant
shift of log Q' cancels in the softmax over negatives), but w does: Q must be the per-draw
probability of one negative slot, summing to 1 over the catalog, for P̂ to estimate
P(p | u) (appendix B: (1/n) sum_i exp(s_i) / Q'(d_i) estimates sum_{d != p} exp(s_d)).

Rows with no valid negative (n = 0): ``corrected`` gives loss 0 and weight 0 (there is no
estimate of the denominator); the other variants give the exact value of their formula with an
empty sum, which is 0 as well. Losses are computed in float32 whatever the input dtype (so
mixed_float16 / mixed_bfloat16 models are safe) with a masked, max-shifted log-sum-exp, so huge
logits stay finite and masked entries never produce NaN gradients.
"""

from typing import NamedTuple, Optional

import tfrs_logq  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

from tfrs_logq import log_q as log_q_lib

CORRECTIONS = ("none", "standard", "standard_no_positive", "corrected")
Q_PRIME_MODES = ("exact", "proxy")


class LossOutput(NamedTuple):
  """Per-example results.

  Attributes:
    loss: [A] float32 per-example loss (before sample weights / reduction).
    weight: [A] float32 the weight w = sg(1 - P̂) for ``corrected``; 1 for the other variants
      (0 for rows without a valid negative under ``corrected``).
    num_valid: [A] int32 number of valid negatives n of each row.
  """
  loss: tf.Tensor
  weight: tf.Tensor
  num_valid: tf.Tensor


def _check_correction(correction: str, q_prime: str) -> None:
  if correction not in CORRECTIONS:
    raise ValueError(f"correction must be one of {CORRECTIONS}, got {correction!r}")
  if q_prime not in Q_PRIME_MODES:
    raise ValueError(f"q_prime must be one of {Q_PRIME_MODES}, got {q_prime!r}")


def masked_logsumexp(x: tf.Tensor, valid: tf.Tensor) -> tf.Tensor:
  """LSE over the valid entries of each row of x [A, N], in three passes over [A, N].

  Invalid entries are replaced by -1e30 before a stop-gradient row-max shift, so huge values
  are stable and invalid entries get exactly zero gradient (through tf.where). Rows with no
  valid entry return about -1e30 (finite, never NaN); callers that need 0 there test n > 0.
  """
  masked = tf.where(valid, x, tf.constant(-1e30, x.dtype))
  shift = tf.stop_gradient(tf.reduce_max(masked, axis=1, keepdims=True))
  sum_exp = tf.reduce_sum(tf.exp(masked - shift), axis=1)
  return tf.squeeze(shift, 1) + tf.math.log(sum_exp)


def _check_shapes(positive_scores, negative_scores, negative_log_q, positive_log_q, valid_mask):
  """Static shape checks where shapes are known; dynamic asserts otherwise."""
  if positive_scores.shape.rank is not None and positive_scores.shape.rank != 1:
    raise ValueError(f"positive_scores must be [A], got shape {positive_scores.shape}")
  if negative_scores.shape.rank is not None and negative_scores.shape.rank != 2:
    raise ValueError(f"negative_scores must be [A, N], got shape {negative_scores.shape}")
  if not positive_scores.shape[:1].is_compatible_with(negative_scores.shape[:1]):
    raise ValueError(f"positive_scores {positive_scores.shape} and negative_scores "
                     f"{negative_scores.shape} disagree on the number of rows")
  a = tf.shape(positive_scores)[0]
  n = tf.shape(negative_scores)[1]
  checks = [tf.debugging.assert_equal(
      tf.shape(negative_scores)[0], a,
      message="negative_scores must have one row per positive score")]
  if negative_log_q is not None:
    rank = negative_log_q.shape.rank
    if rank not in (1, 2):
      raise ValueError(f"negative_log_q must be [N] or [A, N], got shape {negative_log_q.shape}")
    if not negative_log_q.shape[-1:].is_compatible_with(negative_scores.shape[-1:]) or (
        rank == 2 and not negative_log_q.shape.is_compatible_with(negative_scores.shape)):
      raise ValueError(f"negative_log_q {negative_log_q.shape} does not match negative_scores "
                       f"{negative_scores.shape}")
    checks.append(tf.debugging.assert_equal(
        tf.shape(negative_log_q)[-1], n, message="negative_log_q must have N columns"))
    if rank == 2:
      checks.append(tf.debugging.assert_equal(
          tf.shape(negative_log_q)[0], a, message="negative_log_q must have A rows"))
  if positive_log_q is not None:
    if positive_log_q.shape.rank is not None and positive_log_q.shape.rank != 1:
      raise ValueError(f"positive_log_q must be [A], got shape {positive_log_q.shape}")
    if not positive_log_q.shape.is_compatible_with(positive_scores.shape):
      raise ValueError(f"positive_log_q {positive_log_q.shape} does not match positive_scores "
                       f"{positive_scores.shape}")
    checks.append(tf.debugging.assert_equal(tf.shape(positive_log_q)[0], a,
                                            message="positive_log_q must be [A]"))
  if valid_mask is not None:
    if valid_mask.dtype != tf.bool:
      raise TypeError(f"valid_mask must be boolean, got {valid_mask.dtype}")
    if not valid_mask.shape.is_compatible_with(negative_scores.shape):
      raise ValueError(f"valid_mask {valid_mask.shape} does not match negative_scores "
                       f"{negative_scores.shape}")
    checks.append(tf.debugging.assert_equal(tf.shape(valid_mask), tf.shape(negative_scores),
                                            message="valid_mask must be [A, N]"))
  checks.append(tf.debugging.assert_positive(
      a, message="empty batch: there are no queries (positive_scores is empty)"))
  return checks


def sampled_softmax_loss(positive_scores: tf.Tensor,
                         negative_scores: tf.Tensor,
                         negative_log_q: Optional[tf.Tensor] = None,
                         *,
                         correction: str,
                         positive_log_q: Optional[tf.Tensor] = None,
                         valid_mask: Optional[tf.Tensor] = None,
                         q_prime: str = "exact",
                         check_scores: bool = False) -> LossOutput:
  """Per-example sampled-softmax loss with the chosen logQ correction (module docstring).

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
      (``tfrs_logq.accidental_hits.accidental_hit_mask``); ``corrected`` assumes it was done.
    q_prime: ``exact`` (log Q' = log Q - log(1 - Q(p))) or ``proxy`` (log Q' ~ log Q).
    check_scores: Also assert that the scores are finite (one more pass over [A, N] in the
      forward and backward pass: off by default, on for debugging a model that produces NaN).

  Returns:
    LossOutput(loss [A], weight [A], num_valid [A]).
  """
  _check_correction(correction, q_prime)
  positive_scores = tf.convert_to_tensor(positive_scores)
  negative_scores = tf.convert_to_tensor(negative_scores)
  for name, t in (("positive_scores", positive_scores), ("negative_scores", negative_scores)):
    if not t.dtype.is_floating:
      raise TypeError(f"{name} must be floating, got {t.dtype}")
  if negative_log_q is not None:
    negative_log_q = log_q_lib.validate_log_q(negative_log_q, "negative_log_q")
  if positive_log_q is not None:
    positive_log_q = log_q_lib.validate_log_q(positive_log_q, "positive_log_q")
  if valid_mask is not None:
    valid_mask = tf.convert_to_tensor(valid_mask)
  needs_negative_q = correction != "none"
  needs_positive_q = correction == "standard" or (correction == "corrected" and q_prime == "exact")
  if needs_negative_q and negative_log_q is None:
    raise ValueError(f"correction={correction!r} needs negative_log_q")
  if needs_positive_q and positive_log_q is None:
    raise ValueError(f"correction={correction!r} (q_prime={q_prime!r}) needs positive_log_q")

  checks = _check_shapes(positive_scores, negative_scores, negative_log_q, positive_log_q,
                         valid_mask)
  with tf.control_dependencies(checks):
    s_p = tf.cast(positive_scores, tf.float32)
  s_n = tf.cast(negative_scores, tf.float32)
  if check_scores:
    s_n = tf.debugging.assert_all_finite(s_n, "negative_scores has NaN or inf")
    s_p = tf.debugging.assert_all_finite(s_p, "positive_scores has NaN or inf")
  if valid_mask is None:
    valid_mask = tf.ones_like(s_n, dtype=tf.bool)
  num_valid = tf.reduce_sum(tf.cast(valid_mask, tf.int32), axis=1)

  if correction == "none":
    logits, pos_logit = s_n, s_p
  elif correction == "standard":
    logits, pos_logit = s_n - negative_log_q, s_p - positive_log_q
  elif correction == "standard_no_positive":
    logits, pos_logit = s_n - negative_log_q, s_p
  else:  # corrected
    # LSE_i(s_i - log Q'(d_i)) = LSE_i(s_i - log Q(d_i)) + log(1 - Q(p)): Q' is a per-row shift.
    lse = masked_logsumexp(s_n - negative_log_q, valid_mask)
    if q_prime == "exact":
      lse = lse + log_q_lib.log1mexp(positive_log_q)
    has_negatives = num_valid > 0
    log_n = tf.math.log(tf.cast(tf.maximum(num_valid, 1), tf.float32))
    # 1 - P̂ = 1 - sigmoid(s_p - (Z - log n)) = sigmoid((Z - log n) - s_p)
    weight = tf.stop_gradient(tf.sigmoid((lse - log_n) - s_p))
    weight = tf.where(has_negatives, weight, tf.zeros_like(weight))
    term = tf.where(has_negatives, s_p - lse, tf.zeros_like(s_p))
    return LossOutput(loss=-weight * term, weight=weight, num_valid=num_valid)

  # Positive in the denominator: log(e^{pos} + e^{LSE(valid negatives)}), without copying
  # [A, N] into an [A, N + 1] tensor (an empty row's LSE is about -1e30: exactly pos).
  lse = masked_logsumexp(logits, valid_mask)
  loss = tf.reduce_logsumexp(tf.stack([pos_logit, lse], axis=1), axis=1) - pos_logit
  return LossOutput(loss=loss, weight=tf.ones_like(loss), num_valid=num_valid)


class SampledSoftmaxLoss(tf.keras.layers.Layer):
  """Keras layer computing :func:`sampled_softmax_loss` (per-example, float32).

  ``call(positive_scores, negative_scores, negative_log_q=None, positive_log_q=None,
  valid_mask=None)`` returns a :class:`LossOutput`. The layer always computes in float32
  (its dtype policy is fixed to float32 so mixed-precision models are safe).
  """

  def __init__(self, correction: str = "corrected", q_prime: str = "exact", **kwargs):
    kwargs["dtype"] = "float32"
    super().__init__(**kwargs)
    _check_correction(correction, q_prime)
    self.correction = correction
    self.q_prime = q_prime

  def call(self, positive_scores, negative_scores, negative_log_q=None, positive_log_q=None,
           valid_mask=None):
    return sampled_softmax_loss(positive_scores, negative_scores, negative_log_q,
                                correction=self.correction, positive_log_q=positive_log_q,
                                valid_mask=valid_mask, q_prime=self.q_prime)

  def get_config(self):
    return {**super().get_config(), "correction": self.correction, "q_prime": self.q_prime}
