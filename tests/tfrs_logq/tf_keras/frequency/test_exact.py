"""ExactCounts: Q(d) = #d / N and Q'(d) = #d / (N − #p) against numpy."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras.frequency import ExactCounts

import numpy as np
import pytest
import tensorflow as tf


def test_fixed_table_q_and_q_prime():
  counts = np.array([5, 0, 1, 94, 1000000], np.int64)
  est = ExactCounts(5, counts=counts)
  n = counts.sum()
  ids = np.array([[0, 2, 3, 1], [4, 0, 2, 3]], np.int64)
  q_ref = np.maximum(counts, 1) / n  # floor: unseen counts as once
  np.testing.assert_allclose(np.exp(est.log_q(ids).numpy()), q_ref[ids], rtol=1e-6)
  positives = np.array([[3], [4]], np.int64)
  ref = np.log(np.maximum(counts, 1)[ids]) - np.log(n - counts[positives])  # #d / (N − #p)
  np.testing.assert_allclose(est.log_q_prime(ids, positives).numpy(), ref, rtol=1e-6)
  est.update(tf.constant([1, 1, 1], tf.int64))  # fixed table: update only validates
  np.testing.assert_array_equal(est.counts.numpy(), counts)


def test_accumulating_counts_equal_bincount():
  rng = np.random.default_rng(0)
  est = ExactCounts(100)
  np.testing.assert_allclose(est.log_q(tf.constant([3])).numpy(), [np.log(1 / 100)], rtol=1e-6)
  update = tf.function(est.update, input_signature=[tf.TensorSpec([None], tf.int64)])
  seen = np.zeros(100, np.int64)
  for _ in range(10):
    ids = rng.integers(0, 100, size=rng.integers(0, 300))
    update(tf.constant(ids))
    np.add.at(seen, ids, 1)
  np.testing.assert_array_equal(est.counts.numpy(), seen)
  assert est.total.numpy() == seen.sum()
  q = np.exp(est.log_q(tf.range(100)).numpy().astype(np.float64))
  np.testing.assert_allclose(q, np.maximum(seen, 1) / seen.sum(), rtol=1e-6)


def test_positive_holding_almost_everything_is_finite():
  est = ExactCounts(3, counts=[1, 0, 10**9])
  out = est.log_q_prime(tf.constant([[0, 1]]), tf.constant([[2]])).numpy()
  np.testing.assert_allclose(out, [[0.0, 0.0]], atol=1e-6)  # #d / (N − #p) = 1 / 1
  solo = ExactCounts(2, counts=[0, 7])  # N − #p = 0: floored at min_count = 1
  out = solo.log_q_prime(tf.constant([0, 1]), tf.constant([1])).numpy()
  np.testing.assert_allclose(out, np.log([1 / 7, 1.0]) - np.log(1 / 7), atol=1e-6)
  empty = ExactCounts(1)  # N = 0, one item: 1 − Q(p) floored at 1e-6
  out = empty.log_q_prime(tf.constant([0]), tf.constant([0])).numpy()
  np.testing.assert_allclose(out, [-np.log(1e-6)], rtol=1e-6)


def test_bad_tables_and_strings():
  with pytest.raises(ValueError):
    ExactCounts(3, counts=[1, 2])
  with pytest.raises(ValueError):
    ExactCounts(3, counts=[1, -2, 3])
  with pytest.raises(ValueError):
    ExactCounts(3, counts=[1, 2.5, 3])
  with pytest.raises(TypeError, match="StringLookup"):
    ExactCounts(3).update(tf.constant(["a"]))


def test_numpy_integer_num_items():
  """Sizes computed with numpy (e.g. ``counts.shape[0]``, ``np.int64(n)``) are accepted."""
  counts = np.array([3, 1, 0, 4], np.int64)
  est = ExactCounts(np.int64(counts.shape[0]), counts=counts)
  assert est.num_items == 4 and type(est.num_items) is int
  np.testing.assert_allclose(
    np.exp(est.log_q(tf.constant([0, 3])).numpy()), [3 / 8, 4 / 8], rtol=1e-6
  )
  for bad in (4.0, "4", 0):
    with pytest.raises(ValueError, match="num_items"):
      ExactCounts(bad)
