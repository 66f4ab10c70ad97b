"""tfrs_logq.tasks.Retrieval: the drop-in claim against tfrs.tasks.Retrieval, and corrected."""

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import numpy_reference as ref  # noqa: E402

import tfrs_logq  # noqa: E402,F401
import tensorflow as tf  # noqa: E402
import tensorflow_recommenders as tfrs  # noqa: E402
from tfrs_logq import tasks  # noqa: E402


def _batch(seed, a=16, extra=8, d=6, num_items=20):
  rng = np.random.default_rng(seed)
  q = rng.dirichlet(np.ones(num_items) * 0.5)
  q = np.maximum(q, 1e-4)
  q /= q.sum()
  ids = rng.choice(num_items, size=a + extra, p=q)  # popular ids repeat: accidental hits
  return dict(
      query=tf.constant(rng.normal(size=(a, d)), tf.float32),
      cand=tf.constant(rng.normal(size=(a + extra, d)), tf.float32),
      prob=tf.constant(q[ids], tf.float32),
      ids=tf.constant(ids, tf.int64),
      weight=tf.constant(rng.uniform(0.5, 2.0, size=a), tf.float32))


def _loss_and_grads(task, b, **call_kwargs):
  with tf.GradientTape() as tape:
    tape.watch([b["query"], b["cand"]])
    loss = task(b["query"], b["cand"], **call_kwargs)
  return loss.numpy(), [g.numpy() for g in tape.gradient(loss, [b["query"], b["cand"]])]


DROP_IN_CASES = [
    dict(),
    dict(temperature=0.2),
    dict(remove_accidental_hits=True),
    dict(num_hard_negatives=5),
    dict(remove_accidental_hits=True, num_hard_negatives=7, temperature=0.5),
]


@pytest.mark.parametrize("kwargs", DROP_IN_CASES)
@pytest.mark.parametrize("with_probability", [True, False])
def test_drop_in_equals_tfrs(kwargs, with_probability):
  """Same loss and gradients as tfrs.tasks.Retrieval (standard logQ, or none without Q)."""
  b = _batch(0)
  call = dict(candidate_ids=b["ids"], sample_weight=b["weight"])
  if with_probability:
    call["candidate_sampling_probability"] = b["prob"]
  correction = "standard" if with_probability else "none"
  want_loss, want_grads = _loss_and_grads(tfrs.tasks.Retrieval(**kwargs), b, **call)
  got_loss, got_grads = _loss_and_grads(tasks.Retrieval(correction=correction, **kwargs), b,
                                        **call)
  np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5)
  for got, want in zip(got_grads, want_grads):
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_drop_in_with_score_mask_and_mean_reduction():
  b = _batch(1, extra=0)
  a = b["query"].shape[0]
  mask = np.random.default_rng(1).uniform(size=(a, a)) > 0.3
  np.fill_diagonal(mask, True)
  loss = tf.keras.losses.CategoricalCrossentropy(
      from_logits=True, reduction=tf.keras.losses.Reduction.SUM_OVER_BATCH_SIZE)
  call = dict(candidate_sampling_probability=b["prob"], score_mask=tf.constant(mask))
  want, _ = _loss_and_grads(tfrs.tasks.Retrieval(loss=loss), b, **call)
  got, _ = _loss_and_grads(tasks.Retrieval(loss=loss, correction="standard"), b, **call)
  np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("correction", ["corrected", "standard_no_positive"])
def test_task_matches_numpy_with_extra_negatives(correction):
  """Rows' negatives = all other columns (incl. extra rows) minus accidental hits."""
  b = _batch(2, extra=10)
  task = tasks.Retrieval(correction=correction, temperature=0.5, remove_accidental_hits=True,
                         loss=tf.keras.losses.CategoricalCrossentropy(
                             from_logits=True, reduction=tf.keras.losses.Reduction.NONE))
  got = task(b["query"], b["cand"], candidate_sampling_probability=b["prob"],
             candidate_ids=b["ids"]).numpy()
  scores = b["query"].numpy().astype(np.float64) @ b["cand"].numpy().T / 0.5
  ids = b["ids"].numpy()
  a = scores.shape[0]
  lq = np.log(b["prob"].numpy().astype(np.float64))
  valid = (ids[:a, None] != ids[None, :])
  want, _, _, _ = ref.loss_and_grads(np.diag(scores), scores, lq, lq[:a], valid, correction)
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-5)


def test_corrected_needs_probabilities_and_ids():
  b = _batch(3)
  with pytest.raises(ValueError, match="candidate_sampling_probability"):
    tasks.Retrieval()(b["query"], b["cand"], candidate_ids=b["ids"])
  with pytest.raises(ValueError, match="candidate_ids"):
    tasks.Retrieval()(b["query"], b["cand"], candidate_sampling_probability=b["prob"])
  with pytest.raises(ValueError, match="not both"):
    tasks.Retrieval()(b["query"], b["cand"], candidate_sampling_probability=b["prob"],
                      candidate_log_sampling_probability=tf.math.log(b["prob"]),
                      candidate_ids=b["ids"])
  with pytest.raises(ValueError, match="correction"):
    tasks.Retrieval(correction="yi")
  with pytest.raises(ValueError, match="CategoricalCrossentropy"):
    tasks.Retrieval(loss=tf.keras.losses.MeanSquaredError())
  with pytest.raises(tf.errors.InvalidArgumentError, match="must be > 0"):
    tasks.Retrieval()(b["query"], b["cand"], candidate_ids=b["ids"],
                      candidate_sampling_probability=tf.zeros_like(b["prob"]))
  with pytest.raises(tf.errors.InvalidArgumentError, match="at least one row"):
    tasks.Retrieval(correction="none")(b["query"], b["cand"][:3])


def test_log_probabilities_equal_probabilities():
  b = _batch(4)
  task = tasks.Retrieval()
  a = task(b["query"], b["cand"], candidate_sampling_probability=b["prob"],
           candidate_ids=b["ids"])
  c = task(b["query"], b["cand"], candidate_log_sampling_probability=tf.math.log(b["prob"]),
           candidate_ids=b["ids"])
  np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-6)


def test_string_ids_and_metrics():
  b = _batch(5, extra=0)
  str_ids = tf.strings.as_string(b["ids"])
  batch_auc = tf.keras.metrics.AUC(from_logits=True)
  loss_mean = tf.keras.metrics.Mean()
  task = tasks.Retrieval(batch_metrics=[batch_auc], loss_metrics=[loss_mean])
  loss = task(b["query"], b["cand"], candidate_sampling_probability=b["prob"],
              candidate_ids=str_ids)
  assert np.isfinite(loss.numpy())
  assert 0.0 < batch_auc.result().numpy() <= 1.0
  np.testing.assert_allclose(loss_mean.result().numpy(), loss.numpy())


class _TwoTower(tfrs.Model):
  """The TFRS basic-retrieval tutorial shape: id towers + Retrieval task."""

  def __init__(self, num_users, num_items, task):
    super().__init__()
    self.user = tf.keras.layers.Embedding(num_users, 16)
    self.item = tf.keras.layers.Embedding(num_items, 16)
    self.task = task

  def compute_loss(self, features, training=False):
    users = self.user(features["user"])
    items = self.item(features["item"])
    return self.task(users, items, candidate_sampling_probability=features["q"],
                     candidate_ids=features["item"], compute_metrics=False)


@pytest.mark.parametrize("correction", ["corrected", "standard"])
def test_two_tower_model_trains(correction):
  rng = np.random.default_rng(0)
  num_users, num_items, n = 200, 100, 6000
  pop = 1.0 / np.arange(1, num_users + 1) ** 1.0
  pop /= pop.sum()
  users = rng.choice(num_users, size=n, p=pop)  # popular users make popular items
  items = (users * 7 + rng.integers(0, 3, size=n)) % num_items  # learnable, 3 per user
  counts = np.bincount(items, minlength=num_items)
  q = (counts / counts.sum())[items].astype(np.float32)
  ds = tf.data.Dataset.from_tensor_slices({"user": users, "item": items, "q": q}).batch(256)
  tf.keras.utils.set_random_seed(0)
  model = _TwoTower(num_users, num_items,
                    tasks.Retrieval(correction=correction, remove_accidental_hits=True))
  model.compile(optimizer=tf.keras.optimizers.Adam(0.05))
  history = model.fit(ds, epochs=4, verbose=0)
  losses = history.history["loss"]
  assert all(np.isfinite(losses))
  assert losses[-1] < 0.9 * losses[0], losses


def test_mixed_precision_model_loss_is_float32():
  tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    b = _batch(6)
    dense = tf.keras.layers.Dense(6)
    query = dense(b["query"])
    assert query.dtype == tf.bfloat16
    loss = tasks.Retrieval()(query, tf.cast(b["cand"], tf.bfloat16),
                             candidate_sampling_probability=b["prob"], candidate_ids=b["ids"])
    assert loss.dtype == tf.float32 and np.isfinite(loss.numpy())
  finally:
    tf.keras.mixed_precision.set_global_policy("float32")


def test_corrected_hard_negatives_keep_the_top_k_by_s_minus_log_q_prime():
  b = _batch(7, extra=6)
  k = 5
  task = tasks.Retrieval(correction="corrected", num_hard_negatives=k,
                         loss=tf.keras.losses.CategoricalCrossentropy(
                             from_logits=True, reduction=tf.keras.losses.Reduction.NONE))
  got = task(b["query"], b["cand"], candidate_sampling_probability=b["prob"],
             candidate_ids=b["ids"]).numpy()
  scores = b["query"].numpy().astype(np.float64) @ b["cand"].numpy().T
  ids = b["ids"].numpy()
  a = scores.shape[0]
  lq = np.log(b["prob"].numpy().astype(np.float64))
  valid = ids[:a, None] != ids[None, :]
  lq_prime = lq[None, :] - np.log1p(-np.exp(lq[:a]))[:, None]
  hard = np.zeros_like(valid)
  for r in range(a):
    cols = np.flatnonzero(valid[r])
    order = cols[np.argsort(-(scores[r, cols] - lq_prime[r, cols]))]
    hard[r, order[:k]] = True
  want, _, _, _ = ref.loss_and_grads(np.diag(scores), scores, lq, lq[:a], hard, "corrected")
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-5)
