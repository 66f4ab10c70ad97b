"""Partitioned tables (tf.distribute ShardedVariable, as ParameterServerStrategy's
variable_partitioner makes them): `tfrs_logq.tf_keras.sharded.gather_rows` is table[indices] for any
index shape (TF 2.20's tf.gather on a ShardedVariable rejects 2-D indices and returns the rows of
1-D indices grouped by shard), and every estimator whose state is partitioned updates and reads
exactly as with whole variables; per-query scoring reads a partitioned item table row by row."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import frequency, sharded
from tfrs_logq.tf_keras.negatives import scoring

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.distribute import sharded_variable


def _split_div(value, num_shards):
  """Row blocks of TensorFlow's "div" partitioning (the first blocks one row larger)."""
  n = value.shape[0]
  sizes = [n // num_shards + (1 if i < n % num_shards else 0) for i in range(num_shards)]
  return np.split(value, np.cumsum(sizes)[:-1])


def _sharded(value, num_shards=2):
  return sharded_variable.ShardedVariable(
    [tf.Variable(part) for part in _split_div(np.asarray(value), num_shards)]
  )


def _sharding_creator(num_shards):
  """Variable creator: variables of >= 4 rows become ShardedVariables (as a partitioner would)."""

  def creator(next_creator, **kwargs):
    init = kwargs["initial_value"]
    init = tf.convert_to_tensor(init() if callable(init) else init)
    if init.shape.rank == 0 or init.shape[0] < 4:
      return next_creator(**kwargs)
    name = kwargs.get("name") or "v"
    parts = [
      next_creator(**dict(kwargs, initial_value=part, shape=None, name=f"{name}/part_{i}"))
      for i, part in enumerate(_split_div(init.numpy(), num_shards))
    ]
    return sharded_variable.ShardedVariable(parts, name=name)

  return creator


@pytest.mark.parametrize("shape", [(8,), (3, 5), (2, 3, 4)])
def test_gather_rows_is_table_at_indices_for_any_index_shape(shape):
  table = np.arange(11 * 3, dtype=np.float32).reshape(11, 3)
  rng = np.random.default_rng(1)
  idx = rng.integers(0, 11, size=shape)
  idx.flat[:3] = [9, 1, 10]  # rows of both shards, out of shard order
  want = table[idx]
  var = _sharded(table, 3)
  assert sharded.is_sharded(var) and not sharded.is_sharded(tf.Variable(table))
  np.testing.assert_array_equal(sharded.gather_rows(var, tf.constant(idx)).numpy(), want)
  graph = tf.function(sharded.gather_rows)(var, tf.constant(idx, tf.int64))
  np.testing.assert_array_equal(graph.numpy(), want)
  np.testing.assert_array_equal(sharded.gather_rows(tf.constant(table), idx).numpy(), want)


@pytest.mark.parametrize(
  "make",
  [
    lambda: frequency.HashArrayEstimator(num_buckets=64, num_items=100),
    lambda: frequency.CountMinSketch(width=50, depth=3, num_items=100),
    lambda: frequency.CountMinSketch(
      width=50, depth=3, conservative=True, half_life=5.0, num_items=100
    ),
    lambda: frequency.ExactCounts(100),
  ],
  ids=["hash_array", "count_min", "count_min_conservative_decay", "exact"],
)
def test_estimator_with_partitioned_state_equals_whole_state(make):
  whole = make()
  with tf.variable_creator_scope(_sharding_creator(2)):
    parted = make()
  assert sum(sharded.is_sharded(v) for v in vars(parted).values()) >= 1
  update = tf.function(parted.update)
  rng = np.random.default_rng(0)
  for _ in range(5):
    ids = tf.constant(rng.integers(0, 100, size=(3, 4)), tf.int64)
    whole.update(ids)
    update(ids)
  q = tf.constant(rng.integers(0, 100, size=(7, 5)), tf.int64)
  np.testing.assert_array_equal(parted.log_q(q).numpy(), whole.log_q(q).numpy())
  np.testing.assert_array_equal(
    parted.log_q_prime(q, q[:, :1]).numpy(), whole.log_q_prime(q, q[:, :1]).numpy()
  )


def test_per_query_scores_from_a_partitioned_item_table():
  rng = np.random.default_rng(2)
  table = rng.normal(size=(30, 4)).astype(np.float32)
  query = rng.normal(size=(5, 4)).astype(np.float32)
  ids = rng.integers(0, 30, size=(5, 2))
  want = np.einsum("ad,akd->ak", query, table[ids])
  got = scoring.per_query_scores(query, ids, item_table=_sharded(table, 2))  # gather path
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)
  emb = scoring.embed_ids(ids, item_table=lambda: _sharded(table, 2))
  np.testing.assert_array_equal(emb.numpy(), table[ids])


def test_read_markers_read_one_element_of_each_variable_after_its_writes():
  """read_markers: a one-element read per variable (per shard of a ShardedVariable; the scalar
  itself), ordered after the writes before it in a tf.function."""
  table = _sharded(np.zeros([7, 3], np.float32), num_shards=2)
  scalar = tf.Variable(0.0)
  vector = tf.Variable(np.zeros(5, np.float32))

  @tf.function
  def write_then_mark():
    table.scatter_update(tf.IndexedSlices(tf.ones([2, 3]), tf.constant([0, 4])))
    scalar.assign(2.0)
    vector.assign(tf.fill([5], 3.0))
    return sharded.read_markers([table, scalar, vector])

  markers = [m.numpy() for m in write_then_mark()]
  assert [m.shape for m in markers] == [(1, 3), (1, 3), (), (1,)]
  # Row 0 of each shard (global rows 0 and 4), written just before: the reads saw the writes.
  np.testing.assert_array_equal(np.concatenate(markers[:2]), np.ones([2, 3]))
  assert markers[2] == 2.0 and markers[3][0] == 3.0
