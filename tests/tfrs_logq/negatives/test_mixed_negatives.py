"""Mixed negatives: layout and the `unigram` / `mixture` log Q conventions against numpy."""

import math

import numpy as np
import pytest

import tfrs_logq  # noqa: F401
import tensorflow as tf

from tfrs_logq.negatives import (InBatchNegatives, MixedNegatives, UniformNegatives,
                                 mixture_log_q)

NUM_ITEMS = 12


def np_mixture_log_q(q_uni, n_b, k_u, size):
  """Independent reference: log((n_b q_uni + k_u / |D|) / (n_b + k_u)), in float64."""
  with np.errstate(divide="ignore"):
    return np.log((n_b * np.asarray(q_uni, np.float64) + k_u / size) / (n_b + k_u))


def make(counts_table, convention, k_u=5, k_b=None):
  counts = np.arange(NUM_ITEMS, dtype=np.float64)  # item 0 never seen: q_uni(0) = 0
  table = counts_table(counts)
  emb_table = np.random.default_rng(0).normal(size=(NUM_ITEMS, 4)).astype(np.float32)
  embed = lambda ids: tf.gather(emb_table, ids)  # noqa: E731
  sampler = MixedNegatives(InBatchNegatives(table, num_negatives=k_b),
                           UniformNegatives(embed, k_u, id_range=(0, NUM_ITEMS)),
                           convention=convention)
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
  np.testing.assert_allclose(mixture_log_q(tf.math.log(q_uni), 0, 3, 30).numpy(),
                             np.full(30, -math.log(30)), rtol=1e-6)


def test_unseen_uniform_draw_gets_its_slot_probability(counts_table):
  sampler, _, _ = make(counts_table, "unigram", k_u=5)
  got = sampler.log_q(tf.constant([0, 2], tf.int64), 3).numpy()
  np.testing.assert_allclose(got[0], math.log(5 / (8 * NUM_ITEMS)), rtol=1e-6)
  np.testing.assert_allclose(got[1], math.log(2 / 66), rtol=1e-6)


def test_subsample_and_padding_set_n_b(counts_table):
  sampler, q_uni, emb_table = make(counts_table, "mixture", k_u=3, k_b=2)
  pos = np.array([3, 7, 11, 5, 0])
  neg = sampler(pos, emb_table[pos], valid=pos != 0, seed=[1, 1])
  ids = neg.ids.numpy()
  assert len(ids) == 5 and set(ids[:2]) <= {3, 7, 11, 5}
  np.testing.assert_allclose(neg.log_q.numpy(), np_mixture_log_q(q_uni[ids], 2, 3, NUM_ITEMS),
                             rtol=1e-5)


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
  from tfrs_logq.frequency import ExactCounts  # pylint: disable=g-import-not-at-top
  estimator = ExactCounts(NUM_ITEMS)
  history = np.array([1, 1, 2, 5, 5, 5, 7, 11])
  estimator.update(tf.constant(history))
  emb_table = np.ones((NUM_ITEMS, 2), np.float32)
  sampler = MixedNegatives(
      InBatchNegatives(estimator),
      UniformNegatives(lambda i: tf.gather(emb_table, i), 4, id_range=(0, NUM_ITEMS)),
      convention="mixture")
  pos = np.array([5, 1, 5])
  neg = sampler(pos, emb_table[pos], seed=[0, 3])
  ids = neg.ids.numpy()
  counts = np.maximum(np.bincount(history, minlength=NUM_ITEMS), 1.0)  # ExactCounts' floor
  q_uni = counts / len(history)
  np.testing.assert_allclose(neg.log_q.numpy(), np_mixture_log_q(q_uni[ids], 2, 4, NUM_ITEMS),
                             rtol=1e-5)
