"""train/objective.py: per-query negative scoring (both exact paths) against numpy."""

import numpy as np
import pytest

import tfrs_logq  # noqa: F401
import tensorflow as tf

from train import objective


@pytest.mark.parametrize("vocab", [20, 5000])   # full-table scoring vs [A, k, d] gather
@pytest.mark.parametrize("jit", [False, True])
def test_per_query_scores_values_and_gradients(vocab, jit):
  rng = np.random.default_rng(vocab)
  a, k, d = 7, 6, 8
  q = tf.Variable(rng.normal(size=(a, d)).astype(np.float32))
  table = tf.Variable(rng.normal(size=(vocab, d)).astype(np.float32))
  ids = rng.integers(0, vocab, size=(a, k))
  ids[0, :3] = ids[0, 3]                       # repeated ids: gradients must add up
  up = rng.normal(size=(a, k)).astype(np.float32)
  fn = objective._per_query_scores_xla if jit else objective.per_query_scores
  with tf.GradientTape() as tape:
    s = fn(q, table, tf.constant(ids, tf.int64))
    loss = tf.reduce_sum(s * up)
  g_q, g_t = tape.gradient(loss, [q, table])
  qn, tn = q.numpy(), table.numpy()
  expected = np.einsum("ad,akd->ak", qn, tn[ids])
  np.testing.assert_allclose(s.numpy(), expected, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(g_q.numpy(), np.einsum("ak,akd->ad", up, tn[ids]), atol=1e-4)
  exp_t = np.zeros_like(tn)
  np.add.at(exp_t, ids.reshape(-1), (up[..., None] * qn[:, None, :]).reshape(-1, d))
  np.testing.assert_allclose(tf.convert_to_tensor(g_t).numpy(), exp_t, atol=1e-4)
