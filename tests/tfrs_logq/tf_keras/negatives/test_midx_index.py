"""The inverted multi-index (midx_index.build_index) against its definition, in numpy."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras.negatives import midx_index

import numpy as np
import pytest
import tensorflow as tf


@pytest.mark.parametrize("quantizer", ["pq", "rq"])
def test_index_matches_its_definition(quantizer):
  rng = np.random.default_rng(3)
  emb = rng.normal(size=(200, 6)).astype(np.float32)
  k = 4
  index = midx_index.build_index(
    tf.constant(emb),
    k,
    quantizer,
    tf.constant([5, 0], tf.int64),
    num_iterations=5,
    max_points=None,
    chunk_size=64,
  )
  c1, c2 = index.codebook_1.numpy(), index.codebook_2.numpy()
  codes = index.item_codes.numpy()
  d1, d2 = midx_index.split_dims(quantizer, 6)
  assert c1.shape == (k, d1) and c2.shape == (k, d2)
  # k_l(i) = nearest codeword of the sub-vector (pq) or of q_i, then of the residual (rq).
  x1 = emb[:, :3] if quantizer == "pq" else emb
  k1 = np.argmin(((x1[:, None, :] - c1[None]) ** 2).sum(-1), axis=1)
  x2 = emb[:, 3:] if quantizer == "pq" else emb - c1[k1]
  k2 = np.argmin(((x2[:, None, :] - c2[None]) ** 2).sum(-1), axis=1)
  np.testing.assert_array_equal(codes[:, 0], k1)
  np.testing.assert_array_equal(codes[:, 1], k2)
  # Cells: counts, exclusive-cumsum offsets, and every item exactly once, stored by cell.
  cell = k1 * k + k2
  counts = np.bincount(cell, minlength=k * k)
  np.testing.assert_array_equal(index.cell_counts.numpy(), counts)
  np.testing.assert_array_equal(
    index.cell_offsets.numpy(), np.concatenate([[0], np.cumsum(counts)[:-1]])
  )
  order = index.sorted_items.numpy()
  np.testing.assert_array_equal(np.sort(order), np.arange(200))
  for c in range(k * k):
    start = index.cell_offsets.numpy()[c]
    members = order[start : start + counts[c]]
    np.testing.assert_array_equal(members, np.flatnonzero(cell == c))  # stable: ascending rows


def test_split_and_check_int():
  assert midx_index.split_dims("pq", 7) == (3, 4)
  assert midx_index.split_dims("rq", 7) == (7, 7)
  z = tf.reshape(tf.range(14.0), [2, 7])
  a, b = midx_index.split_query("pq", z, 7)
  assert a.shape == [2, 3] and b.shape == [2, 4]
  assert midx_index.check_int(np.int64(3), "n", 1) == 3
  for bad in (0, 2.0, True, "3"):
    with pytest.raises(ValueError, match="n must be an int >= 1"):
      midx_index.check_int(bad, "n", 1)
