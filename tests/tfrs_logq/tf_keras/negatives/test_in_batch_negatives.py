"""In-batch negatives: first-occurrence dedup, k_b subsample, padding, log Q = log q_uni, errors;
the static-shape pool (XLA) masks exactly what the dynamic pool drops."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import losses
from tfrs_logq.tf_keras.negatives import (
  InBatchNegatives,
  dedup_first_occurrence,
  first_occurrence_mask,
  score_negatives,
  subsample_indices,
)

import numpy as np
import pytest
import tensorflow as tf


def np_dedup(ids):
  """Independent reference: distinct ids by first occurrence and their first positions."""
  seen, uniq, first = set(), [], []
  for pos, i in enumerate(ids):
    if i not in seen:
      seen.add(i)
      uniq.append(i)
      first.append(pos)
  return np.array(uniq), np.array(first)


def test_dedup_first_occurrence_matches_reference():
  rng = np.random.default_rng(0)
  ids = rng.integers(0, 7, size=40)
  uniq, first, inverse = dedup_first_occurrence(ids)
  ref_uniq, ref_first = np_dedup(ids.tolist())
  np.testing.assert_array_equal(uniq.numpy(), ref_uniq)
  np.testing.assert_array_equal(first.numpy(), ref_first)
  np.testing.assert_array_equal(uniq.numpy()[inverse.numpy()], ids)
  assert uniq.dtype == tf.int64


def test_negatives_are_first_rows_with_estimator_log_q(counts_table):
  table = counts_table([5, 1, 3, 0, 2, 9])
  ids = np.array([2, 5, 2, 0, 5, 4, 1])
  emb = np.random.default_rng(1).normal(size=(7, 3)).astype(np.float32)
  neg = InBatchNegatives(table)(ids, emb)
  ref_uniq, ref_first = np_dedup(ids.tolist())
  np.testing.assert_array_equal(neg.ids.numpy(), ref_uniq)
  np.testing.assert_allclose(neg.embeddings.numpy(), emb[ref_first])
  np.testing.assert_allclose(neg.log_q.numpy(), table.np_log_q(ref_uniq), rtol=1e-6)
  np.testing.assert_allclose(neg.positive_log_q.numpy(), table.np_log_q(ids), rtol=1e-6)


def test_candidate_log_q_overrides_estimator_and_follows_first_row():
  ids = np.array([3, 1, 3])
  lq = np.array([-1.0, -2.0, -5.0], np.float32)  # the duplicate's value is ignored (first row)
  neg = InBatchNegatives()(ids, np.eye(3, dtype=np.float32), candidate_log_q=lq)
  np.testing.assert_array_equal(neg.ids.numpy(), [3, 1])
  np.testing.assert_allclose(neg.log_q.numpy(), [-1.0, -2.0])
  np.testing.assert_allclose(neg.positive_log_q.numpy(), lq)


def test_valid_mask_leaves_padding_out_of_the_pool(counts_table):
  table = counts_table(np.ones(10))
  ids = np.array([0, 4, 0, 7, 4, 0])
  valid = ids != 0
  neg = InBatchNegatives(table)(ids, np.ones((6, 2), np.float32), valid=valid)
  np.testing.assert_array_equal(neg.ids.numpy(), [4, 7])
  assert neg.positive_log_q.shape == (6,)  # still one per query row


def test_gradient_flows_to_first_occurrence_only(counts_table):
  table = counts_table(np.ones(5))
  ids = tf.constant([1, 2, 1, 3])
  emb = tf.Variable(np.arange(8, dtype=np.float32).reshape(4, 2))
  weights = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
  with tf.GradientTape() as tape:
    neg = InBatchNegatives(table)(ids, emb)
    loss = tf.reduce_sum(neg.embeddings * weights)
  grad = tf.convert_to_tensor(tape.gradient(loss, emb)).numpy()
  np.testing.assert_allclose(grad, [[1, 2], [3, 4], [0, 0], [5, 6]])


def test_subsample_keeps_k_distinct_ids_in_order_and_is_seeded(counts_table):
  table = counts_table(np.ones(50))
  ids = np.random.default_rng(2).integers(0, 50, size=60)
  ref_uniq, _ = np_dedup(ids.tolist())
  sampler = InBatchNegatives(table, num_negatives=8)
  a = sampler(ids, np.ones((60, 2), np.float32), seed=[3, 4]).ids.numpy()
  b = sampler(ids, np.ones((60, 2), np.float32), seed=[3, 4]).ids.numpy()
  c = sampler(ids, np.ones((60, 2), np.float32), seed=[5, 6]).ids.numpy()
  assert len(a) == 8 and len(set(a)) == 8 and set(a) <= set(ref_uniq)
  order = [ref_uniq.tolist().index(i) for i in a]
  assert order == sorted(order)
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, c)
  # Fewer distinct ids than k_b keeps them all.
  small = InBatchNegatives(table, num_negatives=100)(ids, np.ones((60, 2), np.float32))
  np.testing.assert_array_equal(small.ids.numpy(), ref_uniq)


def test_subsample_is_uniform_over_the_pool():
  # Each of n=6 indices is kept with probability k/n = 1/2; 600 seeded subsets.
  counts = np.zeros(6)
  for s in range(600):
    counts[subsample_indices(6, 3, seed=[s, 0]).numpy()] += 1
  expected = 600 * 3 / 6
  chi2 = float(((counts - expected) ** 2 / expected).sum())
  assert chi2 < 20.5  # chi-square, 5 dof, p = 0.001


def test_subsample_accepts_numpy_integers_and_rejects_bool_and_float():
  np.testing.assert_array_equal(
    subsample_indices(6, np.int64(3), seed=[4, 0]).numpy(),
    subsample_indices(6, 3, seed=[4, 0]).numpy(),
  )
  np.testing.assert_array_equal(
    subsample_indices(6, np.int32(3), seed=[4, 0]).numpy(),
    subsample_indices(6, 3, seed=[4, 0]).numpy(),
  )
  for bad in (True, 3.0, np.float64(3.0), np.int64(0), -1):
    with pytest.raises(ValueError, match="num_negatives"):
      subsample_indices(6, bad)


def test_works_inside_tf_function(counts_table):
  table = counts_table(np.arange(1, 9))
  sampler = InBatchNegatives(table)

  @tf.function(
    input_signature=[tf.TensorSpec([None], tf.int64), tf.TensorSpec([None, 2], tf.float32)]
  )
  def run(ids, emb):
    return sampler(ids, emb)

  neg = run(tf.constant([5, 5, 1], tf.int64), tf.ones([3, 2]))
  np.testing.assert_array_equal(neg.ids.numpy(), [5, 1])


@pytest.mark.parametrize(
  "kwargs, error",
  [
    (dict(ids=np.array([1.0, 2.0]), emb=np.ones((2, 2), np.float32)), TypeError),
    (dict(ids=np.array([1, 2]), emb=np.ones((3, 2), np.float32)), ValueError),
    (dict(ids=np.array([[1, 2]]), emb=np.ones((2, 2), np.float32)), ValueError),
    (dict(ids=np.zeros([0], np.int64), emb=np.ones((0, 2), np.float32)), ValueError),
    (dict(ids=np.array([1, 2]), emb=np.ones((2, 2), np.int32)), TypeError),
  ],
)
def test_bad_inputs_raise(counts_table, kwargs, error):
  with pytest.raises(error):
    InBatchNegatives(counts_table(np.ones(5)))(kwargs["ids"], kwargs["emb"])


def test_bad_configuration_raises():
  with pytest.raises(ValueError, match="num_negatives"):
    InBatchNegatives(num_negatives=0)
  with pytest.raises(TypeError, match="log_q"):
    InBatchNegatives(frequency_estimator=object())
  with pytest.raises(ValueError, match="frequency_estimator"):
    InBatchNegatives()(np.array([1]), np.ones((1, 2), np.float32))
  with pytest.raises(TypeError, match="bool"):
    InBatchNegatives()(
      np.array([1]),
      np.ones((1, 2), np.float32),
      candidate_log_q=np.zeros(1, np.float32),
      valid=np.array([1]),
    )


def test_dynamic_empty_batch_raises_at_run_time(counts_table):
  sampler = InBatchNegatives(counts_table(np.ones(3)))

  @tf.function(
    input_signature=[tf.TensorSpec([None], tf.int64), tf.TensorSpec([None, 2], tf.float32)]
  )
  def run(ids, emb):
    return sampler(ids, emb).ids

  with pytest.raises(tf.errors.InvalidArgumentError, match="empty"):
    run(tf.zeros([0], tf.int64), tf.zeros([0, 2]))


def test_expected_count_convention_is_inclusion_probability_over_distinct(counts_table):
  """log Q_eff(d) = log(1 - (1 - q_uni(d))^B) - log U, B = valid pool rows, U = distinct ids."""
  counts = np.array([5, 1, 3, 40, 2, 9], np.float64)
  table = counts_table(counts)
  q = counts / counts.sum()
  ids = np.array([2, 5, 2, 0, 5, 3, 3, 3, 0])
  valid = ids != 0  # B = 7 rows, U = 3 distinct
  emb = np.ones((9, 2), np.float32)
  sampler = InBatchNegatives(table, num_negatives=2, convention="expected_count")
  neg = sampler(ids, emb, valid=valid, seed=[1, 2])
  want = lambda d: np.log(1 - (1 - q[d]) ** 7) - np.log(3)
  np.testing.assert_allclose(neg.log_q.numpy(), want(neg.ids.numpy()), rtol=1e-5)
  np.testing.assert_allclose(neg.positive_log_q.numpy(), want(ids), rtol=1e-5)
  pool = sampler.pool(ids, emb, valid=valid, seed=[1, 2])
  assert (int(pool.num_draws), int(pool.num_distinct), int(pool.num_kept)) == (7, 3, 2)
  np.testing.assert_allclose(
    pool.negatives.log_q.numpy(), np.log(q[neg.ids.numpy()]), rtol=1e-5
  )  # the pool keeps per-draw q_uni
  with pytest.raises(ValueError, match="InBatchPool"):
    sampler.log_q([1, 2])


def test_tiny_probabilities_keep_their_inclusion_probability():
  from tfrs_logq.tf_keras import log_q

  lq = np.array([0.0, -1e-3, -5.0, -25.0, -40.0, -90.0, -np.inf])
  got = log_q.log_inclusion_probability(tf.constant(lq, tf.float32), 64).numpy()
  q = np.exp(lq)
  with np.errstate(divide="ignore"):
    want = np.log(-np.expm1(64 * np.log1p(-q)))  # float64 reference
  want[5] = np.log(64) - 90.0  # q underflows float64's 1 - q
  np.testing.assert_allclose(got[:6], want[:6], rtol=1e-5)
  assert got[6] == -np.inf


def test_config_round_trip(counts_table):
  table = counts_table(np.ones(4))
  sampler = InBatchNegatives(
    table, num_negatives=np.int64(3), cross_replica=False, convention="expected_count"
  )
  clone = InBatchNegatives.from_config(sampler.get_config())
  assert clone.get_config() == sampler.get_config()
  assert clone.num_negatives == 3 and clone.frequency_estimator is table
  with pytest.raises(ValueError, match="convention"):
    InBatchNegatives(table, convention="paper")


def test_first_occurrence_mask_matches_reference():
  rng = np.random.default_rng(5)
  ids = rng.integers(0, 7, size=40)
  valid = rng.random(40) < 0.7
  mask = first_occurrence_mask(ids, valid).numpy()
  ref_uniq, ref_first = np_dedup(ids[valid].tolist())
  np.testing.assert_array_equal(ids[mask], ref_uniq)
  np.testing.assert_array_equal(np.flatnonzero(mask), np.flatnonzero(valid)[ref_first])
  with pytest.raises(TypeError, match="bool"):
    first_occurrence_mask(ids, valid.astype(np.int32))


def _padded_batch(seed=4, size=16):
  rng = np.random.default_rng(seed)
  ids = rng.integers(1, 12, size=size)
  ids[[0, 5, 6, 11]] = 0  # padding rows
  return ids, ids != 0, rng.normal(size=(size, 3)).astype(np.float32)


def _kept(neg):
  keep = neg.valid.numpy()
  return neg.ids.numpy()[keep], neg.embeddings.numpy()[keep], neg.log_q.numpy()[keep]


@pytest.mark.parametrize(
  "k_b, convention",
  [(None, "unigram"), (3, "unigram"), (3, "expected_count"), (20, "expected_count")],
)
def test_static_pool_masks_what_the_dynamic_pool_drops(counts_table, k_b, convention):
  """Static shapes: B slots (k_b with a subsample) whose valid ones are the dynamic negatives (the
  same k_b subset for the same seed) with the same log Q and (B, U, n_b); masked slots have a
  finite log Q; compiled with XLA the static pool is the default and equals the eager one."""
  table = counts_table(np.arange(1, 13))
  ids, valid, emb = _padded_batch()
  kw = dict(num_negatives=k_b, convention=convention)
  dynamic = InBatchNegatives(table, static_shapes=False, **kw)
  static = InBatchNegatives(table, static_shapes=True, **kw)
  want = dynamic(ids, emb, valid=valid, seed=[7, 8])
  got = static(ids, emb, valid=valid, seed=[7, 8])
  assert got.ids.shape[0] == (len(ids) if k_b is None else k_b)
  for a, b in zip(_kept(got), (want.ids, want.embeddings, want.log_q)):
    np.testing.assert_allclose(a, b.numpy(), rtol=1e-6)
  if k_b is None:
    np.testing.assert_array_equal(_kept(got)[0], np_dedup(ids[valid].tolist())[0])
  np.testing.assert_allclose(got.positive_log_q.numpy(), want.positive_log_q.numpy())
  assert np.isfinite(got.log_q.numpy()).all()
  stats = lambda p: (int(p.num_draws), int(p.num_distinct), int(p.num_kept))
  assert stats(static.pool(ids, emb, valid=valid, seed=[7, 8])) == stats(
    dynamic.pool(ids, emb, valid=valid, seed=[7, 8])
  )
  auto = InBatchNegatives(table, **kw)  # static_shapes=None: XLA decides
  compiled = tf.function(lambda i, e, v: auto(i, e, valid=v, seed=[7, 8]), jit_compile=True)(
    tf.constant(ids), tf.constant(emb), tf.constant(valid)
  )
  for a, b in zip(compiled, got):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


def test_static_pool_gives_the_dynamic_loss_and_gradients(counts_table):
  """Scored and masked, the static pool's loss and gradients (to the first occurrences only)
  equal the dynamic pool's."""
  table = counts_table(np.arange(1, 13))
  ids, valid, emb0 = _padded_batch(6)
  query = tf.constant(np.random.default_rng(7).normal(size=(len(ids), 3)), tf.float32)
  results = []
  for static in (False, True):
    emb = tf.Variable(emb0)
    with tf.GradientTape() as tape:
      neg = InBatchNegatives(table, num_negatives=5, static_shapes=static)(
        ids, emb, valid=valid, seed=[1, 2]
      )
      scored = score_negatives(query, ids, emb, neg)
      out = losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected")
      loss = tf.reduce_sum(tf.where(valid, out.loss, 0.0))
    results.append((loss.numpy(), tf.convert_to_tensor(tape.gradient(loss, emb)).numpy()))
  np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6)
  np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-5, atol=1e-7)
  assert np.abs(results[0][1]).sum() > 0
