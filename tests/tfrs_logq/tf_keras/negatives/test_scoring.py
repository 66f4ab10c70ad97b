"""score_negatives / task_candidates / the per-query and per-sequence scoring paths /
ScoredCandidates.concat against numpy; loss and task integration."""

import math
import warnings

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import losses, retrieval
from tfrs_logq.tf_keras.negatives import (
  Negatives,
  ScoredCandidates,
  per_query_scores,
  per_segment_scores,
  score_negatives,
  task_candidates,
)

import numpy as np
import pytest
import tensorflow as tf

RNG = np.random.default_rng(0)
A, N, D = 4, 6, 3


def case():
  query = RNG.normal(size=(A, D)).astype(np.float32)
  pos_ids = np.array([2, 5, 2, 9])
  pos_emb = RNG.normal(size=(A, D)).astype(np.float32)
  neg_ids = np.array([5, 1, 2, 7, 2, 3])
  neg_emb = RNG.normal(size=(N, D)).astype(np.float32)
  neg_lq = np.log(RNG.dirichlet(np.ones(N)) * 0.5).astype(np.float32)
  pos_lq = np.log(np.array([0.1, 0.3, 0.1, 0.05])).astype(np.float32)
  return query, pos_ids, pos_emb, neg_ids, neg_emb, neg_lq, pos_lq


def np_corrected_row(s_p, s_n, lq_n, lq_p, valid):
  """Paper §3.3: L = -w (s_p - Z), Z = LSE(s_i - log Q'), w = 1 - sigmoid(s_p - (Z - log n))."""
  idx = [i for i in range(len(s_n)) if valid[i]]
  logits = [s_n[i] - (lq_n[i] - math.log(1 - math.exp(lq_p))) for i in idx]
  m = max(logits)
  z = m + math.log(sum(math.exp(v - m) for v in logits))
  p_hat = 1 / (1 + math.exp(-(s_p - (z - math.log(len(idx))))))
  return -(1 - p_hat) * (s_p - z)


def test_shared_negatives_scores_mask_and_log_q():
  query, pos_ids, pos_emb, neg_ids, neg_emb, neg_lq, pos_lq = case()
  out = score_negatives(
    query,
    pos_ids,
    pos_emb,
    Negatives(neg_ids, neg_emb, neg_lq, positive_log_q=pos_lq),
    temperature=0.5,
  )
  for a in range(A):
    assert abs(out.positive_scores.numpy()[a] - np.dot(query[a], pos_emb[a]) / 0.5) < 1e-5
    for i in range(N):
      assert abs(out.negative_scores.numpy()[a, i] - np.dot(query[a], neg_emb[i]) / 0.5) < 1e-5
      assert out.valid_mask.numpy()[a, i] == (neg_ids[i] != pos_ids[a])
  np.testing.assert_array_equal(out.negative_log_q.numpy(), neg_lq)
  np.testing.assert_array_equal(out.positive_log_q.numpy(), pos_lq)


def test_q_prime_matches_reference():
  query, pos_ids, pos_emb, neg_ids, neg_emb, neg_lq, pos_lq = case()
  out = score_negatives(
    query,
    pos_ids,
    pos_emb,
    Negatives(neg_ids, neg_emb, neg_lq, positive_log_q=pos_lq),
    apply_q_prime=True,
  )
  ref = np.log(np.exp(neg_lq)[None, :] / (1 - np.exp(pos_lq))[:, None])
  np.testing.assert_allclose(out.negative_log_q.numpy(), ref, rtol=1e-5)


def test_per_query_negatives():
  query, pos_ids, pos_emb, _, _, _, pos_lq = case()
  ids = RNG.integers(0, 10, size=(A, N))
  ids[1, 2] = pos_ids[1]
  emb = RNG.normal(size=(A, N, D)).astype(np.float32)
  lq = np.log(RNG.uniform(0.01, 0.2, size=(A, N))).astype(np.float32)
  out = score_negatives(
    query, pos_ids, pos_emb, Negatives(ids, emb, lq), positive_log_q=pos_lq, apply_q_prime=True
  )
  ref_scores = np.array([[np.dot(query[a], emb[a, i]) for i in range(N)] for a in range(A)])
  np.testing.assert_allclose(out.negative_scores.numpy(), ref_scores, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(out.valid_mask.numpy(), ids != pos_ids[:, None])
  assert not out.valid_mask.numpy()[1, 2]
  ref_lq = lq - np.log1p(-np.exp(pos_lq))[:, None]
  np.testing.assert_allclose(out.negative_log_q.numpy(), ref_lq, rtol=1e-5)


def test_loss_inputs_give_the_corrected_loss():
  query, pos_ids, pos_emb, neg_ids, neg_emb, neg_lq, pos_lq = case()
  scored = score_negatives(
    query, pos_ids, pos_emb, Negatives(neg_ids, neg_emb, neg_lq, positive_log_q=pos_lq)
  )
  out = losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected")
  s_p, s_n = scored.positive_scores.numpy(), scored.negative_scores.numpy()
  valid = scored.valid_mask.numpy()
  ref = [np_corrected_row(s_p[a], s_n[a], neg_lq, pos_lq[a], valid[a]) for a in range(A)]
  np.testing.assert_allclose(out.loss.numpy(), ref, rtol=1e-4)
  # log Q' applied here + q_prime="proxy" in the loss is the same thing.
  primed = score_negatives(
    query,
    pos_ids,
    pos_emb,
    Negatives(neg_ids, neg_emb, neg_lq, positive_log_q=pos_lq),
    apply_q_prime=True,
  )
  out2 = losses.sampled_softmax_loss(
    **primed.loss_kwargs(), correction="corrected", q_prime="proxy"
  )
  np.testing.assert_allclose(out2.loss.numpy(), ref, rtol=1e-4)


def test_task_candidates_feed_the_drop_in_task():
  query, pos_ids, pos_emb, neg_ids, neg_emb, neg_lq, pos_lq = case()
  extra = Negatives(neg_ids, neg_emb, neg_lq)
  cand_ids, cand_emb, cand_lq = task_candidates(pos_ids, pos_emb, pos_lq, extra)
  np.testing.assert_array_equal(cand_ids.numpy(), np.concatenate([pos_ids, neg_ids]))
  np.testing.assert_array_equal(cand_emb.numpy(), np.concatenate([pos_emb, neg_emb]))
  np.testing.assert_array_equal(cand_lq.numpy(), np.concatenate([pos_lq, neg_lq]))
  task = retrieval.Retrieval(correction="standard", remove_accidental_hits=True)
  task_loss = task(
    query,
    cand_emb,
    candidate_ids=cand_ids,
    candidate_log_sampling_probability=cand_lq,
    compute_metrics=False,
  )
  # Same negatives through score_negatives: every candidate row; the row's own positive (and its
  # duplicates) are accidental hits.
  scored = score_negatives(
    query, pos_ids, pos_emb, Negatives(cand_ids, cand_emb, cand_lq, positive_log_q=pos_lq)
  )
  ref = losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="standard").loss
  np.testing.assert_allclose(task_loss.numpy(), ref.numpy().sum(), rtol=1e-5)


def test_bad_inputs_raise():
  query, pos_ids, pos_emb, neg_ids, neg_emb, neg_lq, pos_lq = case()
  neg = Negatives(neg_ids, neg_emb, neg_lq)
  with pytest.raises(ValueError, match="temperature"):
    score_negatives(query, pos_ids, pos_emb, neg, temperature=0.0)
  with pytest.raises(ValueError, match="positive_log_q"):
    score_negatives(query, pos_ids, pos_emb, neg, apply_q_prime=True)
  with pytest.raises(ValueError, match="dimension"):
    score_negatives(query, pos_ids, pos_emb, Negatives(neg_ids, neg_emb[:, :2], neg_lq))
  with pytest.raises(ValueError, match="positive_ids"):
    score_negatives(query, pos_ids[:3], pos_emb, neg)
  with pytest.raises(ValueError, match="log_q"):
    score_negatives(query, pos_ids, pos_emb, Negatives(neg_ids, neg_emb, neg_lq[:4]))
  with pytest.raises(TypeError, match="integer"):
    score_negatives(query, pos_ids, pos_emb, Negatives(neg_ids * 1.0, neg_emb, neg_lq))
  with pytest.raises(TypeError, match="Negatives"):
    score_negatives(query, pos_ids, pos_emb, (neg_ids, neg_emb, neg_lq))
  per_query = Negatives(
    np.zeros((A + 1, 2), np.int64),
    np.zeros((A + 1, 2, D), np.float32),
    np.zeros((A + 1, 2), np.float32),
  )
  with pytest.raises(ValueError, match="per-query"):
    score_negatives(query, pos_ids, pos_emb, per_query)
  with pytest.raises(ValueError, match="shared"):
    task_candidates(pos_ids, pos_emb, pos_lq, per_query)


def test_sasrec_positions_with_mixed_negatives():
  """Per-position queries: A = non-padding positions of a [B, L] batch (id 0 is padding)."""
  from tfrs_logq.tf_keras.negatives import InBatchNegatives, MixedNegatives, UniformNegatives  # noqa

  num_items = 20
  items = np.random.default_rng(5).normal(size=(num_items, D)).astype(np.float32)
  log_table = tf.constant(np.log(np.arange(1, num_items + 1) / 210.0), tf.float32)

  class Counts:
    def log_q(self, ids):
      return tf.gather(log_table, ids)

  targets = np.array([[0, 0, 3, 4], [0, 7, 7, 2], [5, 3, 9, 1]])  # next-item ids, 0 = padding
  hidden = RNG.normal(size=targets.shape + (D,)).astype(np.float32)  # encoder output [B, L, d]
  mask = targets != 0
  query = tf.boolean_mask(hidden, mask)  # [A, d]
  pos_ids = tf.boolean_mask(targets, mask)  # [A]
  pos_emb = tf.gather(items, pos_ids)
  sampler = MixedNegatives(
    InBatchNegatives(Counts()),
    UniformNegatives(lambda i: tf.gather(items, i), 4, id_range=(1, num_items)),
    convention="unigram",
  )
  neg = sampler(pos_ids, pos_emb, seed=[2, 2])
  scored = score_negatives(query, pos_ids, pos_emb, neg)
  a = int(mask.sum())
  n_b = len(set(targets[mask].tolist()))
  assert scored.negative_scores.shape == (a, n_b + 4)
  np.testing.assert_array_equal(
    scored.valid_mask.numpy(), neg.ids.numpy()[None, :] != pos_ids.numpy()[:, None]
  )
  out = losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected")
  assert out.loss.shape == (a,) and np.all(np.isfinite(out.loss.numpy()))


def test_package_exports_midx_sampler_lazily():
  import tfrs_logq.tf_keras.negatives as negatives
  from tfrs_logq.tf_keras.negatives import midx

  assert negatives.MIDXSampler is midx.MIDXSampler
  with pytest.raises(AttributeError):
    _ = negatives.NoSuchSampler


@pytest.mark.parametrize("vocab", [20, 5000])  # [A, V] matmul + gather vs [A, k, d] gather
@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("source", ["table", "callable_table", "embedder"])
def test_per_query_scores_values_and_gradients(vocab, jit, source):
  rng = np.random.default_rng(vocab)
  a, k, d = 7, 6, 8
  q = tf.Variable(rng.normal(size=(a, d)).astype(np.float32))
  table = tf.Variable(rng.normal(size=(vocab, d)).astype(np.float32))
  ids = rng.integers(0, vocab, size=(a, k))
  ids[0, :3] = ids[0, 3]  # repeated ids: gradients must add up
  up = rng.normal(size=(a, k)).astype(np.float32)
  kwargs = dict(
    table=dict(item_table=table),
    callable_table=dict(item_table=lambda: tf.identity(table), num_rows=vocab),
    embedder=dict(candidate_embedder=lambda i: tf.gather(table, i)),
  )[source]
  with tf.GradientTape() as tape:
    s = per_query_scores(q, tf.constant(ids, tf.int64), jit_compile=jit, **kwargs)
    loss = tf.reduce_sum(s * up)
  g_q, g_t = tape.gradient(loss, [q, table])
  qn, tn = q.numpy(), table.numpy()
  np.testing.assert_allclose(s.numpy(), np.einsum("ad,akd->ak", qn, tn[ids]), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(g_q.numpy(), np.einsum("ak,akd->ad", up, tn[ids]), atol=1e-4)
  exp_t = np.zeros_like(tn)
  np.add.at(exp_t, ids.reshape(-1), (up[..., None] * qn[:, None, :]).reshape(-1, d))
  np.testing.assert_allclose(tf.convert_to_tensor(g_t).numpy(), exp_t, atol=1e-4)


def test_per_query_scores_needs_a_source():
  with pytest.raises(ValueError, match="item_table or a candidate_embedder"):
    per_query_scores(tf.ones([2, 3]), tf.zeros([2, 4], tf.int64))


def test_per_segment_scores_match_numpy_in_any_order():
  rng = np.random.default_rng(3)
  a, u, k, d = 11, 4, 5, 3
  q = tf.Variable(rng.normal(size=(a, d)).astype(np.float32))
  emb = tf.Variable(rng.normal(size=(u, k, d)).astype(np.float32))
  seg = np.array([2, 0, 2, 3, 1, 1, 0, 2, 3, 3, 3])  # unsorted, uneven segments
  up = rng.normal(size=(a, k)).astype(np.float32)
  with tf.GradientTape() as tape:
    out = per_segment_scores(q, seg, emb)
    loss = tf.reduce_sum(out * up)
  g_q, g_e = tape.gradient(loss, [q, emb])
  qn, en = q.numpy(), emb.numpy()
  np.testing.assert_allclose(
    out.numpy(), np.einsum("ad,akd->ak", qn, en[seg]), rtol=1e-5, atol=1e-6
  )
  np.testing.assert_allclose(g_q.numpy(), np.einsum("ak,akd->ad", up, en[seg]), atol=1e-5)
  want_e = np.zeros_like(en)
  np.add.at(want_e, seg, up[..., None] * qn[:, None, :])
  np.testing.assert_allclose(g_e.numpy(), want_e, atol=1e-5)


def test_concat_joins_blocks_and_broadcasts_log_q():
  a = 3
  s_p = tf.constant([1.0, 2.0, 3.0])
  shared = ScoredCandidates(
    s_p,
    tf.ones([a, 2]),
    tf.constant([-1.0, -2.0]),
    tf.constant([[True, False]] * a),
    tf.constant([-0.5] * a),
  )
  per_row = ScoredCandidates(
    s_p,
    2 * tf.ones([a, 3]),
    tf.fill([a, 3], -3.0),
    tf.ones([a, 3], tf.bool),
    tf.constant([-0.7] * a),
  )
  joined = ScoredCandidates.concat(shared, per_row)
  assert joined.negative_scores.shape == (a, 5)
  np.testing.assert_array_equal(joined.negative_log_q.numpy(), [[-1.0, -2.0, -3.0, -3.0, -3.0]] * a)
  np.testing.assert_array_equal(joined.valid_mask.numpy()[:, 1], False)
  np.testing.assert_array_equal(joined.positive_log_q.numpy(), [-0.5] * a)  # the first block's
  both_shared = ScoredCandidates.concat(shared, shared, positive_log_q=None)
  assert both_shared.negative_log_q.shape == (4,) and both_shared.positive_log_q is None
  with pytest.raises(ValueError):
    ScoredCandidates.concat()


@pytest.mark.parametrize("vocab", [20, 5000])
def test_per_query_scores_inside_xla_do_not_nest_a_jit_function(monkeypatch, vocab):
  """A nested jit function is recompiled at every call of the outer XLA program (the whole
  train step was recompiled at every step): inside XLA the plain path is traced in place."""
  from tfrs_logq.tf_keras.negatives import scoring

  def nested(*args):
    raise AssertionError("nested jit function called")

  monkeypatch.setattr(scoring, "_matmul_then_gather_xla", nested)
  monkeypatch.setattr(scoring, "_gather_then_dot_xla", nested)
  rng = np.random.default_rng(0)
  q = tf.constant(rng.normal(size=(5, 8)).astype(np.float32))
  table = tf.constant(rng.normal(size=(vocab, 8)).astype(np.float32))
  ids = tf.constant(rng.integers(0, vocab, size=(5, 6)))
  with pytest.raises(AssertionError, match="nested"):  # outside XLA: the jit path
    per_query_scores(q, ids, item_table=table, jit_compile=True)
  out = tf.function(
    lambda: per_query_scores(q, ids, item_table=table, jit_compile=True), jit_compile=True
  )()
  np.testing.assert_allclose(
    out.numpy(), np.einsum("ad,akd->ak", q.numpy(), table.numpy()[ids.numpy()]), rtol=1e-5
  )


def test_the_former_field_order_is_read_with_a_warning():
  """Before 0.3 the tf-keras record was (ids, embeddings, log_q, positive_log_q, valid): a float
  fourth argument is still its positive_log_q (DeprecationWarning); the new order is silent."""
  ids, emb = tf.constant([1, 2], tf.int64), tf.zeros([2, 3])
  log_q, pos_lq, valid = tf.constant([-1.0, -2.0]), tf.constant([-0.5]), tf.constant([True, False])
  with pytest.warns(DeprecationWarning, match="former field order"):
    old = Negatives(ids, emb, log_q, pos_lq, valid)
  with pytest.warns(DeprecationWarning, match="former field order"):
    old_without_valid = Negatives(ids, emb, log_q, pos_lq)
  for got in (old, old_without_valid):
    np.testing.assert_array_equal(got.positive_log_q.numpy(), pos_lq.numpy())
  np.testing.assert_array_equal(old.valid.numpy(), valid.numpy())
  assert old_without_valid.valid is None
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    new = Negatives(ids, emb, log_q, valid, pos_lq)
    keyword = Negatives(ids, emb, log_q, positive_log_q=pos_lq)
    assert new._replace(valid=None).valid is None  # NamedTuple's own methods keep working
  assert new.valid is valid and new.positive_log_q is pos_lq and keyword.valid is None
