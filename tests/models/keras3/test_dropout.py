"""`models.keras3.dropout.Dropout` on jax, tensorflow and torch (a fresh process each,
dropout_worker.py), against its definition: an element is kept with probability
p' = round((1 - rate) 2^16) / 2^16 and then scaled by 1 / p', otherwise zeroed; the mask is
fresh at every call, the same for the same seed, absent at inference and for rate 0."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import without_tensorflow

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
BACKENDS = ["jax", "tensorflow", "torch"]
X = 2.0


def _keep_probability(rate):
  """The definition, written out: 1 - rate on a grid of 1/65536."""
  return np.floor((1.0 - rate) * 65536 + 0.5) / 65536


_RESULTS = {}


def _results(tmp_path_factory):
  if not _RESULTS:
    directory = tmp_path_factory.mktemp("keras3_dropout")
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env.update(
      TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES=""
    )
    procs = {
      b: subprocess.Popen(
        [
          sys.executable,
          str(HERE / "dropout_worker.py"),
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
  return _RESULTS


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rate", [0.5, 0.3])
def test_keep_probability_and_scale(backend, rate, tmp_path_factory):
  got = _results(tmp_path_factory)[backend]
  assert str(got["backend"]) == backend
  keep = _keep_probability(rate)
  for name in ("first", "second"):
    out = got[f"{rate}/{name}"]
    kept = out != 0
    # kept elements carry exactly x / p'
    np.testing.assert_allclose(out[kept], X / keep, rtol=1e-6)
    n = out.size
    sd = np.sqrt(keep * (1 - keep) / n)
    assert abs(kept.mean() - keep) < 5 * sd, (kept.mean(), keep)
    assert abs(out.mean() - X) < 5 * X / keep * sd  # E[dropout(x)] = x
    # neighbours (two halves of one random word on jax) are independent: correlation ~ 0
    flat = kept.reshape(-1).astype(np.float64)
    corr = np.corrcoef(flat[0::2], flat[1::2])[0, 1]
    assert abs(corr) < 5 / np.sqrt(n / 2), corr


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rate", [0.5, 0.3])
def test_fresh_mask_each_call_same_for_same_seed(backend, rate, tmp_path_factory):
  got = _results(tmp_path_factory)[backend]
  first, second = got[f"{rate}/first"] != 0, got[f"{rate}/second"] != 0
  keep = _keep_probability(rate)
  agree = (first == second).mean()  # independent masks: p'^2 + (1 - p')^2
  assert abs(agree - (keep**2 + (1 - keep) ** 2)) < 0.01, agree
  np.testing.assert_array_equal(got[f"{rate}/same_seed"], got[f"{rate}/first"])
  np.testing.assert_array_equal(got[f"{rate}/inference"], np.full_like(first, X, np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_config_serialisation_and_arguments(backend, tmp_path_factory):
  got = _results(tmp_path_factory)[backend]
  for rate in (0.5, 0.3):
    assert str(got[f"{rate}/config"]) == str(got[f"{rate}/config_want"])
  assert str(got["deserialized_class"]) == "models.keras3.dropout.Dropout"
  np.testing.assert_array_equal(got["rate0"], np.full((64, 100, 32), X, np.float32))
  assert "noise_shape" in str(got["noise_shape_error"])
