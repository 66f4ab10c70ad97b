"""The Keras 3 SASRec (models/keras3) against the tf-keras SASRec (models/sasrec.py): with the
tf-keras model's weights copied in, the same hidden states, queries and scores within float
tolerance, for both block styles, one and two heads, tied tables and blocked attention; on the
tensorflow and jax backends, each in a fresh process with only Keras 3 (sasrec_worker.py); plus
get_config and .keras round trips there. Also: `import models.keras3` loads no TensorFlow."""

import json
import os
import pathlib
import subprocess
import sys

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf  # noqa: F401
import without_tensorflow

from models import sasrec_weights
from models.sasrec import SASRec

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]

BACKENDS = ["tensorflow", "jax"]
BASE = dict(
  num_items=30,
  max_len=12,
  embedding_dim=16,
  num_blocks=2,
  num_heads=1,
  dropout=0.3,
  temperature=0.5,
  seed=3,
)
CONFIGS = {
  "reference": dict(block_style="reference"),
  "reference_2heads_tied": dict(block_style="reference", num_heads=2, tie_embeddings=True),
  "pre_ln": dict(block_style="pre_ln", attention_blocks=1),
  "pre_ln_2heads_blocked": dict(block_style="pre_ln", num_heads=2, attention_blocks=3),
}


def _inputs(seed, b=5, l=12, n=30):
  rng = np.random.default_rng(seed)
  x = rng.integers(1, n + 1, size=(b, l))
  for i, m in enumerate([l, 1, 4, 7, 11][:b]):
    x[i, : l - m] = 0  # left padding, one full row
  return x.astype(np.int64)


def _cases():
  out, expected = {}, {}
  for k, (name, extra) in enumerate(sorted(CONFIGS.items())):
    config = {**BASE, "tie_embeddings": False, "attention_blocks": 2, **extra}
    model = SASRec(**config, pack_tokens=False).build_all()
    x = _inputs(k)
    out[f"{name}/config"] = np.array(json.dumps(config))
    out[f"{name}/inputs"] = x
    for sub, layer in sasrec_weights.sublayers(model):
      weights = layer.get_weights()
      out[f"{name}/w/{sub}/count"] = np.array(len(weights))
      for i, w in enumerate(weights):
        out[f"{name}/w/{sub}/{i}"] = w
    expected[name] = dict(
      hidden=model.encode(x).numpy(),
      queries=model.query_embeddings(x).numpy(),
      scores=model(x).numpy(),
      config=config,
    )
  out["names"] = np.array(json.dumps(sorted(CONFIGS)))
  return out, expected


_RESULTS = {}


def _results(tmp_path_factory):
  if not _RESULTS:
    directory = tmp_path_factory.mktemp("keras3_sasrec")
    cases, expected = _cases()
    np.savez(directory / "cases.npz", **cases)
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env.update(
      TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES=""
    )
    procs = {
      b: subprocess.Popen(
        [
          sys.executable,
          str(HERE / "sasrec_worker.py"),
          str(directory / "cases.npz"),
          str(directory / f"{b}.npz"),
        ],
        env=without_tensorflow.for_backend(dict(env, KERAS_BACKEND=b), b),
        stderr=subprocess.PIPE,
        text=True,
      )
      for b in BACKENDS
    }
    for backend, proc in procs.items():
      _, stderr = proc.communicate(timeout=600)
      assert proc.returncode == 0, f"worker failed on {backend}:\n{stderr[-4000:]}"
      _RESULTS[backend] = dict(np.load(directory / f"{backend}.npz"))
    _RESULTS["expected"] = expected
  return _RESULTS


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_same_weights_same_embeddings_as_tf_keras(backend, name, tmp_path_factory):
  res = _results(tmp_path_factory)
  got, want = res[backend], res["expected"][name]
  assert str(got["backend"]) == backend
  np.testing.assert_allclose(got[f"{name}/hidden"], want["hidden"], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(got[f"{name}/queries"], want["queries"], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(got[f"{name}/scores"], want["scores"], rtol=1e-4, atol=1e-5)
  # the training queries are the hidden states of all B L positions, row-major
  np.testing.assert_allclose(
    got[f"{name}/train_queries"], want["hidden"].reshape(-1, 16), rtol=1e-4, atol=1e-5
  )
  # dropout is active in training mode (dropout = 0.3)
  assert bool(got[f"{name}/dropout_differs"])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_packed_encoder_is_the_padded_function_with_the_same_gradients(
  backend, name, tmp_path_factory
):
  """Token packing (the batch's token_rows / token_slots): the tf-keras model's hidden states,
  with filler rows (C = 40 for the 35 tokens of the 5 x 12 cases) and without (C = T), and the
  gradients of sum(H * R) over every weight equal to the padded encoder's."""
  res = _results(tmp_path_factory)
  got, want = res[backend], res["expected"][name]
  assert int(got[f"{name}/packed_capacity"]) == 40
  for key in ("packed_hidden", "packed_exact_hidden"):
    np.testing.assert_allclose(got[f"{name}/{key}"], want["hidden"], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(
    got[f"{name}/packed_train_queries"], want["hidden"].reshape(-1, 16), rtol=1e-4, atol=1e-5
  )
  padded, packed = got[f"{name}/grads_padded"], got[f"{name}/grads_packed"]
  assert np.abs(padded).max() > 1e-3  # the gradients are not all zero
  np.testing.assert_allclose(packed, padded, rtol=1e-3, atol=1e-5)
  assert bool(got[f"{name}/packed_dropout_differs"])


@pytest.mark.parametrize("floor", [0, 17, 10**6])
def test_token_index_against_a_loop(floor):
  """Each non-padding position (row-major) gets the next packed row; padding positions the
  capacity C; C = T rounded up to a multiple of ceil(B L / 8), at least ``min_capacity``, at
  most B L; filler rows B L."""
  from models.keras3 import sasrec_ops

  for seed, (b, l) in enumerate([(5, 12), (3, 7), (1, 1), (4, 200)]):
    x = np.random.default_rng(seed).integers(0, 3, size=(b, l))
    x[0] = 0 if seed == 2 else x[0]
    rows, slots = sasrec_ops.token_index(x, min_capacity=floor)
    real = [i * l + j for i in range(b) for j in range(l) if x[i, j] != 0]
    quantum = -(-(b * l) // 8)
    capacity = min(b * l, max(floor, quantum * max(1, -(-len(real) // quantum))))
    assert len(rows) == capacity and rows.dtype == np.int32 and slots.shape == (b, l)
    assert list(rows[: len(real)]) == real and set(rows[len(real) :]) <= {b * l}
    for k, flat in enumerate(real):
      assert slots[flat // l, flat % l] == k
    assert all(slots[i, j] == capacity for i in range(b) for j in range(l) if x[i, j] == 0)
    rows_exact, _ = sasrec_ops.token_index(x, buckets=None)
    assert list(rows_exact) == real
  with pytest.raises(ValueError, match="ids"):
    sasrec_ops.token_index(np.ones(4))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_get_config_and_keras_file_round_trip(backend, name, tmp_path_factory):
  res = _results(tmp_path_factory)
  got, want = res[backend], res["expected"][name]
  np.testing.assert_array_equal(got[f"{name}/config_roundtrip"], got[f"{name}/queries"])
  np.testing.assert_array_equal(got[f"{name}/keras_roundtrip"], got[f"{name}/queries"])
  assert json.loads(str(got[f"{name}/loaded_config"])) == want["config"]


def test_models_keras3_loads_no_tensorflow_on_jax(tmp_path_factory):
  assert not bool(_results(tmp_path_factory)["jax"]["tensorflow_loaded"])
