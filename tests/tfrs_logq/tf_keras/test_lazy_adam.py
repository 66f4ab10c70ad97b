"""tfrs_logq.LazyAdam against a numpy oracle written from its docstring: only the rows named by
a sparse gradient move, with per-row bias correction; dense gradients get tf-keras's Adam."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras.lazy_adam import LazyAdam

import numpy as np
import pytest
import tensorflow as tf

B1, B2, EPS, LR = 0.9, 0.999, 1e-7, 0.01


def _oracle(table, steps, adaptive=False):
  """steps: list of (indices, values). Per row r named: k_r += 1, moments, then
  theta_r -= lr sqrt(1 - b2^k) / (1 - b1^k) m / (sqrt(v) + eps_hat)."""
  theta = table.astype(np.float64).copy()
  m = np.zeros_like(theta)
  v = np.zeros_like(theta)
  k = np.zeros(theta.shape[0])
  for indices, values in steps:
    grad = {}
    for i, g in zip(indices, values):
      grad[int(i)] = grad.get(int(i), 0.0) + g.astype(np.float64)
    for r, g in grad.items():
      k[r] += 1
      m[r] = B1 * m[r] + (1 - B1) * g
      v[r] = B2 * v[r] + (1 - B2) * g * g
      c2 = np.sqrt(1 - B2 ** k[r])
      eps = EPS * c2 if adaptive else EPS
      theta[r] -= LR * c2 / (1 - B1 ** k[r]) * m[r] / (np.sqrt(v[r]) + eps)
  return theta, m, v, k


def _steps(rng, rows=9, d=3, n=6, count=7):
  out = []
  for _ in range(count):
    idx = rng.integers(0, rows - 2, size=n)  # the last two rows are never named
    idx[1] = idx[0]  # a duplicate index: its rows are summed
    out.append((idx, rng.normal(size=(n, d)).astype(np.float32)))
  return out


@pytest.mark.parametrize("adaptive", [False, True])
def test_sparse_updates_match_the_oracle(adaptive):
  rng = np.random.default_rng(0)
  table = rng.normal(size=(9, 3)).astype(np.float32)
  steps = _steps(rng)
  var = tf.Variable(table)
  opt = LazyAdam(LR, adaptive_epsilon=adaptive)
  for idx, values in steps:
    opt.apply_gradients([(tf.IndexedSlices(tf.constant(values), tf.constant(idx), [9, 3]), var)])
  theta, m, v, k = _oracle(table, steps, adaptive)
  np.testing.assert_allclose(var.numpy(), theta, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(opt._momentums[0].numpy(), m, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(
    opt._velocities[0].numpy(), v, rtol=5e-5, atol=1e-9
  )  # 1 - beta_2 in float32
  np.testing.assert_array_equal(opt._row_counts[0].numpy(), k)
  # Rows never named are untouched: parameters, moments and counters.
  np.testing.assert_array_equal(var.numpy()[-2:], table[-2:])
  assert not opt._momentums[0].numpy()[-2:].any() and not k[-2:].any()


def test_rows_named_every_step_get_dense_adams_update():
  rng = np.random.default_rng(1)
  table = rng.normal(size=(5, 4)).astype(np.float32)
  lazy, dense = tf.Variable(table), tf.Variable(table)
  opt_lazy = LazyAdam(LR)
  opt_dense = tf.keras.optimizers.Adam(LR, jit_compile=False)
  for _ in range(6):
    g = rng.normal(size=(5, 4)).astype(np.float32)
    opt_lazy.apply_gradients([(tf.IndexedSlices(tf.constant(g), tf.range(5), [5, 4]), lazy)])
    opt_dense.apply_gradients([(tf.constant(g), dense)])
  np.testing.assert_allclose(lazy.numpy(), dense.numpy(), rtol=1e-5, atol=1e-6)


def test_dense_gradients_are_adams():
  rng = np.random.default_rng(2)
  w0 = rng.normal(size=(3, 2)).astype(np.float32)
  a, b = tf.Variable(w0), tf.Variable(w0)
  opt_a, opt_b = LazyAdam(LR), tf.keras.optimizers.Adam(LR, jit_compile=False)
  for _ in range(4):
    g = tf.constant(rng.normal(size=(3, 2)).astype(np.float32))
    opt_a.apply_gradients([(g, a)])
    opt_b.apply_gradients([(g, b)])
  np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_embedding_lookup_gradient_is_lazy_and_checkpointed(tmp_path):
  """Through a Keras Embedding layer (the gradient tf produces is an IndexedSlices); the
  per-row counters are saved and restored with the optimizer."""
  layer = tf.keras.layers.Embedding(1000, 4)
  layer.build((None,))
  opt = LazyAdam(LR)
  before = layer.embeddings.numpy().copy()
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(layer(tf.constant([3, 7, 3])) ** 2)
  grads = tape.gradient(loss, layer.trainable_variables)
  assert isinstance(grads[0], tf.IndexedSlices)
  opt.apply_gradients(zip(grads, layer.trainable_variables))
  moved = np.flatnonzero(np.any(layer.embeddings.numpy() != before, axis=1))
  np.testing.assert_array_equal(moved, [3, 7])
  counts = opt._row_counts[0].numpy()
  assert counts[3] == counts[7] == 1 and counts.sum() == 2  # duplicates count once per step
  ckpt = tf.train.Checkpoint(opt=opt, layer=layer)
  path = ckpt.save(str(tmp_path / "ckpt"))
  opt._row_counts[0].assign(tf.zeros_like(opt._row_counts[0]))
  ckpt.restore(path)
  assert opt._row_counts[0].numpy()[3] == 1


def test_mirrored_replicas_match_one_device(mirrored_strategy):
  rng = np.random.default_rng(3)
  table = rng.normal(size=(8, 2)).astype(np.float32)
  idx = np.array([1, 5, 5, 2], np.int64)
  with mirrored_strategy.scope():
    var = tf.Variable(table)
    opt = LazyAdam(LR)
    opt.build([var])

  def step(ids):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(tf.gather(var, ids) ** 2)
    grads = tape.gradient(loss, [var])
    opt.apply_gradients(zip(grads, [var]))

  dist = mirrored_strategy.experimental_distribute_values_from_function(
    lambda ctx: tf.constant(
      idx[2 * ctx.replica_id_in_sync_group : 2 * ctx.replica_id_in_sync_group + 2]
    )
  )
  tf.function(lambda x: mirrored_strategy.run(step, args=(x,)))(dist)
  # The replicas' gradients are summed: the same as one device seeing all four ids.
  grads = [(idx, 2 * table[idx])]
  theta, _, _, _ = _oracle(table, grads)
  np.testing.assert_allclose(var.numpy(), theta, rtol=1e-5, atol=1e-6)


def test_amsgrad_is_refused():
  with pytest.raises(ValueError, match="amsgrad"):
    LazyAdam(amsgrad=True)
