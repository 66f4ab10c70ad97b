"""tfrs_logq/core/cross_batch.py: the memory's FIFO slots and newest-first read order, log Q under
expected_count against 1 - prod_m (1 - rho_m) (and the closed form 1 - (1 - q)^{sum B_m} without
a subsample), empty pushes, q near 1, the rebase of a joined block's log Q, the argument checks.

Oracles in float64 numpy loops, from the module docstring; the formulas run on `tf_ops()`."""

import math
import re

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

from tfrs_logq.core import cross_batch
from tfrs_logq.core.ops import tf_ops

OPS = tf_ops()


def np_expected_count_log_q(q, draws, distinct, kept, memory_distinct):
  """log(1 - prod_m (1 - rho_m)) - log max(U_M, 1), rho_m = (1 - (1 - q)^B_m) n_m / U_m."""
  out = []
  for qd in q:
    not_in = 1.0
    for b, u, n in zip(draws, distinct, kept):
      if b == 0 or n == 0:
        continue
      rho = (1.0 - (1.0 - qd) ** b) * n / max(u, 1.0)
      not_in *= 1.0 - rho
    out.append(math.log(1.0 - not_in) - math.log(max(memory_distinct, 1.0)))
  return np.array(out)


def _memory_log_q(q, draws, distinct, kept, memory_distinct, convention="expected_count"):
  f = lambda x: tf.constant(np.asarray(x, np.float32))
  return cross_batch.memory_log_q(
    OPS,
    f(np.log(q)),
    convention,
    f(draws),
    f(distinct),
    f(kept),
    tf.constant(float(memory_distinct)),
  ).numpy()


@pytest.mark.parametrize("num_pushed", [0, 1, 2, 3, 4, 7])
def test_write_slots_and_newest_first_order_follow_the_fifo(num_pushed):
  m, s = 3, 2
  write = cross_batch.write_slots(OPS, tf.constant(num_pushed, tf.int64), m, s).numpy()
  block = num_pushed % m
  np.testing.assert_array_equal(write, [block * s, block * s + 1])
  order = cross_batch.newest_first_slots(OPS, tf.constant(num_pushed, tf.int64), m, s).numpy()
  # Block of push t - 1, then t - 2, ... (mod M), each block's slots in order.
  want = [((num_pushed - 1 - j) % m) * s + i for j in range(m) for i in range(s)]
  np.testing.assert_array_equal(order, want)
  assert sorted(order.tolist()) == list(range(m * s))


def test_unigram_is_log_q_uni_unchanged():
  q = np.array([0.1, 0.02])
  out = _memory_log_q(q, [4, 4], [3, 2], [3, 2], 4, convention="unigram")
  np.testing.assert_allclose(out, np.log(q), rtol=1e-6)
  np.testing.assert_allclose(
    cross_batch.memory_log_q(OPS, tf.constant(np.log(q), tf.float32), "mixture").numpy(),
    np.log(q),
    rtol=1e-6,
  )


def test_expected_count_matches_the_product_over_pushes_with_a_subsample():
  q = np.array([0.3, 0.05, 1e-3, 1e-7])
  draws, distinct, kept = [8, 6, 8, 0], [5, 4, 7, 0], [3, 3, 3, 0]
  want = np_expected_count_log_q(q, draws, distinct, kept, 7)
  np.testing.assert_allclose(_memory_log_q(q, draws, distinct, kept, 7), want, rtol=2e-5)


def test_expected_count_without_subsample_is_the_inclusion_of_all_draws():
  q = np.array([0.4, 0.01, 2e-4])
  draws, distinct = [8, 5, 7], [6, 5, 3]
  memory_distinct = 9
  closed = np.log(1.0 - (1.0 - q) ** sum(draws)) - np.log(memory_distinct)
  out = _memory_log_q(q, draws, distinct, distinct, memory_distinct)
  np.testing.assert_allclose(out, closed, rtol=2e-5)
  np.testing.assert_allclose(
    out, np_expected_count_log_q(q, draws, distinct, distinct, memory_distinct), rtol=2e-5
  )


def test_empty_pushes_hold_nothing():
  q = np.array([0.2, 0.01])
  # Empty pushes (B_m = 0, e.g. warm-up, or all rows padding) do not change the value.
  with_empty = _memory_log_q(q, [6, 0, 0], [4, 0, 0], [4, 0, 0], 4)
  alone = _memory_log_q(q, [6], [4], [4], 4)
  np.testing.assert_allclose(with_empty, alone, rtol=1e-6)
  # All pushes empty: log rho = -inf for each push, and the memory holds nothing (-inf, no NaN).
  rho = cross_batch.log_push_inclusion(
    OPS, tf.constant(np.log(q), tf.float32), tf.zeros([2]), tf.zeros([2]), tf.zeros([2])
  ).numpy()
  assert rho.shape == (2, 2) and np.all(rho == -np.inf)
  out = _memory_log_q(q, [0, 0], [0, 0], [0, 0], 0)
  assert np.all(out == -np.inf)


@pytest.mark.parametrize("q", [1.0, 1.0 - 1e-7, 0.999, 0.9])
def test_q_near_one_is_finite_and_at_most_zero(q):
  qs = np.array([q])
  for kept in ([5, 5], [2, 3]):
    out = _memory_log_q(qs, [5, 5], [5, 5], kept, 1)
    assert np.all(np.isfinite(out)) and np.all(out <= 1e-6), out
    want = np_expected_count_log_q(qs, [5, 5], [5, 5], kept, 1)
    np.testing.assert_allclose(out, want, atol=1e-5)


def test_tiny_q_keeps_relative_accuracy():
  q = np.array([1e-9, 1e-12, 1e-20])
  out = _memory_log_q(q, [100, 50], [80, 50], [80, 50], 130)
  want = np.log(150 * q) - np.log(130)  # pi ~ (sum B) q for tiny q
  np.testing.assert_allclose(out, want, rtol=1e-5)


def test_expected_count_needs_the_push_stats():
  with pytest.raises(ValueError, match="expected_count"):
    cross_batch.memory_log_q(OPS, tf.zeros([2]), "expected_count")


def test_rebased_block_log_q_gives_the_block_its_own_q_prime_after_the_loss_step():
  a = 3
  lq_block = np.log(np.array([0.2, 0.05, 0.01, 0.3]))  # [N]
  pos_block = np.log(np.array([0.1, 0.5, 0.999]))  # this block's Q_s(p)
  pos_first = np.log(np.array([0.02, 0.3, 0.6]))  # the first block's Q_1(p), the loss's
  out = cross_batch.rebased_block_log_q(
    OPS,
    tf.constant(lq_block, tf.float32),
    tf.constant(pos_block, tf.float32),
    tf.constant(pos_first, tf.float32),
  ).numpy()
  assert out.shape == (a, len(lq_block))
  for r in range(a):
    after_loss = out[r] - math.log(1.0 - math.exp(pos_first[r]))  # the loss's Q' step
    own = lq_block - math.log(1.0 - math.exp(pos_block[r]))
    np.testing.assert_allclose(after_loss, own, rtol=1e-5)
  # Per-row [A, N] log Q (e.g. MIDX) works the same.
  per_row = np.tile(lq_block, (a, 1)) - 0.1 * np.arange(a)[:, None]
  out2 = cross_batch.rebased_block_log_q(
    OPS,
    tf.constant(per_row, tf.float32),
    tf.constant(pos_block, tf.float32),
    tf.constant(pos_first, tf.float32),
  ).numpy()
  np.testing.assert_allclose(out2, out - 0.1 * np.arange(a)[:, None], rtol=1e-5)


@pytest.mark.parametrize(
  "args, message",
  [
    ((0, 4), "num_batches must be a positive int"),
    ((2, 0), "batch_size must be a positive int"),
    ((2.0, 4), "num_batches must be a positive int"),
    ((True, 4), "num_batches must be a positive int"),
    ((2, 4, 0), "slots_per_batch must be a positive int"),
    ((2, 4, 5), "slots_per_batch (5) must be at most batch_size (4)"),
    ((2, 4, None, "vectors"), "mode must be one of"),
    ((2, 4, None, "ids", "popularity"), "convention must be one of"),
  ],
)
def test_check_memory_rejects_bad_arguments(args, message):
  with pytest.raises(ValueError, match=__import__("re").escape(message)):
    cross_batch.check_memory(*args)


def test_check_memory_defaults_slots_to_the_batch():
  assert cross_batch.check_memory(3, 8) == (3, 8, 8)
  assert cross_batch.check_memory(np.int64(3), 8, 5, "embeddings", "expected_count") == (3, 8, 5)


class _Estimator:
  def log_q(self, ids):
    return ids


@pytest.mark.parametrize(
  "args, error, message",
  [
    (("ids", None, object(), None, None), TypeError, "must have a log_q(ids) method"),
    (("embeddings", None, _Estimator(), None, None), ValueError, "needs embedding_dim"),
    (("ids", 0, _Estimator(), None, None), ValueError, "embedding_dim must be a positive int"),
    (("ids", None, _Estimator(), 3, None), TypeError, "candidate_embedder must be callable"),
    (("ids", None, _Estimator(), None, 1.5), ValueError, "seed must be an int or None"),
    (("ids", None, _Estimator(), None, True), ValueError, "seed must be an int or None"),
  ],
)
def test_check_memory_inputs_rejects_bad_arguments(args, error, message):
  with pytest.raises(error, match=re.escape(message)):
    cross_batch.check_memory_inputs(*args)


def test_check_memory_inputs_returns_the_dimension_and_seed():
  assert cross_batch.check_memory_inputs("ids", None, _Estimator(), None, None) == (None, None)
  assert cross_batch.check_memory_inputs(
    "embeddings", np.int64(8), _Estimator(), len, np.int32(3)
  ) == (8, 3)
