"""tfrs_logq.losses: every formula and its gradient against the numpy reference."""

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import numpy_reference as ref  # noqa: E402

import tfrs_logq  # noqa: E402,F401
import tensorflow as tf  # noqa: E402
from tfrs_logq import losses  # noqa: E402

CORRECTIONS = losses.CORRECTIONS


def _random_case(seed, a=7, num_items=12, n_shared=9, n_extra=4, per_row_q=False):
  """Rows whose negatives repeat ids, include the positive (accidental hits) and extra rows."""
  rng = np.random.default_rng(seed)
  q = rng.dirichlet(np.ones(num_items))  # per-draw Q over the catalog
  pos_ids = rng.integers(0, num_items, size=a)
  neg_ids = rng.choice(num_items, size=n_shared + n_extra, p=q)  # duplicates likely
  neg_ids[0] = pos_ids[0]  # guarantee an accidental hit
  s_p = rng.normal(0, 2, size=a)
  s_n = rng.normal(0, 2, size=(a, neg_ids.size))
  valid = pos_ids[:, None] != neg_ids[None, :]
  valid[-1, :] = False  # a row with no valid negative
  lq_n = np.log(q[neg_ids])
  if per_row_q:
    lq_n = np.log(rng.dirichlet(np.ones(neg_ids.size), size=a) * 0.5 + 1e-3)
  lq_p = np.log(q[pos_ids])
  return s_p, s_n, lq_n, lq_p, valid


def _tf_loss_and_grads(s_p, s_n, lq_n, lq_p, valid, correction, q_prime="exact"):
  s_p = tf.constant(s_p, tf.float32)
  s_n = tf.constant(s_n, tf.float32)
  with tf.GradientTape() as tape:
    tape.watch([s_p, s_n])
    out = losses.sampled_softmax_loss(
        s_p, s_n, tf.constant(lq_n, tf.float32), correction=correction,
        positive_log_q=tf.constant(lq_p, tf.float32), valid_mask=tf.constant(valid),
        q_prime=q_prime)
    total = tf.reduce_sum(out.loss)
  gp, gn = tape.gradient(total, [s_p, s_n])
  return out, gp.numpy(), gn.numpy()


@pytest.mark.parametrize("correction", CORRECTIONS)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("per_row_q", [False, True])
def test_loss_and_gradients_match_numpy(correction, seed, per_row_q):
  case = _random_case(seed, per_row_q=per_row_q)
  want_loss, want_w, want_gp, want_gn = ref.loss_and_grads(*case, correction)
  out, gp, gn = _tf_loss_and_grads(*case, correction)
  np.testing.assert_allclose(out.loss.numpy(), want_loss, atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(out.weight.numpy(), want_w, atol=1e-5)
  np.testing.assert_allclose(gp, want_gp, atol=1e-5)
  np.testing.assert_allclose(gn, want_gn, atol=1e-5)
  np.testing.assert_array_equal(out.num_valid.numpy(), case[4].sum(axis=1))


def test_proxy_q_prime_uses_log_q():
  case = _random_case(3)
  want_loss, want_w, _, want_gn = ref.loss_and_grads(*case, "corrected", q_prime="proxy")
  out, _, gn = _tf_loss_and_grads(*case, "corrected", q_prime="proxy")
  np.testing.assert_allclose(out.loss.numpy(), want_loss, atol=1e-5)
  np.testing.assert_allclose(out.weight.numpy(), want_w, atol=1e-5)
  np.testing.assert_allclose(gn, want_gn, atol=1e-5)
  exact, _, _ = _tf_loss_and_grads(*case, "corrected", q_prime="exact")
  assert not np.allclose(exact.weight.numpy()[:-1], out.weight.numpy()[:-1])


def test_corrected_gradient_is_weight_times_unweighted_gradient():
  """Stop-gradient: d L / d s = w * d(-(s_p - Z)) / d s, no term through w."""
  s_p, s_n, lq_n, lq_p, valid = _random_case(4)
  _, gp, gn = _tf_loss_and_grads(s_p, s_n, lq_n, lq_p, valid, "corrected")
  sp_t = tf.constant(s_p, tf.float32)
  sn_t = tf.constant(s_n, tf.float32)
  with tf.GradientTape() as tape:
    tape.watch([sp_t, sn_t])
    out = losses.sampled_softmax_loss(sp_t, sn_t, lq_n.astype(np.float32), correction="corrected",
                                      positive_log_q=lq_p.astype(np.float32),
                                      valid_mask=valid)
    unweighted = tf.reduce_sum(tf.math.divide_no_nan(out.loss, out.weight))
  ugp, ugn = tape.gradient(unweighted, [sp_t, sn_t])
  w = out.weight.numpy()
  np.testing.assert_allclose(gp, w * ugp.numpy(), atol=1e-6)
  np.testing.assert_allclose(gn, w[:, None] * ugn.numpy(), atol=1e-6)
  # And w really depends on the scores: without the stop-gradient the gradient would differ.
  with tf.GradientTape() as tape:
    tape.watch(sp_t)
    lse = losses.masked_logsumexp(sn_t - (lq_n - np.log1p(-np.exp(lq_p))[:, None]), valid)
    n = np.maximum(valid.sum(1), 1).astype(np.float32)
    w_live = tf.sigmoid(lse - np.log(n) - sp_t)
    live = tf.reduce_sum(-w_live * (sp_t - lse) * (valid.sum(1) > 0))
  assert np.abs(tape.gradient(live, sp_t).numpy() - gp).max() > 1e-3


def test_weight_depends_on_scale_of_q_but_gradient_direction_does_not():
  s_p, s_n, lq_n, lq_p, valid = _random_case(5)
  base, gp1, gn1 = _tf_loss_and_grads(s_p, s_n, lq_n, lq_p, valid, "corrected", "proxy")
  scaled, gp2, gn2 = _tf_loss_and_grads(s_p, s_n, lq_n - np.log(10.0), lq_p, valid, "corrected",
                                        "proxy")
  w1, w2 = base.weight.numpy(), scaled.weight.numpy()
  rows = valid.sum(1) > 0
  assert np.all(np.abs(w1[rows] - w2[rows]) > 1e-4)
  np.testing.assert_allclose(gn1[rows] / w1[rows, None], gn2[rows] / w2[rows, None], atol=1e-5)


def test_row_without_valid_negative_gives_zero_not_nan():
  s_p = tf.constant([1.0, 50.0])
  s_n = tf.constant([[3.0, 4.0], [1e4, -1e4]])
  valid = tf.constant([[False, False], [False, False]])
  lq = tf.math.log(tf.constant([0.5, 0.5]))
  for correction in CORRECTIONS:
    out = losses.sampled_softmax_loss(s_p, s_n, lq, correction=correction,
                                      positive_log_q=lq, valid_mask=valid)
    np.testing.assert_array_equal(out.loss.numpy(), [0.0, 0.0])
  with tf.GradientTape() as tape:
    tape.watch([s_p, s_n])
    out = losses.sampled_softmax_loss(s_p, s_n, lq, correction="corrected", positive_log_q=lq,
                                      valid_mask=valid)
  grads = tape.gradient(out.loss, [s_p, s_n])
  assert all(np.all(np.isfinite(g.numpy())) for g in grads)
  np.testing.assert_array_equal(out.weight.numpy(), [0.0, 0.0])


@pytest.mark.parametrize("correction", CORRECTIONS)
def test_huge_logits_are_finite(correction):
  s_p = tf.constant([3e4, -3e4, 0.0])
  s_n = tf.constant([[-3e4, 3e4, 1.0], [3e4, 2e4, -5.0], [8e4, 8e4, 8e4]])
  lq = tf.math.log(tf.constant([1e-12, 0.3, 0.2]))
  lq_p = tf.math.log(tf.constant([1e-9, 0.5, 0.999999]))
  with tf.GradientTape() as tape:
    tape.watch([s_p, s_n])
    out = losses.sampled_softmax_loss(s_p, s_n, lq, correction=correction, positive_log_q=lq_p)
  grads = tape.gradient(out.loss, [s_p, s_n])
  assert np.all(np.isfinite(out.loss.numpy()))
  assert all(np.all(np.isfinite(g.numpy())) for g in grads)
  want, _, _, _ = ref.loss_and_grads(s_p.numpy(), s_n.numpy(), lq.numpy(), lq_p.numpy(),
                                     np.ones((3, 3), bool), correction)
  np.testing.assert_allclose(out.loss.numpy(), want, rtol=1e-5, atol=1e-2)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
@pytest.mark.parametrize("correction", CORRECTIONS)
def test_low_precision_scores_give_float32_loss(dtype, correction):
  s_p, s_n, lq_n, lq_p, valid = _random_case(6)
  out = losses.SampledSoftmaxLoss(correction)(
      tf.constant(s_p, dtype), tf.constant(s_n, dtype), tf.constant(lq_n, dtype),
      positive_log_q=tf.constant(lq_p, tf.float32), valid_mask=valid)
  assert out.loss.dtype == tf.float32
  rounded = [tf.cast(tf.constant(x, dtype), tf.float64).numpy() for x in (s_p, s_n, lq_n)]
  want, _, _, _ = ref.loss_and_grads(rounded[0], rounded[1], rounded[2], lq_p, valid, correction)
  np.testing.assert_allclose(out.loss.numpy(), want, atol=1e-4)


def test_tiny_probabilities_are_not_clipped():
  """Q = 1e-9 stays 1e-9 (TFRS clips at 1e-6)."""
  s_p = tf.constant([0.0])
  s_n = tf.constant([[0.0, 0.0]])
  lq_small = tf.math.log(tf.constant([1e-9, 1e-3]))
  lq_clip = tf.math.log(tf.constant([1e-6, 1e-3]))
  a = losses.sampled_softmax_loss(s_p, s_n, lq_small, correction="standard_no_positive")
  b = losses.sampled_softmax_loss(s_p, s_n, lq_clip, correction="standard_no_positive")
  want, _, _, _ = ref.loss_and_grads([0.0], [[0.0, 0.0]], np.log([1e-9, 1e-3]), [0.0],
                                     np.ones((1, 2), bool), "standard_no_positive")
  np.testing.assert_allclose(a.loss.numpy(), want, rtol=1e-6)
  assert abs(float(a.loss[0]) - float(b.loss[0])) > 1.0


def test_bad_input_errors():
  s_p = tf.constant([1.0, 2.0])
  s_n = tf.constant([[0.0, 1.0], [1.0, 0.0]])
  lq = tf.math.log(tf.constant([0.5, 0.5]))
  with pytest.raises(ValueError, match="correction"):
    losses.sampled_softmax_loss(s_p, s_n, lq, correction="logq")
  with pytest.raises(ValueError, match="negative_log_q"):
    losses.sampled_softmax_loss(s_p, s_n, None, correction="standard_no_positive")
  with pytest.raises(ValueError, match="positive_log_q"):
    losses.sampled_softmax_loss(s_p, s_n, lq, correction="corrected")
  with pytest.raises(ValueError, match="negative_log_q"):
    losses.sampled_softmax_loss(s_p, s_n, tf.zeros([3]) - 1.0, correction="corrected",
                                q_prime="proxy")
  with pytest.raises(ValueError, match="positive_scores"):
    losses.sampled_softmax_loss(tf.constant([1.0, 2.0, 3.0]), s_n, correction="none")
  with pytest.raises(TypeError, match="valid_mask"):
    losses.sampled_softmax_loss(s_p, s_n, correction="none", valid_mask=tf.ones([2, 2]))
  with pytest.raises(TypeError, match="floating"):
    losses.sampled_softmax_loss(tf.constant([1, 2]), s_n, correction="none")
  with pytest.raises(tf.errors.InvalidArgumentError, match="NaN"):
    losses.sampled_softmax_loss(s_p, s_n, tf.constant([np.nan, -1.0]), correction="corrected",
                                q_prime="proxy")
  with pytest.raises(tf.errors.InvalidArgumentError, match="above 1"):
    losses.sampled_softmax_loss(s_p, s_n, tf.constant([0.5, -1.0]), correction="corrected",
                                q_prime="proxy")
  with pytest.raises(tf.errors.InvalidArgumentError, match="NaN or inf"):
    losses.sampled_softmax_loss(s_p, tf.constant([[np.nan, 1.0], [1.0, 0.0]]), correction="none",
                                check_scores=True)
  with pytest.raises(tf.errors.InvalidArgumentError, match="empty batch"):
    losses.sampled_softmax_loss(tf.zeros([0]), tf.zeros([0, 2]), correction="none")


def test_works_inside_tf_function_with_unknown_shapes():
  fn = tf.function(
      lambda sp, sn, lq, lqp, v: losses.sampled_softmax_loss(
          sp, sn, lq, correction="corrected", positive_log_q=lqp, valid_mask=v).loss,
      input_signature=[tf.TensorSpec([None]), tf.TensorSpec([None, None]),
                       tf.TensorSpec([None]), tf.TensorSpec([None]),
                       tf.TensorSpec([None, None], tf.bool)])
  s_p, s_n, lq_n, lq_p, valid = _random_case(7)
  got = fn(s_p.astype(np.float32), s_n.astype(np.float32), lq_n.astype(np.float32),
           lq_p.astype(np.float32), valid).numpy()
  want, _, _, _ = ref.loss_and_grads(s_p, s_n, lq_n, lq_p, valid, "corrected")
  np.testing.assert_allclose(got, want, atol=1e-5)


def test_layer_config_round_trip():
  layer = losses.SampledSoftmaxLoss(correction="standard", q_prime="proxy")
  clone = losses.SampledSoftmaxLoss.from_config(layer.get_config())
  assert (clone.correction, clone.q_prime) == ("standard", "proxy")
  with pytest.raises(ValueError):
    losses.SampledSoftmaxLoss(correction="nope")
