"""tfrs_logq.keras3.LazyAdam on every backend (fresh Keras-3-only process each,
``lazy_adam_worker.py``): a numpy oracle written from the docstring (the rows of a step are the
rows whose gradient is not all zero; k_r in the bias correction; other rows untouched; dense
weights get Adam), the tf-keras LazyAdam given the same nonzero rows as IndexedSlices, the
gradient Keras 3 hands the optimizer on TensorFlow (IndexedSlices), a compiled ``train_on_batch``
(jit on JAX), ``.keras`` save / load of the counts and ``get_config``."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import without_tensorflow

HERE = pathlib.Path(__file__).resolve().parent


def _load(name):
  spec = importlib.util.spec_from_file_location(f"_keras3_{name}", HERE / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


cases = _load("lazy_adam_cases")

import tfrs_logq.tf_keras  # noqa: E402,F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras.lazy_adam import LazyAdam as TfKerasLazyAdam  # noqa: E402

import tensorflow as tf  # noqa: E402

BACKENDS = ["tensorflow", "jax", "torch"]
_RUNS = {}


def _env(backend):
  env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
  env.update(
    KERAS_BACKEND=backend,
    TF_CPP_MIN_LOG_LEVEL="3",
    PYTHONPATH=str(HERE.parents[2]),
    JAX_PLATFORMS="cpu",
    CUDA_VISIBLE_DEVICES="",
  )
  return without_tensorflow.for_backend(env, backend)


@pytest.fixture(scope="module", params=BACKENDS)
def res(request, tmp_path_factory):
  if not _RUNS:
    directory = tmp_path_factory.mktemp("keras3_lazy_adam")
    for b in BACKENDS:  # all at once: they overlap on the cores
      out = directory / f"{b}.npz"
      proc = subprocess.Popen(
        [sys.executable, str(HERE / "lazy_adam_worker.py"), str(out)],
        env=_env(b),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(HERE),
      )
      _RUNS[b] = [proc, out, None]
  run = _RUNS[request.param]
  if run[2] is None:
    _, stderr = run[0].communicate(timeout=900)
    assert run[0].returncode == 0, stderr[-4000:]
    run[2] = dict(np.load(run[1]))
  return run[2]


def _oracle(table, dense, g_table, g_dense):
  """From the docstring: rows with a nonzero gradient get Adam with their own count k_r; the
  dense weight gets Adam with the global step t."""
  theta, m, v = table.astype(np.float64), np.zeros(table.shape), np.zeros(table.shape)
  k = np.zeros(table.shape[0])
  w, mw, vw = dense.astype(np.float64), np.zeros(dense.shape), np.zeros(dense.shape)
  b1, b2, lr, eps = cases.B1, cases.B2, cases.LR, cases.EPS
  for t, (g, gd) in enumerate(zip(g_table.astype(np.float64), g_dense.astype(np.float64)), 1):
    for r in range(table.shape[0]):
      if not np.any(g[r] != 0):
        continue
      k[r] += 1
      m[r] = b1 * m[r] + (1 - b1) * g[r]
      v[r] = b2 * v[r] + (1 - b2) * g[r] ** 2
      theta[r] -= lr * np.sqrt(1 - b2 ** k[r]) / (1 - b1 ** k[r]) * m[r] / (np.sqrt(v[r]) + eps)
    mw = b1 * mw + (1 - b1) * gd
    vw = b2 * vw + (1 - b2) * gd**2
    w -= lr * np.sqrt(1 - b2**t) / (1 - b1**t) * mw / (np.sqrt(vw) + eps)
  return theta, m, v, k, w


def test_matches_the_numpy_oracle(res):
  table, dense, g_table, g_dense = cases.case()
  theta, m, v, k, w = _oracle(table, dense, g_table, g_dense)
  np.testing.assert_allclose(res["apply/table"], theta, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(res["apply/m"], m, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(res["apply/v"], v, rtol=5e-5, atol=1e-9)
  np.testing.assert_array_equal(res["apply/k"], k)
  np.testing.assert_allclose(res["apply/dense"], w, rtol=1e-5, atol=1e-6)
  assert not res["apply/dense_has_counts"]
  # rows 7, 8 never in a step: untouched, parameters, moments and counts
  np.testing.assert_array_equal(res["apply/table"][7:], table[7:])
  assert not res["apply/m"][7:].any() and not res["apply/k"][7:].any()
  assert 0 < k[0] < cases.STEPS and (k[1:7] < cases.STEPS).all()  # rows absent from steps


def test_equals_the_tf_keras_lazy_adam(res):
  table, dense, g_table, g_dense = cases.case()
  var, w = tf.Variable(table), tf.Variable(dense)
  opt = TfKerasLazyAdam(cases.LR, cases.B1, cases.B2, cases.EPS)
  for g, gd in zip(g_table, g_dense):
    rows = np.flatnonzero(np.any(g != 0, axis=1))
    opt.apply_gradients(
      [
        (tf.IndexedSlices(tf.constant(g[rows]), tf.constant(rows), g.shape), var),
        (tf.constant(gd), w),
      ]
    )
  np.testing.assert_allclose(res["apply/table"], var.numpy(), rtol=1e-6, atol=1e-7)
  np.testing.assert_array_equal(res["apply/k"], opt._row_counts[0].numpy())
  np.testing.assert_allclose(res["apply/m"], opt._momentums[0].numpy(), rtol=1e-6, atol=1e-8)
  np.testing.assert_allclose(res["apply/dense"], w.numpy(), rtol=1e-5, atol=1e-6)


def test_compiled_train_step_through_an_embedding(res):
  # batch 1 names rows 1, 2, 3, 4; batch 2 rows 1, 2, 3: only they move, counted per step
  np.testing.assert_array_equal(res["fit/moved"], [0, 1, 1, 1, 1, 0, 0, 0, 0])
  np.testing.assert_array_equal(res["fit/k"], [0, 2, 2, 2, 1, 0, 0, 0, 0])
  if str(res["backend"]) == "tensorflow":  # what Keras 3 hands the optimizer for the table
    assert "IndexedSlices" in set(res["fit/grad_types"].tolist())


def test_counts_survive_a_keras_file_and_config_round_trips(res):
  assert str(res["save/class"]) == "LazyAdam"
  assert str(res["save/pattern"]) == "items/embeddings$"
  np.testing.assert_array_equal(res["save/k_loaded"], res["save/k"])
  assert res["save/k"].sum() == 4 and bool(res["save/variables_equal"])
  assert bool(res["config/equal"]) and str(res["config/pattern"]) == r"(^|/)embeddings$"
  assert "amsgrad" in str(res["amsgrad"])
