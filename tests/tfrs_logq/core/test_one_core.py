"""Each formula once: the tf-keras front and the Keras 3 front return what ``tfrs_logq.core``
computes, and neither front evaluates a formula's building blocks itself.

* Spies: a core function is replaced by one that adds a marker (+1000) to the real result; the
  front's output then carries the marker, so the front returns the core's value (and does not
  recompute it). The tf-keras front runs here, the Keras 3 front in a Keras-3-only subprocess
  (numpy backend: forward values only).
* Source: the front modules that have a twin call none of log-sum-exp, log1p, expm1, softplus,
  sigmoid, stop_gradient, logaddexp or pow themselves (an AST walk over their calls).
"""

import ast
import json
import os
import pathlib
import subprocess
import sys

import tfrs_logq.tf_keras  # legacy Keras before TensorFlow loads
from tfrs_logq.tf_keras import frequency, full_softmax, gbce, log_q, losses, negatives

import numpy as np
import pytest
import tensorflow as tf

from tfrs_logq.core import bce as core_bce
from tfrs_logq.core import frequency as core_frequency
from tfrs_logq.core import kmeans as core_kmeans
from tfrs_logq.core import log_q as core_log_q
from tfrs_logq.core import midx as core_midx
from tfrs_logq.core import negatives as core_negatives
from tfrs_logq.core import sampled_softmax as core_sampled_softmax

PACKAGE = pathlib.Path(tfrs_logq.__file__).resolve().parent
MARK = 1000.0

S_P = np.array([0.3, -1.2], np.float32)
S_N = np.array([[0.5, -0.1, 2.0], [1.0, 0.0, -3.0]], np.float32)
LQ_N = np.log(np.array([0.2, 0.3, 0.1], np.float32))
LQ_P = np.log(np.array([0.25, 0.05], np.float32))


def _marked(fn, index=None):
  """fn with MARK added to its result (to element ``index`` of a tuple result)."""

  def spy(*args, **kwargs):
    out = fn(*args, **kwargs)
    if index is None:
      return out + MARK
    return tuple(o + MARK if i == index else o for i, o in enumerate(out))

  return spy


MIDX_EMB = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)


def _tf_cases():
  """(core module, function name, result index or None, front call returning numpy)."""
  ids = np.array([1, 2, 2, 4], np.int64)

  def midx_log_prob():
    from tfrs_logq.tf_keras.negatives.midx import MIDXSampler

    sampler = MIDXSampler(num_codewords=2, seed=1, id_offset=1)
    sampler.refresh(MIDX_EMB)
    return sampler.log_prob(MIDX_EMB[:2], [1, 3]).numpy()

  def kmeans_distances():
    from tfrs_logq.tf_keras.negatives import kmeans

    return kmeans.nearest_centroid(MIDX_EMB, MIDX_EMB[:3], chunk_size=4)[1].numpy()

  def exact():
    est = frequency.ExactCounts(6)
    est.update(tf.constant(ids))
    return est.log_q(tf.constant([2, 3], tf.int64)).numpy()

  def hash_array():
    est = frequency.HashArrayEstimator(num_buckets=64)
    est.update(tf.constant(ids))
    return est.log_q(tf.constant([2, 3], tf.int64)).numpy()

  return [
    (
      core_sampled_softmax,
      "sampled_softmax",
      0,
      lambda: losses.sampled_softmax_loss(
        S_P, S_N, LQ_N, correction="corrected", positive_log_q=LQ_P
      ).loss.numpy(),
    ),
    (
      core_sampled_softmax,
      "masked_logsumexp",
      None,
      lambda: losses.masked_logsumexp(S_N, tf.ones(S_N.shape, tf.bool)).numpy(),
    ),
    (
      core_sampled_softmax,
      "softmax_with_positive",
      None,
      lambda: full_softmax.full_softmax_loss(
        np.eye(2, 3, dtype=np.float32), [0, 1], np.eye(3, 3, dtype=np.float32)
      ).loss.numpy(),
    ),
    (core_bce, "gbce", 0, lambda: gbce.gbce_loss(S_P, S_N, beta=0.5).loss.numpy()),
    (core_log_q, "log1mexp", None, lambda: log_q.log1mexp(tf.constant(LQ_P)).numpy()),
    (core_frequency, "exact_log_q", None, exact),
    (core_frequency, "hash_array_log_q", None, hash_array),
    (
      core_negatives,
      "mixture_log_q",
      None,
      lambda: negatives.mixture_log_q(tf.constant(LQ_N), 3, 2, 10).numpy(),
    ),
    (core_midx, "code_log_q", None, midx_log_prob),
    (core_kmeans, "nearest_centroid", 1, kmeans_distances),
  ]


@pytest.mark.parametrize("case", range(len(_tf_cases())))
def test_tf_keras_front_returns_the_core_result(case, monkeypatch):
  module, name, index, call = _tf_cases()[case]
  want = call()
  monkeypatch.setattr(module, name, _marked(getattr(module, name), index))
  np.testing.assert_allclose(call(), want + MARK, rtol=1e-6, err_msg=name)


_KERAS3_SCRIPT = r"""
import json, sys
import numpy as np
import tfrs_logq.keras3 as tlk
from tfrs_logq.keras3 import log_q, losses, negatives
from tfrs_logq.core import frequency as core_frequency, log_q as core_log_q
from tfrs_logq.core import negatives as core_negatives, sampled_softmax as core_sampled_softmax
from tfrs_logq.core import midx as core_midx
EMB = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
S_P, S_N, LQ_N, LQ_P = (np.asarray(v, np.float32) for v in json.loads(sys.argv[1]))
MARK = 1000.0

def midx_log_prob():
  sampler = negatives.MIDXSampler(num_codewords=2, seed=1, id_offset=1)
  sampler.refresh(EMB)
  return sampler.log_prob(EMB[:2], np.array([1, 3], np.int32))

def exact():
  est = tlk.frequency.ExactCounts(6)
  est.update(np.array([1, 2, 2, 4], np.int32))
  return est.log_q(np.array([2, 3], np.int32))

cases = [
    (core_sampled_softmax, "sampled_softmax", 0,
     lambda: losses.sampled_softmax_loss(S_P, S_N, LQ_N, correction="corrected",
                                         positive_log_q=LQ_P).loss),
    (core_sampled_softmax, "masked_logsumexp", None,
     lambda: losses.masked_logsumexp(S_N, np.ones(S_N.shape, bool))),
    (core_log_q, "log1mexp", None, lambda: log_q.log1mexp(LQ_P)),
    (core_frequency, "exact_log_q", None, exact),
    (core_frequency, "hash_array_log_q", None,
     lambda: tlk.frequency.HashArrayEstimator(num_buckets=64).log_q(np.array([2, 3], np.int32))),
    (core_negatives, "mixture_log_q", None,
     lambda: negatives.MixedNegatives(2, id_range=(0, 10), convention="mixture").log_q(
         LQ_N, np.float32(3.0))),
    (core_midx, "code_log_q", None, midx_log_prob),
]
out = {}
for module, name, index, call in cases:
  real = getattr(module, name)
  want = np.asarray(call())
  def spy(*args, _real=real, _index=index, **kwargs):
    res = _real(*args, **kwargs)
    if _index is None:
      return res + MARK
    return tuple(r + MARK if i == _index else r for i, r in enumerate(res))
  setattr(module, name, spy)
  try:
    got = np.asarray(call())
  finally:
    setattr(module, name, real)
  out[name] = [want.tolist(), got.tolist()]
out["tf_keras_loaded"] = "tf_keras" in sys.modules
print(json.dumps(out))
"""


def test_keras3_front_returns_the_core_result():
  env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
  env["KERAS_BACKEND"] = "numpy"
  arrays = json.dumps([a.tolist() for a in (S_P, S_N, LQ_N, LQ_P)])
  proc = subprocess.run(
    [sys.executable, "-c", _KERAS3_SCRIPT, arrays],
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
    env=env,
    cwd=str(PACKAGE.parent),
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  assert out.pop("tf_keras_loaded") is False
  assert len(out) == 7, sorted(out)
  for name, (want, got) in out.items():
    np.testing.assert_allclose(got, np.asarray(want) + MARK, rtol=1e-6, err_msg=name)


# Every module of the two fronts (formulas must come from core), but two that route gradients
# with stop_gradient and compute no formula: the cross-replica gather and MIDX's index refresh.
_PLUMBING = {"tf_keras/negatives/cross_replica.py", "tf_keras/negatives/midx_refresh.py"}
FRONT_MODULES = sorted(
  path
  for front in ("tf_keras", "keras3")
  for path in (str(p.relative_to(PACKAGE)) for p in (PACKAGE / front).rglob("*.py"))
  if path not in _PLUMBING
)
BUILDING_BLOCKS = {
  "logsumexp",
  "reduce_logsumexp",
  "log1p",
  "expm1",
  "softplus",
  "sigmoid",
  "stop_gradient",
  "logaddexp",
  "pow",
  "power",
}


@pytest.mark.parametrize("path", FRONT_MODULES)
def test_front_module_calls_no_formula_building_block(path):
  tree = ast.parse((PACKAGE / path).read_text(), filename=path)
  calls = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Call):
      func = node.func
      name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
      if name in BUILDING_BLOCKS:
        calls.append(f"{path}:{node.lineno} {name}")
  assert not calls, calls
