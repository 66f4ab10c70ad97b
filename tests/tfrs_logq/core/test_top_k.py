"""The on-device exact top-k (`tfrs_logq.core.top_k`) on both fronts equals the numpy search
(`ranking.exact_top_k_np`, the oracle): same ids and scores, ties included, for the tf-keras
front in this process and for the Keras 3 front on each backend (one worker process each)."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import without_tensorflow

HERE = pathlib.Path(__file__).resolve().parent
_SPEC = importlib.util.spec_from_file_location("top_k_cases", HERE / "top_k_cases.py")
top_k_cases = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(top_k_cases)

import tfrs_logq.tf_keras  # noqa: E402,F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import top_k as tf_top_k  # noqa: E402

from tfrs_logq.core import ranking  # noqa: E402
from tfrs_logq.core import top_k as top_k_lib  # noqa: E402

BACKENDS = ["jax", "tensorflow", "torch"]


@pytest.fixture(scope="module")
def oracle():
  return top_k_cases.run_cases(ranking.exact_top_k_np, item_chunks=False)


def _brute_force(queries, table, k, rows, targets):
  """The module docstring's definition, literally: sort the allowed ids by (-score, id)."""
  scores = queries.astype(np.float64) @ table.astype(np.float64).T
  out = []
  for u in range(queries.shape[0]):
    banned = set() if rows is None else set(int(d) for d in rows[u])
    if targets is not None:
      banned.discard(int(targets[u]))
    allowed = [d for d in range(1, table.shape[0]) if d not in banned]
    allowed.sort(key=lambda d: (-scores[u, d], d))
    out.append((allowed + [-1] * k)[:k])
  return np.array(out)


def test_oracle_is_the_definition(oracle):
  """The numpy search itself against the definition, on the integer cases (exact scores)."""
  for case in top_k_cases.CASES:
    name, k, except_target, integer = case[0], case[4], case[8], case[9]
    if not integer:
      continue
    queries, table, rows, targets = top_k_cases.make_case(*case)
    expected = _brute_force(queries, table, k, rows, targets if except_target else None)
    np.testing.assert_array_equal(oracle[name][0], expected, err_msg=name)


def _assert_same(ids, scores, expected_ids, expected_scores, name):
  """Ids equal; scores equal on the integer cases (exact in float32), within float32 rounding
  of the matmul (another summation order) on the float case."""
  np.testing.assert_array_equal(ids, expected_ids, err_msg=name)
  if name.endswith("floats"):
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-5, err_msg=name)
  else:
    np.testing.assert_array_equal(scores, expected_scores, err_msg=name)


def test_tf_keras_front_equals_numpy(oracle):
  got = top_k_cases.run_cases(tf_top_k.exact_top_k)
  for name, (ids, scores) in oracle.items():
    _assert_same(*got[name], ids, scores, name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_keras3_front_equals_numpy(oracle, backend, tmp_path):
  out = tmp_path / "top_k.npz"
  env = dict(os.environ, KERAS_BACKEND=backend)
  env.pop("TF_USE_LEGACY_KERAS", None)
  env = without_tensorflow.for_backend(env, backend)
  subprocess.run(
    [sys.executable, str(HERE / "top_k_worker.py"), str(out)], env=env, check=True, timeout=600
  )
  got = np.load(out)
  for name, (ids, scores) in oracle.items():
    _assert_same(got[f"{name}/ids"], got[f"{name}/scores"], ids, scores, f"{backend} {name}")
  assert "must be >= k" in str(got["item_chunk_below_k_error"])


def test_layout_pads_to_static_shapes():
  rng = np.random.default_rng(0)
  lay = top_k_lib.layout(
    rng.normal(size=(10, 3)),
    rng.normal(size=(101, 3)),
    5,
    rated=[np.array([3, 4, 7])] * 10,
    targets=np.full(10, 4),
    chunk_size=4,
    item_chunk=30,
  )
  assert lay.queries.shape == (12, 3) and lay.num_queries == 10
  assert lay.table.shape == (120, 3) and not lay.table[101:].any()
  assert lay.rated.shape == (12, 3) and lay.rated[0].tolist() == [3, 0, 7]  # target left out
  assert not lay.rated[10:].any()


def test_bad_arguments_are_refused():
  q, t = np.ones((2, 3), np.float32), np.ones((9, 3), np.float32)
  with pytest.raises(ValueError, match="must be >= k"):
    tf_top_k.exact_top_k(q, t, 5, item_chunk=4)
  with pytest.raises(ValueError, match="k must be in"):
    tf_top_k.exact_top_k(q, t, 9)
  with pytest.raises(ValueError, match="NaN or inf"):
    tf_top_k.exact_top_k(np.full((2, 3), np.nan, np.float32), t, 3)
