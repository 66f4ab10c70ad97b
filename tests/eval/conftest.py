"""Fixtures for the eval tests: a tiny training export in the format train/__main__.py writes."""

import json

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

NUM_ITEMS = 300
DIM = 8
MAX_LEN = 6


class _QueryEncoder(tf.Module):
  """q_u = tanh(W · mean of the non-padding history embeddings): a stand-in query tower."""

  def __init__(self, seed, num_items=NUM_ITEMS):
    super().__init__()
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(num_items + 1, DIM)).astype(np.float32)
    table[0] = 0.0
    self.table = tf.Variable(table)
    self.w = tf.Variable(rng.normal(size=(DIM, DIM)).astype(np.float32))

  @tf.function(input_signature=[tf.TensorSpec([None, MAX_LEN], tf.int64, name="history")])
  def serve(self, history):
    mask = tf.cast(history > 0, tf.float32)[:, :, None]
    pooled = tf.reduce_sum(tf.gather(self.table, history) * mask, 1) / tf.maximum(
      tf.reduce_sum(mask, 1), 1.0
    )
    return {"embedding": tf.tanh(tf.matmul(pooled, self.w)) * 3.0}


class _ItemTower(tf.Module):
  def __init__(self, items):
    super().__init__()
    self.items = tf.Variable(items)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="item_ids")])
  def serve(self, item_ids):
    return {"embedding": tf.gather(self.items, item_ids)}


def make_export(path, seed=0, write_npy=True, num_items=NUM_ITEMS):
  """Writes query_encoder/, item_embeddings/, item_embeddings.npy, export_meta.json."""
  rng = np.random.default_rng(seed + 1)
  items = rng.normal(size=(num_items + 1, DIM)).astype(np.float32)
  items[0] = 0.0
  qe = _QueryEncoder(seed, num_items)
  tf.saved_model.save(qe, str(path / "query_encoder"), signatures={"serving_default": qe.serve})
  it = _ItemTower(items)
  tf.saved_model.save(it, str(path / "item_embeddings"), signatures={"serving_default": it.serve})
  if write_npy:
    np.save(path / "item_embeddings.npy", items)
  (path / "export_meta.json").write_text(
    json.dumps({"num_items": num_items, "max_len": MAX_LEN, "model": "test", "dataset": "test"})
  )
  return qe, items


def make_eval_npz(path, num_queries=120, seed=0):
  """Histories of 1..15 items (longer than MAX_LEN: filtering uses all), targets, counts."""
  rng = np.random.default_rng(seed + 2)
  width = 15
  inputs = np.zeros((num_queries, width), np.int64)
  pop = 1.0 / np.arange(1, NUM_ITEMS + 1)
  pop /= pop.sum()
  for q in range(num_queries):
    n = rng.integers(1, width + 1)
    inputs[q, width - n :] = rng.choice(NUM_ITEMS, size=n, p=pop) + 1
  targets = rng.choice(NUM_ITEMS, size=num_queries, p=pop) + 1
  targets[::7] = inputs[::7, -1]  # some targets also occur in the history
  counts = np.concatenate([[0], rng.multinomial(5000, pop)])
  np.savez(path, inputs=inputs, targets=targets, item_counts=counts)
  return inputs, targets, counts


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory):
  path = tmp_path_factory.mktemp("export")
  qe, items = make_export(path)
  return path, qe, items


@pytest.fixture(scope="session")
def tiny_eval_npz(tmp_path_factory):
  path = tmp_path_factory.mktemp("evalset") / "eval.npz"
  inputs, targets, counts = make_eval_npz(path)
  return path, inputs, targets, counts


@pytest.fixture(scope="session")
def export_factory():
  """make_export(path, seed=0, write_npy=True, num_items=300) -> (query encoder, items)."""
  return make_export
