"""Static-shape estimator updates (XLA / TPU): ``update(ids, valid)`` counts exactly the valid ids
(state equal to ``update(ids[valid])``), the XLA-compiled update (sort-based grouping, no
`tf.unique`) equals the eager one, a batch without a valid id is a no-op, and under
MirroredStrategy the masked update of the replicas' shares equals one device's."""

import re

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras.frequency import CountMinSketch, ExactCounts, HashArrayEstimator

import numpy as np
import pytest
import tensorflow as tf

FACTORIES = {
  "exact": lambda: ExactCounts(40),
  "hash": lambda: HashArrayEstimator(num_buckets=8, num_hashes=2, alpha=0.2),
  "hash_no_warmup": lambda: HashArrayEstimator(
    num_buckets=8, num_hashes=3, alpha=0.3, warmup=False, pending_gap=False, seed=4
  ),
  "cms": lambda: CountMinSketch(width=7, depth=3, half_life=3.0),
  "cms_conservative": lambda: CountMinSketch(width=7, depth=3, conservative=True, half_life=4.0),
}


def _stream(steps=6, size=24, seed=0):
  """Zipf-like ids (many collisions in the small tables) and ~70 % valid masks."""
  rng = np.random.default_rng(seed)
  p = np.arange(1, 41) ** -1.2
  return [
    (rng.choice(40, size=size, p=p / p.sum()).astype(np.int64), rng.random(size) < 0.7)
    for _ in range(steps)
  ]


def _state(est):
  return [v.numpy() for v in est.weights]


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_masked_and_compiled_updates_equal_the_update_of_the_valid_ids(kind):
  dynamic, masked, compiled = FACTORIES[kind](), FACTORIES[kind](), FACTORIES[kind]()
  update = tf.function(lambda ids, valid: compiled.update(ids, valid=valid), jit_compile=True)
  for ids, valid in _stream():
    dynamic.update(tf.constant(ids[valid]))  # tf.unique grouping
    masked.update(tf.constant(ids), valid=tf.constant(valid))  # sort grouping, eager
    update(tf.constant(ids), tf.constant(valid))  # sort grouping, XLA
  for d, m, c in zip(_state(dynamic), _state(masked), _state(compiled)):
    np.testing.assert_array_equal(m, d)
    np.testing.assert_allclose(c, d, rtol=1e-6)
  assert any(np.any(x != 0) for x in _state(dynamic))


@pytest.mark.parametrize("kind", ["hash", "cms_conservative"])
def test_compiled_update_without_mask_equals_eager(kind):
  eager, compiled = FACTORIES[kind](), FACTORIES[kind]()
  update = tf.function(compiled.update, jit_compile=True)
  for ids, _ in _stream(seed=1):
    eager.update(tf.constant(ids))
    update(tf.constant(ids))
  for e, c in zip(_state(eager), _state(compiled)):
    np.testing.assert_allclose(c, e, rtol=1e-6)
  graph = update.get_concrete_function(tf.constant(ids)).graph.as_graph_def()
  ops = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
  assert not {o for o in ops if re.match(r"Unique|Where$", o)}


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_batch_without_valid_id_is_a_no_op(kind):
  est = FACTORIES[kind]()
  ids, valid = _stream(1)[0]
  est.update(tf.constant(ids), valid=tf.constant(valid))
  before = _state(est)
  est.update(tf.constant(ids), valid=tf.zeros(len(ids), tf.bool))
  for a, b in zip(before, _state(est)):
    np.testing.assert_array_equal(a, b)


def test_bad_mask_raises():
  est = ExactCounts(40)
  with pytest.raises(TypeError, match="bool"):
    est.update(tf.constant([1, 2]), valid=tf.constant([1, 0]))
  with pytest.raises(ValueError, match="valid"):
    est.update(tf.constant([1, 2]), valid=tf.constant([True, False, True]))


@pytest.mark.parametrize("kind", ["exact", "cms_conservative"])
def test_masked_update_under_mirrored_strategy_equals_single_device(kind, mirrored_strategy):
  strategy = mirrored_strategy
  with strategy.scope():
    dist = FACTORIES[kind]()
  single = FACTORIES[kind]()

  @tf.function
  def step(ids, valid):
    strategy.run(lambda i, v: dist.update(i, valid=v), args=(ids, valid))

  for ids, valid in _stream(4, size=20, seed=2):
    parts = lambda x: strategy.experimental_distribute_values_from_function(
      lambda ctx: tf.constant(
        x[10 * ctx.replica_id_in_sync_group : 10 * ctx.replica_id_in_sync_group + 10]
      )
    )
    step(parts(ids), parts(valid))
    single.update(tf.constant(ids[valid]))
  for dv, sv in zip(dist.weights, single.weights):
    for copy in strategy.experimental_local_results(dv):
      np.testing.assert_array_equal(copy.numpy(), sv.numpy())
