"""The Keras 3 objective's negatives (`train.keras3.objective.RetrievalModel.negatives`) follow
the tf-keras objective's settings (`train.objective.Objective(..., static_shapes=True).sampler`)
for the same RunConfig: on a fixed batch, the same shapes (ids, log Q, valid slots, scores),
the same split k_b / k_u (mixed: k // 2 in-batch + k - k // 2 uniform; in_batch: k_b = k), the
same number of valid in-batch slots n_b = min(U, k_b) (U = distinct non-padding positives, the
k_b subsample), each kept in-batch id a distinct positive of the batch (all of them, in the
tf-keras order, when n_b = U), and log Q of every valid
slot and of every positive equal to the tf-keras sampler's log Q of the same ids under the same
pool (B, U, n_b) and --log_q_convention (unigram, mixture, expected_count). One case is an
ML-1M-sized step (B = 128, L = 200, 256 negatives: [25,600, 128 + 128] negatives, as the
tf-keras binary's static-shape step). The one difference: when k_b >= B L (nothing to drop) the
tf-keras static pool pads the in-batch block to k_b masked slots, the Keras 3 one keeps B L.
The Keras 3 objective scores block by block (`RetrievalModel.score`: no [A, N, d] embeddings);
its scores and masks equal `score_negatives` on the embeddings formed in full.

The Keras 3 side runs in a fresh process (`negatives_worker.py`; KERAS_BACKEND=jax for every
case, tensorflow for the default one); this process builds the tf-keras side.
"""

import json
import os
import pathlib
import subprocess
import sys

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import frequency

import numpy as np
import pytest
import tensorflow as tf
import without_tensorflow

from train import objective as tf_objective
from train.config import RunConfig

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]

SMALL = dict(max_len=10, embedding_dim=8, num_blocks=1, batch_size=6, dropout=0.0, seed=3)
ML1M = dict(max_len=200, embedding_dim=4, num_blocks=1, batch_size=128, dropout=0.0, seed=0)


def _batch(rng, b, l, num_items, min_len):
  """Left-padded windows: inputs [B, L], targets [B, L] = the next items (0 on padding)."""
  inputs = np.zeros((b, l), np.int32)
  targets = np.zeros((b, l), np.int32)
  for r in range(b):
    n = int(rng.integers(min_len, l + 1))
    # a popular head: many repeats, so dedup and the k_b subsample both matter
    seq = np.where(
      rng.random(n + 1) < 0.5, rng.integers(1, 6, n + 1), rng.integers(1, num_items + 1, n + 1)
    )
    inputs[r, l - n :], targets[r, l - n :] = seq[:-1], seq[1:]
  return inputs, targets


def _cases():
  rng = np.random.default_rng(7)
  small_items, ml1m_items = 40, 3416
  small_counts = np.concatenate([[0], rng.integers(0, 30, small_items)]).astype(float)
  small_counts[7] = 0  # never seen: the unigram fallback
  ml1m_counts = np.concatenate([[0], rng.integers(1, 3000, ml1m_items)]).astype(float)
  batches = {}
  batches["small_inputs"], batches["small_targets"] = _batch(rng, 6, 10, small_items, 2)
  batches["ml1m_inputs"], batches["ml1m_targets"] = _batch(rng, 128, 200, ml1m_items, 20)
  small = dict(batch="small", counts=small_counts.tolist())
  cases = {}
  for convention in ("unigram", "mixture", "expected_count"):
    for per in ("sequence", "batch", "query"):
      cases[f"mixed_{convention}_{per}"] = dict(
        small,
        settings=dict(
          SMALL,
          negatives="mixed",
          num_negatives=8,
          log_q_convention=convention,
          uniform_negatives=per,
        ),
      )
  for convention in ("unigram", "expected_count"):
    cases[f"in_batch_{convention}"] = dict(
      small,
      settings=dict(SMALL, negatives="in_batch", num_negatives=5, log_q_convention=convention),
    )
  # k_b >= B L: no subsample, the whole deduplicated pool (B L slots)
  cases["mixed_large_kb"] = dict(small, settings=dict(SMALL, negatives="mixed", num_negatives=200))
  cases["in_batch_large_kb"] = dict(
    small, settings=dict(SMALL, negatives="in_batch", num_negatives=100)
  )
  cases["uniform_sequence"] = dict(
    small, settings=dict(SMALL, negatives="uniform", num_negatives=6)
  )
  # the binary's defaults on an ML-1M-sized step: mixed, 256, per-sequence uniform, unigram
  cases["ml1m_defaults"] = dict(batch="ml1m", counts=ml1m_counts.tolist(), settings=dict(ML1M))
  return cases, batches


_RUN = {}


def _worker_outputs(tmp_path_factory):
  """The worker's npz per backend (jax: every case; tensorflow: the default one), run once."""
  if _RUN:
    return _RUN
  cases, batches = _cases()
  tmp = tmp_path_factory.mktemp("keras3_negatives")
  np.savez(tmp / "batches.npz", **batches)
  env = {
    k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL")
  }
  env.update(PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
  procs = {}
  for backend, names in (("jax", list(cases)), ("tensorflow", ["mixed_unigram_sequence"])):
    (tmp / f"{backend}.json").write_text(json.dumps({n: cases[n] for n in names}))
    procs[backend] = subprocess.Popen(
      [
        sys.executable,
        str(HERE / "negatives_worker.py"),
        str(tmp / f"{backend}.json"),
        str(tmp / "batches.npz"),
        str(tmp / f"{backend}.npz"),
      ],
      cwd=ROOT,
      env=without_tensorflow.for_backend(dict(env, KERAS_BACKEND=backend), backend),
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
  for backend, proc in procs.items():
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"{backend} worker failed:\n{err[-3000:]}"
    with np.load(tmp / f"{backend}.npz") as f:
      _RUN[backend] = {k: f[k] for k in f.files}
  _RUN["cases"], _RUN["batches"] = cases, batches
  return _RUN


class _Table:
  """The query model's item tables for the tf-keras sampler (embeddings do not matter here)."""

  def __init__(self, num_items, dim):
    self.table = tf.random.stateless_normal([num_items + 1, dim], seed=[1, 2])

  def item_embeddings(self, ids):
    return tf.gather(self.table, ids)

  def all_item_embeddings(self):
    return self.table


def _tf_side(case, batches, positive_ids, rows, valid):
  """(tf-keras Negatives, sampler, pool or None) of the case's batch, static shapes."""
  cfg = RunConfig.create(**case["settings"])
  counts = np.asarray(case["counts"])
  model = _Table(len(counts) - 1, cfg.embedding_dim)
  estimator = frequency.ExactCounts(len(counts), counts=counts, min_count=cfg.frequency_min_count)
  objective = tf_objective.Objective(cfg, model, len(counts) - 1, estimator, static_shapes=True)
  sampler, seed = objective.sampler, tf.constant([5, 6], tf.int64)
  pos = tf.constant(positive_ids)
  emb = model.item_embeddings(pos)
  valid = tf.constant(valid)
  kwargs = dict(valid=valid, seed=seed)
  if cfg.negatives == "uniform":
    return sampler(pos, sequence_ids=tf.constant(rows), **kwargs), sampler, None
  if cfg.negatives == "in_batch":
    return sampler(pos, emb, **kwargs), sampler, sampler.pool(pos, emb, **kwargs)
  negatives = sampler(pos, emb, sequence_ids=tf.constant(rows), **kwargs)
  seed_b, _ = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
  return negatives, sampler, sampler.in_batch.pool(pos, emb, valid=valid, seed=seed_b)


def _tf_log_q(sampler, ids, pool, cfg):
  ids = tf.constant(ids)
  if cfg.negatives == "uniform":
    return sampler.log_q(ids).numpy()
  return sampler.log_q(ids, pool).numpy()


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
  return _worker_outputs(tmp_path_factory)


CASE_NAMES = list(_cases()[0])


@pytest.mark.parametrize("name", CASE_NAMES)
def test_keras3_negatives_have_the_tf_keras_shapes_and_log_q(name, outputs):
  _check_case(outputs["jax"], name, outputs["cases"][name], outputs["batches"])


def test_tensorflow_backend_gives_the_same_shapes_and_log_q(outputs):
  assert str(outputs["tensorflow"]["backend"]) == "tensorflow"
  name = "mixed_unigram_sequence"
  _check_case(outputs["tensorflow"], name, outputs["cases"][name], outputs["batches"])


def _check_case(k3, name, case, batches):
  cfg = RunConfig.create(**case["settings"])
  targets = batches[f"{case['batch']}_targets"]
  b, l = targets.shape
  # the queries: every position, row-major, padding marked (both objectives' static layout)
  positive_ids = targets.reshape(-1)
  rows = np.repeat(np.arange(b, dtype=np.int32), l)
  valid = positive_ids != 0
  np.testing.assert_array_equal(k3[f"{name}/positive_ids"], positive_ids)
  np.testing.assert_array_equal(k3[f"{name}/rows"], rows)
  np.testing.assert_array_equal(k3[f"{name}/query_valid"], valid)

  neg, sampler, pool = _tf_side(case, batches, positive_ids, rows, valid)
  k = cfg.num_negatives
  k_b = 0 if cfg.negatives == "uniform" else (k if cfg.negatives == "in_batch" else k // 2)
  assert tuple(k3[f"{name}/split"]) == (k_b, k - k_b)
  ids, log_q, slot_valid = k3[f"{name}/ids"], k3[f"{name}/log_q"], k3[f"{name}/valid"]
  # The in-batch block: k_b slots when k_b < B L, as the tf-keras static pool. With k_b >= B L
  # nothing is dropped: the Keras 3 pool keeps its B L rows, the tf-keras one pads to k_b
  # masked slots (same valid slots, a wider block).
  pool_k3 = 0 if cfg.negatives == "uniform" else min(k_b, b * l)
  pool_tf = 0 if pool is None else pool.negatives.ids.shape[0]
  assert pool_tf == (k_b if cfg.negatives != "uniform" else 0)
  widen = lambda shape: tuple(shape)[:-1] + (tuple(shape)[-1] - pool_tf + pool_k3,)
  assert ids.shape == widen(neg.ids.shape), name
  # log Q per slot (tf-keras's uniform sampler gives the constant -log |D| once per slot, [k])
  assert log_q.shape == ids.shape, name
  assert np.broadcast_shapes(widen(neg.log_q.shape), ids.shape) == ids.shape, name
  # scores [A, N]: the tf-keras negatives' embeddings [(A,) N, d] against the A queries
  emb_shape = tuple(neg.embeddings.shape)
  assert k3[f"{name}/scores"].shape == (b * l, widen(emb_shape[:-1])[-1]), name
  # block by block (no [A, N, d] tensor) = score_negatives on the embeddings formed in full
  np.testing.assert_array_equal(k3[f"{name}/valid_mask"], k3[f"{name}/full_valid_mask"])
  np.testing.assert_allclose(
    k3[f"{name}/scores"], k3[f"{name}/full_scores"], rtol=1e-5, atol=1e-5, err_msg=name
  )
  assert float(k3[f"{name}/positive_scores_diff"]) < 1e-5
  per = cfg.uniform_negatives if cfg.negatives != "in_batch" else "batch"
  layout = {"batch": "shared", "sequence": "sequence", "query": "query"}[per]
  expected_blocks = {"mixed": ["shared", layout], "uniform": [layout], "in_batch": ["shared"]}[
    cfg.negatives
  ]
  assert k3[f"{name}/blocks"].tolist() == expected_blocks, name
  if k_b < b * l:
    assert ids.shape == tuple(neg.ids.shape), name  # the same shapes exactly
  if neg.valid is None:
    assert cfg.negatives == "uniform" and slot_valid.size == 0
  else:
    assert slot_valid.shape == ids.shape, name
    # n_b = min(U, k_b) valid in-batch slots, each a distinct non-padding positive
    distinct = np.unique(positive_ids[valid])
    n_b = min(len(distinct), k_b)
    block_ids = ids[..., :pool_k3].reshape(-1, pool_k3)
    block_valid = slot_valid[..., :pool_k3].reshape(-1, pool_k3)
    assert (block_ids == block_ids[0]).all() and (block_valid == block_valid[0]).all()
    kept = block_ids[0][block_valid[0]]
    assert len(kept) == n_b == int(pool.num_kept), name
    assert len(set(kept.tolist())) == n_b and set(kept.tolist()) <= set(distinct.tolist())
    if n_b == len(distinct):  # no subsample: the same deduplicated pool, in the same order
      tf_block = pool.negatives
      np.testing.assert_array_equal(kept, tf_block.ids.numpy()[tf_block.valid.numpy()])
    np.testing.assert_array_equal(slot_valid[..., pool_k3:], True)  # every uniform slot
  # log Q: the tf-keras sampler's, for the Keras 3 ids, under the same pool and convention
  mask = np.ones(ids.shape, bool) if neg.valid is None else slot_valid
  expected = _tf_log_q(sampler, ids, pool, cfg)
  np.testing.assert_allclose(log_q[mask], expected[mask], rtol=1e-5, atol=1e-5, err_msg=name)
  np.testing.assert_allclose(
    k3[f"{name}/positive_log_q"][valid],
    neg.positive_log_q.numpy()[valid],
    rtol=1e-5,
    atol=1e-5,
    err_msg=name,
  )
