"""train/objective.py: per-query negative scoring (both exact paths) against numpy."""

import numpy as np
import pytest

import tfrs_logq  # noqa: F401
import tensorflow as tf

from train import objective


@pytest.mark.parametrize("vocab", [20, 5000])   # full-table scoring vs [A, k, d] gather
@pytest.mark.parametrize("jit", [False, True])
def test_per_query_scores_values_and_gradients(vocab, jit):
  rng = np.random.default_rng(vocab)
  a, k, d = 7, 6, 8
  q = tf.Variable(rng.normal(size=(a, d)).astype(np.float32))
  table = tf.Variable(rng.normal(size=(vocab, d)).astype(np.float32))
  ids = rng.integers(0, vocab, size=(a, k))
  ids[0, :3] = ids[0, 3]                       # repeated ids: gradients must add up
  up = rng.normal(size=(a, k)).astype(np.float32)
  fn = objective._per_query_scores_xla if jit else objective.per_query_scores
  with tf.GradientTape() as tape:
    s = fn(q, table, tf.constant(ids, tf.int64))
    loss = tf.reduce_sum(s * up)
  g_q, g_t = tape.gradient(loss, [q, table])
  qn, tn = q.numpy(), table.numpy()
  expected = np.einsum("ad,akd->ak", qn, tn[ids])
  np.testing.assert_allclose(s.numpy(), expected, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(g_q.numpy(), np.einsum("ak,akd->ad", up, tn[ids]), atol=1e-4)
  exp_t = np.zeros_like(tn)
  np.add.at(exp_t, ids.reshape(-1), (up[..., None] * qn[:, None, :]).reshape(-1, d))
  np.testing.assert_allclose(tf.convert_to_tensor(g_t).numpy(), exp_t, atol=1e-4)


def _np_reference_losses(q, table, pos, neg_ids, counts, correction):
  """The paper's code (train_mns_log_new/old.py) written in numpy: per-row loss and weight.

  neg_ids [A, N]; Q(d) = #d / N_total; corrected uses Q'(d) = #d / (N_total - #p)."""
  total = counts.sum()
  s_p = np.einsum("ad,ad->a", q, table[pos]).astype(np.float64)
  s_n = np.einsum("ad,and->an", q, table[neg_ids]).astype(np.float64)
  valid = neg_ids != pos[:, None]
  if correction == "none":
    logits = np.concatenate([s_p[:, None], np.where(valid, s_n, -np.inf)], 1)
    return -(s_p - np.log(np.exp(logits).sum(1))), np.ones_like(s_p)
  if correction == "standard_no_positive":
    corr = np.where(valid, s_n - np.log(counts[neg_ids] / total), -np.inf)
    logits = np.concatenate([s_p[:, None], corr], 1)
    return -(s_p - np.log(np.exp(logits).sum(1))), np.ones_like(s_p)
  q_prime = counts[neg_ids] / (total - counts[pos])[:, None]
  corr = np.where(valid, s_n - np.log(q_prime), -np.inf)
  loss = -(s_p - np.log(np.exp(corr).sum(1)))
  n = valid.sum(1)
  p_hat = np.exp(s_p) / (np.exp(s_p) + np.exp(corr).sum(1) / n)
  return (1 - p_hat) * loss, 1 - p_hat


@pytest.mark.parametrize("per_position", [False, True])
@pytest.mark.parametrize("correction", ["none", "standard_no_positive", "corrected"])
def test_mixed_objective_matches_the_papers_code(per_position, correction):
  from models.sasrec import SASRec
  from tfrs_logq import frequency
  rng = np.random.default_rng(11)
  n_items, k = 40, 16
  model = SASRec(n_items, max_len=10, embedding_dim=8, dropout=0.0, seed=3).build_all()
  for v in model.trainable_variables:
    v.assign(v * 20.0)                   # spread the scores
  counts = np.concatenate([[0], rng.integers(1, 50, size=n_items)]).astype(np.int64)
  est = frequency.ExactCounts(n_items + 1, counts=counts)
  obj = objective.Objective(objective.ObjectiveConfig(
      num_items=n_items, negatives="mixed", num_negatives=k, per_position=per_position,
      logq=correction, update_estimator=False), model, est)
  inputs = rng.integers(1, n_items + 1, size=(5, 10))
  inputs[:, :3] = 0
  targets = np.roll(inputs, -1, axis=1)
  targets[:, -1] = rng.integers(1, n_items + 1, size=5)
  q, pos, _ = model.training_queries(tf.constant(inputs), tf.constant(targets), training=False)
  seed = tf.constant([4, 5], tf.int64)
  out = obj._per_query_loss(q, pos, seed)
  # The negatives the objective drew, rebuilt from the same stateless seeds.
  pos_emb = model.item_embeddings(pos)
  a = int(tf.shape(q)[0])
  if per_position:
    seed_b, seed_u = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    batch_ids = obj.in_batch(pos, pos_emb, seed=seed_b).ids.numpy()
    uni = obj._uniform_ids([a, k - k // 2], seed_u).numpy()
    neg_ids = np.concatenate([np.broadcast_to(batch_ids, (a, batch_ids.size)), uni], 1)
  else:
    ids = obj.mixed(pos, pos_emb, seed=seed).ids.numpy()
    neg_ids = np.broadcast_to(ids, (a, ids.size))
  assert neg_ids.shape[1] == k
  loss, weight = _np_reference_losses(q.numpy(), model.all_item_embeddings().numpy(),
                                      pos.numpy(), neg_ids, counts.astype(np.float64), correction)
  np.testing.assert_allclose(out.loss.numpy(), loss, rtol=2e-4, atol=2e-4)
  np.testing.assert_allclose(out.weight.numpy(), weight, rtol=1e-4, atol=1e-5)
  assert np.ptp(loss) > 0.1
