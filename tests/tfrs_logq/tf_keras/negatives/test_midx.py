"""Tests of the MIDX sampler (tfrs_logq/tf_keras/negatives/midx.py) and its k-means (kmeans.py).

Independent numpy references:
  * proposal: Q(i|z) = exp(s1[k1(i)] + s2[k2(i)]) / sum_j exp(s1[k1(j)] + s2[k2(j)]), normalised
    over ITEMS (not over cells), so it checks the cell-size weighting |Omega| of Theorem 2
    independently;
  * assignments: k_l(i) = argmin_k ||x_i^l - c_k^l||^2 in float64 (pq halves / rq residuals);
  * losses: the standard and corrected formulas of tfrs_logq/tf_keras/losses.py written out in
  numpy.
"""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import losses
from tfrs_logq.tf_keras.accidental_hits import accidental_hit_mask
from tfrs_logq.tf_keras.negatives import kmeans as kmeans_lib
from tfrs_logq.tf_keras.negatives.base import Negatives
from tfrs_logq.tf_keras.negatives.midx import MIDXRefreshCallback, MIDXSampler, RefreshEveryNSteps

import numpy as np
import pytest
import tensorflow as tf


# ------------------------------------------------------------------------------ numpy references
def np_scores(sampler, z):
  """s1 [A, K], s2 [A, K] in float64 from the sampler's codebooks."""
  z = np.asarray(z, np.float64)
  c1 = sampler.codebook_1.numpy().astype(np.float64)
  c2 = sampler.codebook_2.numpy().astype(np.float64)
  if sampler.quantizer == "pq":
    h = z.shape[1] // 2
    z1, z2 = z[:, :h], z[:, h:]
  else:
    z1 = z2 = z
  return z1 @ c1.T / sampler.temperature, z2 @ c2.T / sampler.temperature


def np_log_q(sampler, z):
  """log Q(i|z) [A, N]: item logits s1[k1(i)] + s2[k2(i)] normalised over the items."""
  s1, s2 = np_scores(sampler, z)
  codes = sampler.item_codes.numpy()
  logits = s1[:, codes[:, 0]] + s2[:, codes[:, 1]]
  m = logits.max(axis=1, keepdims=True)
  return logits - (m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True)))


def np_nearest(x, c):
  d = ((x[:, None, :] - c[None, :, :]) ** 2).sum(-1)
  return d


def chi_square_p_value(observed, expected, min_expected=5.0):
  """Pearson chi-square goodness of fit; cells with expected < min_expected are pooled."""
  observed = np.asarray(observed, np.float64)
  expected = np.asarray(expected, np.float64)
  small = expected < min_expected
  obs = np.append(observed[~small], observed[small].sum())
  exp = np.append(expected[~small], expected[small].sum())
  keep = exp > 0
  obs, exp = obs[keep], exp[keep]
  stat = ((obs - exp) ** 2 / exp).sum()
  df = obs.size - 1
  return float(tf.math.igammac(df / 2.0, stat / 2.0).numpy()), stat, df


def correlated_halves(n, d, groups, rng, noise=0.05):
  """Items whose first-half cluster determines the second-half cluster: most PQ cells are empty."""
  g = rng.integers(0, groups, size=n)
  h = d // 2
  c1 = rng.normal(size=(groups, h))
  c2 = rng.normal(size=(groups, d - h))
  x = np.concatenate([c1[g], c2[g]], axis=1) + noise * rng.normal(size=(n, d))
  return x.astype(np.float32)


def clustered_catalog(n, d, clusters, rng):
  """Trained-like catalog: clustered directions, norms varying, popularity rising with the norm."""
  centers = rng.normal(size=(clusters, d))
  centers /= np.linalg.norm(centers, axis=1, keepdims=True)
  g = rng.integers(0, clusters, size=n)
  scale = rng.uniform(0.5, 1.5, size=n)
  x = (centers[g] + 0.35 * rng.normal(size=(n, d)) / np.sqrt(d)) * scale[:, None]
  popularity = scale**4 * rng.pareto(2.0, size=n) + 1e-3
  return x.astype(np.float32), centers, popularity / popularity.sum()


# ------------------------------------------------------------------------- (1) sampling frequency
@pytest.mark.parametrize("quantizer,structured", [("pq", True), ("rq", False)])
def test_empirical_frequencies_match_returned_q(quantizer, structured):
  rng = np.random.default_rng(1)
  n, d, k = 60, 6, 4
  emb = (
    correlated_halves(n, d, 4, rng) if structured else rng.normal(size=(n, d)).astype(np.float32)
  )
  sampler = MIDXSampler(num_codewords=k, quantizer=quantizer, id_offset=1, seed=11, temperature=0.5)
  sampler.refresh(emb)
  if structured:  # the case the cell weights matter for: most (k1, k2) cells are empty
    assert (sampler.cell_counts.numpy() == 0).sum() >= 6
  z = rng.normal(size=(3, d)).astype(np.float32)
  num_samples = 30000
  ids, log_q = sampler.sample(z, num_samples)
  ids, log_q = ids.numpy(), log_q.numpy()
  assert ids.shape == (3, num_samples) and ids.dtype == np.int64
  assert log_q.shape == (3, num_samples) and log_q.dtype == np.float32
  assert ids.min() >= 1 and ids.max() <= n
  ref = np_log_q(sampler, z)
  np.testing.assert_allclose(np.exp(ref).sum(1), 1.0, rtol=1e-12)
  # Returned log Q is the exact proposal of the returned id.
  np.testing.assert_allclose(log_q, np.take_along_axis(ref, ids - 1, axis=1), atol=2e-5)
  for a in range(3):
    observed = np.bincount(ids[a] - 1, minlength=n)
    p, stat, df = chi_square_p_value(observed, num_samples * np.exp(ref[a]))
    assert p > 1e-3, (a, stat, df)


def test_uniform_inside_cell_for_large_cell():
  # One codeword per codebook: a single cell holding every item, so Q(i|z) = 1/N exactly.
  n = 5000
  emb = np.random.default_rng(2).normal(size=(n, 4)).astype(np.float32)
  sampler = MIDXSampler(num_codewords=1, quantizer="pq", seed=3)
  sampler.refresh(emb)
  ids, log_q = sampler.sample(np.ones((2, 4), np.float32), 50000)
  np.testing.assert_allclose(log_q.numpy(), -np.log(n), rtol=1e-6)
  counts = np.bincount(ids.numpy().ravel(), minlength=n)
  p, stat, df = chi_square_p_value(counts, np.full(n, 100000 / n))
  assert p > 1e-3, (stat, df)


def test_log_prob_matches_reference_and_sample_is_deterministic():
  rng = np.random.default_rng(3)
  emb = rng.normal(size=(200, 8)).astype(np.float32)
  z = rng.normal(size=(5, 8)).astype(np.float32)
  a = MIDXSampler(num_codewords=6, quantizer="rq", seed=5, id_offset=2)
  b = MIDXSampler(num_codewords=6, quantizer="rq", seed=5, id_offset=2)
  a.refresh(emb)
  b.refresh(emb)
  ref = np_log_q(a, z)
  np.testing.assert_allclose(a.proposal_log_probs(z).numpy(), ref, atol=2e-5)
  pos = np.arange(5) * 7 + 2
  np.testing.assert_allclose(a.log_prob(z, pos).numpy(), ref[np.arange(5), pos - 2], atol=2e-5)
  ids_a, lq_a = a.sample(z, 16)
  ids_b, lq_b = b.sample(z, 16)
  np.testing.assert_array_equal(ids_a.numpy(), ids_b.numpy())
  np.testing.assert_array_equal(lq_a.numpy(), lq_b.numpy())
  ids_a2, _ = a.sample(z, 16)  # the draw counter advanced: a new draw
  assert not np.array_equal(ids_a.numpy(), ids_a2.numpy())
  explicit_1, _ = a.sample(z, 16, seed=[4, 2])
  explicit_2, _ = a.sample(z, 16, seed=[4, 2])
  np.testing.assert_array_equal(explicit_1.numpy(), explicit_2.numpy())


def test_sample_in_tf_function_and_negatives_record():
  rng = np.random.default_rng(4)
  table = rng.normal(size=(101, 8)).astype(np.float32)  # row 0 is padding
  sampler = MIDXSampler(num_codewords=4, id_offset=1, seed=1)
  sampler.refresh(table[1:])
  z = rng.normal(size=(3, 8)).astype(np.float32)

  @tf.function
  def draw(q):
    return sampler.negatives(q, 5, lambda ids: tf.gather(table, ids), positive_ids=[1, 50, 100])

  neg = draw(z)
  assert isinstance(neg, Negatives)
  assert neg.embeddings.shape == (3, 5, 8)
  np.testing.assert_allclose(neg.embeddings.numpy(), table[neg.ids.numpy()])
  ref = np_log_q(sampler, z)
  np.testing.assert_allclose(
    neg.log_q.numpy(), np.take_along_axis(ref, neg.ids.numpy() - 1, 1), atol=2e-5
  )
  np.testing.assert_allclose(neg.positive_log_q.numpy(), ref[[0, 1, 2], [0, 49, 99]], atol=2e-5)
  second = draw(z)
  assert sampler.num_draws.numpy() == 2
  assert not np.array_equal(neg.ids.numpy(), second.ids.numpy())


# ---------------------------------------------------------------------- (2) closer to the softmax
def test_proposal_closer_to_softmax_than_uniform_and_unigram():
  rng = np.random.default_rng(5)
  n, d, temperature = 3000, 16, 0.1
  items, centers, unigram = clustered_catalog(n, d, 12, rng)
  g = rng.integers(0, 12, size=40)
  z = (centers[g] + 0.3 * rng.normal(size=(40, d)) / np.sqrt(d)).astype(np.float32)
  sampler = MIDXSampler(num_codewords=16, quantizer="pq", temperature=temperature, seed=0)
  sampler.refresh(items)
  logits = z.astype(np.float64) @ items.T.astype(np.float64) / temperature
  log_p = logits - logits.max(1, keepdims=True)
  log_p -= np.log(np.exp(log_p).sum(1, keepdims=True))
  p = np.exp(log_p)

  def kl(log_q):
    return float(np.mean((p * (log_p - log_q)).sum(1)))

  kl_midx = kl(np_log_q(sampler, z))
  kl_uniform = kl(np.full((1, n), -np.log(n)))
  kl_unigram = kl(np.log(unigram)[None, :])
  assert kl_midx < 0.5 * kl_uniform, (kl_midx, kl_uniform)
  assert kl_midx < 0.5 * kl_unigram, (kl_midx, kl_unigram)
  rq = MIDXSampler(num_codewords=16, quantizer="rq", temperature=temperature, seed=0)
  rq.refresh(items)
  assert kl(np_log_q(rq, z)) < 0.5 * kl_uniform


# ----------------------------------------------------------------------- (3) refresh and the index
def check_index(sampler, emb):
  """Every item in exactly one cell; cells hold exactly the items with those codes; codes
  nearest."""
  n = emb.shape[0]
  k = sampler.num_codewords
  codes = sampler.item_codes.numpy()
  order = sampler.sorted_items.numpy()
  counts = sampler.cell_counts.numpy()
  offsets = sampler.cell_offsets.numpy()
  np.testing.assert_array_equal(np.sort(order), np.arange(n))
  assert counts.sum() == n
  np.testing.assert_array_equal(offsets, np.concatenate([[0], np.cumsum(counts)[:-1]]))
  for c in range(k * k):
    members = order[offsets[c] : offsets[c] + counts[c]]
    np.testing.assert_array_equal(codes[members, 0] * k + codes[members, 1], c)
  x = emb.astype(np.float64)
  c1 = sampler.codebook_1.numpy().astype(np.float64)
  c2 = sampler.codebook_2.numpy().astype(np.float64)
  if sampler.quantizer == "pq":
    x1, x2 = x[:, : x.shape[1] // 2], x[:, x.shape[1] // 2 :]
  else:
    x1 = x
    x2 = x - c1[codes[:, 0]]
  for x_l, c_l, code in ((x1, c1, codes[:, 0]), (x2, c2, codes[:, 1])):
    dist = np_nearest(x_l, c_l)
    assert np.all(dist[np.arange(n), code] <= dist.min(1) + 1e-4)


@pytest.mark.parametrize("quantizer", ["pq", "rq"])
def test_refresh_rebuilds_codebooks_and_index(quantizer):
  rng = np.random.default_rng(6)
  emb = rng.normal(size=(300, 7)).astype(np.float32)
  sampler = MIDXSampler(num_codewords=5, quantizer=quantizer, seed=2)
  sampler.refresh(emb)
  check_index(sampler, emb)
  before = (sampler.codebook_1.numpy().copy(), sampler.codebook_2.numpy().copy())
  moved = (emb * 1.5 + rng.normal(size=(1, 7))).astype(np.float32)
  assert int(sampler.refresh(moved)) == 2
  assert not np.allclose(before[0], sampler.codebook_1.numpy())
  assert not np.allclose(before[1], sampler.codebook_2.numpy())
  check_index(sampler, moved)


def test_fewer_items_than_cells_leaves_empty_cells_with_zero_probability():
  rng = np.random.default_rng(7)
  emb = rng.normal(size=(3, 4)).astype(np.float32)
  sampler = MIDXSampler(num_codewords=8, quantizer="pq", seed=0)
  sampler.refresh(emb)
  check_index(sampler, emb)
  assert (sampler.cell_counts.numpy() > 0).sum() <= 3
  z = rng.normal(size=(2, 4)).astype(np.float32)
  ids, log_q = sampler.sample(z, 2000)
  assert set(np.unique(ids.numpy())) <= {0, 1, 2}
  assert np.all(np.isfinite(log_q.numpy()))
  np.testing.assert_allclose(np.exp(sampler.proposal_log_probs(z).numpy()).sum(1), 1.0, rtol=1e-5)


def test_kmeans_recovers_separated_clusters():
  rng = np.random.default_rng(8)
  means = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
  labels = rng.integers(0, 3, size=600)
  x = (means[labels] + 0.1 * rng.normal(size=(600, 2))).astype(np.float32)
  c = kmeans_lib.kmeans(x, 3, num_iterations=10, seed=[1, 2]).numpy()
  truth = np.stack([x[labels == j].mean(0) for j in range(3)])
  dist = np_nearest(truth, c.astype(np.float64))
  assert np.all(dist.min(1) < 1e-6)
  assign, sq = kmeans_lib.nearest_centroid(x, c, chunk_size=64)
  dist_all = np_nearest(x.astype(np.float64), c.astype(np.float64))
  np.testing.assert_array_equal(assign.numpy(), dist_all.argmin(1))
  np.testing.assert_allclose(sq.numpy(), dist_all.min(1), atol=1e-3)
  again = kmeans_lib.kmeans(x, 3, num_iterations=10, seed=[1, 2]).numpy()
  np.testing.assert_array_equal(c, again)


def test_refresh_every_n_steps_hook_and_callback():
  emb = tf.Variable(np.random.default_rng(9).normal(size=(50, 4)).astype(np.float32))
  sampler = MIDXSampler(num_codewords=3, seed=0)
  hook = RefreshEveryNSteps(sampler, lambda: emb, every_n_steps=3)
  done = [bool(hook(step)) for step in range(7)]
  assert done == [True, False, False, True, False, False, True]
  assert int(sampler.num_refreshes) == 3

  @tf.function
  def train_step(step):
    emb.assign_add(tf.ones_like(emb))
    return hook(step)

  done = [bool(train_step(tf.constant(step))) for step in range(7, 13)]
  assert done == [False, False, True, False, False, True]
  assert int(sampler.num_refreshes) == 5
  check_index(sampler, emb.numpy())
  callback = MIDXRefreshCallback(sampler, lambda: emb, every_n_steps=2)
  for batch in range(5):
    callback.on_train_batch_begin(batch)
  assert int(sampler.num_refreshes) == 8


# ------------------------------------------------------------------- losses use log Q(i|z) as is
def test_sampled_softmax_losses_take_query_dependent_log_q():
  rng = np.random.default_rng(10)
  n, d, a, s = 40, 6, 4, 12
  items = rng.normal(size=(n, d)).astype(np.float32)
  z = rng.normal(size=(a, d)).astype(np.float32)
  sampler = MIDXSampler(num_codewords=3, quantizer="pq", seed=4)
  sampler.refresh(items)
  pos = np.array([0, 5, 17, 39])
  ids, log_q = sampler.sample(z, s)
  ids, log_q = ids.numpy(), log_q.numpy()
  pos_log_q = sampler.log_prob(z, pos).numpy()
  s_pos = (z * items[pos]).sum(1)
  s_neg = np.einsum("ad,asd->as", z, items[ids])
  valid = accidental_hit_mask(tf.constant(pos, tf.int64), tf.constant(ids)).numpy()
  np.testing.assert_array_equal(valid, ids != pos[:, None])
  for correction in ("standard", "corrected"):
    out = losses.sampled_softmax_loss(
      s_pos, s_neg, log_q, correction=correction, positive_log_q=pos_log_q, valid_mask=valid
    )
    want = []
    for r in range(a):
      sv, lq = s_neg[r][valid[r]].astype(np.float64), log_q[r][valid[r]].astype(np.float64)
      sp, lp = float(s_pos[r]), float(pos_log_q[r])
      if correction == "standard":
        want.append(-((sp - lp) - np.log(np.exp(sp - lp) + np.exp(sv - lq).sum())))
      else:
        lq_prime = lq - np.log1p(-np.exp(lp))
        big_z = np.log(np.exp(sv - lq_prime).sum())
        p_hat = 1.0 / (1.0 + np.exp(-(sp - (big_z - np.log(sv.size)))))
        want.append(-(1.0 - p_hat) * (sp - big_z))
    np.testing.assert_allclose(out.loss.numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("source", ["item_table", "embedder"])
def test_score_is_the_negative_sampler_interface(source):
  """score(): per-query scores of the drawn ids, exact log Q(d|z), log Q(p|z), hits masked."""
  rng = np.random.default_rng(8)
  n, d, a, s = 30, 4, 5, 40
  table = rng.normal(size=(n + 1, d)).astype(np.float32)  # row 0 = padding
  z = rng.normal(size=(a, d)).astype(np.float32)
  pos = np.array([1, 5, 30, 5, 2])
  embedder = (lambda i: tf.gather(table, i)) if source == "embedder" else None
  sampler = MIDXSampler(
    num_codewords=3,
    quantizer="pq",
    seed=4,
    id_offset=1,
    num_negatives=s,
    candidate_embedder=embedder,
  )
  sampler.refresh(table[1:])
  kwargs = dict(item_table=table) if source == "item_table" else {}
  scored = sampler.score(z, pos, table[pos], temperature=0.5, seed=[1, 2], **kwargs)
  ids, log_q = sampler.sample(z, s, seed=[1, 2])
  ids = ids.numpy()
  np.testing.assert_allclose(
    scored.negative_scores.numpy(),
    np.einsum("ad,asd->as", z, table[ids]) / 0.5,
    rtol=1e-5,
    atol=1e-5,
  )
  np.testing.assert_allclose(
    scored.positive_scores.numpy(), (z * table[pos]).sum(1) / 0.5, rtol=1e-5
  )
  np.testing.assert_allclose(scored.negative_log_q.numpy(), log_q.numpy(), rtol=1e-6)
  np.testing.assert_allclose(
    scored.negative_log_q.numpy(),
    np_log_q(sampler, z)[np.arange(a)[:, None], ids - 1],
    rtol=1e-4,
    atol=1e-5,
  )
  np.testing.assert_allclose(
    scored.positive_log_q.numpy(), np_log_q(sampler, z)[np.arange(a), pos - 1], rtol=1e-4, atol=1e-5
  )
  np.testing.assert_array_equal(scored.valid_mask.numpy(), ids != pos[:, None])
  neg = sampler.sample_negatives(z, pos, table[pos], seed=[1, 2], item_table=table)
  np.testing.assert_array_equal(neg.ids.numpy(), ids)
  assert MIDXSampler.from_config(sampler.get_config()).num_negatives == s
  with pytest.raises(ValueError, match="num_negatives"):
    MIDXSampler(num_codewords=3, num_items=n, dim=d).score(z, pos, table[pos], item_table=table)


# --------------------------------------------------------------------- (4) errors and checkpoints
def test_numpy_integer_arguments_are_accepted_and_stored_as_python_ints():
  table = np.random.default_rng(0).normal(size=(9, 4)).astype(np.float32)
  sampler = MIDXSampler(
    num_codewords=np.int64(2),
    quantizer="rq",
    num_items=np.int64(8),
    dim=np.int32(4),
    id_offset=np.int64(1),
    num_negatives=np.int64(5),
    seed=3,
  )
  for name, want in [
    ("num_codewords", 2),
    ("num_items", 8),
    ("dim", 4),
    ("id_offset", 1),
    ("num_negatives", 5),
  ]:
    value = getattr(sampler, name)
    assert value == want and type(value) is int, (name, value)
  sampler.refresh(table[1:])
  z = table[:3]
  ids, log_q = sampler.sample(z, np.int64(6), seed=[1, 2])
  ids_int, log_q_int = sampler.sample(z, 6, seed=[1, 2])
  assert ids.shape == (3, 6)
  np.testing.assert_array_equal(ids.numpy(), ids_int.numpy())
  np.testing.assert_array_equal(log_q.numpy(), log_q_int.numpy())
  hook = RefreshEveryNSteps(sampler, lambda: table[1:], every_n_steps=np.int64(2))
  assert hook.every_n_steps == 2 and type(hook.every_n_steps) is int


@pytest.mark.parametrize("bad", [True, 2.0, np.float32(2.0), 0])
def test_bool_float_and_small_integer_arguments_raise(bad):
  with pytest.raises(ValueError, match="num_codewords"):
    MIDXSampler(num_codewords=bad)
  with pytest.raises(ValueError, match="num_negatives"):
    MIDXSampler(num_negatives=bad)
  with pytest.raises(ValueError, match="num_items"):
    MIDXSampler(num_items=bad, dim=4)
  with pytest.raises(ValueError, match="dim"):
    MIDXSampler(quantizer="rq", num_items=4, dim=bad)
  with pytest.raises(ValueError, match="every_n_steps"):
    RefreshEveryNSteps(MIDXSampler(), lambda: None, every_n_steps=bad)
  with pytest.raises(ValueError, match="id_offset"):
    MIDXSampler(id_offset=-1 if bad == 0 else bad)  # id_offset=0 is valid
  sampler = MIDXSampler(num_codewords=2, seed=0)
  sampler.refresh(np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32))
  with pytest.raises(ValueError, match="num_samples"):
    sampler.sample(np.ones((2, 4), np.float32), bad)


def test_bad_inputs_raise_clear_errors():
  with pytest.raises(ValueError, match="quantizer"):
    MIDXSampler(num_codewords=4, quantizer="opq")
  with pytest.raises(ValueError, match="num_codewords"):
    MIDXSampler(num_codewords=0)
  with pytest.raises(ValueError, match="temperature"):
    MIDXSampler(temperature=0.0)
  with pytest.raises(ValueError, match="dim"):
    MIDXSampler(quantizer="pq", num_items=10, dim=1)
  sampler = MIDXSampler(num_codewords=2, seed=0)
  z = np.ones((2, 4), np.float32)
  with pytest.raises(ValueError, match="refresh"):
    sampler.sample(z, 3)
  with pytest.raises(TypeError, match="floating"):
    sampler.refresh(np.ones((5, 4), np.int32))
  with pytest.raises(ValueError, match="empty"):
    sampler.refresh(np.ones((0, 4), np.float32))
  bad = np.ones((5, 4), np.float32)
  bad[2, 1] = np.nan
  with pytest.raises(tf.errors.InvalidArgumentError, match="NaN"):
    sampler.refresh(bad)
  sampler.refresh(np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32))
  with pytest.raises(ValueError, match="num_items"):
    sampler.refresh(np.ones((6, 4), np.float32))
  with pytest.raises(ValueError, match="dim"):
    sampler.sample(np.ones((2, 3), np.float32), 3)
  with pytest.raises(ValueError, match="empty"):
    sampler.sample(np.ones((0, 4), np.float32), 3)
  with pytest.raises(ValueError, match="num_samples"):
    sampler.sample(z, 0)
  with pytest.raises(TypeError, match="floating"):
    sampler.sample(np.ones((2, 4), np.int64), 3)
  with pytest.raises(tf.errors.InvalidArgumentError, match="NaN"):
    sampler.sample(np.full((2, 4), np.inf, np.float32), 3)
  with pytest.raises(tf.errors.InvalidArgumentError, match="out of range"):
    sampler.log_prob(z, [0, 5])
  with pytest.raises(TypeError, match="integers"):
    sampler.log_prob(z, [0.0, 1.0])
  with pytest.raises(ValueError, match="rows"):
    sampler.log_prob(z, [0, 1, 2])


def test_checkpoint_round_trip(tmp_path):
  rng = np.random.default_rng(11)
  emb = rng.normal(size=(80, 6)).astype(np.float32)
  z = rng.normal(size=(3, 6)).astype(np.float32)
  original = MIDXSampler(num_codewords=4, quantizer="rq", seed=9, id_offset=1)
  original.refresh(emb)
  original.sample(z, 4)
  path = tf.train.Checkpoint(sampler=original).save(str(tmp_path / "ckpt"))
  restored = MIDXSampler(num_codewords=4, quantizer="rq", seed=9, id_offset=1, num_items=80, dim=6)
  tf.train.Checkpoint(sampler=restored).restore(path).assert_consumed()
  for v_orig, v_rest in zip(original.weights, restored.weights):
    np.testing.assert_array_equal(v_orig.numpy(), v_rest.numpy())
  ids_o, lq_o = original.sample(z, 8)
  ids_r, lq_r = restored.sample(z, 8)
  np.testing.assert_array_equal(ids_o.numpy(), ids_r.numpy())
  np.testing.assert_array_equal(lq_o.numpy(), lq_r.numpy())
  config = restored.get_config()
  assert MIDXSampler.from_config(config).num_codewords == 4


def test_mirrored_strategy_replicas_draw_different_samples_with_exact_log_q(mirrored_strategy):
  strategy = mirrored_strategy
  rng = np.random.default_rng(12)
  emb = rng.normal(size=(64, 6)).astype(np.float32)
  z = rng.normal(size=(2, 6)).astype(np.float32)
  with strategy.scope():
    sampler = MIDXSampler(num_codewords=3, quantizer="pq", seed=1, num_items=64, dim=6)
  sampler.refresh(emb)

  @tf.function
  def step():
    return strategy.run(lambda: sampler.sample(tf.constant(z), 32))

  ids, log_q = step()
  ids = [t.numpy() for t in strategy.experimental_local_results(ids)]
  log_q = [t.numpy() for t in strategy.experimental_local_results(log_q)]
  assert not np.array_equal(ids[0], ids[1])  # replica id is folded into the seed
  ref = np_log_q(sampler, z)
  for r in range(2):
    np.testing.assert_allclose(log_q[r], np.take_along_axis(ref, ids[r], axis=1), atol=2e-5)
  assert int(sampler.num_draws.numpy()) == 1
