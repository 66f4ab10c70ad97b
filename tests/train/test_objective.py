"""train/objective.py: the per-step loss of the library composition against a numpy oracle of the
paper's code (mixed negatives: shared in-batch block + per-query / per-sequence / shared uniform
block; none / standard / corrected), the full softmax and gBCE."""

import types

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import frequency
from tfrs_logq.tf_keras import negatives as neg_lib

import numpy as np
import pytest
import tensorflow as tf

from models.sasrec import SASRec
from train import objective

N_ITEMS, K, L, B = 40, 16, 10, 5


def _config(**kw):
  """The RunConfig fields the objective reads (train.config.RunConfig has them all)."""
  fields = dict(
    loss="sampled_softmax",
    negatives="mixed",
    num_negatives=K,
    uniform_negatives="batch",
    logq="corrected",
    q_prime="exact",
    log_q_convention="unigram",
    ratio_floor=0.0,
    temperature=1.0,
    gbce_t=0.75,
    seed=0,
    jit_compile=False,
    frequency="exact",
  )
  fields.update(kw)
  return types.SimpleNamespace(**fields)


def _setup(seed=11):
  rng = np.random.default_rng(seed)
  model = SASRec(N_ITEMS, max_len=L, embedding_dim=8, dropout=0.0, seed=3).build_all()
  for v in model.trainable_variables:
    v.assign(v * 20.0)  # spread the scores
  counts = np.concatenate([[0], rng.integers(1, 50, size=N_ITEMS)]).astype(np.int64)
  est = frequency.ExactCounts(N_ITEMS + 1, counts=counts)
  inputs = rng.integers(1, N_ITEMS + 1, size=(B, L))
  inputs[:, :3] = 0
  inputs[1, :6] = 0
  targets = np.roll(inputs, -1, axis=1)
  targets[:, -1] = rng.integers(1, N_ITEMS + 1, size=B)
  batch = {"inputs": tf.constant(inputs), "targets": tf.constant(targets)}
  return model, est, counts.astype(np.float64), batch, targets


def _np_reference_losses(q, table, pos, neg_ids, counts, correction):
  """The paper's code (train_mns_log_new / old) written in numpy: per-row loss and weight.

  neg_ids [A, N]; Q(d) = #d / N_total (standard) and Q'(d) = #d / (N_total - #p) (corrected)."""
  total = counts.sum()
  s_p = np.einsum("ad,ad->a", q, table[pos]).astype(np.float64)
  s_n = np.einsum("ad,and->an", q, table[neg_ids]).astype(np.float64)
  valid = neg_ids != pos[:, None]
  if correction in ("none", "standard_no_positive"):
    lq = np.log(counts[neg_ids] / total) if correction != "none" else 0.0
    logits = np.concatenate([s_p[:, None], np.where(valid, s_n - lq, -np.inf)], 1)
    return -(s_p - np.log(np.exp(logits).sum(1))), np.ones_like(s_p)
  q_prime = counts[neg_ids] / (total - counts[pos])[:, None]
  corr = np.where(valid, s_n - np.log(q_prime), -np.inf)
  loss = -(s_p - np.log(np.exp(corr).sum(1)))
  n = valid.sum(1)
  p_hat = np.exp(s_p) / (np.exp(s_p) + np.exp(corr).sum(1) / n)
  return (1 - p_hat) * loss, 1 - p_hat


def _drawn_negatives(per, seed, pos, pos_emb, seq, est):
  """The ids the objective's sampler drew, rebuilt from the documented seed split: in-batch
  block with the first half of the split step seed, uniform block with the second."""
  seed_b, seed_u = tf.unstack(tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 2))
  batch_ids = neg_lib.InBatchNegatives(est, num_negatives=K // 2)(
    pos, pos_emb, seed=seed_b
  ).ids.numpy()
  uniform = neg_lib.UniformNegatives(None, K - K // 2, id_range=(1, N_ITEMS + 1), per=per)
  a = len(pos)
  if per == "batch":
    uni = np.broadcast_to(uniform.sample_ids(seed_u).numpy(), (a, K - K // 2))
  elif per == "query":
    uni = uniform.sample_ids(seed_u, a).numpy()
  else:
    distinct, segment = np.unique(seq, return_inverse=True)  # rows in order: same as tf.unique
    uni = uniform.sample_ids(seed_u, len(distinct)).numpy()[segment]
  return np.concatenate([np.broadcast_to(batch_ids, (a, batch_ids.size)), uni], 1)


@pytest.mark.parametrize("per", ["batch", "sequence", "query"])
@pytest.mark.parametrize("correction", ["none", "standard_no_positive", "corrected"])
def test_mixed_step_loss_matches_the_papers_code(per, correction):
  model, est, counts, batch, targets = _setup()
  obj = objective.Objective(_config(uniform_negatives=per, logq=correction), model, N_ITEMS, est)
  step = 7
  out = obj(batch, step, training=False)
  q, pos, seq = model.training_queries(batch, training=False)
  seed, _ = objective.step_seeds(0, step)
  neg_ids = _drawn_negatives(per, seed, pos, model.item_embeddings(pos), seq.numpy(), est)
  assert neg_ids.shape[1] == K
  if per == "sequence":  # the positions of one sequence share their uniform negatives
    rows = seq.numpy()
    assert np.array_equal(neg_ids[rows == rows[0]][0], neg_ids[rows == rows[0]][-1])
  loss, weight = _np_reference_losses(
    q.numpy(), model.all_item_embeddings().numpy(), pos.numpy(), neg_ids, counts, correction
  )
  a = int((targets != 0).sum())
  np.testing.assert_allclose(out["count"].numpy(), a)
  np.testing.assert_allclose(out["loss_sum"].numpy(), loss.sum(), rtol=2e-4)
  np.testing.assert_allclose(out["loss"].numpy(), loss.sum() / a, rtol=2e-4)
  np.testing.assert_allclose(out["weight_sum"].numpy(), weight.sum(), rtol=1e-4)
  per_row = obj.per_query_loss(q, pos, seq, seed)
  np.testing.assert_allclose(per_row.loss.numpy(), loss, rtol=2e-4, atol=2e-4)
  assert np.ptp(loss) > 0.1


def test_standard_correction_subtracts_log_q_of_the_positive_too():
  model, est, counts, batch, _ = _setup(12)
  obj = objective.Objective(
    _config(logq="standard", uniform_negatives="query"), model, N_ITEMS, est
  )
  q, pos, seq = model.training_queries(batch, training=False)
  seed, _ = objective.step_seeds(0, 3)
  neg_ids = _drawn_negatives("query", seed, pos, model.item_embeddings(pos), seq.numpy(), est)
  table = model.all_item_embeddings().numpy()
  s_p = np.einsum("ad,ad->a", q.numpy(), table[pos.numpy()])
  s_n = np.einsum("ad,and->an", q.numpy(), table[neg_ids])
  with np.errstate(divide="ignore"):
    lq = np.log(counts / counts.sum())
  pos_logit = s_p - lq[pos.numpy()]
  logits = np.where(neg_ids != pos.numpy()[:, None], s_n - lq[neg_ids], -np.inf)
  m = np.maximum(pos_logit, logits.max(1))
  want = m + np.log(np.exp(pos_logit - m) + np.exp(logits - m[:, None]).sum(1)) - pos_logit
  np.testing.assert_allclose(
    obj.per_query_loss(q, pos, seq, seed).loss.numpy(), want, rtol=2e-4, atol=2e-4
  )


def test_full_softmax_and_gbce_steps():
  model, est, _, batch, _ = _setup(13)
  q, pos, seq = model.training_queries(batch, training=False)
  table = model.all_item_embeddings().numpy()
  full = objective.Objective(_config(loss="full_softmax", temperature=2.0), model, N_ITEMS)
  logits = q.numpy() @ table[1:].T / 2.0
  m = logits.max(1, keepdims=True)
  want = (m[:, 0] + np.log(np.exp(logits - m).sum(1))) - logits[
    np.arange(len(pos)), pos.numpy() - 1
  ]
  np.testing.assert_allclose(
    full(batch, 0, training=False)["loss_sum"].numpy(), want.sum(), rtol=1e-4
  )
  gbce = objective.Objective(
    _config(loss="gbce", negatives="uniform", uniform_negatives="query", gbce_t=0.5), model, N_ITEMS
  )
  seed, _ = objective.step_seeds(0, 4)
  ids = (
    neg_lib.UniformNegatives(None, K, id_range=(1, N_ITEMS + 1)).sample_ids(seed, len(pos)).numpy()
  )
  s_p = np.einsum("ad,ad->a", q.numpy(), table[pos.numpy()])
  s_n = np.einsum("ad,akd->ak", q.numpy(), table[ids])
  alpha = K / (N_ITEMS - 1)
  beta = alpha * (0.5 * (1 - 1 / alpha) + 1 / alpha)
  softplus = lambda x: np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)
  want = beta * softplus(-s_p) + np.where(ids != pos.numpy()[:, None], softplus(s_n), 0).sum(1)
  np.testing.assert_allclose(gbce.per_query_loss(q, pos, seq, seed).loss.numpy(), want, rtol=1e-4)


def test_estimator_is_updated_once_per_training_step_unless_exact():
  model, _, _, batch, targets = _setup(14)
  est = frequency.ExactCounts(N_ITEMS + 1)
  obj = objective.Objective(_config(frequency="count_min"), model, N_ITEMS, est)
  obj(batch, 0, training=True)
  np.testing.assert_array_equal(
    est.counts.numpy(), np.bincount(targets[targets != 0], minlength=N_ITEMS + 1)
  )
  obj(batch, 1, training=False)  # evaluation steps do not count
  assert int(est.total.numpy()) == int((targets != 0).sum())
  exact = frequency.ExactCounts(N_ITEMS + 1, counts=np.ones(N_ITEMS + 1, np.int64))
  objective.Objective(_config(), model, N_ITEMS, exact)(batch, 0, training=True)
  assert int(exact.total.numpy()) == N_ITEMS + 1  # exact counts are fixed


def test_ratio_floor_and_the_library_validation():
  model, est, _, batch, _ = _setup(15)
  obj = objective.Objective(_config(ratio_floor=1e-10), model, N_ITEMS, est)
  assert np.isfinite(obj(batch, 0, training=False)["loss"].numpy())
  with pytest.raises(ValueError, match="ratio_floor"):  # validated by the library, once
    objective.Objective(_config(logq="standard", ratio_floor=1e-10), model, N_ITEMS, est)


@pytest.mark.parametrize(
  "negatives, per, convention",
  [
    ("mixed", "sequence", "expected_count"),
    ("mixed", "query", "mixture"),
    ("in_batch", "batch", "expected_count"),
  ],
)
def test_graph_mode_equals_eager(negatives, per, convention):
  """The trainer runs the objective inside tf.function with unknown batch shapes."""
  model, est, _, batch, _ = _setup(16)
  obj = objective.Objective(
    _config(negatives=negatives, uniform_negatives=per, log_q_convention=convention),
    model,
    N_ITEMS,
    est,
  )
  spec = {k: tf.TensorSpec([None, None], v.dtype) for k, v in batch.items()}
  graph = tf.function(
    lambda b, s: obj(b, s, training=False), input_signature=[spec, tf.TensorSpec([], tf.int64)]
  )
  eager = obj(batch, tf.constant(5, tf.int64), training=False)
  got = graph(batch, tf.constant(5, tf.int64))
  assert np.isfinite(got["loss"].numpy())
  np.testing.assert_allclose(got["loss_sum"].numpy(), eager["loss_sum"].numpy(), rtol=1e-5)
