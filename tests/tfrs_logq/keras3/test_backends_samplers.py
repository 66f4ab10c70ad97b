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
  probability k_b / U.
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
import tensorflow as tf  # noqa: E402
from tfrs_logq.tf_keras import frequency as tf_frequency  # noqa: E402
from tfrs_logq.tf_keras import losses as tf_losses  # noqa: E402
from tfrs_logq.tf_keras import negatives as tf_negatives  # noqa: E402
from tfrs_logq.tf_keras.negatives import in_batch as tf_in_batch  # noqa: E402
from tfrs_logq.tf_keras.negatives.midx import MIDXSampler as TfMIDXSampler  # noqa: E402


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
      "kb/keys": tf_in_batch._random_keys(  # pylint: disable=protected-access
        len(c["pos_ids"]), tf.constant(KB_SEED, tf.int64)
      ).numpy(),
    }
  )
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
  except Exception as e:  # pylint: disable=broad-except
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


def test_mixed_subsample_get_config_and_keras_file_round_trip(res):
  assert bool(res["kb/serial/config_same"]) and int(res["kb/serial/num_in_batch"]) == 3
  np.testing.assert_array_equal(res["kb/serial/clone"], res["kb/serial/before"])
  np.testing.assert_array_equal(res["kb/serial/after"], res["kb/serial/before"])
