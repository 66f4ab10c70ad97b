"""The Keras 3 full softmax, BCE / gBCE, CountMinSketch, per-sequence uniform negatives and the
expected_count convention on every backend, against the tf-keras path and numpy references;
every estimator's ``update(ids, valid)`` against its update of the valid ids alone.

As test_backends.py: ``features_worker.py`` runs in a fresh Keras-3-only process per backend
(``KERAS_BACKEND`` = tensorflow, jax, torch); the tests compare its results with the tf-keras
implementation (this process) and numpy oracles written from the formulas.
"""

import importlib.util
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import without_tensorflow

HERE = pathlib.Path(__file__).resolve().parent
import numpy_reference as ref  # noqa: E402


def _load(name):
  spec = importlib.util.spec_from_file_location(f"_keras3_{name}", HERE / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


fc = _load("features_cases")

import tfrs_logq.tf_keras  # noqa: E402,F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import frequency as tf_frequency  # noqa: E402
from tfrs_logq.tf_keras import losses as tf_losses  # noqa: E402
from tfrs_logq.tf_keras import negatives as tf_negatives  # noqa: E402

import tensorflow as tf  # noqa: E402

BACKENDS = ["tensorflow", "jax", "torch"]
_RUNS = {}


def _clean_env(backend):
  env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
  env.update(
    KERAS_BACKEND=backend,
    TF_CPP_MIN_LOG_LEVEL="3",
    PYTHONPATH=str(HERE.parents[2]),
    JAX_PLATFORMS="cpu",
    CUDA_VISIBLE_DEVICES="",
  )
  return without_tensorflow.for_backend(env, backend)


def results(backend, tmp_path_factory):
  if not _RUNS:
    directory = tmp_path_factory.mktemp("keras3_features")
    for b in BACKENDS:  # all at once: they overlap on the cores
      out = directory / f"{b}.npz"
      proc = subprocess.Popen(
        [sys.executable, str(HERE / "features_worker.py"), str(out)],
        env=_clean_env(b),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(HERE),
      )
      _RUNS[b] = [proc, out, None]
  run = _RUNS[backend]
  if run[2] is None:
    proc, out, _ = run
    _, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, f"Keras 3 worker failed on {backend}:\n{stderr[-4000:]}"
    run[2] = dict(np.load(out, allow_pickle=False))
  return run[2]


@pytest.fixture(params=BACKENDS)
def res(request, tmp_path_factory):
  return results(request.param, tmp_path_factory)


def test_worker_is_keras3_only(res):
  assert str(res["env/legacy_keras_var"]) == "" and not bool(res["env/tf_keras_loaded"])


# ---- full softmax ------------------------------------------------------------------------------


def test_full_softmax_equals_numpy_and_tf_keras(res):
  c = fc.full_softmax_case()
  q, table, ids = (tf.constant(c[k]) for k in ("query", "table", "ids"))
  with tf.GradientTape() as tape:
    tape.watch([q, table])
    out = tf_losses.full_softmax_loss(q, ids, table, temperature=0.5, id_offset=1)
    total = tf.reduce_sum(out.loss)
  g_q, g_t = tape.gradient(total, [q, table])
  s = c["query"].astype(np.float64) @ c["table"].T / 0.5
  cols = c["ids"] - 1
  want = -s[np.arange(len(cols)), cols] + np.log(np.exp(s).sum(1))
  for key in ("full/loss", "full/layer"):
    np.testing.assert_allclose(res[key], want, rtol=1e-5)
    np.testing.assert_allclose(res[key], out.loss.numpy(), rtol=2e-6)
  np.testing.assert_array_equal(res["full/num_valid"], np.full(len(cols), 8))
  np.testing.assert_allclose(res["full/grad_query"], g_q.numpy(), rtol=2e-5, atol=1e-6)
  np.testing.assert_allclose(res["full/grad_table"], g_t.numpy(), rtol=2e-5, atol=1e-6)
  huge = tf_losses.full_softmax_loss(c["query"] * 1e18, c["ids"], c["table"], id_offset=1)
  assert np.isfinite(res["full/huge"]).all() and np.isfinite(res["full/huge_grad"]).all()
  np.testing.assert_allclose(res["full/huge"], huge.loss.numpy(), rtol=1e-6)
  assert "id_offset" in str(res["full/raises_low"]) and "id_offset" in str(res["full/raises_high"])


# ---- BCE / gBCE --------------------------------------------------------------------------------


def _np_gbce(c, beta):
  sp, sn, valid = (c[k].astype(np.float64) for k in ("s_p", "s_n", "valid"))
  softplus = lambda x: np.logaddexp(0.0, x)
  with np.errstate(invalid="ignore", over="ignore"):
    neg = np.where(valid.astype(bool), softplus(np.where(valid.astype(bool), sn, 0.0)), 0.0)
  return beta * softplus(-sp) + neg.sum(1)


@pytest.mark.parametrize("beta", fc.GBCE_BETAS)
def test_gbce_equals_numpy_and_tf_keras(res, beta):
  for name, c in (("gbce", fc.gbce_case()), ("gbce_extreme", fc.gbce_extreme_case())):
    tag = f"{name}/{beta}"
    s_p, s_n = tf.constant(c["s_p"]), tf.constant(c["s_n"])
    with tf.GradientTape() as tape:
      tape.watch([s_p, s_n])
      out = tf_losses.gbce_loss(s_p, s_n, beta=beta, valid_mask=c["valid"])
      total = tf.reduce_sum(out.loss)
    g_p, g_n = tape.gradient(total, [s_p, s_n])
    for key in ("/loss", "/layer"):
      np.testing.assert_allclose(res[tag + key], _np_gbce(c, beta), rtol=1e-6, err_msg=tag)
      np.testing.assert_allclose(res[tag + key], out.loss.numpy(), rtol=1e-6, err_msg=tag)
    assert np.isfinite(res[tag + "/loss"]).all(), tag  # masked NaN / inf, huge scores
    np.testing.assert_array_equal(res[tag + "/num_valid"], c["valid"].sum(1))
    np.testing.assert_allclose(res[tag + "/grad_pos"], g_p.numpy(), rtol=1e-6, err_msg=tag)
    np.testing.assert_allclose(res[tag + "/grad_neg"], g_n.numpy(), rtol=1e-6, err_msg=tag)
    assert np.isfinite(res[tag + "/grad_neg"]).all(), tag
  np.testing.assert_allclose(res["bce/loss"], _np_gbce(fc.gbce_case(), 1.0), rtol=1e-6)
  alpha = 256 / 2999
  assert math.isclose(float(res["gbce/beta"]), 1 - 0.75 * (1 - alpha))
  assert float(res["gbce/beta"]) == tf_losses.gbce_beta(256, 3000, 0.75)


# ---- CountMinSketch ----------------------------------------------------------------------------


def _numpy_count_min(cfg):
  spec = importlib.util.spec_from_file_location(
    "_ref_count_min", HERE.parent / "tf_keras" / "frequency" / "test_count_min.py"
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  np_bucket32 = _load_bucket32()

  class Numpy32(module.NumpyCountMin):
    def cells(self, keys):
      with np.errstate(over="ignore"):
        return np.stack(
          [np_bucket32(np.asarray(keys), self.seed + j, self.w) for j in range(self.d)]
        )

  return Numpy32(
    cfg["width"],
    cfg["depth"],
    cfg.get("conservative", False),
    cfg.get("half_life"),
    seed=cfg["seed"],
  )


def _load_bucket32():
  """test_backends.np_bucket32 (the independent uint32 reference of the Keras 3 hash)."""
  source = (HERE / "test_backends.py").read_text()
  start, end = source.index("def np_bucket32"), source.index("def test_hash_is_lowbias32")
  namespace = {"np": np}
  exec(source[start:end], namespace)
  return namespace["np_bucket32"]


@pytest.mark.parametrize("name", sorted(fc.COUNT_MIN_CONFIGS))
def test_count_min_matches_the_numpy_reference(res, name):
  cfg = fc.COUNT_MIN_CONFIGS[name]
  reference = _numpy_count_min(cfg)
  for i, ids in enumerate(fc.stream()):
    reference.update(ids)
    np.testing.assert_allclose(
      res[f"cms/{name}/estimate/{i}"], reference.estimate(fc.PROBE), rtol=1e-5, err_msg=f"step {i}"
    )
    np.testing.assert_allclose(
      res[f"cms/{name}/log_q/{i}"],
      reference.log_q(fc.PROBE),
      rtol=1e-5,
      atol=1e-6,
      err_msg=f"step {i}",
    )
  assert math.isclose(float(res[f"cms/{name}/total"]), reference.total, rel_tol=1e-6)
  assert int(res[f"cms/{name}/step"]) == len(fc.stream())


def test_count_min_equals_tf_keras_sketch_without_collisions(res):
  """Width 2**20: neither hash family collides on the 60 ids, so both sketches hold the true
  (decayed, conservative) counts and give the same log Q and log Q' after every step."""
  cfg = fc.COUNT_MIN_CONFIGS["wide"]
  bucket32 = _load_bucket32()
  with np.errstate(over="ignore"):
    for j in range(cfg["depth"]):
      assert (
        np.unique(bucket32(np.arange(fc.VOCAB), cfg["seed"] + j, cfg["width"])).size == fc.VOCAB
      )
  sketch = tf_frequency.CountMinSketch(**cfg)
  assert (
    np.unique(sketch._cells(tf.range(fc.VOCAB, dtype=tf.int64)).numpy()).size
    == cfg["depth"] * fc.VOCAB
  )
  for i, ids in enumerate(fc.stream()):
    sketch.update(tf.constant(ids, tf.int64))
    np.testing.assert_allclose(
      res[f"cms/wide/log_q/{i}"],
      sketch.log_q(fc.PROBE).numpy(),
      rtol=1e-6,
      atol=1e-6,
      err_msg=f"step {i}",
    )
  np.testing.assert_allclose(
    res["cms/wide/log_q_prime"],
    sketch.log_q_prime(fc.PROBE[0], fc.PROBE[1:3, :1]).numpy(),
    rtol=1e-5,
    atol=1e-6,
  )


# ---- update(ids, valid) ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(fc.MASKED_ESTIMATORS))
def test_masked_update_equals_the_update_of_the_valid_ids(res, name):
  """The padded stream with `valid` leaves every state variable where the stream itself leaves
  it (padding at random places with random ids, and a last batch with nothing valid, a no-op):
  integer state bit for bit, float state to 1e-6 (on JAX the masked update is compiled, which
  may round differently from the eager plain one). On JAX it is one program for batches with 40
  and 7 valid ids (traced once)."""
  prefix = f"masked/{name}/plain/"
  keys = [k[len(prefix) :] for k in res if k.startswith(prefix)]
  assert keys
  for key in keys:
    got, want = res[f"masked/{name}/masked/{key}"], res[prefix + key]
    assert got.dtype == want.dtype, key
    if np.issubdtype(want.dtype, np.integer):
      np.testing.assert_array_equal(got, want, err_msg=f"{name} {key}")
    else:
      np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=f"{name} {key}")
  assert int(res[f"masked/{name}/traces"]) == (1 if str(res["env/backend"]) == "jax" else 0)


def test_masked_update_bad_valid_is_a_clear_error(res):
  assert str(res["masked_bad/0"]).startswith("TypeError") and "valid must be bool" in str(
    res["masked_bad/0"]
  )
  assert str(res["masked_bad/1"]).startswith("ValueError") and "does not match ids" in str(
    res["masked_bad/1"]
  )
  assert str(res["masked_bad/2"]).startswith("ValueError") and "num_items" in str(
    res["masked_bad/2"]
  )
  assert str(res["masked_bad/3"]) == "no error"


# ---- negatives ---------------------------------------------------------------------------------


def _first(pos_ids, valid):
  first, seen = np.zeros_like(valid), set()
  for i, (d, v) in enumerate(zip(pos_ids, valid)):
    if v and d not in seen:
      seen.add(d)
      first[i] = True
  return first


def _tf_in_batch(c, convention):
  est = tf_frequency.ExactCounts(len(c["counts"]), counts=c["counts"])
  sampler = tf_negatives.InBatchNegatives(est, convention=convention, cross_replica=False)
  emb = c["emb_table"][c["pos_ids"]]
  return (
    sampler,
    sampler.pool(c["pos_ids"], emb, valid=c["pos_valid"]),
    sampler(c["pos_ids"], emb, valid=c["pos_valid"]),
  )


@pytest.mark.parametrize("convention", ["unigram", "mixture", "expected_count"])
def test_in_batch_log_q_equals_tf_keras(res, convention):
  c = fc.negatives_case()
  first = _first(c["pos_ids"], c["pos_valid"])
  np.testing.assert_array_equal(res[f"in_batch/{convention}/valid"], first)
  _, _, tf_negs = _tf_in_batch(c, convention)
  np.testing.assert_allclose(
    res[f"in_batch/{convention}/log_q"][first], tf_negs.log_q.numpy(), rtol=1e-5, atol=1e-6
  )
  np.testing.assert_allclose(
    res[f"in_batch/{convention}/positive_log_q"],
    tf_negs.positive_log_q.numpy(),
    rtol=1e-5,
    atol=1e-6,
  )
  if convention == "expected_count":  # log pi(d) - log U, pi = 1 - (1 - q)^B
    q = np.maximum(c["counts"], 1) / c["counts"].sum()
    b, u = c["pos_valid"].sum(), first.sum()
    want = np.log(1 - (1 - q[c["pos_ids"]]) ** b) - np.log(u)
    np.testing.assert_allclose(res["in_batch/expected_count/positive_log_q"], want, rtol=1e-5)


@pytest.mark.parametrize("per", ["batch", "sequence", "query"])
@pytest.mark.parametrize("convention", ["unigram", "mixture", "expected_count"])
def test_mixed_negatives_equal_tf_keras_log_q_and_loss(res, convention, per):
  """log Q of every slot equals the tf-keras MixedNegatives.log_q (same pool, same ids), and the
  corrected loss equals the tf-keras loss on the deduplicated pool + the same uniform draws."""
  c = fc.negatives_case()
  tag = f"mixed/{convention}/{per}"
  pos_ids, valid, table = c["pos_ids"], c["pos_valid"], c["emb_table"]
  first = _first(pos_ids, valid)
  ids = res[f"{tag}/ids"]
  k_u, b = c["k_u"], len(pos_ids)
  sampler, pool, _ = _tf_in_batch(c, convention)
  uniform = tf_negatives.UniformNegatives(None, k_u, id_range=(1, table.shape[0]), per=per)
  mixed = tf_negatives.MixedNegatives(sampler, uniform, convention=convention)
  want = mixed.log_q(tf.constant(ids, tf.int64), pool).numpy()
  slot_valid = res[f"{tag}/valid"]
  np.testing.assert_allclose(
    res[f"{tag}/log_q"][slot_valid], want[slot_valid], rtol=1e-5, atol=1e-6
  )
  np.testing.assert_allclose(
    res[f"{tag}/positive_log_q"],
    mixed.log_q(tf.constant(pos_ids, tf.int64), pool).numpy(),
    rtol=1e-5,
    atol=1e-6,
  )
  keep = np.concatenate([np.flatnonzero(first), b + np.arange(k_u)])
  query, pos_emb = c["query"], table[pos_ids]
  s_p = (query * pos_emb).sum(1) / 0.5
  if per == "batch":
    assert ids.shape == (b + k_u,)
    neg_ids, lq_n = ids[keep], res[f"{tag}/log_q"][keep]
    s_n = query @ table[neg_ids].T / 0.5
    hits = pos_ids[:, None] != neg_ids[None, :]
  else:
    assert ids.shape == (b, b + k_u)
    uni = ids[:, b:]
    if per == "sequence":  # one set per sequence, shared by its queries
      for s in np.unique(c["sequence_ids"][valid]):
        rows = np.flatnonzero((c["sequence_ids"] == s) & valid)
        assert (uni[rows] == uni[rows[0]]).all()
      assert len({tuple(r) for r in uni[valid]}) == np.unique(c["sequence_ids"][valid]).size
    else:  # one set per valid query (a padding query's set is not used)
      assert len({tuple(r) for r in uni[valid]}) == valid.sum()
    neg_ids, lq_n = ids[:, keep], res[f"{tag}/log_q"][:, keep]
    s_n = np.einsum("ad,and->an", query, table[neg_ids]) / 0.5
    hits = pos_ids[:, None] != neg_ids
  tf_out = tf_losses.sampled_softmax_loss(
    s_p.astype(np.float32),
    s_n.astype(np.float32),
    lq_n.astype(np.float32),
    correction="corrected",
    positive_log_q=res[f"{tag}/positive_log_q"],
    valid_mask=hits,
  )
  np.testing.assert_allclose(res[f"{tag}/loss"], tf_out.loss.numpy(), rtol=1e-5, atol=1e-6)
  lq_n_rows = np.broadcast_to(lq_n, s_n.shape)
  want_loss = ref.loss_and_grads(
    s_p, s_n, lq_n_rows, res[f"{tag}/positive_log_q"], hits, "corrected"
  )[0]
  np.testing.assert_allclose(res[f"{tag}/loss"], want_loss, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
  "per,layout,shape",
  [("batch", "shared", (5, 4)), ("sequence", "sequence", (2, 5, 4)), ("query", "query", (8, 5, 4))],
)
def test_mixed_negatives_blocks_score_as_the_whole_negatives(res, per, layout, shape):
  """MixedNegatives.blocks: the negatives of `call` (same seed: same ids, log Q, valid), the
  in-batch pool as one shared block and the k_u = 5 uniform draws as one block (per sequence:
  [B, k_u, d] on the [2, 4] grid of rows); score_blocks of them = score_negatives of `call`."""
  tag = f"blocks/{per}"
  assert list(res[f"{tag}/layouts"]) == ["shared", layout]
  assert tuple(res[f"{tag}/shapes"]) == shape
  for name in ("ids", "negative_log_q", "valid_mask", "positive_log_q"):
    np.testing.assert_array_equal(res[f"{tag}/blocks/{name}"], res[f"{tag}/call/{name}"], name)
  for name in ("positive_scores", "negative_scores"):
    np.testing.assert_allclose(
      res[f"{tag}/blocks/{name}"], res[f"{tag}/call/{name}"], rtol=1e-5, atol=1e-6, err_msg=name
    )


def test_per_sequence_draws_do_not_depend_on_where_the_padding_is(res):
  np.testing.assert_array_equal(res["per_sequence/pad_a"], res["per_sequence/pad_b"])
  sets = res["per_sequence/pad_a"]  # sequences 7, 7, 3, 9, 3
  assert (sets[0] == sets[1]).all() and (sets[2] == sets[4]).all()
  assert not (sets[0] == sets[2]).all() and not (sets[2] == sets[3]).all()


# ---- serialisation and argument checks ---------------------------------------------------------

SERIALISED = [
  "FullSoftmaxLoss",
  "GBCELoss",
  "CountMinSketch",
  "UniformNegativesPerSequence",
  "MixedNegativesExpectedCount",
  "SampledSoftmaxLossCheckScores",
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


def _tf_error(name, kwargs):
  makers = {
    "FullSoftmaxLoss": tf_losses.FullSoftmaxLoss,
    "GBCELoss": tf_losses.GBCELoss,
    "gbce_beta": tf_losses.gbce_beta,
    "CountMinSketch": tf_frequency.CountMinSketch,
    "UniformNegatives": lambda **kw: tf_negatives.UniformNegatives(None, **kw),
    "InBatchConvention": lambda **kw: tf_negatives.InBatchNegatives(**kw),
  }
  try:
    makers[name](**kwargs)
    return "no error"
  except Exception as e:
    return f"{type(e).__name__}: {e}"


def test_bad_arguments_raise_the_tf_keras_errors(res):
  for i, (name, kwargs) in enumerate(fc.BAD_ARGUMENTS):
    want = _tf_error(name, kwargs)
    assert want != "no error", (name, kwargs)
    assert str(res[f"bad/{i}"]) == want, (name, kwargs)
