"""Mixed negatives: layout, the `unigram` / `mixture` / `expected_count` log Q conventions against
numpy (expected_count against Monte Carlo inclusion frequencies), per-query uniform blocks; the
static-shape path (padding queries, masked in-batch slots) scores like the dynamic one."""

import math

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import losses
from tfrs_logq.tf_keras.negatives import (
  InBatchNegatives,
  InBatchPool,
  MixedNegatives,
  Negatives,
  UniformNegatives,
  mixture_log_q,
)

import numpy as np
import pytest
import tensorflow as tf

NUM_ITEMS = 12


def np_mixture_log_q(q_uni, n_b, k_u, size):
  """Independent reference: log((n_b q_uni + k_u / |D|) / (n_b + k_u)), in float64."""
  with np.errstate(divide="ignore"):
    return np.log((n_b * np.asarray(q_uni, np.float64) + k_u / size) / (n_b + k_u))


def make(counts_table, convention, k_u=5, k_b=None):
  counts = np.arange(NUM_ITEMS, dtype=np.float64)  # item 0 never seen: q_uni(0) = 0
  table = counts_table(counts)
  emb_table = np.random.default_rng(0).normal(size=(NUM_ITEMS, 4)).astype(np.float32)
  embed = lambda ids: tf.gather(emb_table, ids)
  sampler = MixedNegatives(
    InBatchNegatives(table, num_negatives=k_b),
    UniformNegatives(embed, k_u, id_range=(0, NUM_ITEMS)),
    convention=convention,
  )
  return sampler, counts / counts.sum(), emb_table


@pytest.mark.parametrize("convention", ["unigram", "mixture"])
def test_layout_and_log_q_match_reference(counts_table, convention):
  sampler, q_uni, emb_table = make(counts_table, convention, k_u=5)
  pos = np.array([3, 7, 3, 11, 5])
  neg = sampler(pos, emb_table[pos], seed=[4, 2])
  ids = neg.ids.numpy()
  n_b = 4  # distinct positives 3, 7, 11, 5
  np.testing.assert_array_equal(ids[:n_b], [3, 7, 11, 5])
  assert len(ids) == n_b + 5
  np.testing.assert_allclose(neg.embeddings.numpy(), emb_table[ids], rtol=1e-6)
  if convention == "mixture":
    ref = np_mixture_log_q(q_uni[ids], n_b, 5, NUM_ITEMS)
    ref_pos = np_mixture_log_q(q_uni[pos], n_b, 5, NUM_ITEMS)
  else:
    with np.errstate(divide="ignore"):
      ref = np.log(q_uni[ids])
      ref_pos = np.log(q_uni[pos])
    unseen = math.log(5 / ((n_b + 5) * NUM_ITEMS))
    ref = np.where(np.isfinite(ref), ref, unseen)
  np.testing.assert_allclose(neg.log_q.numpy(), ref, rtol=1e-5)
  np.testing.assert_allclose(neg.positive_log_q.numpy(), ref_pos, rtol=1e-5)
  assert np.all(np.isfinite(neg.log_q.numpy()))


def test_mixture_is_a_distribution_over_the_catalog():
  q_uni = np.random.default_rng(3).dirichlet(np.ones(30))
  q_uni[4] = 0.0
  q_uni /= q_uni.sum()
  log_q = mixture_log_q(tf.math.log(tf.constant(q_uni, tf.float32)), 7, 3, 30)  # log 0 = -inf
  np.testing.assert_allclose(np.exp(log_q.numpy()).sum(), 1.0, rtol=1e-5)
  np.testing.assert_allclose(log_q.numpy(), np_mixture_log_q(q_uni, 7, 3, 30), rtol=1e-5)
  # n_b = 0: only uniform slots.
  np.testing.assert_allclose(
    mixture_log_q(tf.math.log(q_uni), 0, 3, 30).numpy(), np.full(30, -math.log(30)), rtol=1e-6
  )


def _pool(n_b, num_draws=10, num_distinct=None):
  """A hand-made in-batch pool with n_b kept negatives out of U distinct of B draws."""
  ids = tf.range(n_b, dtype=tf.int64)
  neg = Negatives(ids, tf.zeros([n_b, 1]), tf.zeros([n_b]))
  return InBatchPool(
    neg, tf.constant(num_draws), tf.constant(n_b if num_distinct is None else num_distinct)
  )


def test_unseen_uniform_draw_gets_its_slot_probability(counts_table):
  sampler, _, _ = make(counts_table, "unigram", k_u=5)
  got = sampler.log_q(tf.constant([0, 2], tf.int64), _pool(3)).numpy()
  np.testing.assert_allclose(got[0], math.log(5 / (8 * NUM_ITEMS)), rtol=1e-6)
  np.testing.assert_allclose(got[1], math.log(2 / 66), rtol=1e-6)


def test_subsample_and_padding_set_n_b(counts_table):
  sampler, q_uni, emb_table = make(counts_table, "mixture", k_u=3, k_b=2)
  pos = np.array([3, 7, 11, 5, 0])
  neg = sampler(pos, emb_table[pos], valid=pos != 0, seed=[1, 1])
  ids = neg.ids.numpy()
  assert len(ids) == 5 and set(ids[:2]) <= {3, 7, 11, 5}
  np.testing.assert_allclose(
    neg.log_q.numpy(), np_mixture_log_q(q_uni[ids], 2, 3, NUM_ITEMS), rtol=1e-5
  )


def test_seeded_calls_repeat(counts_table):
  sampler, _, emb_table = make(counts_table, "mixture", k_u=6, k_b=2)
  pos = np.array([1, 2, 3, 4, 5])
  a = sampler(pos, emb_table[pos], seed=[9, 9]).ids.numpy()
  np.testing.assert_array_equal(a, sampler(pos, emb_table[pos], seed=[9, 9]).ids.numpy())


def test_bad_configuration_raises(counts_table):
  uni = UniformNegatives(lambda i: tf.zeros([tf.size(i), 2]), 2, id_range=(0, 3))
  batch = InBatchNegatives(counts_table(np.ones(3)))
  with pytest.raises(ValueError, match="convention"):
    MixedNegatives(batch, uni, convention="paper")
  with pytest.raises(ValueError, match="frequency_estimator"):
    MixedNegatives(InBatchNegatives(), uni)
  with pytest.raises(TypeError, match="InBatchNegatives"):
    MixedNegatives(uni, uni)
  with pytest.raises(TypeError, match="UniformNegatives"):
    MixedNegatives(batch, batch)


def test_with_streaming_exact_counts_estimator():
  from tfrs_logq.tf_keras.frequency import ExactCounts

  estimator = ExactCounts(NUM_ITEMS)
  history = np.array([1, 1, 2, 5, 5, 5, 7, 11])
  estimator.update(tf.constant(history))
  emb_table = np.ones((NUM_ITEMS, 2), np.float32)
  sampler = MixedNegatives(
    InBatchNegatives(estimator),
    UniformNegatives(lambda i: tf.gather(emb_table, i), 4, id_range=(0, NUM_ITEMS)),
    convention="mixture",
  )
  pos = np.array([5, 1, 5])
  neg = sampler(pos, emb_table[pos], seed=[0, 3])
  ids = neg.ids.numpy()
  counts = np.maximum(np.bincount(history, minlength=NUM_ITEMS), 1.0)  # ExactCounts' floor
  q_uni = counts / len(history)
  np.testing.assert_allclose(
    neg.log_q.numpy(), np_mixture_log_q(q_uni[ids], 2, 4, NUM_ITEMS), rtol=1e-5
  )


# --------------------------------------------------------------------- expected_count convention
def _simulate_counts(q_uni, num_draws, k_b, k_u, trials, rng):
  """Numpy simulation of the mixed sampler: B i.i.d. unigram draws, deduplicated, k_b of the U
  distinct kept uniformly without replacement, plus k_u uniform draws over the catalog.

  Returns (mean count of each item among the n_b + k_u negatives, its standard error, mean U,
  mean n_b)."""
  size = len(q_uni)
  draws = rng.choice(size, size=(trials, num_draws), p=q_uni)
  present = np.zeros((trials, size), bool)
  present[np.arange(trials)[:, None], draws] = True
  num_distinct = present.sum(1)
  keys = np.where(present, rng.random((trials, size)), -1.0)  # uniform subset of the pool
  kth = -np.sort(-keys, axis=1)[:, k_b - 1 : k_b]
  kept = present & (keys >= kth)
  counts = kept.astype(np.float64)
  for _ in range(k_u):
    counts[np.arange(trials), rng.integers(0, size, size=trials)] += 1.0
  return (counts.mean(0), counts.std(0) / np.sqrt(trials), num_distinct.mean(), kept.sum(1).mean())


@pytest.mark.parametrize("k_u", [0, 12])
def test_expected_count_matches_monte_carlo_inclusion_frequencies(counts_table, k_u):
  rng = np.random.default_rng(0)
  size, num_draws, k_b = 120, 96, 24
  q_uni = 1.0 / np.arange(1, size + 1) ** 1.2  # Zipf: B Q >> 1 for the head
  q_uni /= q_uni.sum()
  table = counts_table(q_uni * 1e6)
  mc, se, mean_u, mean_nb = _simulate_counts(q_uni, num_draws, k_b, k_u, 20000, rng)
  n_b = int(round(mean_nb))
  pool = _pool(n_b, num_draws, int(round(mean_u)))
  ids = tf.range(size, dtype=tf.int64)
  if k_u:
    sampler = MixedNegatives(
      InBatchNegatives(table, num_negatives=k_b),
      UniformNegatives(None, k_u, id_range=(0, size)),
      convention="expected_count",
    )
  else:
    sampler = InBatchNegatives(table, num_negatives=k_b, convention="expected_count")
  log_q = sampler.log_q(ids, pool).numpy()
  expected = np.exp(log_q) * (n_b + k_u)  # E[count] = n Q_eff
  # Within Monte Carlo noise (4.5 s.e.) and 4% (U is replaced by its mean) of the simulation.
  assert np.all(np.abs(expected - mc) <= 4.5 * se + 0.04 * mc), np.max(np.abs(expected - mc) / se)
  np.testing.assert_allclose(np.exp(log_q).sum(), 1.0, rtol=0.03)  # ~ a distribution
  # The per-draw conventions are far off for the head (B Q >> 1) on the same counts.
  unigram = (n_b * q_uni + k_u / size) / (n_b + k_u) * (n_b + k_u)
  assert np.max(np.abs(unigram[:5] / mc[:5] - 1)) > 0.5


def test_expected_count_formula_against_its_definition(counts_table):
  """log Q_eff = log((pi n_b / U + k_u / |D|) / (n_b + k_u)), pi = 1 - (1 - q)^B, in float64."""
  sampler, q_uni, _ = make(counts_table, "expected_count", k_u=5, k_b=3)
  ids = np.arange(NUM_ITEMS)
  got = sampler.log_q(ids, _pool(3, num_draws=7, num_distinct=4)).numpy()
  pi = 1 - (1 - q_uni) ** 7
  with np.errstate(divide="ignore"):
    want = np.log((pi * 3 / 4 + 5 / NUM_ITEMS) / 8)
  np.testing.assert_allclose(got, want, rtol=1e-5)


# ------------------------------------------------------------------ per-query / per-sequence blocks
@pytest.mark.parametrize("per", ["batch", "sequence", "query"])
@pytest.mark.parametrize("convention", ["unigram", "mixture", "expected_count"])
def test_score_joins_shared_in_batch_and_uniform_blocks(counts_table, per, convention):
  counts = np.arange(1, NUM_ITEMS + 1, dtype=np.float64)
  table = counts_table(counts)
  q_uni = counts / counts.sum()
  rng = np.random.default_rng(4)
  emb = rng.normal(size=(NUM_ITEMS, 3)).astype(np.float32)
  query = rng.normal(size=(6, 3)).astype(np.float32)
  pos = np.array([3, 7, 3, 11, 5, 7])
  seq = np.array([0, 0, 1, 1, 1, 2])
  sampler = MixedNegatives(
    InBatchNegatives(table, num_negatives=3),
    UniformNegatives(None, 4, id_range=(0, NUM_ITEMS), per=per),
    convention=convention,
  )
  scored = sampler.score(
    query, pos, emb[pos], temperature=2.0, seed=[8, 1], sequence_ids=seq, item_table=emb
  )
  neg = sampler(pos, emb[pos], seed=[8, 1], sequence_ids=seq, item_table=emb)  # same draws
  ids = np.broadcast_to(neg.ids.numpy(), (6, 7))
  assert set(ids[0, :3]) <= {3, 7, 11, 5} and len(set(ids[0, :3])) == 3
  np.testing.assert_array_equal(ids[:, :3], np.broadcast_to(ids[0, :3], (6, 3)))  # shared
  np.testing.assert_allclose(
    scored.negative_scores.numpy(),
    np.einsum("ad,akd->ak", query, emb[ids]) / 2.0,
    rtol=1e-5,
    atol=1e-6,
  )
  np.testing.assert_array_equal(scored.valid_mask.numpy(), ids != pos[:, None])
  n_b, k_u, b, u = 3, 4, 6, 4
  if convention == "unigram":
    ref = np.log(q_uni)
  elif convention == "mixture":
    ref = np_mixture_log_q(q_uni, n_b, k_u, NUM_ITEMS)
  else:
    ref = np.log(((1 - (1 - q_uni) ** b) * n_b / u + k_u / NUM_ITEMS) / (n_b + k_u))
  np.testing.assert_allclose(
    np.broadcast_to(scored.negative_log_q.numpy(), (6, 7)), ref[ids], rtol=1e-5
  )
  np.testing.assert_allclose(scored.positive_log_q.numpy(), ref[pos], rtol=1e-5)
  np.testing.assert_allclose(neg.log_q.numpy(), ref[neg.ids.numpy()], rtol=1e-5)


def test_config_round_trip(counts_table):
  table = counts_table(np.ones(NUM_ITEMS))
  sampler = MixedNegatives(
    InBatchNegatives(table, num_negatives=4, cross_replica=False),
    UniformNegatives(None, 3, id_range=(1, NUM_ITEMS), per="query"),
    convention="expected_count",
  )
  config = sampler.get_config()
  clone = MixedNegatives.from_config(config)
  assert clone.get_config() == config
  assert clone.uniform.per == "query" and clone.in_batch.num_negatives == 4
  assert clone.in_batch.frequency_estimator is table


def _masked_loss(scored, valid):
  out = losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected")
  return tf.where(valid, out.loss, 0.0).numpy(), tf.where(valid, out.weight, 0.0).numpy()


@pytest.mark.parametrize("per", ["batch", "sequence", "query"])
@pytest.mark.parametrize("convention", ["unigram", "expected_count"])
def test_static_shapes_score_like_dynamic_shapes(counts_table, per, convention):
  """Padding queries in the batch + static shapes (k_b slots with masked duplicates, uniform
  sets numbered over the valid queries) give the per-row loss of the batch without padding;
  `__call__` marks the masked in-batch slots in Negatives.valid."""
  table = counts_table(np.arange(1, NUM_ITEMS + 1, dtype=np.float64))
  rng = np.random.default_rng(9)
  emb = rng.normal(size=(NUM_ITEMS, 3)).astype(np.float32)
  pos = np.array([3, 0, 7, 3, 0, 11, 5, 7, 0])
  seq = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
  valid = pos != 0
  query = rng.normal(size=(9, 3)).astype(np.float32)
  sampler = lambda static: MixedNegatives(
    InBatchNegatives(table, num_negatives=6, static_shapes=static),
    UniformNegatives(None, 4, id_range=(1, NUM_ITEMS), per=per, static_shapes=static),
    convention=convention,
  )
  kw = dict(seed=[5, 6], item_table=emb)
  want = sampler(False).score(
    query[valid], pos[valid], emb[pos[valid]], sequence_ids=seq[valid], **kw
  )
  want_loss, want_weight = _masked_loss(want, np.ones(valid.sum(), bool))
  got = sampler(True).score(query, pos, emb[pos], sequence_ids=seq, valid=valid, **kw)
  assert got.negative_scores.shape == (9, 6 + 4)  # k_b slots, 4 distinct ids
  loss, weight = _masked_loss(got, valid)
  np.testing.assert_allclose(loss[valid], want_loss, rtol=1e-5)
  np.testing.assert_allclose(weight[valid], want_weight, rtol=1e-5)
  neg = sampler(True)(pos, emb[pos], sequence_ids=seq, valid=valid, **kw)
  assert neg.valid.shape == neg.ids.shape and int(np.sum(neg.valid.numpy()[..., :6])) == (
    4 if per == "batch" else 4 * 9
  )
  assert neg.valid.numpy()[..., 6:].all()  # uniform slots always valid
