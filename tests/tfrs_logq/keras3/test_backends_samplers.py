"""The Keras 3 MIDX sampler and the k_b in-batch subsample on every backend, against the tf-keras
path and numpy references.

As test_backends_features.py: ``samplers_worker.py`` runs in a fresh Keras-3-only process per
backend (``KERAS_BACKEND`` = tensorflow, jax, torch). This process builds the cases with the
tf-keras path (a refreshed tf-keras ``MIDXSampler`` whose state the worker copies into the
Keras 3 sampler; the tf-keras subsample keys) and compares the worker's results with tf-keras
and with numpy oracles written from the formulas:

* proposal: Q(i|z) = exp(s1[k1(i)] + s2[k2(i)]) / sum_j exp(s1[k1(j)] + s2[k2(j)]), normalised
  over ITEMS (not cells), in float64 from the codebooks and codes;
* index: k_l(i) = argmin_k ||x_i^l - c^l_k||^2 (pq halves / rq residual), cells, counts,
  offsets, every item exactly once, ascending rows inside a cell;
* draws: Pearson chi-square of many draws against Q(.|z);
* k_b: the kept ids are those of the tf-keras sampler with the same keys (n_b = min(U, k_b)),
  log Q equals the tf-keras convention's, and with random keys each distinct id is kept with
  probability k_b / U;
* cross-batch memory (``CrossBatchNegatives``): a Python list of the pushes as the FIFO, read
  newest first, dedup with the newest copy winning, log Q under ``unigram`` / ``expected_count``
  from the pushes' draws (``tfrs_logq.core.cross_batch``'s docstring), the row's accidental hits,
  the DESIGN.md corrected loss; stale embeddings, half precision, save / restore, gradients, a
  compiled JAX train step; ``join_blocks``'s rebase of each block's Q'.
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

import tfrs_logq.tf_keras  # noqa: E402,F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import frequency as tf_frequency  # noqa: E402
from tfrs_logq.tf_keras import losses as tf_losses  # noqa: E402
from tfrs_logq.tf_keras import negatives as tf_negatives  # noqa: E402
from tfrs_logq.tf_keras.negatives import in_batch as tf_in_batch  # noqa: E402
from tfrs_logq.tf_keras.negatives.midx import MIDXSampler as TfMIDXSampler  # noqa: E402

import tensorflow as tf  # noqa: E402


def _load(name):
  if str(HERE) not in sys.path:  # the worker modules import their siblings (backend_worker)
    sys.path.insert(0, str(HERE))
  spec = importlib.util.spec_from_file_location(f"_keras3_{name}", HERE / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


BACKENDS = ["tensorflow", "jax", "torch"]
QUANTIZERS = ("pq", "rq")
STATE = ("codebook_1", "codebook_2", "item_codes", "sorted_items", "cell_counts", "cell_offsets")
K, TEMPERATURE, N, D = 4, 0.5, 60, 6
KB_SIZES = (3, 5, 20)
FN_DRAWS = 300  # subsample_indices(6, 2) draws
KB_SEED = (3, 4)
NUM_RANDOM = 300
_RUNS = {}
_TF = {}  # quantizer -> the refreshed tf-keras sampler (built with the cases)
_CASES = {}


def correlated_halves(n, d, groups, rng, noise=0.05):
  """Items whose first-half cluster determines the second-half cluster: most PQ cells empty."""
  g = rng.integers(0, groups, size=n)
  h = d // 2
  c1, c2 = rng.normal(size=(groups, h)), rng.normal(size=(groups, d - h))
  return (np.concatenate([c1[g], c2[g]], axis=1) + noise * rng.normal(size=(n, d))).astype(
    np.float32
  )


def kb_case():
  rng = np.random.default_rng(21)
  return dict(
    pos_ids=np.array([3, 5, 3, 7, 1, 5, 9, 2, 11, 4, 9, 6], np.int32),
    valid=np.array([1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1], bool),
    emb=rng.normal(size=(13, 4)).astype(np.float32),
    query=rng.normal(size=(12, 4)).astype(np.float32),
    counts=np.array([0, 5, 3, 9, 1, 4, 2, 2, 1, 6, 1, 1, 3]),
  )


def tf_kb_sampler(convention, k_b):
  c = kb_case()
  est = tf_frequency.ExactCounts(len(c["counts"]), counts=c["counts"])
  return tf_negatives.InBatchNegatives(
    est, num_negatives=k_b, convention=convention, cross_replica=False
  ), est


CB_M, CB_V, CB_TEMPERATURE = 3, 13, 0.5
CB_PUSH_IDS = np.array(
  [
    [3, 5, 3, 7, 12, 1],
    [2, 5, 8, 8, 9, 0],
    [4, 6, 2, 10, 12, 3],
    [7, 7, 7, 1, 11, 0],
    [5, 9, 4, 6, 2, 12],
  ],
  np.int32,
)
CB_PUSH_VALID = np.array(
  [
    [1, 1, 1, 1, 0, 1],
    [1, 1, 1, 1, 1, 0],
    [1, 1, 1, 1, 0, 1],
    [1, 1, 1, 1, 1, 0],
    [1, 1, 1, 1, 1, 0],
  ],
  bool,
)  # id 12 is only ever a padding row
CB_COUNTS = np.array([1, 5, 3, 9, 2, 4, 2, 6, 1, 3, 1, 2, 7])
CB_TAGS = {  # the worker's CROSS_BATCH: tag -> (mode, S, convention, estimator)
  "ids_ec": ("ids", 6, "expected_count", "table"),
  "emb_sub_ec": ("embeddings", 3, "expected_count", "exact"),
  "ids_uni": ("ids", 6, "unigram", "exact"),
  "emb_uni": ("embeddings", 6, "unigram", "exact"),
}
CB_RUNS = ("ids_ec", "emb_sub_ec")  # read after 0, 1, ..., 5 pushes
CB_DTYPES = {"ids_uni": "float16", "emb_uni": "bfloat16"}  # read after 3 pushes
CB_NOT_COUNTED = 8  # the "table" estimator's log q_uni(8) = -inf
CB_SCORED_FIELDS = (
  "positive_scores",
  "negative_scores",
  "negative_log_q",
  "valid_mask",
  "positive_log_q",
)


def cross_batch_cases():
  rng = np.random.default_rng(31)
  log_q = np.log(CB_COUNTS / CB_COUNTS.sum()).astype(np.float32)
  table_log_q = log_q.copy()
  table_log_q[CB_NOT_COUNTED] = -np.inf
  table = rng.normal(size=(CB_V, 4)).astype(np.float32)
  cases = {
    "cb/num_batches": np.array(CB_M),
    "cb/push_ids": CB_PUSH_IDS,
    "cb/push_valid": CB_PUSH_VALID,
    "cb/counts": CB_COUNTS,
    "cb/log_q_table": table_log_q,
    "cb/table": table,
    "cb/push_tables": (table[None] + rng.normal(size=(5, CB_V, 4))).astype(np.float32),
    "cb/query": rng.normal(size=(4, 4)).astype(np.float32),
    "cb/pos_ids": np.array([5, 7, 2, 11], np.int32),
    "cb/pos_emb": rng.normal(size=(4, 4)).astype(np.float32),
    "cb/step_x": rng.normal(size=(3, 6, 4)).astype(np.float32),
  }
  for k, (n, per_query) in enumerate(((3, False), (2, False), (4, True))):
    cases[f"join/{k}/s_p"] = rng.normal(size=4).astype(np.float32)
    cases[f"join/{k}/s_n"] = rng.normal(size=(4, n)).astype(np.float32)
    shape = (4, n) if per_query else (n,)
    cases[f"join/{k}/lq"] = np.log(rng.uniform(0.01, 0.3, size=shape)).astype(np.float32)
    cases[f"join/{k}/valid"] = rng.uniform(size=(4, n)) < 0.8
    cases[f"join/{k}/pos_lq"] = np.log(rng.uniform(0.05, 0.5, size=4)).astype(np.float32)
  return cases


def build_cases():
  """The tf-keras side: refreshed samplers (state to copy), embeddings, subsample keys."""
  cases = {"midx/k": np.array(K), "midx/temperature": np.array(TEMPERATURE)}
  rng = np.random.default_rng(1)
  for q, structured in (("pq", True), ("rq", False)):
    emb = (
      correlated_halves(N, D, 4, rng) if structured else rng.normal(size=(N, D)).astype(np.float32)
    )
    sampler = TfMIDXSampler(
      num_codewords=K, quantizer=q, id_offset=1, seed=11, temperature=TEMPERATURE
    )
    sampler.refresh(emb)
    _TF[q] = sampler
    cases[f"midx/{q}/emb"] = emb
    for name in STATE:
      cases[f"midx/{q}/{name}"] = getattr(sampler, name).numpy()
    cases[f"midx/{q}/z"] = rng.normal(size=(3, D)).astype(np.float32)
    cases[f"midx/{q}/pos"] = np.array([1, 17, 60], np.int32)
    emb = rng.normal(size=(300, 7)).astype(np.float32)
    cases[f"refresh/{q}/emb"] = emb
    cases[f"refresh/{q}/moved"] = (emb * 1.5 + rng.normal(size=(1, 7))).astype(np.float32)
  cases["refresh/small"] = rng.normal(size=(3, 4)).astype(np.float32)
  cases["refresh/small_z"] = rng.normal(size=(2, 4)).astype(np.float32)
  rng = np.random.default_rng(8)
  cases["score/table"] = rng.normal(size=(31, 4)).astype(np.float32)  # row 0 = padding
  cases["score/z"] = rng.normal(size=(5, 4)).astype(np.float32)
  cases["score/pos"] = np.array([1, 5, 30, 5, 2], np.int32)
  cases["bad/emb"] = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
  c = kb_case()
  _, est = tf_kb_sampler("unigram", 3)
  cases.update(
    {
      "kb/pos_ids": c["pos_ids"],
      "kb/valid": c["valid"],
      "kb/emb": c["emb"],
      "kb/query": c["query"],
      "kb/sizes": np.array(KB_SIZES),
      "kb/num_random": np.array(NUM_RANDOM),
      "kb/log_q_table": est.log_q(tf.range(13, dtype=tf.int64)).numpy().astype(np.float32),
      "kb/keys": tf_in_batch._random_keys(
        len(c["pos_ids"]), tf.constant(KB_SEED, tf.int64)
      ).numpy(),
    }
  )
  cases["fn/log_q"] = np.array([-1.0, -3.0, -np.inf, -0.1], np.float32)
  cases["fn/draws"] = np.array(FN_DRAWS)
  cases.update(cross_batch_cases())
  _CASES.update(cases)
  return cases


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
    directory = tmp_path_factory.mktemp("keras3_samplers")
    cases_path = directory / "cases.npz"
    np.savez(cases_path, **build_cases())
    for b in BACKENDS:  # all at once: they overlap on the cores
      out = directory / f"{b}.npz"
      proc = subprocess.Popen(
        [sys.executable, str(HERE / "samplers_worker.py"), str(cases_path), str(out)],
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


# ---- numpy references --------------------------------------------------------------------------


def np_log_q(codebook_1, codebook_2, codes, quantizer, z, temperature=TEMPERATURE):
  """log Q(i|z) [A, N]: item logits s1[k1(i)] + s2[k2(i)] normalised over the items."""
  z = np.asarray(z, np.float64)
  c1, c2 = codebook_1.astype(np.float64), codebook_2.astype(np.float64)
  z1, z2 = (z[:, : c1.shape[1]], z[:, c1.shape[1] :]) if quantizer == "pq" else (z, z)
  logits = (z1 @ c1.T)[:, codes[:, 0]] / temperature + (z2 @ c2.T)[:, codes[:, 1]] / temperature
  m = logits.max(axis=1, keepdims=True)
  return logits - (m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True)))


def chi_square_p_value(observed, expected, min_expected=5.0):
  """Pearson chi-square goodness of fit; cells with expected < min_expected are pooled."""
  observed, expected = np.asarray(observed, np.float64), np.asarray(expected, np.float64)
  small = expected < min_expected
  obs = np.append(observed[~small], observed[small].sum())
  exp = np.append(expected[~small], expected[small].sum())
  keep = exp > 0
  obs, exp = obs[keep], exp[keep]
  stat = ((obs - exp) ** 2 / exp).sum()
  return float(tf.math.igammac((obs.size - 1) / 2.0, stat / 2.0).numpy()), stat


def check_index(state, emb, k, quantizer):
  """Every item in exactly one cell; cells hold exactly their items (ascending); codes nearest."""
  n = emb.shape[0]
  codes, order = state["item_codes"], state["sorted_items"]
  counts, offsets = state["cell_counts"], state["cell_offsets"]
  np.testing.assert_array_equal(np.sort(order), np.arange(n))
  assert counts.sum() == n
  np.testing.assert_array_equal(offsets, np.concatenate([[0], np.cumsum(counts)[:-1]]))
  cell = codes[:, 0] * k + codes[:, 1]
  for c in range(k * k):
    np.testing.assert_array_equal(
      order[offsets[c] : offsets[c] + counts[c]], np.flatnonzero(cell == c)
    )
  x = emb.astype(np.float64)
  c1, c2 = state["codebook_1"].astype(np.float64), state["codebook_2"].astype(np.float64)
  if quantizer == "pq":
    x1, x2 = x[:, : x.shape[1] // 2], x[:, x.shape[1] // 2 :]
  else:
    x1, x2 = x, x - c1[codes[:, 0]]
  for x_l, c_l, code in ((x1, c1, codes[:, 0]), (x2, c2, codes[:, 1])):
    dist = ((x_l[:, None, :] - c_l[None]) ** 2).sum(-1)
    assert np.all(dist[np.arange(n), code] <= dist.min(1) + 1e-4)


# ---- MIDX ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("q", QUANTIZERS)
def test_midx_proposal_equals_tf_keras_on_the_same_index_and_sums_to_one(res, q):
  sampler = _TF[q]
  z, pos = _CASES[f"midx/{q}/z"], _CASES[f"midx/{q}/pos"]
  want = sampler.proposal_log_probs(z).numpy()
  got = res[f"midx/{q}/proposal"]
  np.testing.assert_allclose(got, want, atol=2e-5)
  np.testing.assert_allclose(np.exp(got.astype(np.float64)).sum(1), 1.0, rtol=1e-5)
  ref = np_log_q(
    sampler.codebook_1.numpy(), sampler.codebook_2.numpy(), sampler.item_codes.numpy(), q, z
  )
  np.testing.assert_allclose(got, ref, atol=2e-5)
  np.testing.assert_allclose(res[f"midx/{q}/log_prob"], sampler.log_prob(z, pos).numpy(), atol=2e-5)
  both = np.stack([pos, pos[::-1]], 1)
  np.testing.assert_allclose(
    res[f"midx/{q}/log_prob_2d"], sampler.log_prob(z, both).numpy(), atol=2e-5
  )
  if q == "pq":  # the case the cell weights matter for: most (k1, k2) cells are empty
    assert (sampler.cell_counts.numpy() == 0).sum() >= 6


@pytest.mark.parametrize("q", QUANTIZERS)
def test_midx_draws_follow_the_proposal_and_return_its_log_q(res, q):
  sampler = _TF[q]
  z = _CASES[f"midx/{q}/z"]
  ref = np_log_q(
    sampler.codebook_1.numpy(), sampler.codebook_2.numpy(), sampler.item_codes.numpy(), q, z
  )
  ids, log_q = res[f"midx/{q}/ids"], res[f"midx/{q}/log_q"]
  assert ids.shape == log_q.shape == (3, 30000) and ids.dtype == np.int32
  assert ids.min() >= 1 and ids.max() <= N
  np.testing.assert_allclose(log_q, np.take_along_axis(ref, ids - 1, axis=1), atol=2e-5)
  for a in range(3):
    observed = np.bincount(ids[a] - 1, minlength=N)
    p, stat = chi_square_p_value(observed, ids.shape[1] * np.exp(ref[a]))
    assert p > 1e-3, (a, stat)
    tv = 0.5 * np.abs(observed / ids.shape[1] - np.exp(ref[a])).sum()
    assert tv < 0.05, (a, tv)
  np.testing.assert_array_equal(res[f"midx/{q}/seed_a"], res[f"midx/{q}/seed_b"])  # same seed
  assert not np.array_equal(res[f"midx/{q}/seed_a"], res[f"midx/{q}/seed_c"])
  assert not np.array_equal(res[f"midx/{q}/generator_1"], res[f"midx/{q}/generator_2"])


@pytest.mark.parametrize("q", QUANTIZERS)
def test_midx_refresh_builds_the_index_of_its_definition(res, q):
  cases = {"emb": _CASES[f"refresh/{q}/emb"], "moved": _CASES[f"refresh/{q}/moved"]}
  state = {name: res[f"refresh/{q}/{name}"] for name in STATE}
  assert int(res[f"refresh/{q}/count_1"]) == 1 and int(res[f"refresh/{q}/count_2"]) == 2
  assert state["codebook_1"].shape == ((5, 3) if q == "pq" else (5, 7))
  check_index(state, cases["emb"], 5, q)
  assert all(bool(res[f"refresh/{q}/same_{name}"]) for name in STATE)  # same seed, same index
  moved = {name: res[f"refresh/{q}/moved_{name}"] for name in STATE}
  check_index(moved, cases["moved"], 5, q)
  assert not np.allclose(moved["codebook_1"], state["codebook_1"])


@pytest.mark.parametrize("q", QUANTIZERS)
def test_midx_fewer_items_than_cells_leaves_empty_cells_at_zero(res, q):
  counts = res[f"refresh/small/{q}/counts"]
  assert counts.sum() == 3 and (counts > 0).sum() <= 3
  np.testing.assert_allclose(res[f"refresh/small/{q}/sum"], 1.0, rtol=1e-5)
  assert set(np.unique(res[f"refresh/small/{q}/ids"])) <= {0, 1, 2}
  assert np.isfinite(res[f"refresh/small/{q}/log_q"]).all()


@pytest.mark.parametrize("source", ["item_table", "embedder"])
def test_midx_score_is_scores_log_q_and_hits(res, source):
  table, z, pos = _CASES["score/table"], _CASES["score/z"], _CASES["score/pos"]
  tag = f"score/{source}"
  ids, proposal = res[f"{tag}/ids"], res[f"{tag}/proposal"]
  rows = np.arange(5)
  np.testing.assert_allclose(
    res[f"{tag}/negative_scores"],
    np.einsum("ad,asd->as", z, table[ids]) / 0.5,
    rtol=1e-5,
    atol=1e-5,
  )
  np.testing.assert_allclose(
    res[f"{tag}/positive_scores"], (z * table[pos]).sum(1) / 0.5, rtol=1e-5
  )
  np.testing.assert_allclose(res[f"{tag}/negative_log_q"], res[f"{tag}/log_q"], rtol=1e-6)
  np.testing.assert_allclose(
    res[f"{tag}/negative_log_q"], proposal[rows[:, None], ids - 1], atol=1e-5
  )
  np.testing.assert_allclose(res[f"{tag}/positive_log_q"], proposal[rows, pos - 1], atol=1e-5)
  np.testing.assert_array_equal(res[f"{tag}/valid_mask"], ids != pos[:, None])
  tf_out = tf_losses.sampled_softmax_loss(
    res[f"{tag}/positive_scores"],
    res[f"{tag}/negative_scores"],
    res[f"{tag}/negative_log_q"],
    correction="corrected",
    positive_log_q=res[f"{tag}/positive_log_q"],
    valid_mask=res[f"{tag}/valid_mask"],
  )
  np.testing.assert_allclose(res[f"{tag}/loss"], tf_out.loss.numpy(), rtol=1e-5, atol=1e-6)


def test_midx_get_config_and_keras_file_round_trip(res):
  assert bool(res["serial/config_same"])
  i = 0
  while f"serial/{i}/before" in res:
    np.testing.assert_array_equal(res[f"serial/{i}/clone"], res[f"serial/{i}/before"])
    np.testing.assert_array_equal(res[f"serial/{i}/after"], res[f"serial/{i}/before"])
    i += 1
  assert i == 3


def _tf_error(fn):
  try:
    fn()
    return "no error"
  except Exception as e:
    return f"{type(e).__name__}: {e}"


def test_midx_bad_arguments_raise_the_tf_keras_errors(res):
  worker = _load("samplers_worker")
  for i, kwargs in enumerate(worker.BAD_CONSTRUCTOR):
    want = _tf_error(lambda kw=kwargs: TfMIDXSampler(**kw))
    assert want != "no error", kwargs
    assert str(res[f"bad/constructor/{i}"]) == want, kwargs
  emb = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)

  def make(refreshed):
    sampler = TfMIDXSampler(num_codewords=2, seed=0)
    if refreshed:
      sampler.refresh(emb)
    return sampler

  for name, call in worker.bad_calls(make, emb):
    want = _tf_error(call)
    assert want != "no error", name
    assert str(res[f"bad/call/{name}"]) == want, name
  for name, words in worker.RUNTIME_CALLS:
    got = str(res[f"bad/runtime/{name}"])
    assert got.startswith("ValueError") and words in got, (name, got)
  want = _tf_error(lambda: tf_negatives.InBatchNegatives(num_negatives=0))
  assert str(res["bad/in_batch_k_b"]) == want
  want = _tf_error(lambda: tf_negatives.InBatchNegatives(num_negatives=2.0))
  assert str(res["bad/mixed_k_b"]) == want.replace("num_negatives", "num_in_batch")


# ---- k_b subsample -------------------------------------------------------------------------------


def _tf_pool(convention, k_b):
  c = kb_case()
  sampler, _ = tf_kb_sampler(convention, k_b)
  emb = c["emb"][c["pos_ids"]]
  seed = tf.constant(KB_SEED, tf.int64)
  pool = sampler.pool(c["pos_ids"], emb, valid=c["valid"], seed=seed)
  negs = sampler(c["pos_ids"], emb, valid=c["valid"], seed=seed)
  return sampler, pool, negs


@pytest.mark.parametrize("k_b", KB_SIZES)
@pytest.mark.parametrize("convention", ["unigram", "mixture", "expected_count"])
def test_in_batch_subsample_keeps_the_tf_keras_ids_and_log_q(res, convention, k_b):
  c = kb_case()
  tag = f"kb/{k_b}/{convention}"
  _, pool, tf_negs = _tf_pool(convention, k_b)
  ids, valid = res[f"{tag}/ids"], res[f"{tag}/valid"]
  b, u = len(c["pos_ids"]), np.unique(c["pos_ids"][c["valid"]]).size
  assert ids.shape == ((k_b,) if k_b < b else (b,))
  assert valid.sum() == min(u, k_b) == int(pool.num_kept)
  np.testing.assert_array_equal(ids[valid], tf_negs.ids.numpy())  # same ids, same order
  np.testing.assert_allclose(
    res[f"{tag}/log_q"][valid], tf_negs.log_q.numpy(), rtol=1e-5, atol=1e-6
  )
  np.testing.assert_allclose(
    res[f"{tag}/positive_log_q"], tf_negs.positive_log_q.numpy(), rtol=1e-5, atol=1e-6
  )
  np.testing.assert_allclose(res[f"{tag}/embeddings"][valid], c["emb"][tf_negs.ids.numpy()])


@pytest.mark.parametrize("k_b", KB_SIZES)
@pytest.mark.parametrize("convention", ["unigram", "mixture", "expected_count"])
def test_mixed_with_subsample_equals_tf_keras_log_q_and_loss(res, convention, k_b):
  c = kb_case()
  tag = f"mixed_kb/{k_b}/{convention}"
  sampler, pool, _ = _tf_pool(convention, k_b)
  uniform = tf_negatives.UniformNegatives(None, 3, id_range=(1, 13))
  mixed = tf_negatives.MixedNegatives(sampler, uniform, convention=convention)
  ids, valid, log_q = res[f"{tag}/ids"], res[f"{tag}/valid"], res[f"{tag}/log_q"]
  want = mixed.log_q(tf.constant(ids, tf.int64), pool).numpy()
  np.testing.assert_allclose(log_q[valid], want[valid], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(
    res[f"{tag}/positive_log_q"],
    mixed.log_q(tf.constant(c["pos_ids"], tf.int64), pool).numpy(),
    rtol=1e-5,
    atol=1e-6,
  )
  np.testing.assert_array_equal(ids[:-3][valid[:-3]], pool.negatives.ids.numpy())
  neg_ids, lq = ids[valid], log_q[valid]
  query, pos_emb = c["query"], c["emb"][c["pos_ids"]]
  s_p = (query * pos_emb).sum(1) / 0.5
  s_n = query @ c["emb"][neg_ids].T / 0.5
  tf_out = tf_losses.sampled_softmax_loss(
    s_p.astype(np.float32),
    s_n.astype(np.float32),
    lq,
    correction="corrected",
    positive_log_q=res[f"{tag}/positive_log_q"],
    valid_mask=c["pos_ids"][:, None] != neg_ids[None, :],
  )
  np.testing.assert_allclose(res[f"{tag}/loss"], tf_out.loss.numpy(), rtol=1e-5, atol=1e-6)


def test_in_batch_subsample_with_random_keys_is_uniform(res):
  """Each distinct valid id is kept with probability k_b / U; padding-only ids never."""
  c = kb_case()
  kept = res["kb/random_kept"]  # [draws, vocab]
  distinct = np.unique(c["pos_ids"][c["valid"]])
  assert (kept.sum(1) == 3).all()
  others = np.setdiff1d(np.arange(kept.shape[1]), distinct)
  assert not kept[:, others].any()
  p = 3 / distinct.size
  freq = kept[:, distinct].mean(0)
  sigma = np.sqrt(p * (1 - p) / kept.shape[0])
  assert np.all(np.abs(freq - p) < 5 * sigma), (freq, p)


def test_expected_count_and_mixture_log_q_functions_match_numpy(res):
  """The formulas, from the definitions: log E[count] = log(1 - (1 - q)^B) + log n_b - log U;
  mixture log((n_b q + k_u / |D|) / (n_b + k_u)), -inf-safe; and the tf-keras functions."""
  c = kb_case()
  b = c["valid"].sum()
  u = np.unique(c["pos_ids"][c["valid"]]).size
  n_b = min(u, 3)
  np.testing.assert_array_equal(res["fn/pool"], [b, u, n_b])
  table = _CASES["kb/log_q_table"]
  q = np.exp(table.astype(np.float64))
  with np.errstate(divide="ignore"):
    want = np.log1p(-((1 - q) ** b)) + np.log(n_b) - np.log(u)
  np.testing.assert_allclose(res["fn/expected_count"], want, rtol=1e-5, atol=1e-6)
  _, tf_pool, _ = _tf_pool("unigram", 3)  # the same keys: the same pool
  tf_value = tf_in_batch.expected_count_log_q(tf.constant(table), tf_pool).numpy()
  np.testing.assert_allclose(res["fn/expected_count"], tf_value, rtol=1e-5, atol=1e-6)
  lq = np.array([-1.0, -3.0, -np.inf, -0.1])
  for n, key in ((3, "fn/mixture"), (0, "fn/mixture_no_batch")):
    want = np.log((n * np.exp(lq) + 4 / 50) / (n + 4))
    np.testing.assert_allclose(res[key], want, rtol=1e-5)
    tf_value = tf_negatives.mixture_log_q(tf.constant(lq, tf.float32), n, 4, 50).numpy()
    np.testing.assert_allclose(res[key], tf_value, rtol=1e-6)


def test_subsample_indices_is_a_uniform_increasing_subset(res):
  draws = res["fn/subsample"]
  assert draws.shape == (FN_DRAWS, 2) and draws.dtype == np.int32
  assert np.all(draws[:, 0] < draws[:, 1]) and draws.min() >= 0 and draws.max() <= 5
  freq = np.bincount(draws.ravel(), minlength=6) / FN_DRAWS  # each index: p = 2 / 6
  sigma = np.sqrt((1 / 3) * (2 / 3) / FN_DRAWS)
  assert np.all(np.abs(freq - 1 / 3) < 5 * sigma), freq
  np.testing.assert_array_equal(res["fn/subsample_small"], [0, 1, 2])
  np.testing.assert_array_equal(res["fn/subsample_empty"], [0])
  assert all(str(e).startswith("ValueError: num_negatives") for e in res["fn/subsample_bad"])


def test_validate_negatives_has_the_tf_keras_rules(res):
  assert list(res["fn/validate_dtypes"]) == ["float32", "float32"]
  kinds = {
    "float_ids": "TypeError",
    "int_embeddings": "TypeError",
    "rank": "ValueError",
    "sizes": "ValueError",
    "rows": "ValueError",
    "valid_dtype": "TypeError",
    "valid_shape": "ValueError",
    "tuple": "TypeError",
  }
  for name, kind in kinds.items():
    assert str(res[f"fn/validate/{name}"]).startswith(kind + ":"), (
      name,
      res[f"fn/validate/{name}"],
    )
  assert int(res["fn/num_replicas"]) == 1


def test_mixed_subsample_get_config_and_keras_file_round_trip(res):
  assert bool(res["kb/serial/config_same"]) and int(res["kb/serial/num_in_batch"]) == 3
  np.testing.assert_array_equal(res["kb/serial/clone"], res["kb/serial/before"])
  np.testing.assert_array_equal(res["kb/serial/after"], res["kb/serial/before"])


# ---- cross-batch memory --------------------------------------------------------------------------


def cb_log_q_unigram(kind):
  """log q_uni of every id: counts / N (every count >= min_count = 1), or the table's."""
  log_q = np.log(CB_COUNTS / CB_COUNTS.sum())
  if kind == "table":
    log_q[CB_NOT_COUNTED] = -np.inf
  return log_q


def cb_block(res, tag, t):
  """(ids [S], filled [S]) of push t. S = B: slot j = row j, filled at the first valid row of
  each id. S < B: the newest block right after push t, as the worker read it (its subset is
  random; test_cross_batch_subsample_keeps_min_u_k_distinct_ids checks it)."""
  s = CB_TAGS[tag][1]
  ids, valid = CB_PUSH_IDS[t], CB_PUSH_VALID[t]
  if s < len(ids):
    return res[f"cb/{tag}/{t + 1}/ids"][:s], res[f"cb/{tag}/{t + 1}/valid"][:s]
  seen, filled = set(), []
  for i, v in zip(ids, valid):
    filled.append(bool(v) and i not in seen)
    seen.update([i] if v else [])
  return ids, np.array(filled)


class CbOracle:
  """The memory after T pushes from the docstring: a list of the pushes as the FIFO, read newest
  first (block j holds push T - 1 - j), dedup with the newest copy winning, log Q per convention."""

  def __init__(self, res, tag, num_pushed):
    _, s, self.convention, kind = CB_TAGS[tag]
    self.log_q_uni = cb_log_q_unigram(kind)
    self.pushes = list(range(max(0, num_pushed - CB_M), num_pushed))  # in the memory
    self.ids = np.zeros(CB_M * s, np.int64)
    self.origin = np.full(CB_M * s, -1)  # the push a slot holds
    filled = np.zeros(CB_M * s, bool)
    for j in range(CB_M):
      t = num_pushed - 1 - j
      if t >= 0:
        self.ids[j * s : (j + 1) * s], filled[j * s : (j + 1) * s] = cb_block(res, tag, t)
        self.origin[j * s : (j + 1) * s] = t
    self.valid, seen = np.zeros(CB_M * s, bool), set()
    for k in range(CB_M * s):
      if filled[k] and self.ids[k] not in seen:
        seen.add(self.ids[k])
        self.valid[k] = np.isfinite(self.log_q_uni[self.ids[k]])
    self.stats = [
      (
        CB_PUSH_VALID[t].sum(),
        np.unique(CB_PUSH_IDS[t][CB_PUSH_VALID[t]]).size,
        cb_block(res, tag, t)[1].sum(),
      )
      for t in self.pushes
    ]

  def log_q(self, ids):
    """unigram: log q_uni; expected_count: log pi_M(d) - log max(U_M, 1),
    pi_M = 1 - prod_m (1 - (1 - (1 - q)^{B_m}) n_m / U_m)."""
    log_q = self.log_q_uni[ids]
    if self.convention != "expected_count":
      return log_q
    q = np.exp(log_q)
    not_in = np.ones_like(q)
    for b, u, n in self.stats:
      not_in *= 1 - (1 - (1 - q) ** b) * n / u
    with np.errstate(divide="ignore"):
      return np.log(1 - not_in) - np.log(max(self.valid.sum(), 1))

  def embeddings(self, mode, tables=None):
    """ids mode: the current table; embeddings mode: the table at the slot's push."""
    c = _CASES
    if mode == "ids":
      return c["cb/table"][self.ids] if tables is None else tables[self.ids]
    pushed = c["cb/push_tables"] if tables is None else tables
    return pushed[np.maximum(self.origin, 0), self.ids]


def np_corrected_loss(s_p, s_n, log_q, pos_log_q, valid):
  """DESIGN.md: L = -w (s_p - Z), Z = LSE_valid(s_i - log Q'(d_i)), log Q' = log Q - log(1 - Q(p)),
  w = 1 - sigma(s_p - (Z - log n)); n = 0: L = 0."""
  s_p, s_n = np.asarray(s_p, np.float64), np.asarray(s_n, np.float64)
  log_q_prime = np.broadcast_to(log_q, s_n.shape) - np.log1p(-np.exp(pos_log_q))[:, None]
  loss = np.zeros(len(s_p))
  for a in range(len(s_p)):
    v = valid[a]
    n = v.sum()
    if n == 0:
      continue
    x = s_n[a, v] - log_q_prime[a, v]
    z = x.max() + np.log(np.exp(x - x.max()).sum())
    w = 1 - 1 / (1 + np.exp(-(s_p[a] - (z - np.log(n)))))
    loss[a] = -w * (s_p[a] - z)
  return loss


def cb_reads(res, tag):
  """(T, prefix of the read, scored names) of a run: T = 0..5, and the final full read."""
  pushes = len(CB_PUSH_IDS)
  reads = [
    (t, f"cb/{tag}/{t}", ("sampled", "score") if t == 0 else ("sampled",))
    for t in range(pushes + 1)
  ]
  return reads + [(pushes, f"cb/{tag}/final", ("sampled", "score"))]


def _cb_rounded(x, dtype):
  return tf.cast(tf.cast(x, dtype), tf.float64).numpy()


def check_cross_batch_scores(res, prefix, tag, oracle, names, dtype="float32"):
  """valid_mask = valid AND d != p (the row's hits); scores of the oracle's embeddings; log Q;
  the corrected loss of the DESIGN.md formula."""
  c = _CASES
  mode = CB_TAGS[tag][0]
  query, pos_emb, pos = c["cb/query"], c["cb/pos_emb"], c["cb/pos_ids"]
  tables = None
  if dtype != "float32":
    query, pos_emb = _cb_rounded(query, dtype), _cb_rounded(pos_emb, dtype)
    tables = _cb_rounded(c["cb/table"] if mode == "ids" else c["cb/push_tables"], dtype)
  emb = oracle.embeddings(mode, tables).astype(np.float64)
  want_mask = oracle.valid[None, :] & (oracle.ids[None, :] != pos[:, None])
  s_p = (query * pos_emb).sum(1) / CB_TEMPERATURE
  s_n = query @ emb.T / CB_TEMPERATURE
  log_q = oracle.log_q(oracle.ids)
  pos_log_q = oracle.log_q(pos)
  if not oracle.pushes:  # empty memory: the unigram value stands in for log Q(p) (finite)
    pos_log_q = oracle.log_q_uni[pos]
  for name in names:
    got = {k: res[f"{prefix}/{name}/{k}"] for k in ("valid_mask", "negative_scores")}
    np.testing.assert_array_equal(got["valid_mask"], want_mask, err_msg=f"{prefix}/{name}")
    assert got["negative_scores"].dtype == np.float32
    np.testing.assert_allclose(res[f"{prefix}/{name}/positive_scores"], s_p, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
      got["negative_scores"][:, oracle.valid], s_n[:, oracle.valid], rtol=1e-5, atol=1e-5
    )
    neg_log_q = res[f"{prefix}/{name}/negative_log_q"]
    assert np.isfinite(neg_log_q).all()
    np.testing.assert_allclose(neg_log_q[oracle.valid], log_q[oracle.valid], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
      res[f"{prefix}/{name}/positive_log_q"], pos_log_q, rtol=1e-5, atol=1e-5
    )
  loss = res[f"{prefix}/loss"]
  assert np.isfinite(loss).all()
  want = np_corrected_loss(s_p, s_n, np.where(oracle.valid, log_q, 0.0), pos_log_q, want_mask)
  np.testing.assert_allclose(loss, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("tag", CB_RUNS)
def test_cross_batch_memory_is_a_fifo_of_the_last_pushes_with_the_newest_copy(res, tag):
  _, s, _, kind = CB_TAGS[tag]
  finite = np.isfinite(cb_log_q_unigram(kind))
  for t, prefix, _ in cb_reads(res, tag):
    oracle = CbOracle(res, tag, t)
    ids, valid = res[f"{prefix}/ids"], res[f"{prefix}/valid"]
    assert ids.shape == valid.shape == (CB_M * s,) and ids.dtype == np.int32
    np.testing.assert_array_equal(valid, oracle.valid, err_msg=prefix)
    np.testing.assert_array_equal(ids[valid], oracle.ids[valid], err_msg=prefix)
    assert len(set(ids[valid])) == valid.sum()  # one slot per id
    assert not valid[min(t, CB_M) * s :].any()  # warm-up blocks
    assert 12 not in ids[valid]  # a padding row never enters
    if s == len(CB_PUSH_IDS[0]):  # all rows kept: the distinct ids of the last min(T, M) pushes
      last = [CB_PUSH_IDS[p][CB_PUSH_VALID[p]] for p in range(max(0, t - CB_M), t)]
      want = set(np.concatenate(last)) if last else set()
      assert set(ids[valid]) == {i for i in want if finite[i]}, prefix
  assert int(res[f"cb/{tag}/num_pushed"]) == len(CB_PUSH_IDS)
  assert bool(res[f"cb/{tag}/pure"])  # reads never modify the memory


def test_cross_batch_subsample_keeps_min_u_k_distinct_ids(res):
  tag = "emb_sub_ec"
  s = CB_TAGS[tag][1]
  for t in range(len(CB_PUSH_IDS)):
    ids, filled = cb_block(res, tag, t)
    kept = ids[filled]
    rows = CB_PUSH_IDS[t]
    distinct = np.unique(rows[CB_PUSH_VALID[t]])
    assert len(kept) == min(distinct.size, s) == len(set(kept))  # n_m = min(U_m, k)
    assert set(kept) <= set(distinct)
    first_row = [int(np.flatnonzero((rows == i) & CB_PUSH_VALID[t])[0]) for i in kept]
    assert first_row == sorted(first_row)  # slots in increasing row order
  if "cb/seeded/5" in res:  # update(seed=...): the same subsample whatever the layer's seed
    np.testing.assert_array_equal(res["cb/seeded/5"], res["cb/seeded/6"])
    distinct = np.unique(CB_PUSH_IDS[0][CB_PUSH_VALID[0]])
    assert (res["cb/seeded/5"] > 0).sum() == min(distinct.size, s)


@pytest.mark.parametrize("tag", CB_RUNS)
def test_cross_batch_log_q_of_slots_positives_and_any_id(res, tag):
  for t, prefix, _ in cb_reads(res, tag):
    oracle = CbOracle(res, tag, t)
    log_q = res[f"{prefix}/log_q"]
    assert np.isfinite(log_q).all()  # empty slots too
    np.testing.assert_allclose(
      log_q[oracle.valid], oracle.log_q(oracle.ids)[oracle.valid], rtol=1e-5, atol=1e-5
    )
    pos = _CASES["cb/pos_ids"]
    want = oracle.log_q(pos) if t else oracle.log_q_uni[pos]  # empty: the unigram stands in
    np.testing.assert_allclose(res[f"{prefix}/positive_log_q"], want, rtol=1e-5, atol=1e-5)
    if f"{prefix}/probe_log_q" in res:  # log_q(ids): every id (-inf: Q = 0)
      probe = np.arange(len(log_q) + len(pos)) % CB_V
      np.testing.assert_allclose(
        res[f"{prefix}/probe_log_q"], oracle.log_q(probe), rtol=1e-5, atol=1e-5
      )


@pytest.mark.parametrize("tag", CB_RUNS)
def test_cross_batch_score_masks_hits_and_gives_the_corrected_loss(res, tag):
  for t, prefix, names in cb_reads(res, tag):
    check_cross_batch_scores(res, prefix, tag, CbOracle(res, tag, t), names)
  empty = res[f"cb/{tag}/0/loss"]
  np.testing.assert_array_equal(empty, np.zeros_like(empty))  # an empty memory: n = 0


def test_cross_batch_embeddings_mode_is_stale_and_ids_mode_follows_the_table(res):
  c = _CASES
  t = len(CB_PUSH_IDS)
  ids_mode = CbOracle(res, "ids_ec", t)
  got = res[f"cb/ids_ec/{t}/embeddings"]
  np.testing.assert_allclose(got[ids_mode.valid], c["cb/table"][ids_mode.ids][ids_mode.valid])
  stale = CbOracle(res, "emb_sub_ec", t)
  got = res[f"cb/emb_sub_ec/{t}/embeddings"][stale.valid]
  pushed = c["cb/push_tables"][stale.origin, stale.ids][stale.valid]
  np.testing.assert_allclose(got, pushed)
  assert not np.allclose(got, c["cb/table"][stale.ids][stale.valid])
  assert len(set(stale.origin[stale.valid])) > 1  # from several pushes


@pytest.mark.parametrize("tag", sorted(CB_DTYPES))
def test_cross_batch_half_precision_keeps_float32_masks_and_a_finite_loss(res, tag):
  dtype = CB_DTYPES[tag]
  check_cross_batch_scores(res, f"cb/{tag}/3", tag, CbOracle(res, tag, 3), ("score",), dtype)
  mode = CB_TAGS[tag][0]
  assert str(res[f"cb/{tag}/memory_dtype"]) == ("float32" if mode == "embeddings" else "none")


@pytest.mark.parametrize("tag", CB_RUNS)
def test_cross_batch_restored_state_scores_and_pushes_as_the_uninterrupted_run(res, tag):
  """After 2 pushes: a .weights.h5 round trip into a fresh layer (the generator state too) and
  get_weights / set_weights into a from_config clone; then push 3 and read."""
  fields = ("ids", "valid", "log_q", "embeddings", "sampled/negative_scores", "loss")
  base = f"cb/restore/{tag}"
  copies = ("file", "set_weights") if CB_TAGS[tag][1] == 6 else ("file",)  # S < B: the generator
  for name in copies:
    for field in fields:
      np.testing.assert_array_equal(
        res[f"{base}/{name}/{field}"], res[f"{base}/run/{field}"], err_msg=f"{name}/{field}"
      )
  for field in fields:  # the uninterrupted run is the main one after 3 pushes
    np.testing.assert_array_equal(res[f"{base}/run/{field}"], res[f"cb/{tag}/3/{field}"])
  assert bool(res[f"{base}/config_same"])


def test_cross_batch_gradient_reaches_memory_rows_in_ids_mode_only(res):
  if "cb/grad/ids" not in res:
    pytest.skip("checked on TensorFlow and PyTorch (eager pushes inside the gradient)")
  oracle = CbOracle(res, "ids_ec", 3)
  used = res["cb/ids_ec/3/sampled/valid_mask"].any(0)  # a valid negative of some row
  rows = np.isin(np.arange(CB_V), oracle.ids[used])
  norm = np.abs(res["cb/grad/ids"]).sum(1)
  np.testing.assert_array_equal(norm > 0, rows)
  assert not res["cb/grad/emb_table"].any()  # stop_gradient at the push
  assert np.abs(res["cb/grad/emb_query"]).sum() > 0


def test_cross_batch_update_inside_a_compiled_jax_train_step(res):
  if "cb/train/losses" not in res:
    pytest.skip("JAX only: model.train_on_batch compiles score, loss and push in one step")
  losses_ = res["cb/train/losses"]
  assert np.isfinite(losses_).all() and losses_[0] == 0 and (losses_[1:] != 0).all()
  assert res["cb/train/same"].all()  # the eager twin's ids, slots, counts and generator
  assert int(res["cb/train/num_pushed"]) == 3 and bool(res["cb/train/embeddings_moved"])


def test_join_blocks_concatenates_and_rebases_each_blocks_q_prime(res):
  c = _CASES
  n = [c[f"join/{k}/s_n"].shape[1] for k in range(3)]
  lq = [np.broadcast_to(c[f"join/{k}/lq"], (4, n[k])).astype(np.float64) for k in range(3)]
  pos = [c[f"join/{k}/pos_lq"].astype(np.float64) for k in range(3)]
  log1m = lambda x: np.log1p(-np.exp(x))
  for rebase in (True, False):
    got = {k: res[f"join/{rebase}/{k}"] for k in CB_SCORED_FIELDS}
    np.testing.assert_array_equal(got["positive_scores"], c["join/0/s_p"])
    np.testing.assert_array_equal(got["positive_log_q"], c["join/0/pos_lq"])
    np.testing.assert_array_equal(
      got["negative_scores"], np.concatenate([c[f"join/{k}/s_n"] for k in range(3)], 1)
    )
    np.testing.assert_array_equal(
      got["valid_mask"], np.concatenate([c[f"join/{k}/valid"] for k in range(3)], 1)
    )
    # rebased where the block's entry is valid; a masked entry keeps its own log Q
    want = [lq[0]] + [
      np.where(c[f"join/{k}/valid"], lq[k] - (log1m(pos[k]) - log1m(pos[0]))[:, None], lq[k])
      if rebase
      else lq[k]
      for k in (1, 2)
    ]
    np.testing.assert_allclose(got["negative_log_q"], np.concatenate(want, 1), rtol=1e-5)
    if rebase:  # the loss's one Q' step (the first block's Q(p)) gives each block its own Q'
      split = np.split(got["negative_log_q"] - log1m(pos[0])[:, None], np.cumsum(n)[:-1], 1)
      for k in range(3):
        v = c[f"join/{k}/valid"]
        np.testing.assert_allclose(split[k][v], (lq[k] - log1m(pos[k])[:, None])[v], rtol=1e-5)
  assert str(res["join/missing"]).startswith("ValueError") and "positive_log_q" in str(
    res["join/missing"]
  )


def test_cross_batch_memory_equals_the_tf_keras_twin(res):
  """The two fronts' CrossBatchNegatives, built with the same arguments and fed the same pushes,
  read the same memory after every push: slots, validity, log Q, scores, masks and the corrected
  loss (the S = B configuration, whose content does not depend on random draws)."""
  _, s, convention, _ = CB_TAGS["ids_ec"]
  table_log_q = tf.constant(_CASES["cb/log_q_table"])

  class TableLogQ:
    def log_q(self, ids):
      return tf.gather(table_log_q, ids)

  memory = tf_negatives.CrossBatchNegatives(
    TableLogQ(),
    CB_M,
    CB_PUSH_IDS.shape[1],
    slots_per_batch=s,
    mode="ids",
    convention=convention,
    seed=5,
  )
  c = _CASES
  query, pos, pos_emb, table = c["cb/query"], c["cb/pos_ids"], c["cb/pos_emb"], c["cb/table"]
  for t in range(len(CB_PUSH_IDS) + 1):
    if t:
      memory.update(CB_PUSH_IDS[t - 1], valid=CB_PUSH_VALID[t - 1])
    negs = memory.sample_negatives(query, pos, pos_emb, item_table=table)
    scored = tf_negatives.score_negatives(query, pos, pos_emb, negs, temperature=CB_TEMPERATURE)
    loss = tf_losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected").loss
    prefix = f"cb/ids_ec/{t}"
    valid = res[f"{prefix}/valid"]
    np.testing.assert_array_equal(negs.valid.numpy(), valid, err_msg=prefix)
    np.testing.assert_array_equal(negs.ids.numpy()[valid], res[f"{prefix}/ids"][valid])
    np.testing.assert_allclose(negs.log_q.numpy()[valid], res[f"{prefix}/log_q"][valid], 1e-5)
    np.testing.assert_allclose(
      negs.positive_log_q.numpy(), res[f"{prefix}/positive_log_q"], rtol=1e-5, atol=1e-6
    )
    np.testing.assert_array_equal(
      scored.valid_mask.numpy(), res[f"{prefix}/sampled/valid_mask"], err_msg=prefix
    )
    got = scored.negative_scores.numpy()[:, valid]
    want = res[f"{prefix}/sampled/negative_scores"][:, valid]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loss.numpy(), res[f"{prefix}/loss"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("convention", ["unigram", "expected_count"])
def test_in_batch_sampler_class_scores_as_the_tf_keras_sampler(res, convention):
  """``InBatchNegatives(estimator, convention=...).score(...)``, the same class and arguments on
  both fronts: the same scores, log Q, masks and positive log Q (no subsample: the tf-keras
  static-shape pool, padding rows masked)."""
  c = kb_case()
  sampler, _ = tf_kb_sampler(convention, None)
  sampler.static_shapes = True  # the Keras 3 pool keeps every row, masked
  pos_ids, valid = c["pos_ids"], c["valid"]
  want = sampler.score(
    c["query"], pos_ids, c["emb"][pos_ids], temperature=0.5, valid=tf.constant(valid)
  )
  mask = want.valid_mask.numpy()
  got = {k: res[f"ibs/{convention}/{k}"] for k in want._fields}
  np.testing.assert_array_equal(got["valid_mask"], mask)
  for name in ("positive_scores", "positive_log_q"):
    np.testing.assert_allclose(got[name], getattr(want, name).numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(
    got["negative_scores"][mask], want.negative_scores.numpy()[mask], rtol=1e-5, atol=1e-6
  )
  lq_got = np.broadcast_to(got["negative_log_q"], mask.shape)[mask]
  lq_want = np.broadcast_to(want.negative_log_q.numpy(), mask.shape)[mask]
  np.testing.assert_allclose(lq_got, lq_want, rtol=1e-5, atol=1e-6)
