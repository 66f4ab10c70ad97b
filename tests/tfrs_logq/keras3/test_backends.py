"""tfrs_logq.keras3 on every Keras 3 backend against the tf-keras path and numpy references.

Each backend runs ``backend_worker.py`` in its own process with ``KERAS_BACKEND`` set (and no
``TF_USE_LEGACY_KERAS``): a process that uses only Keras 3; on jax and torch TensorFlow is hidden
from it (tests/without_tensorflow.py), as on a machine without TensorFlow. The worker writes its
results; the tests here compare them with the tf-keras implementation (this process) and with
numpy oracles written from the formulas. TensorFlow and JAX are required (the tests fail when jax
is missing); PyTorch runs when it is installed (an optional backend, not part of the ``keras3``
extra).
"""

import importlib.util
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import without_tensorflow

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
import tfrs_logq.tf_keras  # noqa: E402,F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import accidental_hits as tf_hits  # noqa: E402
from tfrs_logq.tf_keras import frequency as tf_frequency  # noqa: E402
from tfrs_logq.tf_keras import logq_correction as tf_correction  # noqa: E402
from tfrs_logq.tf_keras import losses as tf_losses  # noqa: E402
from tfrs_logq.tf_keras import retrieval as tf_tasks  # noqa: E402

import numpy_reference as ref  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfrs_logq.core import checks as core_checks  # noqa: E402
from tfrs_logq.core import log_q as core_log_q  # noqa: E402
from tfrs_logq.core import ops as core_ops  # noqa: E402
from tfrs_logq.core import sampled_softmax as core_sampled_softmax  # noqa: E402

# PyTorch is in the test extra (setup.py): a missing torch fails these tests, never skips them.
BACKENDS = ["tensorflow", "jax", "torch"]
CORRECTIONS = core_checks.CORRECTIONS
VOCAB = 40


# ---- the cases (numpy, deterministic) -------------------------------------------------------


def _loss_case(seed, a=7, num_items=12, n=13, per_row_q=False):
  rng = np.random.default_rng(seed)
  q = rng.dirichlet(np.ones(num_items))
  pos_ids = rng.integers(0, num_items, size=a)
  neg_ids = rng.choice(num_items, size=n, p=q)
  neg_ids[0] = pos_ids[0]
  valid = pos_ids[:, None] != neg_ids[None, :]
  valid[-1, :] = False  # a row without negatives
  lq_n = np.log(q[neg_ids])
  if per_row_q:
    lq_n = np.log(rng.dirichlet(np.ones(n), size=a) * 0.5 + 1e-3)
  return dict(
    s_p=rng.normal(0, 2, a),
    s_n=rng.normal(0, 2, (a, n)),
    lq_n=lq_n,
    lq_p=np.log(q[pos_ids]),
    valid=valid,
  )


def _extreme_case():
  """Huge finite scores, +-inf scores and -inf negatives (tf_keras.losses's edge cases)."""
  c = _loss_case(9, a=6, n=5)
  c["valid"][:] = True
  c["s_p"][:] = [1e30, np.inf, -np.inf, 0.5, 3e4, 0.0]
  c["s_n"][0] = [1e30, -1e30, 2e29, 0.0, 1.0]
  c["s_n"][1] = [0.0, 1.0, 2.0, 3.0, 4.0]
  c["s_n"][2] = [0.0, 1.0, 2.0, 3.0, 4.0]
  c["s_n"][3] = [-np.inf, 1.0, -np.inf, 2.0, 0.0]
  c["s_n"][4] = [np.inf, 0.0, 1.0, 2.0, 3.0]
  c["s_n"][5] = [-np.inf] * 5
  return c


LOSS_CASES = {f"loss/{i}": _loss_case(i, per_row_q=(i % 2 == 1)) for i in range(4)}
LOSS_CASES["loss/f16"] = dict(_loss_case(5), dtype="float16")
LOSS_CASES["loss/bf16"] = dict(_loss_case(6), dtype="bfloat16")
LOSS_CASES["loss/extreme"] = _extreme_case()


def _task_case(seed, a=10, extra=6, d=5, num_items=15):
  rng = np.random.default_rng(seed)
  q = np.maximum(rng.dirichlet(np.ones(num_items) * 0.5), 1e-4)
  q /= q.sum()
  ids = rng.choice(num_items, size=a + extra, p=q)
  return dict(
    query=rng.normal(size=(a, d)),
    cand=rng.normal(size=(a + extra, d)),
    prob=q[ids],
    ids=ids,
    weight=rng.uniform(0.5, 2.0, size=a),
    mask=rng.uniform(size=(a, a + extra)) > 0.2,
  )


TASK_CASES = [  # (Keras 3 kwargs, call arguments -> case arrays)
  (dict(correction=c), dict(candidate_sampling_probability="prob", candidate_ids="ids"))
  for c in CORRECTIONS
] + [
  (
    dict(correction="corrected", q_prime="proxy", temperature=0.3),
    dict(candidate_log_sampling_probability="log_prob", candidate_ids="ids"),
  ),
  (
    dict(correction="standard", remove_accidental_hits=True, num_hard_negatives=4, loss="mean"),
    dict(candidate_sampling_probability="prob", candidate_ids="ids", sample_weight="weight"),
  ),
  (
    dict(correction="corrected", num_hard_negatives=5),
    dict(
      candidate_sampling_probability="prob",
      candidate_ids="ids",
      score_mask="mask",
      sample_weight="weight",
    ),
  ),
  (dict(correction="none"), dict()),
]


def _sampler_task_case(seed, layout, a=10, extra=6, d=5, num_items=15, n=6):
  """In-batch candidates with Q_b, and a sampler's draws from its own proposal Q_s: shared
  [N] (UniformNegatives' per-batch layout) or per query [A, N], with an accidental hit."""
  rng = np.random.default_rng(100 + seed)
  q_b = np.maximum(rng.dirichlet(np.ones(num_items) * 0.5), 1e-3)
  q_b /= q_b.sum()
  q_s = rng.dirichlet(np.ones(num_items))
  ids = rng.choice(num_items, size=a + extra, p=q_b).astype(np.int32)
  drawn = rng.choice(num_items, size=(n,) if layout == "shared" else (a, n), p=q_s)
  drawn = drawn.astype(np.int32)
  if layout == "shared":
    drawn[0] = ids[0]
  else:
    drawn[1, 0] = ids[1]
  return dict(
    query=rng.normal(size=(a, d)).astype(np.float32),
    cand=rng.normal(size=(a + extra, d)).astype(np.float32),
    ids=ids,
    prob=q_b[ids].astype(np.float32),
    weight=rng.uniform(0.5, 2.0, size=a).astype(np.float32),
    mask=rng.uniform(size=(a, a + extra)) > 0.2,
    table=rng.normal(size=(num_items, d)).astype(np.float32),
    extra=drawn,
    lq_s=np.log(q_s[drawn]).astype(np.float32),
    lqp_s=np.log(q_s[ids[:a]]).astype(np.float32),
  )


_WITH_Q = dict(candidate_sampling_probability="prob", candidate_ids="ids")
SAMPLER_TASK_CASES = [  # (Keras 3 kwargs besides negative_sampler, sampler layout, call)
  (dict(correction="corrected", loss="none"), "shared", _WITH_Q),
  (dict(correction="corrected", q_prime="proxy", loss="none"), "shared", _WITH_Q),
  (dict(correction="standard", loss="none"), "shared", _WITH_Q),
  (dict(correction="standard_no_positive", loss="none"), "shared", _WITH_Q),
  (dict(correction="none", loss="none"), "shared", dict(candidate_ids="ids")),
  (
    dict(correction="corrected", temperature=0.7, num_hard_negatives=6, loss="none"),
    "query",
    _WITH_Q,
  ),
  (
    dict(
      correction="standard",
      remove_accidental_hits=True,
      num_hard_negatives=5,
      loss="mean",
    ),
    "query",
    dict(_WITH_Q, sample_weight="weight", score_mask="mask"),
  ),
]


def _stream():
  rng = np.random.default_rng(1)
  p = np.arange(1, VOCAB + 1) ** -1.2
  sizes = [24] * 10
  sizes[3] = 5  # two batch sizes: multi-hit steps of both kinds, few shapes to compile
  return [rng.choice(VOCAB, size=n, p=p / p.sum()).astype(np.int32) for n in sizes]


HASH_CONFIGS = {
  "a": dict(num_buckets=16, num_hashes=2, alpha=0.2, seed=3),
  "b": dict(num_buckets=16, num_hashes=3, alpha=0.3, warmup=False, seed=1),
  "c": dict(num_buckets=2**20, num_hashes=1, alpha=0.05, pending_gap=False, seed=11),
}


def _cases():
  out = {}
  for name, case in LOSS_CASES.items():
    for key, value in case.items():
      if key != "dtype":
        value = np.asarray(value, np.float32) if key != "valid" else value
      out[f"{name}/{key}"] = np.asarray(value)
    out.setdefault(f"{name}/dtype", np.array("float32"))
  for i, (kwargs, call) in enumerate(TASK_CASES):
    case = _task_case(i)
    case["log_prob"] = np.log(case["prob"])
    for key, value in case.items():
      out[f"task/{i}/{key}"] = value.astype(np.float32) if value.dtype == np.float64 else value
    out[f"task/{i}/kwargs"] = np.array(repr(kwargs))
    out[f"task/{i}/call"] = np.array(repr(call))
  for i, (kwargs, layout, call) in enumerate(SAMPLER_TASK_CASES):
    for key, value in _sampler_task_case(i, layout).items():
      out[f"sampler_task/{i}/{key}"] = value
    out[f"sampler_task/{i}/kwargs"] = np.array(repr(kwargs))
    out[f"sampler_task/{i}/call"] = np.array(repr(call))
  rng = np.random.default_rng(3)
  out["layers/logits"] = rng.normal(0, 3, (5, 8)).astype(np.float32)
  out["layers/q"] = rng.dirichlet(np.ones(8)).astype(np.float32)
  out["layers/ids"] = np.array([3, 1, 3, 4, 1, 5, 6, 3], np.int32)
  out["layers/labels"] = np.eye(5, 8, dtype=np.float32)
  out["mask/pos"] = np.array([1, 2, 3, 2], np.int32)
  out["mask/neg"] = np.array([2, 2, 5, 1, 3], np.int32)
  out["mask/neg_rows"] = rng.integers(1, 4, (4, 5)).astype(np.int32)
  out["lqp/neg"] = np.log(rng.dirichlet(np.ones(6))).astype(np.float32)
  out["lqp/pos"] = np.log(np.array([0.01, 0.3, 0.7, 0.999999])).astype(np.float32)
  out["hash/keys"] = np.concatenate(
    [rng.integers(0, 2**31 - 1, 500), np.arange(50), [2**31 - 1, 2**31 - 2]]
  ).astype(np.int32)
  stream = _stream()
  out["stream/n"] = np.array(len(stream))
  for i, ids in enumerate(stream):
    out[f"stream/{i}"] = ids
  out["stream/probe"] = np.arange(VOCAB, dtype=np.int32).reshape(4, 10)
  out["stream/vocab"] = np.array(VOCAB)
  out["stream/table"] = np.arange(VOCAB) % 7
  for name, cfg in HASH_CONFIGS.items():
    out[f"hash_cfg/{name}"] = np.array(repr(cfg))
  out["neg/pos_ids"] = np.array([3, 5, 3, 7, 1, 5, 9, 2], np.int32)
  out["neg/pos_valid"] = np.array([1, 1, 1, 1, 0, 1, 1, 1], bool)
  out["neg/emb_table"] = rng.normal(size=(12, 4)).astype(np.float32)
  out["neg/query"] = rng.normal(size=(8, 4)).astype(np.float32)
  out["neg/counts"] = np.array([0, 5, 3, 9, 1, 4, 0, 2, 0, 6, 1, 1])
  out["neg/k_u"] = np.array(6)
  out["neg/table_ids"] = np.array([2, 4, 6, 8, 10], np.int32)
  return out


CASES = _cases()
_RUNS = {}


def _clean_env(backend, tensorflow=False):
  """The worker's environment: Keras 3 on ``backend``; TensorFlow hidden off the tensorflow
  backend unless ``tensorflow`` (tests/without_tensorflow.py)."""
  env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
  env.update(
    KERAS_BACKEND=backend,
    TF_CPP_MIN_LOG_LEVEL="3",
    PYTHONPATH=str(ROOT),
    JAX_PLATFORMS="cpu",
    CUDA_VISIBLE_DEVICES="",
  )
  return env if tensorflow else without_tensorflow.for_backend(env, backend)


def _start_workers(tmp_path_factory):
  """Starts one worker per installed backend at once (they overlap on the CPU cores)."""
  directory = tmp_path_factory.mktemp("keras3_backends")
  cases = directory / "cases.npz"
  np.savez(cases, **CASES)
  for backend in BACKENDS:
    out = directory / f"{backend}.npz"
    proc = subprocess.Popen(
      [sys.executable, str(HERE / "backend_worker.py"), str(cases), str(out)],
      env=_clean_env(backend),
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    _RUNS[backend] = [proc, out, None]


def results(backend, tmp_path_factory):
  """The worker's results on one backend (each worker runs once per session)."""
  if not _RUNS:
    _start_workers(tmp_path_factory)
  run = _RUNS[backend]
  if run[2] is None:
    proc, out, _ = run
    _, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, (
      f"Keras 3 worker failed on backend {backend} (is it "
      f"installed? pip install -e '.[keras3]'):\n{stderr[-4000:]}"
    )
    run[2] = dict(np.load(out, allow_pickle=False))
  return run[2]


@pytest.fixture(params=BACKENDS)
def res(request, tmp_path_factory):
  return results(request.param, tmp_path_factory)


# ---- helpers on the tf-keras side ----------------------------------------------------------


def _tf_loss(case, correction, q_prime="exact", dtype=tf.float32, ratio_floor=0.0):
  s_p = tf.constant(case["s_p"], dtype)
  s_n = tf.constant(case["s_n"], dtype)
  with tf.GradientTape() as tape:
    tape.watch([s_p, s_n])
    out = tf_losses.sampled_softmax_loss(
      s_p,
      s_n,
      tf.constant(case["lq_n"], tf.float32),
      correction=correction,
      positive_log_q=tf.constant(case["lq_p"], tf.float32),
      valid_mask=tf.constant(case["valid"]),
      q_prime=q_prime,
      ratio_floor=ratio_floor,
    )
    total = tf.reduce_sum(out.loss)
  gp, gn = tape.gradient(total, [s_p, s_n])
  return out.loss.numpy(), out.weight.numpy(), out.num_valid.numpy(), gp.numpy(), gn.numpy()


# ---- the process -----------------------------------------------------------------------------


def test_worker_process_uses_only_keras3(res):
  """No TF_USE_LEGACY_KERAS, no tf_keras; JAX and PyTorch processes never load TensorFlow."""
  assert str(res["env/legacy_keras_var"]) == ""
  assert not bool(res["env/tf_keras_loaded"])
  if str(res["env/backend"]) != "tensorflow":
    assert not bool(res["env/tensorflow_loaded"])


# ---- losses ----------------------------------------------------------------------------------


@pytest.mark.parametrize("case_name", [f"loss/{i}" for i in range(4)])
def test_losses_weights_gradients_equal_numpy_and_tf_keras(res, case_name):
  case = LOSS_CASES[case_name]
  for correction in CORRECTIONS:
    for q_prime in ("exact", "proxy") if correction == "corrected" else ("exact",):
      tag = f"{case_name}/{correction}/{q_prime}"
      want = ref.loss_and_grads(
        case["s_p"], case["s_n"], case["lq_n"], case["lq_p"], case["valid"], correction, q_prime
      )
      tf_out = _tf_loss(case, correction, q_prime)
      got = [res[tag + k] for k in ("/loss", "/weight", "/grad_pos", "/grad_neg")]
      for g, w, t in zip(got, want, [tf_out[0], tf_out[1], tf_out[3], tf_out[4]]):
        np.testing.assert_allclose(g, w, atol=2e-5, rtol=2e-5, err_msg=tag)
        np.testing.assert_allclose(g, t, atol=2e-6, rtol=2e-6, err_msg=tag)
      np.testing.assert_array_equal(res[tag + "/num_valid"], case["valid"].sum(1))


@pytest.mark.parametrize("case_name,dtype", [("loss/f16", tf.float16), ("loss/bf16", tf.bfloat16)])
def test_half_precision_scores_are_computed_in_float32(res, case_name, dtype):
  """float16 / bfloat16 scores give a float32 loss equal to the tf-keras path's (same rounding
  of the inputs, then float32 arithmetic)."""
  case = LOSS_CASES[case_name]
  for correction in CORRECTIONS:
    tag = f"{case_name}/{correction}/exact"
    assert str(res[tag + "/loss_dtype"]) == "float32"
    loss, weight = _tf_loss(case, correction, dtype=dtype)[:2]
    np.testing.assert_allclose(res[tag + "/loss"], loss, rtol=1e-6, atol=1e-6, err_msg=tag)
    np.testing.assert_allclose(res[tag + "/weight"], weight, rtol=1e-6, atol=1e-6, err_msg=tag)


def test_huge_and_infinite_scores_give_the_tf_keras_limits_without_nan_gradients(res):
  """Rows: huge finite scores, s_p = +inf (0), s_p = -inf (+inf), -inf negatives (drop out),
  a negative at +inf (+inf), all negatives -inf (0): the values of the tf-keras path, and
  finite gradients wherever the loss is finite."""
  case = LOSS_CASES["loss/extreme"]
  for correction in CORRECTIONS:
    tag = f"loss/extreme/{correction}/exact"
    loss, weight = _tf_loss(case, correction)[:2]
    np.testing.assert_allclose(res[tag + "/loss"], loss, rtol=1e-6, err_msg=tag)
    np.testing.assert_allclose(res[tag + "/weight"], weight, rtol=1e-6, err_msg=tag)
    finite = np.isfinite(res[tag + "/loss"])
    assert finite[[0, 1, 3, 5]].all() and res[tag + "/loss"][1] == 0.0, tag
    assert np.isfinite(res[tag + "/grad_pos"][finite]).all(), tag
    assert np.isfinite(res[tag + "/grad_neg"][finite]).all(), tag


def test_ratio_floor_equals_tf_keras(res):
  np.testing.assert_allclose(
    res["ratio_floor/loss"],
    _tf_loss(LOSS_CASES["loss/0"], "corrected", ratio_floor=0.3)[0],
    rtol=1e-6,
    atol=1e-6,
  )


def test_shared_formulas_on_tensorflow_equal_the_tf_keras_losses():
  """core.sampled_softmax with tf_ops() is the tf-keras loss (the one source of truth)."""
  ops = core_ops.tf_ops()
  for name in ("loss/0", "loss/1", "loss/extreme"):
    case = LOSS_CASES[name]
    for correction in CORRECTIONS:
      loss, weight, n = core_sampled_softmax.sampled_softmax(
        ops,
        tf.constant(case["s_p"], tf.float32),
        tf.constant(case["s_n"], tf.float32),
        tf.constant(case["lq_n"], tf.float32),
        tf.constant(case["lq_p"], tf.float32),
        tf.constant(case["valid"]),
        correction,
      )
      want = _tf_loss(case, correction)
      np.testing.assert_allclose(loss.numpy(), want[0], rtol=1e-6, atol=1e-7)
      np.testing.assert_allclose(weight.numpy(), want[1], rtol=1e-6, atol=1e-7)
      np.testing.assert_array_equal(n.numpy(), want[2])


# ---- the task --------------------------------------------------------------------------------


_TF_REDUCTIONS = {
  "sum": tf.keras.losses.Reduction.SUM,
  "mean": tf.keras.losses.Reduction.SUM_OVER_BATCH_SIZE,
  "none": tf.keras.losses.Reduction.NONE,
}


def _tf_loss_object(name):
  """The tf-keras task's ``loss`` for a Keras 3 reduction name."""
  return tf.keras.losses.CategoricalCrossentropy(from_logits=True, reduction=_TF_REDUCTIONS[name])


def _tf_task(kwargs):
  kwargs = dict(kwargs)
  if "loss" in kwargs:
    kwargs["loss"] = _tf_loss_object(kwargs["loss"])
  return tf_tasks.Retrieval(**kwargs)


@pytest.mark.parametrize("index", range(len(TASK_CASES)))
def test_retrieval_equals_tf_keras_task(res, index):
  kwargs, call = TASK_CASES[index]
  base = f"task/{index}"
  query = tf.constant(CASES[base + "/query"])
  cand = tf.constant(CASES[base + "/cand"])
  with tf.GradientTape() as tape:
    tape.watch([query, cand])
    loss = _tf_task(kwargs)(
      query, cand, **{arg: tf.constant(CASES[f"{base}/{name}"]) for arg, name in call.items()}
    )
  g_query, g_cand = tape.gradient(loss, [query, cand])
  np.testing.assert_allclose(res[base + "/loss"], loss.numpy(), rtol=2e-6)
  np.testing.assert_allclose(res[base + "/grad_query"], g_query.numpy(), rtol=2e-5, atol=1e-6)
  np.testing.assert_allclose(res[base + "/grad_cand"], g_cand.numpy(), rtol=2e-5, atol=1e-6)


# ---- the task with a negative sampler ------------------------------------------------------------


def _np_sampler_task(case, kwargs, call):
  """The task's loss from the formulas of the tfrs_logq.tf_keras.retrieval docstring: the
  in-batch block, then the sampler block; under corrected / exact each block's Q' excludes p
  from its own proposal (log Q'(d) = log Q_blk(d) - log(1 - Q_blk(p))); k hardest by s - log Q'
  (s under none); reduced as ``loss``."""
  f64 = np.float64
  t = kwargs.get("temperature", 1.0)
  correction, q_prime = kwargs["correction"], kwargs.get("q_prime", "exact")
  q, c, ids = case["query"].astype(f64), case["cand"].astype(f64), case["ids"]
  a = q.shape[0]
  s_in = q @ c.T / t
  emb = case["table"][case["extra"]].astype(f64)
  s_ex = q @ emb.T / t if emb.ndim == 2 else np.einsum("ad,and->an", q, emb) / t
  drawn = np.broadcast_to(case["extra"], s_ex.shape)
  if correction == "corrected" or kwargs.get("remove_accidental_hits"):
    v_in = ids[:a, None] != ids[None, :]
  else:
    v_in = ~np.eye(a, len(ids), dtype=bool)
  if "score_mask" in call:
    v_in = v_in & case["mask"]
  valid = np.concatenate([v_in, drawn != ids[:a, None]], axis=1)
  lq_b = np.log(case["prob"].astype(f64)) if "candidate_sampling_probability" in call else None
  lq_b = np.zeros(len(ids)) if lq_b is None else lq_b
  lp_b, lp_s = lq_b[:a], case["lqp_s"].astype(f64)
  lq_in = np.broadcast_to(lq_b, s_in.shape)
  lq_ex = np.broadcast_to(case["lq_s"].astype(f64), s_ex.shape)
  if correction == "corrected" and q_prime == "exact":
    lq_in = lq_in - np.log1p(-np.exp(lp_b))[:, None]
    lq_ex = lq_ex - np.log1p(-np.exp(lp_s))[:, None]
  s_n, lq = np.concatenate([s_in, s_ex], 1), np.concatenate([lq_in, lq_ex], 1)
  k = kwargs.get("num_hard_negatives")
  if k:
    logits = np.where(valid, s_n if correction == "none" else s_n - lq, -np.inf)
    valid = valid & (logits >= -np.sort(-logits, axis=1)[:, k - 1 : k])
  s_p = np.diag(s_in[:, :a])
  losses = []
  for r in range(a):
    e, l = s_n[r][valid[r]], lq[r][valid[r]]
    if correction == "none":
      losses.append(-(s_p[r] - np.logaddexp.reduce(np.append(e, s_p[r]))))
    elif correction == "standard":
      pos = s_p[r] - lp_b[r]
      losses.append(-(pos - np.logaddexp.reduce(np.append(e - l, pos))))
    elif correction == "standard_no_positive":
      losses.append(-(s_p[r] - np.logaddexp.reduce(np.append(e - l, s_p[r]))))
    else:
      z = np.logaddexp.reduce(e - l)
      p_hat = 1.0 / (1.0 + np.exp(-(s_p[r] - z + np.log(e.size))))
      losses.append(-(1.0 - p_hat) * (s_p[r] - z))
  losses = np.array(losses)
  if "sample_weight" in call:
    losses = losses * case["weight"]
  reduction = kwargs.get("loss", "sum")
  return losses if reduction == "none" else losses.sum() / (a if reduction == "mean" else 1)


class _TfStubSampler:
  """The worker's stub sampler on the tf-keras front: the same fixed draws, log Q_s, Q_s(p)."""

  def __init__(self, case):
    self.case = case

  def score(
    self,
    query,
    positive_ids,
    positive_embeddings,
    *,
    temperature=1.0,
    seed=None,
    sequence_ids=None,
    item_table=None,
    valid=None,
  ):
    del seed, sequence_ids, item_table, valid
    from tfrs_logq.tf_keras.negatives import scoring

    extra = tf.constant(self.case["extra"], tf.int64)
    emb = tf.gather(tf.constant(self.case["table"]), extra)
    if emb.shape.rank == 2:
      scores = tf.matmul(query, emb, transpose_b=True) / temperature
    else:
      scores = tf.einsum("ad,and->an", query, emb) / temperature
    drawn = tf.broadcast_to(extra, tf.shape(scores))
    return scoring.ScoredCandidates(
      tf.reduce_sum(query * positive_embeddings, -1) / temperature,
      scores,
      tf.constant(self.case["lq_s"]),
      tf.not_equal(drawn, tf.cast(positive_ids, tf.int64)[:, None]),
      tf.constant(self.case["lqp_s"]),
    )


def _sampler_case_arrays(index):
  base = f"sampler_task/{index}"
  return {k[len(base) + 1 :]: v for k, v in CASES.items() if k.startswith(base + "/")}


@pytest.mark.parametrize("index", range(len(SAMPLER_TASK_CASES)))
def test_sampler_block_is_joined_as_the_tf_keras_task_joins_it(res, index):
  """negative_sampler: its block after the in-batch one, each block's own Q(p) in Q' under
  corrected / exact, log Q unchanged under proxy / standard, zeros for none, its own hit
  mask, k hardest over both blocks: the numpy formula and the tf-keras task (loss and
  gradients) on the same inputs."""
  kwargs, _, call = SAMPLER_TASK_CASES[index]
  case = _sampler_case_arrays(index)
  base = f"sampler_task/{index}"
  np.testing.assert_allclose(
    res[base + "/loss"], _np_sampler_task(case, kwargs, call), rtol=2e-5, atol=2e-6
  )
  query, cand = tf.constant(case["query"]), tf.constant(case["cand"])
  task = _tf_task(dict(kwargs, negative_sampler=_TfStubSampler(case)))
  with tf.GradientTape() as tape:
    tape.watch([query, cand])
    loss = task(query, cand, **{arg: tf.constant(case[name]) for arg, name in call.items()})
  g_query, g_cand = tape.gradient(loss, [query, cand])
  np.testing.assert_allclose(res[base + "/loss"], loss.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(res[base + "/grad_query"], g_query.numpy(), rtol=2e-5, atol=1e-6)
  np.testing.assert_allclose(res[base + "/grad_cand"], g_cand.numpy(), rtol=2e-5, atol=1e-6)


def test_sampler_keywords_follow_its_score_signature_and_errors_match_tf_keras(res):
  """A sampler's score gets the keywords it takes (a stub naming temperature, seed, item_table;
  none of sequence_ids / valid: the task passing one is a TypeError), a value for one it does
  not take is a TypeError; the tf-keras task's errors: no candidate_ids, max-sim queries, no
  positive_log_q under corrected / exact, not a sampler, get_config."""
  want = res["sampler_task/0/loss"]
  np.testing.assert_allclose(res["sampler/midx_like/loss"], want, rtol=1e-6)
  np.testing.assert_allclose(res["sampler/temperature_only/loss"], want, rtol=1e-6)
  np.testing.assert_array_equal(res["sampler/midx_like/seed"], [3, 4])
  expected = {
    "no_ids": ("ValueError", "candidate_ids"),
    "max_sim": ("ValueError", "max-sim"),
    "no_positive_log_q": ("ValueError", "positive_log_q"),
    "not_a_sampler": ("TypeError", "negative_sampler"),
    "get_config": ("NotImplementedError", "negative sampler"),
    "seed_not_taken": ("TypeError", "seed="),
  }
  for name, (kind, words) in expected.items():
    got = str(res[f"sampler/error/{name}"])
    assert got.startswith(kind + ":") and words in got, (name, got)


def test_core_retrieval_steps_on_tensorflow():
  """core.retrieval's shared steps with tf_ops(): the in-batch mask, the positives, the sampler
  block's log Q (rebased only under corrected / exact) and the join of [N] and [A, N] blocks."""
  from tfrs_logq.core import retrieval as core_retrieval

  ops = core_ops.tf_ops()
  rng = np.random.default_rng(7)
  scores = rng.normal(size=(3, 5)).astype(np.float32)
  hits = rng.uniform(size=(3, 5)) > 0.3
  mask = rng.uniform(size=(3, 5)) > 0.3
  np.testing.assert_array_equal(
    core_retrieval.in_batch_valid(ops, 3, 5).numpy(), ~np.eye(3, 5, dtype=bool)
  )
  np.testing.assert_array_equal(
    core_retrieval.in_batch_valid(ops, 3, 5, tf.constant(hits), mask).numpy(), hits & mask
  )
  log_q = np.log(rng.dirichlet(np.ones(5))).astype(np.float32)
  s_p, lp = core_retrieval.positives(ops, tf.constant(scores), tf.constant(log_q), 3)
  np.testing.assert_array_equal(s_p.numpy(), np.diag(scores))
  np.testing.assert_array_equal(lp.numpy(), log_q[:3])
  assert core_retrieval.positives(ops, tf.constant(scores), None, 3)[1] is None
  block_lq = np.log(rng.dirichlet(np.ones(4))).astype(np.float32)
  block_lp = np.log(np.array([0.1, 0.4, 0.05], np.float32))
  for correction, q_prime in (("corrected", "proxy"), ("standard", "exact"), ("none", "exact")):
    same = core_retrieval.sampled_block_log_q(ops, correction, q_prime, block_lq, None, lp)
    assert same is block_lq
  rebased = core_retrieval.sampled_block_log_q(
    ops, "corrected", "exact", tf.constant(block_lq), tf.constant(block_lp), lp
  )
  shift = np.log1p(-np.exp(block_lp)) - np.log1p(-np.exp(log_q[:3]))
  np.testing.assert_allclose(rebased.numpy(), block_lq[None, :] - shift[:, None], rtol=1e-6)
  keep = rng.uniform(size=(3, 4)) > 0.4  # entries that take no part keep their own log Q
  masked = core_retrieval.sampled_block_log_q(
    ops, "corrected", "exact", tf.constant(block_lq), tf.constant(block_lp), lp, tf.constant(keep)
  )
  want = np.where(keep, block_lq[None, :] - shift[:, None], block_lq[None, :])
  np.testing.assert_allclose(masked.numpy(), want, rtol=1e-6)
  with pytest.raises(ValueError, match="positive_log_q"):
    core_retrieval.sampled_block_log_q(ops, "corrected", "exact", block_lq, None, lp)
  block_s = rng.normal(size=(3, 4)).astype(np.float32)
  block_v = np.array([True, False, True, True])
  for lq_b, want_lq in (
    (block_lq, np.concatenate([log_q, block_lq])),  # [N] blocks stay [C + N]
    (rebased, np.concatenate([np.broadcast_to(log_q, (3, 5)), rebased.numpy()], 1)),
  ):
    s, lq, v = core_retrieval.join_blocks(
      ops,
      (tf.constant(scores), tf.constant(log_q), tf.constant(hits)),
      (tf.constant(block_s), lq_b, tf.constant(block_v)),
    )
    np.testing.assert_array_equal(s.numpy(), np.concatenate([scores, block_s], 1))
    np.testing.assert_allclose(lq.numpy(), want_lq, rtol=1e-6)
    np.testing.assert_array_equal(v.numpy(), np.concatenate([hits, np.tile(block_v, (3, 1))], 1))
  _, lq, _ = core_retrieval.join_blocks(
    ops, (tf.constant(scores), None, tf.constant(hits)), (tf.constant(block_s), None, block_v)
  )
  np.testing.assert_array_equal(lq.numpy(), np.zeros(9))  # correction none: zeros


def _tf_task_loss(*args, **kwargs):
  base = "task/0"
  return tf_tasks.Retrieval(*args, **kwargs)(
    tf.constant(CASES[base + "/query"]),
    tf.constant(CASES[base + "/cand"]),
    candidate_sampling_probability=tf.constant(CASES[base + "/prob"]),
    candidate_ids=tf.constant(CASES[base + "/ids"]),
  ).numpy()


def test_loss_argument_maps_reductions_as_tf_keras_and_reduction_is_deprecated(res):
  """loss= takes a reduction name or a CategoricalCrossentropy(from_logits=True) (sum -> sum,
  sum_over_batch_size / mean -> mean, none -> none: the tf-keras task's values); reduction=
  gives the same result with one DeprecationWarning; bad losses are ValueErrors."""
  for name in ("sum", "mean", "none"):
    want = _tf_task_loss(loss=_tf_loss_object(name), correction="standard")
    np.testing.assert_allclose(res[f"args/loss/{name}"], want, rtol=2e-6, err_msg=name)
    np.testing.assert_array_equal(res[f"args/reduction/{name}"], res[f"args/loss/{name}"])
    assert res[f"args/loss/{name}/warnings"].size == 0
    (warning,) = res[f"args/reduction/{name}/warnings"]
    assert "reduction=" in warning and "loss=" in warning
  np.testing.assert_allclose(
    res["args/loss/sum"], _tf_task_loss(correction="standard"), rtol=2e-6
  )  # the default of both: a sum, as TFRS
  cce = {"sum": "sum", "sum_over_batch_size": "mean", "mean": "mean", "none": "none"}
  for name, reduction in cce.items():
    assert str(res[f"args/cce/{name}/reduction"]) == reduction, name
    np.testing.assert_array_equal(res[f"args/cce/{name}"], res[f"args/loss/{reduction}"])
  assert str(res["args/cce/default/reduction"]) == "mean"  # sum_over_batch_size, as tf-keras
  for name in (
    "loss_name",
    "loss_probabilities",
    "loss_smoothing",
    "loss_mse",
    "loss_weighted_mean",
    "loss_and_reduction",
    "metrics",
    "batch_metrics",
  ):
    assert str(res[f"args/error/{name}"]).startswith("ValueError:"), name
  assert str(res["args/empty_metrics"]) == ""


def test_positional_arguments_follow_tf_keras_and_the_former_order_warns(res):
  """The tf-keras order (loss, metrics, batch_metrics, loss_metrics, temperature,
  num_hard_negatives, remove_accidental_hits, name, correction, q_prime) gives the tf-keras
  task's loss; the former order (a correction name first) still works with a
  DeprecationWarning, Retrieval("none") included; a config written with reduction= loads."""
  want = _tf_task_loss(_tf_loss_object("mean"), None, None, None, 0.5, 4, True, "t", "standard")
  np.testing.assert_allclose(res["args/positional"], want, rtol=2e-6)
  assert res["args/positional/warnings"].size == 0
  assert str(res["args/positional/name"]) == "positional"
  np.testing.assert_array_equal(res["args/former"], res["args/positional"])
  (warning,) = res["args/former/warnings"]
  assert "positional" in warning and "keyword" in warning
  assert str(res["args/former_none/correction"]) == "none"
  assert str(res["args/former_none/reduction"]) == "sum"
  assert res["args/former_none/warnings"].size == 1
  assert str(res["args/error/former_too_many"]).startswith("TypeError:")
  assert str(res["args/error/former_twice"]).startswith("TypeError:")
  want = _tf_task_loss(loss=_tf_loss_object("mean"), correction="standard", temperature=0.5)
  np.testing.assert_allclose(res["args/old_config"], want, rtol=2e-6)
  assert res["args/old_config/warnings"].size == 0
  assert str(res["args/old_config/loss"]) == "mean"


# ---- layers ----------------------------------------------------------------------------------


def test_sampling_probability_correction_is_logits_minus_log_q_unclipped(res):
  logits, q = CASES["layers/logits"], CASES["layers/q"]
  want = logits - np.log(q)[None, :]
  tf_layer = tf_correction.SamplingProbabilityCorrection()
  for key in ("spc/prob", "spc/log", "spc/rows"):
    np.testing.assert_allclose(res[key], want, rtol=1e-6, atol=1e-6, err_msg=key)
  np.testing.assert_allclose(res["spc/prob"], tf_layer(logits, q).numpy(), rtol=1e-6)
  assert str(res["spc/float16_dtype"]) == "float16"
  np.testing.assert_allclose(
    res["spc/float16"], tf_layer(tf.constant(logits, tf.float16), q).numpy(), rtol=1e-3
  )
  # epsilon given: keras-rs's clip to [epsilon, 1]
  np.testing.assert_allclose(
    res["spc/clip"], logits - np.log(np.clip(q * 1e-4, 1e-3, 1.0)), rtol=1e-6
  )
  assert bool(res["spc/raises_zero"]) and bool(res["spc/raises_above_one"])


def test_remove_accidental_hits_masks_duplicates_of_the_positive(res):
  logits, labels, ids = CASES["layers/logits"], CASES["layers/labels"], CASES["layers/ids"]
  positive_ids = ids[labels.argmax(1)]
  duplicate = (ids[None, :] == positive_ids[:, None]) & (labels == 0)
  assert duplicate.any()
  for dtype, lowest in (("float32", np.finfo(np.float32).min / 100), ("float16", -6e4)):
    assert str(res[f"rah/{dtype}_dtype"]) == dtype
    want = np.where(duplicate, lowest, logits.astype(dtype).astype(np.float64))
    np.testing.assert_allclose(res[f"rah/{dtype}"], want, rtol=1e-6)
    tf_out = tf_hits.RemoveAccidentalHits()(labels, tf.constant(logits.astype(dtype)), ids)
    np.testing.assert_allclose(res[f"rah/{dtype}"], tf_out.numpy().astype(np.float64), rtol=1e-6)
  np.testing.assert_allclose(res["rah/rows"], res["rah/float32"].astype(np.float32))


def test_accidental_hit_mask_and_log_q_prime(res):
  pos, neg, rows = CASES["mask/pos"], CASES["mask/neg"], CASES["mask/neg_rows"]
  np.testing.assert_array_equal(res["mask"], pos[:, None] != neg[None, :])
  np.testing.assert_array_equal(res["mask_rows"], pos[:, None] != rows)
  lq_n, lq_p = CASES["lqp/neg"].astype(np.float64), CASES["lqp/pos"].astype(np.float64)
  one_minus = np.maximum(1.0 - np.exp(lq_p), core_log_q.MIN_ONE_MINUS_Q)
  np.testing.assert_allclose(
    res["log_q_prime"], lq_n[None, :] - np.log(one_minus)[:, None], rtol=1e-5, atol=1e-5
  )


# ---- frequency estimators ----------------------------------------------------------------------


def np_bucket32(keys, seed, num_buckets):
  """Independent uint32 lowbias32 of key + (seed + 1) * 0x9e3779b9 (numpy wraps mod 2**32)."""
  x = keys.astype(np.int64).astype(np.uint32) + np.uint32(((seed + 1) * 0x9E3779B9) % 2**32)
  x = x ^ (x >> np.uint32(16))
  x = x * np.uint32(0x7FEB352D)
  x = x ^ (x >> np.uint32(15))
  x = x * np.uint32(0x846CA68B)
  x = x ^ (x >> np.uint32(16))
  return ((x & np.uint32(0x7FFFFFFF)) % np.uint32(num_buckets)).astype(np.int64)


def test_hash_is_lowbias32_bit_for_bit(res):
  with np.errstate(over="ignore"):
    assert np_bucket32(np.array([0]), -1, 2**31 - 1)[0] == 0  # lowbias32(0) = 0
    for seed in (0, 1, 7):
      for num_buckets in (1, 7, 1000, 2**20, 2**31 - 1):
        np.testing.assert_array_equal(
          res[f"hash/{seed}/{num_buckets}"], np_bucket32(CASES["hash/keys"], seed, num_buckets)
        )


def _numpy_hash_array(cfg):
  spec = importlib.util.spec_from_file_location(
    "_ref_hash_array", HERE.parent / "tf_keras" / "frequency" / "test_hash_array.py"
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)

  class Numpy32(module.NumpyHashArray):
    def slots(self, keys):
      with np.errstate(over="ignore"):
        return np.stack(
          [np_bucket32(np.asarray(keys), self.seed + i, self.h) + i * self.h for i in range(self.m)]
        )

  return Numpy32(
    cfg["num_buckets"],
    cfg["num_hashes"],
    cfg["alpha"],
    cfg.get("warmup", True),
    cfg.get("pending_gap", True),
    cfg["seed"],
  )


@pytest.mark.parametrize("cfg_name", sorted(HASH_CONFIGS))
def test_hash_array_matches_the_per_hit_numpy_reference(res, cfg_name):
  cfg = HASH_CONFIGS[cfg_name]
  reference = _numpy_hash_array(cfg)
  probe = CASES["stream/probe"]
  for i in range(int(CASES["stream/n"])):
    reference.update(CASES[f"stream/{i}"])
    np.testing.assert_allclose(
      res[f"hash_cfg/{cfg_name}/log_q/{i}"],
      reference.log_q(probe),
      rtol=1e-5,
      atol=1e-5,
      err_msg=f"step {i}",
    )
  np.testing.assert_array_equal(res[f"hash_cfg/{cfg_name}/last_step"], reference.a)
  np.testing.assert_allclose(res[f"hash_cfg/{cfg_name}/gap"], reference.b, rtol=1e-5)
  assert int(res[f"hash_cfg/{cfg_name}/step"]) == reference.t


def test_hash_array_equals_tf_keras_estimator_without_collisions(res):
  """With 2**20 buckets neither hash family collides on the 40 ids, so both estimators hold the
  same per-item state and must give the same log Q after every step."""
  cfg = HASH_CONFIGS["c"]
  ids = np.arange(VOCAB)
  with np.errstate(over="ignore"):
    assert np.unique(np_bucket32(ids, cfg["seed"], cfg["num_buckets"])).size == VOCAB
  est = tf_frequency.HashArrayEstimator(**cfg)
  assert np.unique(est._slots(tf.constant(ids, tf.int64)).numpy()).size == VOCAB
  for i in range(int(CASES["stream/n"])):
    est.update(tf.constant(CASES[f"stream/{i}"], tf.int64))
    np.testing.assert_allclose(
      res[f"hash_cfg/c/log_q/{i}"],
      est.log_q(tf.constant(CASES["stream/probe"], tf.int64)).numpy(),
      rtol=1e-6,
      atol=1e-6,
      err_msg=f"step {i}",
    )


def test_exact_counts_equal_numpy_and_tf_keras(res):
  probe = CASES["stream/probe"]
  est = tf_frequency.ExactCounts(VOCAB)
  counts = np.zeros(VOCAB)
  for i in range(int(CASES["stream/n"])):
    ids = CASES[f"stream/{i}"]
    counts += np.bincount(ids, minlength=VOCAB)
    est.update(tf.constant(ids, tf.int64))
    c, n = np.maximum(counts[probe], 1.0), counts.sum()
    np.testing.assert_allclose(res[f"exact/log_q/{i}"], np.log(c / n), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
      res[f"exact/log_one_minus_q/{i}"], np.log(np.maximum(n - c, 1.0) / n), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
      res[f"exact/log_q/{i}"], est.log_q(tf.constant(probe, tf.int64)).numpy(), rtol=1e-6
    )
  np.testing.assert_array_equal(res["exact/counts"], counts)
  np.testing.assert_allclose(
    res["exact/log_q_prime"],
    est.log_q_prime(
      tf.constant(probe[:5], tf.int64), tf.constant(probe[5:10, None], tf.int64)
    ).numpy(),
    rtol=1e-5,
    atol=1e-6,
  )
  table = CASES["stream/table"]
  np.testing.assert_allclose(
    res["table/log_q"], np.log(np.maximum(table[probe], 1) / table.sum()), rtol=1e-6
  )
  assert bool(res["exact/raises_out_of_range"])
  np.testing.assert_array_equal(res["exact/counts_after_bad"], counts)  # state untouched


# ---- negatives -------------------------------------------------------------------------------


def test_mixed_negatives_equal_the_tf_keras_pool_and_conventions(res):
  """Keras 3 keeps all B rows and masks duplicates / padding; the loss equals the tf-keras loss
  on the deduplicated pool + the same uniform draws, log Q under each convention equals the
  formula (tf-keras mixture_log_q for ``mixture``)."""
  pos_ids, valid = CASES["neg/pos_ids"], CASES["neg/pos_valid"]
  first = np.zeros_like(valid)
  seen = set()
  for i, (d, v) in enumerate(zip(pos_ids, valid)):
    if v and d not in seen:
      seen.add(d)
      first[i] = True
  np.testing.assert_array_equal(res["neg/first"], first)
  counts = CASES["neg/counts"]
  table = CASES["neg/emb_table"]
  lq_uni = np.log(np.maximum(counts, 1) / counts.sum())
  k_u, size, n_b = int(CASES["neg/k_u"]), table.shape[0] - 1, first.sum()
  query = CASES["neg/query"]
  from tfrs_logq.tf_keras.negatives import mixed as tf_mixed

  for convention in ("unigram", "mixture"):
    ids = res[f"neg/{convention}/ids"]
    uniform = ids[len(pos_ids) :]
    assert uniform.size == k_u and ((uniform >= 1) & (uniform < table.shape[0])).all()
    np.testing.assert_array_equal(
      res[f"neg/{convention}/valid"], np.concatenate([first, np.ones(k_u, bool)])
    )
    if convention == "unigram":
      want = lq_uni[ids]
    else:
      want = tf_mixed.mixture_log_q(lq_uni[ids], n_b, k_u, size).numpy()
      np.testing.assert_allclose(
        want, np.log((n_b * np.exp(lq_uni[ids]) + k_u / size) / (n_b + k_u)), rtol=1e-5
      )
    np.testing.assert_allclose(res[f"neg/{convention}/log_q"], want, rtol=1e-5, atol=1e-6)
    pool = np.concatenate([np.flatnonzero(first), len(pos_ids) + np.arange(k_u)])
    neg_ids, lq_n = ids[pool], res[f"neg/{convention}/log_q"][pool]
    s_p = (query * table[pos_ids]).sum(1) / 0.5
    s_n = query @ table[neg_ids].T / 0.5
    tf_out = tf_losses.sampled_softmax_loss(
      s_p.astype(np.float32),
      s_n.astype(np.float32),
      lq_n,
      correction="corrected",
      positive_log_q=res[f"neg/{convention}/positive_log_q"],
      valid_mask=pos_ids[:, None] != neg_ids[None, :],
    )
    np.testing.assert_allclose(
      res[f"neg/{convention}/loss"], tf_out.loss.numpy(), rtol=1e-5, atol=1e-6
    )


def test_per_query_uniform_negatives(res):
  ids, table_ids = res["per_query/ids"], CASES["neg/table_ids"]
  query, table = CASES["neg/query"], CASES["neg/emb_table"]
  pos_ids = CASES["neg/pos_ids"]
  assert ids.shape == (query.shape[0], 5) and np.isin(ids, table_ids).all()
  assert len({tuple(r) for r in ids}) > 1  # one draw per query
  np.testing.assert_allclose(res["per_query/log_q"], -np.log(table_ids.size), rtol=1e-6)
  s_p = (query * table[pos_ids]).sum(1)
  s_n = np.einsum("ad,and->an", query, table[ids])
  lq = np.full(ids.shape, -np.log(table_ids.size))
  want = ref.loss_and_grads(
    s_p,
    s_n,
    lq,
    np.full(len(pos_ids), -np.log(table_ids.size)),
    pos_ids[:, None] != ids,
    "corrected",
  )[0]
  np.testing.assert_allclose(res["per_query/loss"], want, rtol=1e-5, atol=1e-6)


# ---- compiled training and serialisation --------------------------------------------------------


def test_compiled_fit_updates_the_estimators_and_trains(res):
  """model.fit (jit / tf.function) with the estimator updated inside the step: compute_loss
  with mixed negatives, and the Retrieval task through add_loss with compile(optimizer)."""
  assert np.isfinite(res["fit/loss"]).all() and res["fit/loss"][-1] < res["fit/loss"][0]
  assert int(res["fit/estimator_step"]) == 8  # 2 epochs x 4 batches
  assert np.isfinite(res["add_loss/loss"]).all()
  np.testing.assert_array_equal(
    res["add_loss/counts"], 2 * np.bincount(res["fit/items"], minlength=12)
  )


SERIALISED = [
  "SampledSoftmaxLoss",
  "SamplingProbabilityCorrection",
  "RemoveAccidentalHits",
  "Retrieval",
  "RetrievalWithLossObject",
  "RetrievalWithEstimator",
  "ExactCounts",
  "HashArrayEstimator",
  "UniformNegatives",
  "MixedNegatives",
]


@pytest.mark.parametrize("name", SERIALISED)
def test_get_config_and_keras_file_round_trips(res, name):
  assert bool(res[f"serial/{name}/config_same"])
  i = 0
  while f"serial/{name}/{i}/before" in res:
    before = res[f"serial/{name}/{i}/before"]
    np.testing.assert_array_equal(res[f"serial/{name}/{i}/clone"], before)
    np.testing.assert_array_equal(res[f"serial/{name}/{i}/after"], before)
    i += 1
  assert i > 0


# ---- the environment switch --------------------------------------------------------------------


def _python(code, backend, tensorflow=False):
  return subprocess.run(
    [sys.executable, "-c", code],
    env=_clean_env(backend, tensorflow),
    capture_output=True,
    text=True,
    timeout=300,
  )


def test_keras3_path_works_after_tensorflow_under_keras3_and_guards_the_tf_keras_path():
  """import tensorflow (tf.keras = Keras 3) + import tfrs_logq.keras3 works; a later import of
  a tf-keras module still fails with the fix in the message, as the tf-keras front does."""
  code = (
    "import tensorflow as tf, keras; assert tf.keras.Model.__module__.startswith('keras')\n"
    "import tfrs_logq.keras3 as tlk, numpy as np\n"
    "print(float(tlk.Retrieval()(np.eye(2, 3, dtype='float32'), np.eye(3, dtype='float32'), "
    "candidate_sampling_probability=np.full(3, 0.2, 'float32'), candidate_ids=[1, 2, 3])))\n"
    "try:\n  import tfrs_logq.tf_keras.losses\nexcept ImportError as e:\n  print('ImportError', e)"
  )
  out = _python(code, "tensorflow")
  assert out.returncode == 0, out.stderr[-3000:]
  assert "ImportError" in out.stdout and "TF_USE_LEGACY_KERAS=1" in out.stdout, out.stdout
  assert np.isfinite(float(out.stdout.split()[0]))


def test_keras3_first_then_tf_keras_path_in_one_process():
  """JAX process: keras3 loads without TensorFlow; importing the tf-keras path afterwards sets
  TF_USE_LEGACY_KERAS=1 before TensorFlow loads."""
  code = (
    "import os, sys, keras, tfrs_logq.keras3\n"
    "print('tensorflow' in sys.modules, os.environ.get('TF_USE_LEGACY_KERAS'))\n"
    "import tfrs_logq.tf_keras.losses, tensorflow as tf\n"
    "print(os.environ['TF_USE_LEGACY_KERAS'], tf.keras.Model.__module__.split('.')[0])"
  )
  out = _python(code, "jax", tensorflow=True)
  assert out.returncode == 0, out.stderr[-3000:]
  assert out.stdout.split() == ["False", "None", "1", "tf_keras"], out.stdout


# ---- argument checks -----------------------------------------------------------------------------


def test_uniform_negatives_accepts_numpy_integers_and_rejects_bool_and_float():
  """num_negatives / id_range given as numpy integers work as Python ints (stored as int, so the
  config is plain JSON); bool and float are rejected. JAX process: no TensorFlow needed."""
  code = (
    "import json, numpy as np, keras\n"
    "from tfrs_logq.keras3 import negatives\n"
    "u = negatives.UniformNegatives(np.int64(5), id_range=(np.int32(2), np.int64(9)), "
    "seed=1)\n"
    "assert type(u.num_negatives) is int and u.num_negatives == 5, u.num_negatives\n"
    "assert u.id_range == (2, 9) and all(type(v) is int for v in u.id_range)\n"
    "json.dumps(u.get_config())\n"
    "print(tuple(keras.ops.shape(u())))\n"
    "m = negatives.MixedNegatives(np.int64(3), id_range=(1, 9), seed=1)\n"
    "assert type(m.uniform.num_negatives) is int\n"
    "cases = [(dict(num_negatives=b, id_range=(0, 9)), 'num_negatives')\n"
    "         for b in (True, 5.0, np.float32(5.0), np.int64(0))]\n"
    "cases += [(dict(num_negatives=2, id_range=b), 'id_range') "
    "for b in ((True, 9), (0.0, 9))]\n"
    "for kwargs, name in cases:\n"
    "  try:\n"
    "    negatives.UniformNegatives(**kwargs)\n"
    "  except ValueError as e:\n"
    "    assert name in str(e), e\n"
    "  else:\n"
    "    raise AssertionError(f'accepted {kwargs!r}')\n"
    "print('ok')"
  )
  out = _python(code, "jax")
  assert out.returncode == 0, out.stderr[-3000:]
  assert out.stdout.split() == ["(5,)", "ok"], out.stdout
