"""models.sasrec_ops: the fast stateless dropout, the query blocks of blocked causal attention
and the bucketed token index of token compaction (the encoder's paths against each other:
tests/models/test_sasrec.py)."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import tensorflow as tf

from models.sasrec_ops import block_bounds, stateless_dropout, token_index


def test_fast_dropout_rate_and_scale():
  x = tf.ones([200, 500])
  y = stateless_dropout(x, 0.5, True, tf.constant([1, 2], tf.int64), 3).numpy()
  kept = y > 0
  assert abs(kept.mean() - 0.5) < 0.01
  np.testing.assert_allclose(y[kept], 2.0)
  y2 = stateless_dropout(x, 0.2, True, tf.constant([1, 2], tf.int64), 3).numpy()
  assert abs((y2 > 0).mean() - (1 - 51 / 256)) < 0.01
  np.testing.assert_allclose(y2[y2 > 0], 256 / 205, rtol=1e-6)
  np.testing.assert_array_equal(stateless_dropout(x, 0.5, False, None, 0).numpy(), 1.0)


def test_block_bounds_cover_the_queries_with_near_equal_blocks():
  assert block_bounds(11, 3) == [(0, 4), (4, 8), (8, 11)]
  assert block_bounds(200, 4) == [(0, 50), (50, 100), (100, 150), (150, 200)]
  assert block_bounds(3, 8) == [(0, 1), (1, 2), (2, 3)]
  assert block_bounds(None, 4) == [(0, None)] == block_bounds(200, 1)


def test_token_index_capacity_buckets():
  """rows: the non-padding flat slots (row-major) then zeros up to C; C = T rounded up to a
  multiple of ceil(B L / 8), >= that, <= B L; slots: the packed row of each slot, C at padding."""
  rng = np.random.default_rng(11)
  capacities = set()
  for t in [0, 1, 5, 6, 7, 13, 18, 19, 25, 30, 31, 37, 42, 43, 47, 48]:
    valid = np.zeros(48, bool)
    valid[rng.choice(48, size=t, replace=False)] = True
    rows, slots, count = (v.numpy() for v in token_index(tf.constant(valid.reshape(4, 12)), 8))
    c = len(rows)
    capacities.add(c)
    assert count == t and c == max(6, -(-t // 6) * 6)  # ceil(48 / 8) = 6
    np.testing.assert_array_equal(rows[:t], np.nonzero(valid)[0])
    np.testing.assert_array_equal(rows[t:], 0)
    expected = np.full(48, c)
    expected[np.nonzero(valid)[0]] = np.arange(t)
    np.testing.assert_array_equal(slots, expected)
  assert capacities == {6, 12, 18, 24, 30, 36, 42, 48}
  rows, slots, count = (v.numpy() for v in token_index(tf.constant(valid.reshape(4, 12))))
  assert len(rows) == count == valid.sum()
