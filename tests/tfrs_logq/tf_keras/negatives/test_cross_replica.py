"""Cross-replica in-batch negatives: MirroredStrategy on 2 logical CPUs == one device on the
global batch (loss and gradients), with dedup over the global batch; the all-reduce all-gather
(what XLA-compiled replica functions use) equals ReplicaContext.all_gather, gradients included."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import losses
from tfrs_logq.tf_keras.negatives import InBatchNegatives, all_gather_rows, score_negatives

import numpy as np
import pytest
import tensorflow as tf

NUM_USERS, NUM_ITEMS, DIM = 6, 9, 4
USERS = np.array([0, 1, 2, 3, 4, 5, 0, 2], np.int64)
# Item 4 is on both replicas (dedup must see the global batch); 7 twice on replica 1.
ITEMS = np.array([4, 1, 7, 2, 4, 7, 7, 8], np.int64)
SPLIT = 5  # replica 0 gets rows [0, 5), replica 1 rows [5, 8): unequal local batches.
GLOBAL_BATCH = len(ITEMS)


class Counts:
  def __init__(self):
    self.table = tf.constant(np.log(np.arange(1, NUM_ITEMS + 1) / 45.0), tf.float32)

  def log_q(self, ids):
    return tf.gather(self.table, ids)


def make_variables():
  rng = np.random.default_rng(0)
  users = tf.Variable(rng.normal(size=(NUM_USERS, DIM)).astype(np.float32), name="users")
  items = tf.Variable(rng.normal(size=(NUM_ITEMS, DIM)).astype(np.float32), name="items")
  return users, items


def loss_and_grads(users, items, user_ids, item_ids, correction):
  sampler = InBatchNegatives(Counts())
  with tf.GradientTape() as tape:
    q = tf.gather(users, user_ids)
    p = tf.gather(items, item_ids)
    negatives = sampler(item_ids, p)
    scored = score_negatives(q, item_ids, p, negatives)
    out = losses.sampled_softmax_loss(**scored.loss_kwargs(), correction=correction)
    loss = tf.reduce_sum(out.loss) / GLOBAL_BATCH
  grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, [users, items])]
  return loss, grads, negatives.ids


@pytest.mark.parametrize("correction", ["corrected", "standard"])
def test_mirrored_equals_single_device_on_global_batch(correction, mirrored_strategy):
  users, items = make_variables()
  ref_loss, ref_grads, ref_ids = loss_and_grads(users, items, USERS, ITEMS, correction)

  strategy = mirrored_strategy
  with strategy.scope():
    d_users, d_items = make_variables()

  def local(ctx):
    lo, hi = (0, SPLIT) if ctx.replica_id_in_sync_group == 0 else (SPLIT, GLOBAL_BATCH)
    return tf.constant(USERS[lo:hi]), tf.constant(ITEMS[lo:hi])

  user_ids = strategy.experimental_distribute_values_from_function(lambda c: local(c)[0])
  item_ids = strategy.experimental_distribute_values_from_function(lambda c: local(c)[1])

  @tf.function
  def step(u, i):
    def replica_fn(u, i):
      loss, grads, ids = loss_and_grads(d_users, d_items, u, i, correction)
      return loss, grads, ids

    loss, grads, ids = strategy.run(replica_fn, args=(u, i))
    total = strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
    grads = [strategy.reduce(tf.distribute.ReduceOp.SUM, g, axis=None) for g in grads]
    return total, grads, strategy.experimental_local_results(ids)

  loss, grads, ids_per_replica = step(user_ids, item_ids)
  for ids in ids_per_replica:  # every replica sees the deduplicated global batch
    np.testing.assert_array_equal(ids.numpy(), ref_ids.numpy())
  np.testing.assert_array_equal(ref_ids.numpy(), [4, 1, 7, 2, 8])
  np.testing.assert_allclose(loss.numpy(), ref_loss.numpy(), rtol=1e-5)
  for g, ref in zip(grads, ref_grads):
    np.testing.assert_allclose(g.numpy(), ref.numpy(), rtol=1e-4, atol=1e-6)
  assert np.abs(ref_grads[1].numpy()).sum() > 0


def test_all_gather_rows_is_identity_without_strategy():
  x = tf.constant([[1.0], [2.0]])
  (y,) = all_gather_rows([x])
  np.testing.assert_array_equal(y.numpy(), x.numpy())
  with pytest.raises(ValueError, match="scalar"):
    all_gather_rows([tf.constant(1.0)])


def test_all_gather_in_cross_replica_context_raises(mirrored_strategy):
  strategy = mirrored_strategy
  with strategy.scope():
    with pytest.raises(RuntimeError, match="strategy.run"):
      all_gather_rows([tf.constant([1])])


def test_all_gather_by_all_reduce_equals_all_gather(mirrored_strategy):
  """Block placement + all-reduce sum == all_gather for floats (inf and NaN kept), int64 ids and
  bools; the float gradient is the summed gradient of the replica's own rows."""
  strategy = mirrored_strategy
  with strategy.scope():
    x = tf.Variable([[1.0, -2.0], [3.0, 4.0]])
  rows = np.array([[[0.5, np.inf], [2.0, -1.0]], [[np.nan, 1.0], [7.0, 8.0]]], np.float32)
  ids = np.array([[5, 2**40], [-3, 0]], np.int64)
  flags = np.array([[True, False], [False, True]])
  weights = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])

  def replica_fn(method):
    r = tf.distribute.get_replica_context().replica_id_in_sync_group
    with tf.GradientTape() as tape:
      local = x * tf.cast(r + 1, tf.float32)
      gathered = all_gather_rows(
        [local, tf.gather(rows, r), tf.gather(ids, r), tf.gather(flags, r)], method=method
      )
      loss = tf.reduce_sum(gathered[0] * weights)
    return gathered + [tape.gradient(loss, x)]

  @tf.function
  def run(method):
    return strategy.run(replica_fn, args=(method,))

  want, got = run("all_gather"), run("all_reduce")
  for w, g in zip(want, got):
    for a, b in zip(strategy.experimental_local_results(w), strategy.experimental_local_results(g)):
      assert a.dtype == b.dtype
      np.testing.assert_array_equal(b.numpy(), a.numpy())
  np.testing.assert_array_equal(
    strategy.experimental_local_results(got[2])[0].numpy(), ids.reshape(-1)
  )
  with pytest.raises(ValueError, match="method"):
    all_gather_rows([tf.constant([1])], method="gather")
