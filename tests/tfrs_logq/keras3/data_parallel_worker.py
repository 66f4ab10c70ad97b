"""Cross-replica in-batch negatives under keras.distribution.DataParallel on JAX, 2 CPU devices.

    XLA_FLAGS=--xla_force_host_platform_device_count=2 KERAS_BACKEND=jax \
        python data_parallel_worker.py OUT.npz

Trains the same two-tower (in-batch + uniform negatives, expected_count log Q, CountMinSketch
updated in the step, corrected loss) with model.fit once on one device and once data-parallel
over two, and records losses, weights and estimator state (and the same with a cross-batch
memory of the global batch as the negatives: its slots too); also the layout of an in-batch pool
built from a batch sharded over the two devices. test_data_parallel.py compares them.
"""

import sys

import jax
import keras
import numpy as np
from keras import ops

from tfrs_logq.keras3 import frequency, losses, negatives


class TwoTower(keras.Model):
  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.users = keras.layers.Embedding(
      16, 4, embeddings_initializer=keras.initializers.RandomNormal(seed=1)
    )
    self.items = keras.layers.Embedding(
      20, 4, embeddings_initializer=keras.initializers.RandomNormal(seed=2)
    )
    self.estimator = frequency.CountMinSketch(width=64, depth=2, conservative=True)
    self.mixed = negatives.MixedNegatives(3, id_range=(0, 20), convention="expected_count", seed=5)

  def call(self, inputs):
    return self.users(inputs["user"]), self.items(inputs["item"])

  def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
    query, positive = y_pred
    self.estimator.update(x["item"])
    negs = self.mixed(
      x["item"], positive, candidate_embedder=self.items, log_q_unigram=self.estimator.log_q
    )
    scored = negatives.score_negatives(query, x["item"], positive, negs, temperature=0.5)
    return ops.mean(
      losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected").loss
    )


class MemoryTwoTower(TwoTower):
  """The two-tower against a cross-batch memory (ids mode, M = 3 pushes of the global batch of
  16, expected_count log Q from the step's estimator): score, loss, then push."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.memory = negatives.CrossBatchNegatives(
      self.estimator, 3, 16, convention="expected_count", seed=7, name="memory"
    )

  def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
    query, positive = y_pred
    self.estimator.update(x["item"])
    scored = self.memory.score(
      query, x["item"], positive, temperature=0.5, item_table=self.items.embeddings
    )
    loss = losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected").loss
    self.memory.update(x["item"], positive)
    return ops.mean(loss)


def train(distribution, model_class=TwoTower):
  keras.distribution.set_distribution(distribution)
  rng = np.random.default_rng(0)
  x = {
    "user": rng.integers(0, 16, 64).astype("int32"),
    "item": rng.integers(0, 20, 64).astype("int32"),
  }
  model = model_class(name="two_tower")
  model.compile(optimizer=keras.optimizers.SGD(0.5))
  hist = model.fit(x, epochs=2, batch_size=16, verbose=0, shuffle=False)
  out = {
    "loss": np.array(hist.history["loss"]),
    "users": np.asarray(model.users.embeddings.value),
    "items": np.asarray(model.items.embeddings.value),
    "table": np.asarray(model.estimator.table.value),
    "total": np.asarray(model.estimator.total.value),
    "sharding_devices": np.array(len(model.items.embeddings.value.sharding.device_set)),
  }
  if model_class is MemoryTwoTower:
    memory = model.memory
    for name in ("ids", "filled", "push_draws", "push_distinct", "push_kept", "num_pushed"):
      out[f"memory_{name}"] = np.asarray(getattr(memory, name).value)
    out["memory_replicated"] = np.array(memory.ids.value.sharding.is_fully_replicated)
  keras.distribution.set_distribution(None)
  return out


def pool_layout(distribution):
  """An in-batch pool built inside jit from ids / embeddings sharded over the devices."""
  keras.distribution.set_distribution(distribution)
  mesh = distribution.device_mesh.backend_mesh
  batch = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("batch"))
  ids = jax.device_put(np.array([3, 5, 3, 7, 1, 5, 9, 2], np.int32), batch)
  emb = jax.device_put(np.arange(32, dtype=np.float32).reshape(8, 4), batch)
  log_q = jax.device_put(np.full(8, -2.0, np.float32), batch)

  @jax.jit
  def build(ids, emb, log_q):
    negs = negatives.in_batch_negatives(ids, emb, log_q, convention="expected_count")
    return negs.ids, negs.embeddings, negs.valid, negs.log_q

  outs = build(ids, emb, log_q)
  keras.distribution.set_distribution(None)
  return {
    "input_sharded": np.array(not ids.sharding.is_fully_replicated),
    "pool_replicated": np.array([o.sharding.is_fully_replicated for o in outs]),
    "pool_ids": np.asarray(outs[0]),
    "pool_valid": np.asarray(outs[2]),
    "pool_log_q": np.asarray(outs[3]),
  }


def main():
  devices = keras.distribution.list_devices()
  out = {"num_devices": np.array(len(devices))}
  for name, dist in (
    ("single", None),
    ("parallel", keras.distribution.DataParallel(devices=devices)),
  ):
    for key, value in train(dist).items():
      out[f"{name}/{key}"] = value
    for key, value in train(dist, MemoryTwoTower).items():
      out[f"memory_{name}/{key}"] = value
  for key, value in pool_layout(keras.distribution.DataParallel(devices=devices)).items():
    out[f"layout/{key}"] = value
  np.savez(sys.argv[1], **out)


if __name__ == "__main__":
  main()
