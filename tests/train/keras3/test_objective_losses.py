"""One step's loss of the Keras 3 objective (`train.keras3.objective.RetrievalModel`) equals
the tf-keras objective's (`train.objective.Objective`, static shapes) on the same batch with the
tf-keras SASRec's weights copied in, for --loss=full_softmax (every other item a negative: no
random draws), on the jax and tensorflow backends (fresh Keras 3 process each,
objective_worker.py)."""

import json
import os
import pathlib
import subprocess
import sys

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf
import without_tensorflow

from models import sasrec_weights
from models.sasrec import SASRec
from train import objective as tf_objective
from train.config import RunConfig

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]

NUM_ITEMS = 40
CASES = {
  "full_softmax": dict(
    loss="full_softmax",
    max_len=10,
    embedding_dim=8,
    num_blocks=1,
    batch_size=6,
    dropout=0.0,
    seed=3,
    temperature=0.5,
  ),
  "full_softmax_tied_pre_ln": dict(
    loss="full_softmax",
    max_len=10,
    embedding_dim=8,
    num_blocks=2,
    num_heads=2,
    batch_size=6,
    dropout=0.0,
    seed=1,
    temperature=0.2,
    tie_embeddings=True,
    sasrec_block="pre_ln",
  ),
}


def _batch(rng, b, l):
  inputs, targets = np.zeros((b, l), np.int64), np.zeros((b, l), np.int64)
  for r in range(b):
    n = int(rng.integers(2, l + 1))
    seq = rng.integers(1, NUM_ITEMS + 1, n + 1)
    inputs[r, l - n :], targets[r, l - n :] = seq[:-1], seq[1:]
  return inputs, targets


def _cases():
  rng = np.random.default_rng(5)
  out, expected = {"names": np.array(json.dumps(sorted(CASES)))}, {}
  counts = np.concatenate([[0.0], rng.integers(1, 20, NUM_ITEMS)])
  for name, settings in sorted(CASES.items()):
    cfg = RunConfig.create(**settings)
    model = SASRec(
      NUM_ITEMS,
      max_len=cfg.max_len,
      embedding_dim=cfg.embedding_dim,
      num_blocks=cfg.num_blocks,
      num_heads=cfg.num_heads,
      dropout=cfg.dropout,
      temperature=cfg.temperature,
      seed=cfg.seed,
      block_style=cfg.sasrec_block,
      tie_embeddings=cfg.tie_embeddings,
      pack_tokens=False,
      attention_blocks=cfg.sasrec_attention_blocks,
    ).build_all()
    inputs, targets = _batch(rng, cfg.batch_size, cfg.max_len)
    objective = tf_objective.Objective(cfg, model, NUM_ITEMS, static_shapes=True)
    loss = objective(
      {"inputs": tf.constant(inputs), "targets": tf.constant(targets)}, step=0, training=False
    )["loss"]
    expected[name] = float(loss.numpy())
    out.update(
      {
        f"{name}/settings": np.array(json.dumps(settings)),
        f"{name}/counts": counts,
        f"{name}/inputs": inputs,
        f"{name}/targets": targets,
      }
    )
    for sub, layer in sasrec_weights.sublayers(model):
      weights = layer.get_weights()
      out[f"{name}/w/{sub}/count"] = np.array(len(weights))
      for i, w in enumerate(weights):
        out[f"{name}/w/{sub}/{i}"] = w
  return out, expected


_RESULTS = {}


def _results(tmp_path_factory):
  if not _RESULTS:
    directory = tmp_path_factory.mktemp("keras3_objective")
    cases, _RESULTS["expected"] = _cases()
    np.savez(directory / "cases.npz", **cases)
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env.update(
      PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3"
    )
    procs = {
      b: subprocess.Popen(
        [
          sys.executable,
          str(HERE / "objective_worker.py"),
          str(directory / "cases.npz"),
          str(directory / f"{b}.npz"),
        ],
        env=without_tensorflow.for_backend({**env, "KERAS_BACKEND": b}, b),
        cwd=str(ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
      )
      for b in ("jax", "tensorflow")
    }
    for b, proc in procs.items():
      _, err = proc.communicate(timeout=900)
      assert proc.returncode == 0, err[-4000:]
      _RESULTS[b] = dict(np.load(directory / f"{b}.npz"))
  return _RESULTS


@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_full_softmax_loss_equals_the_tf_keras_objective(backend, name, tmp_path_factory):
  res = _results(tmp_path_factory)
  assert str(res[backend]["backend"]) == backend
  np.testing.assert_allclose(float(res[backend][f"{name}/loss"]), res["expected"][name], rtol=2e-5)


@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_packed_batch_gives_the_same_loss(backend, name, tmp_path_factory):
  """The binary's packed batches (token_rows / token_slots): the tf-keras objective's loss."""
  res = _results(tmp_path_factory)
  np.testing.assert_allclose(
    float(res[backend][f"{name}/loss_packed"]), res["expected"][name], rtol=2e-5
  )
