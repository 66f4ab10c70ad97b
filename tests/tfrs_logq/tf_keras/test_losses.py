"""tfrs_logq.tf_keras.losses: every formula and its gradient against the numpy reference."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import full_softmax, gbce, losses

import numpy as np
import numpy_reference as ref
import pytest
import tensorflow as tf

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
      s_p,
      s_n,
      tf.constant(lq_n, tf.float32),
      correction=correction,
      positive_log_q=tf.constant(lq_p, tf.float32),
      valid_mask=tf.constant(valid),
      q_prime=q_prime,
    )
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
    out = losses.sampled_softmax_loss(
      sp_t,
      sn_t,
      lq_n.astype(np.float32),
      correction="corrected",
      positive_log_q=lq_p.astype(np.float32),
      valid_mask=valid,
    )
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
  scaled, gp2, gn2 = _tf_loss_and_grads(
    s_p, s_n, lq_n - np.log(10.0), lq_p, valid, "corrected", "proxy"
  )
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
    out = losses.sampled_softmax_loss(
      s_p, s_n, lq, correction=correction, positive_log_q=lq, valid_mask=valid
    )
    np.testing.assert_array_equal(out.loss.numpy(), [0.0, 0.0])
  with tf.GradientTape() as tape:
    tape.watch([s_p, s_n])
    out = losses.sampled_softmax_loss(
      s_p, s_n, lq, correction="corrected", positive_log_q=lq, valid_mask=valid
    )
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
  want, _, _, _ = ref.loss_and_grads(
    s_p.numpy(), s_n.numpy(), lq.numpy(), lq_p.numpy(), np.ones((3, 3), bool), correction
  )
  np.testing.assert_allclose(out.loss.numpy(), want, rtol=1e-5, atol=1e-2)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
@pytest.mark.parametrize("correction", CORRECTIONS)
def test_low_precision_scores_give_float32_loss(dtype, correction):
  s_p, s_n, lq_n, lq_p, valid = _random_case(6)
  out = losses.SampledSoftmaxLoss(correction)(
    tf.constant(s_p, dtype),
    tf.constant(s_n, dtype),
    tf.constant(lq_n, dtype),
    positive_log_q=tf.constant(lq_p, tf.float32),
    valid_mask=valid,
  )
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
  want, _, _, _ = ref.loss_and_grads(
    [0.0], [[0.0, 0.0]], np.log([1e-9, 1e-3]), [0.0], np.ones((1, 2), bool), "standard_no_positive"
  )
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
    losses.sampled_softmax_loss(
      s_p, s_n, tf.zeros([3]) - 1.0, correction="corrected", q_prime="proxy"
    )
  with pytest.raises(ValueError, match="positive_scores"):
    losses.sampled_softmax_loss(tf.constant([1.0, 2.0, 3.0]), s_n, correction="none")
  with pytest.raises(TypeError, match="valid_mask"):
    losses.sampled_softmax_loss(s_p, s_n, correction="none", valid_mask=tf.ones([2, 2]))
  with pytest.raises(TypeError, match="floating"):
    losses.sampled_softmax_loss(tf.constant([1, 2]), s_n, correction="none")
  with pytest.raises(tf.errors.InvalidArgumentError, match="NaN"):
    losses.sampled_softmax_loss(
      s_p, s_n, tf.constant([np.nan, -1.0]), correction="corrected", q_prime="proxy"
    )
  with pytest.raises(tf.errors.InvalidArgumentError, match="above 1"):
    losses.sampled_softmax_loss(
      s_p, s_n, tf.constant([0.5, -1.0]), correction="corrected", q_prime="proxy"
    )
  with pytest.raises(tf.errors.InvalidArgumentError, match="NaN or inf"):
    losses.sampled_softmax_loss(
      s_p, tf.constant([[np.nan, 1.0], [1.0, 0.0]]), correction="none", check_scores=True
    )
  with pytest.raises(tf.errors.InvalidArgumentError, match="empty batch"):
    losses.sampled_softmax_loss(tf.zeros([0]), tf.zeros([0, 2]), correction="none")


def test_works_inside_tf_function_with_unknown_shapes():
  fn = tf.function(
    lambda sp, sn, lq, lqp, v: (
      losses.sampled_softmax_loss(
        sp, sn, lq, correction="corrected", positive_log_q=lqp, valid_mask=v
      ).loss
    ),
    input_signature=[
      tf.TensorSpec([None]),
      tf.TensorSpec([None, None]),
      tf.TensorSpec([None]),
      tf.TensorSpec([None]),
      tf.TensorSpec([None, None], tf.bool),
    ],
  )
  s_p, s_n, lq_n, lq_p, valid = _random_case(7)
  got = fn(
    s_p.astype(np.float32),
    s_n.astype(np.float32),
    lq_n.astype(np.float32),
    lq_p.astype(np.float32),
    valid,
  ).numpy()
  want, _, _, _ = ref.loss_and_grads(s_p, s_n, lq_n, lq_p, valid, "corrected")
  np.testing.assert_allclose(got, want, atol=1e-5)


def test_layer_config_round_trip():
  layer = losses.SampledSoftmaxLoss(correction="standard", q_prime="proxy")
  clone = losses.SampledSoftmaxLoss.from_config(layer.get_config())
  assert (clone.correction, clone.q_prime) == ("standard", "proxy")
  with pytest.raises(ValueError):
    losses.SampledSoftmaxLoss(correction="nope")


# ---------------------------------------------------------------------- ratio floor (paper clamp)
def _np_paper_clamped_corrected(s_p, s_n, lq_n, lq_p, valid, floor):
  """The paper's corrected script in float64: R = e^{s_p} / max(sum_i e^{s_i - log Q'_i}, r),
  L = -w log max(R, r), w = 1 - softmax([s_p, s_i - log Q'_i - log n])_0 (unclamped)."""
  out = []
  for r in range(len(s_p)):
    idx = np.nonzero(valid[r])[0]
    lq_prime = lq_n[idx] - np.log1p(-np.exp(lq_p[r]))
    denom = np.exp(s_n[r, idx] - lq_prime).sum()
    ratio = np.exp(s_p[r]) / max(denom, floor)
    n = len(idx)
    w = 1 - np.exp(s_p[r]) / (np.exp(s_p[r]) + np.exp(s_n[r, idx] - lq_prime - np.log(n)).sum())
    out.append(-w * np.log(max(ratio, floor)))
  return np.array(out)


def test_ratio_floor_matches_the_paper_scripts_clamp_and_stops_gradients():
  rng = np.random.default_rng(11)
  a, n = 6, 5
  s_p = np.array([3.0, -30.0, 0.5, -25.0, 1.0, -10.0])  # rows 1 and 3: ratio far below 1e-10
  s_n = rng.normal(0, 1, size=(a, n))
  s_n[5] = -40.0  # row 5: denominator below the floor
  lq_n = np.log(rng.dirichlet(np.ones(n)) * 0.5)
  lq_p = np.log(rng.uniform(0.01, 0.2, size=a))
  valid = np.ones((a, n), bool)
  valid[0, 1] = False
  floor = 1e-10
  sp_t, sn_t = tf.constant(s_p, tf.float32), tf.constant(s_n, tf.float32)
  with tf.GradientTape() as tape:
    tape.watch([sp_t, sn_t])
    out = losses.sampled_softmax_loss(
      sp_t,
      sn_t,
      lq_n.astype(np.float32),
      correction="corrected",
      positive_log_q=lq_p.astype(np.float32),
      valid_mask=valid,
      ratio_floor=floor,
    )
  gp, gn = tape.gradient(out.loss, [sp_t, sn_t])
  want = _np_paper_clamped_corrected(s_p, s_n, lq_n, lq_p, valid, floor)
  np.testing.assert_allclose(out.loss.numpy(), want, rtol=1e-4, atol=1e-5)
  assert abs(out.loss.numpy()[1] - (-out.weight.numpy()[1] * np.log(floor))) < 1e-3
  # Clamped rows get no gradient at all; row 5's negatives none (denominator clamped).
  for row in (1, 3):
    assert gp.numpy()[row] == 0.0 and np.all(gn.numpy()[row] == 0.0)
  assert np.all(gn.numpy()[5] == 0.0) and gp.numpy()[5] != 0.0
  # Unclamped rows are the plain corrected loss.
  plain = losses.sampled_softmax_loss(
    sp_t,
    sn_t,
    lq_n.astype(np.float32),
    correction="corrected",
    positive_log_q=lq_p.astype(np.float32),
    valid_mask=valid,
  )
  np.testing.assert_allclose(out.loss.numpy()[[0, 2, 4]], plain.loss.numpy()[[0, 2, 4]], rtol=1e-6)
  assert out.loss.numpy()[1] < plain.loss.numpy()[1] - 1.0


def test_ratio_floor_only_for_the_corrected_loss():
  with pytest.raises(ValueError, match="ratio_floor"):
    losses.sampled_softmax_loss(
      [0.0], [[0.0]], [-1.0], correction="standard", positive_log_q=[-1.0], ratio_floor=1e-10
    )
  with pytest.raises(ValueError, match="ratio_floor"):
    losses.SampledSoftmaxLoss("corrected", ratio_floor=1.5)
  with pytest.raises(ValueError, match="ratio_floor"):
    losses.SampledSoftmaxLoss("none", ratio_floor=1e-10)


# ----------------------------------------------------------------------- full softmax, BCE, gBCE
def _np_softplus(x):
  return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


def test_full_softmax_matches_numpy_and_its_gradient():
  rng = np.random.default_rng(0)
  q = rng.normal(size=(5, 4)).astype(np.float32)
  table = rng.normal(size=(9, 4)).astype(np.float32)  # ids 1..9 (id_offset = 1)
  pos = np.array([1, 9, 3, 3, 5])
  q_t, table_t = tf.constant(q), tf.Variable(table)
  with tf.GradientTape() as tape:
    tape.watch(q_t)
    out = full_softmax.full_softmax_loss(q_t, pos, table_t, temperature=0.5, id_offset=1)
    total = tf.reduce_sum(out.loss)
  g_q = tape.gradient(total, q_t).numpy()
  logits = (q.astype(np.float64) @ table.T.astype(np.float64)) / 0.5
  m = logits.max(1, keepdims=True)
  lse = (m + np.log(np.exp(logits - m).sum(1, keepdims=True)))[:, 0]
  np.testing.assert_allclose(out.loss.numpy(), lse - logits[np.arange(5), pos - 1], rtol=1e-5)
  soft = np.exp(logits - lse[:, None])
  onehot = np.eye(9)[pos - 1]
  np.testing.assert_allclose(g_q, ((soft - onehot) @ table.astype(np.float64)) / 0.5, atol=1e-4)
  np.testing.assert_array_equal(out.num_valid.numpy(), [8] * 5)
  np.testing.assert_array_equal(out.weight.numpy(), 1.0)


def test_full_softmax_rejects_ids_outside_the_table():
  q, table = tf.ones([1, 2]), tf.ones([3, 2])
  with pytest.raises(tf.errors.InvalidArgumentError, match=">= 1"):
    full_softmax.full_softmax_loss(q, [0], table, id_offset=1)
  with pytest.raises(tf.errors.InvalidArgumentError, match="id_offset"):
    full_softmax.full_softmax_loss(q, [4], table, id_offset=1)
  with pytest.raises(ValueError, match="temperature"):
    full_softmax.full_softmax_loss(q, [1], table, temperature=0.0)


def test_gbce_beta_formula():
  for k, n, t in [(256, 3417, 0.75), (1, 100, 0.5), (10, 11, 0.3)]:
    alpha = k / (n - 1)
    expected = alpha * (t * (1 - 1 / alpha) + 1 / alpha)  # gSASRec's definition
    assert gbce.gbce_beta(k, n, t) == pytest.approx(expected)
    assert gbce.gbce_beta(np.int64(k), np.int64(n), t) == pytest.approx(expected)
  assert gbce.gbce_beta(7, 50, 0.0) == pytest.approx(1.0)  # t = 0: plain BCE
  assert gbce.gbce_beta(7, 50, 1.0) == pytest.approx(7 / 49)  # t = 1: beta = alpha
  with pytest.raises(ValueError, match="t must"):
    gbce.gbce_beta(7, 50, 1.5)
  with pytest.raises(ValueError, match="num_items"):
    gbce.gbce_beta(7, 1, 0.5)


@pytest.mark.parametrize("beta", [1.0, 0.3])
def test_bce_and_gbce_match_numpy(beta):
  rng = np.random.default_rng(1)
  s_p = rng.normal(0, 3, size=6)
  s_n = rng.normal(0, 3, size=(6, 4))
  valid = rng.random((6, 4)) > 0.3
  sig = 1 / (1 + np.exp(-s_p))
  sig_n = 1 / (1 + np.exp(-s_n))
  want = -np.log(sig**beta) - np.sum(np.where(valid, np.log(1 - sig_n), 0.0), axis=1)
  fn = (
    gbce.bce_loss
    if beta == 1.0
    else (lambda p, n, v: gbce.gbce_loss(p, n, beta=beta, valid_mask=v))
  )
  out = fn(s_p.astype(np.float32), s_n.astype(np.float32), valid)
  np.testing.assert_allclose(out.loss.numpy(), want, rtol=1e-5)
  np.testing.assert_array_equal(out.num_valid.numpy(), valid.sum(1))
  layer_out = gbce.GBCELoss(beta)(s_p.astype(np.float32), s_n.astype(np.float32), valid)
  np.testing.assert_allclose(layer_out.loss.numpy(), want, rtol=1e-5)
  with pytest.raises(ValueError, match="beta"):
    gbce.gbce_loss(s_p, s_n, beta=0.0)


# ------------------------------------------------------------------------------- infinite scores
INF = np.inf
LOG_FLOOR = np.log(1e-10)


def _sampled_case(s_p, s_n, valid=None):
  s_n = np.asarray(s_n, np.float64)
  valid = np.ones(s_n.shape, bool) if valid is None else np.asarray(valid)
  lq_n = np.log(np.linspace(0.05, 0.2, s_n.shape[1]))
  lq_p = np.full(len(s_p), np.log(0.1))
  return np.asarray(s_p, np.float64), s_n, lq_n, lq_p, valid


# Rows: (s_p, s_n, valid, {variant: the limit of the formula}). "ref" = the value of the formula
# with the -inf entries' exp() = 0 (numpy reference), "nan" = no limit.
_INF_ROWS = [
  (
    "positive +inf",
    INF,
    [0.5, -1.0, 2.0],
    None,
    dict(none=0.0, standard=0.0, standard_no_positive=0.0, corrected=0.0, floor=0.0),
  ),
  (
    "positive -inf",
    -INF,
    [0.5, -1.0, 2.0],
    None,
    dict(none=INF, standard=INF, standard_no_positive=INF, corrected=INF, floor=-LOG_FLOOR),
  ),
  (
    "negative +inf",
    0.3,
    [0.5, INF, 2.0],
    None,
    dict(none=INF, standard=INF, standard_no_positive=INF, corrected=INF, floor=-LOG_FLOOR),
  ),
  (
    "negative -inf",
    0.3,
    [0.5, -INF, 2.0],
    None,
    dict(none="ref", standard="ref", standard_no_positive="ref", corrected="ref", floor="ref"),
  ),
  (
    "all negatives -inf",
    0.3,
    [-INF, -INF, -INF],
    None,
    dict(none=0.0, standard=0.0, standard_no_positive=0.0, corrected=0.0, floor=0.0),
  ),
  (
    "masked nan and inf",
    0.3,
    [np.nan, INF, 2.0],
    [False, False, True],
    dict(none="ref", standard="ref", standard_no_positive="ref", corrected="ref", floor="ref"),
  ),
  (
    "positive and negative +inf",
    INF,
    [0.5, INF, 2.0],
    None,
    dict(none="nan", standard="nan", standard_no_positive="nan", corrected="nan", floor="nan"),
  ),
]


def _ref_value(variant, s_p, s_n, lq_n, lq_p, valid):
  s_n = np.where(valid, s_n, 0.0)
  keep = valid & (s_n != -INF)
  correction = "corrected" if variant == "floor" else variant
  loss, _, _, _ = ref.loss_and_grads(
    [s_p], [np.where(keep, s_n, 0.0)], lq_n, [lq_p], [keep], correction
  )
  if correction != "corrected":
    return loss[0]
  # The dropped -inf negatives still count in n (they are valid samples with weight 0).
  n_all, n_kept = valid.sum(), keep.sum()
  z = np.log(np.exp(s_n[keep] - (lq_n[keep] - np.log1p(-np.exp(lq_p)))).sum())
  w = 1 / (1 + np.exp(-(z - np.log(n_all) - s_p)))
  assert n_kept > 0
  return -w * (max(s_p - max(z, LOG_FLOOR), LOG_FLOOR) if variant == "floor" else s_p - z)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16])
@pytest.mark.parametrize("variant", list(CORRECTIONS) + ["floor"])
def test_infinite_scores_give_the_limit_and_finite_gradients(variant, dtype):
  for name, s_p, s_n, valid, limits in _INF_ROWS:
    s_p_, s_n_, lq_n, lq_p, valid_ = _sampled_case([s_p], [s_n], None if valid is None else [valid])
    sp_t = tf.constant(s_p_, dtype)
    sn_t = tf.constant(s_n_, dtype)
    with tf.GradientTape() as tape:
      tape.watch([sp_t, sn_t])
      out = losses.sampled_softmax_loss(
        sp_t,
        sn_t,
        lq_n.astype(np.float32),
        positive_log_q=lq_p.astype(np.float32),
        valid_mask=valid_,
        correction="corrected" if variant == "floor" else variant,
        ratio_floor=1e-10 if variant == "floor" else 0.0,
      )
    got = float(out.loss.numpy()[0])
    want = limits[variant]
    if want == "nan":
      assert np.isnan(got), (name, got)
      continue
    if want == "ref":
      rounded = tf.cast(sn_t, tf.float64).numpy()[0]
      want = _ref_value(
        variant, float(tf.cast(sp_t, tf.float64)[0]), rounded, lq_n, lq_p[0], valid_[0]
      )
    if np.isinf(want):
      assert got == want, (name, variant, got)
    else:
      np.testing.assert_allclose(
        got, want, rtol=1e-2 if dtype != tf.float32 else 1e-5, atol=1e-5, err_msg=name
      )
      gp, gn = tape.gradient(out.loss, [sp_t, sn_t])
      assert np.all(np.isfinite(tf.cast(gp, tf.float32).numpy())), (name, variant)
      assert np.all(np.isfinite(tf.cast(gn, tf.float32).numpy())), (name, variant)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float16, tf.bfloat16])
def test_infinite_scores_in_full_softmax_and_gbce(dtype):
  # Full softmax with d = 1 and q = 1: the scores are the table's entries.
  def full(values, positive):
    table = tf.constant(np.asarray(values, np.float64)[:, None], dtype)
    return float(full_softmax.full_softmax_loss(tf.ones([1, 1], dtype), [positive], table).loss[0])

  assert full([INF, 0.5, 1.0], 0) == 0.0  # s_p = +inf
  assert full([-INF, 0.5, 1.0], 0) == INF  # s_p = -inf
  assert full([0.2, INF, 1.0], 0) == INF  # a +inf competitor
  np.testing.assert_allclose(
    full([0.2, -INF, 1.0], 0), _np_softplus(1.0 - 0.2), rtol=1e-2
  )  # -inf drops out

  # gBCE: beta softplus(-s_p) + sum softplus(s_i).
  def gbce_of(s_p, s_n, valid=None):
    sp_t, sn_t = tf.constant([s_p], dtype), tf.constant([s_n], dtype)
    with tf.GradientTape() as tape:
      tape.watch([sp_t, sn_t])
      out = gbce.gbce_loss(sp_t, sn_t, beta=0.5, valid_mask=None if valid is None else [valid])
    grads = tape.gradient(out.loss, [sp_t, sn_t])
    return float(out.loss[0]), grads

  got, grads = gbce_of(INF, [0.0, -INF])
  np.testing.assert_allclose(got, np.log(2.0), rtol=1e-2)  # softplus(0) + 0 + 0
  assert all(np.all(np.isfinite(tf.cast(g, tf.float32).numpy())) for g in grads)
  assert gbce_of(-INF, [0.0])[0] == INF
  assert gbce_of(0.0, [INF])[0] == INF
  got, grads = gbce_of(0.0, [np.nan, INF, 1.0], [False, False, True])  # masked entries ignored
  np.testing.assert_allclose(got, 0.5 * np.log(2.0) + _np_softplus(1.0), rtol=1e-2)
  assert all(np.all(np.isfinite(tf.cast(g, tf.float32).numpy())) for g in grads)


def test_keras_layers_config_round_trip():
  for layer in (
    losses.SampledSoftmaxLoss("corrected", "proxy", ratio_floor=1e-10, check_scores=True),
    full_softmax.FullSoftmaxLoss(temperature=0.5, id_offset=1, check_scores=True),
    gbce.GBCELoss(beta=0.25),
  ):
    clone = type(layer).from_config(layer.get_config())
    config = {k: v for k, v in layer.get_config().items() if k != "name"}
    assert {k: v for k, v in clone.get_config().items() if k != "name"} == config
    assert clone.dtype == "float32"


def test_gbce_and_bce_reject_an_empty_batch_like_the_other_losses():
  empty_p, empty_n = tf.zeros([0]), tf.zeros([0, 3])
  for fn in (
    lambda: gbce.gbce_loss(empty_p, empty_n, beta=0.5),
    lambda: gbce.bce_loss(empty_p, empty_n),
    lambda: losses.sampled_softmax_loss(empty_p, empty_n, correction="none"),
  ):
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="empty batch"):
      fn()
