"""tfrs_logq.tf_keras.Retrieval: the drop-in claim against tfrs.tasks.Retrieval, and corrected."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import frequency, retrieval

import numpy as np
import numpy_reference as ref
import pytest
import tensorflow as tf
import tensorflow_recommenders as tfrs


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
    weight=tf.constant(rng.uniform(0.5, 2.0, size=a), tf.float32),
  )


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
  got_loss, got_grads = _loss_and_grads(
    retrieval.Retrieval(correction=correction, **kwargs), b, **call
  )
  np.testing.assert_allclose(got_loss, want_loss, rtol=1e-5)
  for got, want in zip(got_grads, want_grads):
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_drop_in_with_score_mask_and_mean_reduction():
  b = _batch(1, extra=0)
  a = b["query"].shape[0]
  mask = np.random.default_rng(1).uniform(size=(a, a)) > 0.3
  np.fill_diagonal(mask, True)
  loss = tf.keras.losses.CategoricalCrossentropy(
    from_logits=True, reduction=tf.keras.losses.Reduction.SUM_OVER_BATCH_SIZE
  )
  call = dict(candidate_sampling_probability=b["prob"], score_mask=tf.constant(mask))
  want, _ = _loss_and_grads(tfrs.tasks.Retrieval(loss=loss), b, **call)
  got, _ = _loss_and_grads(retrieval.Retrieval(loss=loss, correction="standard"), b, **call)
  np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("correction", ["corrected", "standard_no_positive"])
def test_task_matches_numpy_with_extra_negatives(correction):
  """Rows' negatives = all other columns (incl. extra rows) minus accidental hits."""
  b = _batch(2, extra=10)
  task = retrieval.Retrieval(
    correction=correction,
    temperature=0.5,
    remove_accidental_hits=True,
    loss=tf.keras.losses.CategoricalCrossentropy(
      from_logits=True, reduction=tf.keras.losses.Reduction.NONE
    ),
  )
  got = task(
    b["query"], b["cand"], candidate_sampling_probability=b["prob"], candidate_ids=b["ids"]
  ).numpy()
  scores = b["query"].numpy().astype(np.float64) @ b["cand"].numpy().T / 0.5
  ids = b["ids"].numpy()
  a = scores.shape[0]
  lq = np.log(b["prob"].numpy().astype(np.float64))
  valid = ids[:a, None] != ids[None, :]
  want, _, _, _ = ref.loss_and_grads(np.diag(scores), scores, lq, lq[:a], valid, correction)
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-5)


def test_ratio_floor_is_passed_to_the_loss_and_round_trips():
  """The task's per-row loss with ratio_floor = r equals sampled_softmax_loss(..., ratio_floor=r)
  on the same scores, log Q and accidental-hit mask; get_config / from_config keep r."""
  from tfrs_logq.tf_keras import accidental_hits, losses

  b = _batch(2, extra=10)
  r = 0.2  # log r ~ -1.6: the clamp is active for a part of the rows at temperature 0.25
  no_reduction = tf.keras.losses.CategoricalCrossentropy(
    from_logits=True, reduction=tf.keras.losses.Reduction.NONE
  )
  task = retrieval.Retrieval(
    correction="corrected", temperature=0.25, ratio_floor=r, loss=no_reduction
  )
  assert task.ratio_floor == r
  call = dict(candidate_sampling_probability=b["prob"], candidate_ids=b["ids"])
  got = task(b["query"], b["cand"], **call).numpy()
  scores = tf.linalg.matmul(b["query"], b["cand"], transpose_b=True) / 0.25
  a = scores.shape[0]
  log_q = tf.math.log(b["prob"])
  valid = accidental_hits.accidental_hit_mask(b["ids"][:a], b["ids"])
  want = losses.sampled_softmax_loss(
    tf.linalg.diag_part(scores),
    scores,
    log_q,
    correction="corrected",
    positive_log_q=log_q[:a],
    valid_mask=valid,
    ratio_floor=r,
  ).loss.numpy()
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
  unclamped = retrieval.Retrieval(correction="corrected", temperature=0.25, loss=no_reduction)(
    b["query"], b["cand"], **call
  ).numpy()
  assert np.any(np.abs(got - unclamped) > 1e-3)  # the floor changes some rows
  config = task.get_config()
  assert config["ratio_floor"] == r
  rebuilt = retrieval.Retrieval.from_config(config)
  assert rebuilt.ratio_floor == r and rebuilt.get_config() == config
  np.testing.assert_allclose(rebuilt(b["query"], b["cand"], **call).numpy(), got, rtol=1e-6)
  assert retrieval.Retrieval().get_config()["ratio_floor"] == 0.0
  for bad in (-0.1, 1.0, True, "1e-10"):
    with pytest.raises(ValueError, match="ratio_floor"):
      retrieval.Retrieval(ratio_floor=bad)
  with pytest.raises(ValueError, match="ratio_floor.*corrected"):
    retrieval.Retrieval(correction="standard", ratio_floor=1e-10)


def test_corrected_needs_probabilities_and_ids():
  b = _batch(3)
  with pytest.raises(ValueError, match="candidate_sampling_probability"):
    retrieval.Retrieval()(b["query"], b["cand"], candidate_ids=b["ids"])
  with pytest.raises(ValueError, match="candidate_ids"):
    retrieval.Retrieval()(b["query"], b["cand"], candidate_sampling_probability=b["prob"])
  with pytest.raises(ValueError, match="not both"):
    retrieval.Retrieval()(
      b["query"],
      b["cand"],
      candidate_sampling_probability=b["prob"],
      candidate_log_sampling_probability=tf.math.log(b["prob"]),
      candidate_ids=b["ids"],
    )
  with pytest.raises(ValueError, match="correction"):
    retrieval.Retrieval(correction="yi")
  with pytest.raises(ValueError, match="CategoricalCrossentropy"):
    retrieval.Retrieval(loss=tf.keras.losses.MeanSquaredError())
  with pytest.raises(tf.errors.InvalidArgumentError, match="must be > 0"):
    retrieval.Retrieval()(
      b["query"],
      b["cand"],
      candidate_ids=b["ids"],
      candidate_sampling_probability=tf.zeros_like(b["prob"]),
    )
  with pytest.raises(tf.errors.InvalidArgumentError, match="at least one row"):
    retrieval.Retrieval(correction="none")(b["query"], b["cand"][:3])


def test_log_probabilities_equal_probabilities():
  b = _batch(4)
  task = retrieval.Retrieval()
  a = task(b["query"], b["cand"], candidate_sampling_probability=b["prob"], candidate_ids=b["ids"])
  c = task(
    b["query"],
    b["cand"],
    candidate_log_sampling_probability=tf.math.log(b["prob"]),
    candidate_ids=b["ids"],
  )
  np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-6)


def test_string_ids_and_metrics():
  b = _batch(5, extra=0)
  str_ids = tf.strings.as_string(b["ids"])
  batch_auc = tf.keras.metrics.AUC(from_logits=True)
  loss_mean = tf.keras.metrics.Mean()
  task = retrieval.Retrieval(batch_metrics=[batch_auc], loss_metrics=[loss_mean])
  loss = task(
    b["query"], b["cand"], candidate_sampling_probability=b["prob"], candidate_ids=str_ids
  )
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
    return self.task(
      users,
      items,
      candidate_sampling_probability=features["q"],
      candidate_ids=features["item"],
      compute_metrics=False,
    )


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
  model = _TwoTower(
    num_users, num_items, retrieval.Retrieval(correction=correction, remove_accidental_hits=True)
  )
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
    loss = retrieval.Retrieval()(
      query,
      tf.cast(b["cand"], tf.bfloat16),
      candidate_sampling_probability=b["prob"],
      candidate_ids=b["ids"],
    )
    assert loss.dtype == tf.float32 and np.isfinite(loss.numpy())
  finally:
    tf.keras.mixed_precision.set_global_policy("float32")


def test_corrected_hard_negatives_keep_the_top_k_by_s_minus_log_q_prime():
  b = _batch(7, extra=6)
  k = 5
  task = retrieval.Retrieval(
    correction="corrected",
    num_hard_negatives=k,
    loss=tf.keras.losses.CategoricalCrossentropy(
      from_logits=True, reduction=tf.keras.losses.Reduction.NONE
    ),
  )
  got = task(
    b["query"], b["cand"], candidate_sampling_probability=b["prob"], candidate_ids=b["ids"]
  ).numpy()
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


# ---- max-sim, dtypes, check_scores, infinite scores -------------------------------------------


def test_max_sim_equals_tfrs():
  """[A, heads, d] queries: s[a, c] = max_h <q_ah, x_c>, as tfrs.tasks.Retrieval."""
  rng = np.random.default_rng(11)
  query = tf.constant(rng.normal(size=(8, 3, 5)), tf.float32)
  cand = tf.constant(rng.normal(size=(8, 5)), tf.float32)
  prob = tf.constant(rng.uniform(0.01, 0.2, size=8), tf.float32)
  want = tfrs.tasks.Retrieval()(query, cand, candidate_sampling_probability=prob)
  got = retrieval.Retrieval(correction="standard")(query, cand, candidate_sampling_probability=prob)
  np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)


@pytest.mark.parametrize("correction", ["none", "standard", "standard_no_positive", "corrected"])
def test_float16_embeddings_are_scored_in_float32(correction):
  """float16 query and candidate embeddings (what a mixed_float16 tower gives): the loss is
  the float32 loss of the same (float16-representable) values; it used to raise MatMul float
  vs half for every correction."""
  b = _batch(8)
  q16, c16 = tf.cast(b["query"], tf.float16), tf.cast(b["cand"], tf.float16)
  call = dict(candidate_ids=b["ids"])
  if correction != "none":
    call["candidate_sampling_probability"] = b["prob"]
  got = retrieval.Retrieval(correction=correction)(q16, c16, **call)
  want = retrieval.Retrieval(correction=correction)(
    tf.cast(q16, tf.float32), tf.cast(c16, tf.float32), **call
  )
  assert got.dtype == tf.float32
  np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
  retrieval.Retrieval(correction="none")(
    tf.random.normal([4, 8], dtype=tf.float16), tf.random.normal([4, 8], dtype=tf.float16)
  )


def test_mixed_float16_policy_trains_with_finite_float32_loss():
  tf.keras.mixed_precision.set_global_policy("mixed_float16")
  try:
    b = _batch(9)
    query_tower = tf.keras.layers.Dense(6)
    candidate_tower = tf.keras.layers.Dense(6)
    task = retrieval.Retrieval(
      correction="corrected", batch_metrics=[tf.keras.metrics.AUC(from_logits=True)]
    )
    with tf.GradientTape() as tape:
      query, cand = query_tower(b["query"]), candidate_tower(b["cand"])
      assert query.dtype == tf.float16 and cand.dtype == tf.float16
      loss = task(query, cand, candidate_sampling_probability=b["prob"], candidate_ids=b["ids"])
    grads = tape.gradient(loss, query_tower.trainable_variables)
    want = retrieval.Retrieval(correction="corrected")(
      tf.cast(query, tf.float32),
      tf.cast(cand, tf.float32),
      candidate_sampling_probability=b["prob"],
      candidate_ids=b["ids"],
    )
    assert loss.dtype == tf.float32
    np.testing.assert_allclose(loss.numpy(), want.numpy(), rtol=1e-6)
    assert all(np.all(np.isfinite(g.numpy())) for g in grads)
  finally:
    tf.keras.mixed_precision.set_global_policy("float32")


def test_check_scores_names_a_nan_embedding():
  b = _batch(10)
  cand = b["cand"].numpy()
  cand[3, 1] = np.nan
  call = dict(candidate_sampling_probability=b["prob"], candidate_ids=b["ids"])
  with pytest.raises(tf.errors.InvalidArgumentError, match="check_scores"):
    retrieval.Retrieval(check_scores=True)(b["query"], tf.constant(cand), **call)
  assert np.isnan(retrieval.Retrieval()(b["query"], tf.constant(cand), **call).numpy())
  ok = retrieval.Retrieval(check_scores=True)(b["query"], b["cand"], **call)
  np.testing.assert_allclose(
    ok.numpy(), retrieval.Retrieval()(b["query"], b["cand"], **call), rtol=1e-6
  )


@pytest.mark.parametrize("correction", ["none", "standard", "standard_no_positive", "corrected"])
def test_infinite_scores_give_the_limit_not_nan(correction):
  """Row 0: positive score +inf (every negative finite) -> loss 0; row 1: a negative at +inf ->
  loss +inf; row 2: huge finite scores -> the float64 value of the formula. Hard-negative top-k,
  batch-metric logits, a zero-weight row with an infinite loss and the sum stay NaN-free."""
  big = 1e20  # big * big overflows float32 to +inf
  query = np.array([[big, 0], [0, big], [1, 1]], np.float32)
  cand = np.array([[big, 0], [0, 1], [1, 0], [0, big]], np.float32)
  prob = np.full(4, 0.25, np.float32)
  ids = np.arange(4)
  auc = tf.keras.metrics.AUC(from_logits=True)
  task = retrieval.Retrieval(
    correction=correction,
    num_hard_negatives=2,
    batch_metrics=[auc],
    loss=tf.keras.losses.CategoricalCrossentropy(
      from_logits=True, reduction=tf.keras.losses.Reduction.NONE
    ),
  )
  got = task(
    tf.constant(query), tf.constant(cand), candidate_sampling_probability=prob, candidate_ids=ids
  ).numpy()
  assert got[0] == 0.0 and got[1] == np.inf, got
  s = query[2].astype(np.float64) @ cand.T.astype(np.float64)  # [1e20, 1, 1, 1e20]
  lq = np.log(prob.astype(np.float64))
  hard = np.array([True, True, False, True])  # negatives 0, 1, 3: the two hardest are 0 and 3
  hard[1] = False
  want, _, _, _ = ref.loss_and_grads(s[2:3], s[None, :], lq, lq[2:3], hard[None, :], correction)
  np.testing.assert_allclose(got[2], want[0], rtol=1e-6)
  assert np.isfinite(auc.result().numpy())
  summed = retrieval.Retrieval(correction=correction)(
    tf.constant(query),
    tf.constant(cand),
    candidate_sampling_probability=prob,
    candidate_ids=ids,
    sample_weight=tf.constant([1.0, 0.0, 1.0]),
  )
  assert np.isfinite(summed.numpy())


# ---- frequency_estimator: log Q without computing it -------------------------------------------


def _int_batch(seed, a=12, extra=4, d=5, num_items=9):
  rng = np.random.default_rng(seed)
  return dict(
    query=tf.constant(rng.normal(size=(a, d)), tf.float32),
    cand=tf.constant(rng.normal(size=(a + extra, d)), tf.float32),
    ids=rng.integers(0, num_items, size=a + extra).astype(np.int64),
  )


def test_estimator_is_updated_with_the_positives_then_read_for_every_candidate():
  """log Q(c) = log(#c / N) after counting the A positives of this call (ExactCounts): the loss
  equals the task given those log Q explicitly; extra candidate rows are not counted."""
  num_items = 9
  previous = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5], np.int64)
  est = frequency.ExactCounts(num_items, counts=previous, accumulate=True)
  b = _int_batch(20)
  a = b["query"].shape[0]
  task = retrieval.Retrieval(correction="corrected", frequency_estimator=est)
  got = task(b["query"], b["cand"], candidate_ids=b["ids"], training=True)
  counts = previous + np.bincount(b["ids"][:a], minlength=num_items)
  np.testing.assert_array_equal(est.counts.numpy(), counts)
  log_q = np.log(np.maximum(counts, 1) / counts.sum())[b["ids"]]
  want = retrieval.Retrieval(correction="corrected")(
    b["query"],
    b["cand"],
    candidate_ids=b["ids"],
    candidate_log_sampling_probability=tf.constant(log_q, tf.float32),
  )
  np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)


def test_update_frequency_follows_training():
  b = _int_batch(21)
  a = b["query"].shape[0]
  per_call = np.bincount(b["ids"][:a], minlength=9)

  def counts_after(update_frequency, **call):
    est = frequency.ExactCounts(9)
    task = retrieval.Retrieval(frequency_estimator=est, update_frequency=update_frequency)
    task(b["query"], b["cand"], candidate_ids=b["ids"], **call)
    return est.counts.numpy()

  np.testing.assert_array_equal(counts_after("training", training=True), per_call)
  np.testing.assert_array_equal(counts_after("training", training=False), 0 * per_call)
  np.testing.assert_array_equal(counts_after("always", training=False), per_call)
  np.testing.assert_array_equal(counts_after("always"), per_call)
  np.testing.assert_array_equal(counts_after("never", training=True), 0 * per_call)
  with pytest.raises(ValueError, match="training="):
    counts_after("training")
  est = frequency.ExactCounts(9)
  task = retrieval.Retrieval(frequency_estimator=est)
  step = tf.function(
    lambda training: task(b["query"], b["cand"], candidate_ids=b["ids"], training=training)
  )
  step(tf.constant(False))
  step(tf.constant(True))  # a tensor flag: tf.cond inside the graph
  np.testing.assert_array_equal(est.counts.numpy(), per_call)


def test_estimator_errors():
  b = _int_batch(22)
  task = retrieval.Retrieval(frequency_estimator=frequency.ExactCounts(9))
  with pytest.raises(ValueError, match="not both"):
    task(
      b["query"],
      b["cand"],
      candidate_ids=b["ids"],
      training=True,
      candidate_sampling_probability=tf.fill([16], 0.1),
    )
  with pytest.raises(ValueError, match="candidate_ids"):
    task(b["query"], b["cand"], training=True)
  with pytest.raises(TypeError, match="frequency_estimator"):
    retrieval.Retrieval(frequency_estimator=np.ones(3))
  with pytest.raises(ValueError, match="update_frequency"):
    retrieval.Retrieval(update_frequency="sometimes")


def test_estimator_counts_the_global_batch_under_mirrored_strategy(mirrored_strategy):
  """2 replicas, each with its own queries: the estimator state is the count of the positives
  of both replicas (the global batch), identical on both replicas."""
  strategy = mirrored_strategy
  with strategy.scope():
    est = frequency.ExactCounts(9)
    task = retrieval.Retrieval(correction="corrected", frequency_estimator=est)
  parts = [_int_batch(23), _int_batch(24, a=7)]

  @tf.function
  def step(q, c, ids):
    return strategy.run(
      lambda q, c, ids: task(q, c, candidate_ids=ids, training=True), args=(q, c, ids)
    )

  def per_replica(key):
    return strategy.experimental_distribute_values_from_function(
      lambda ctx: tf.constant(parts[ctx.replica_id_in_sync_group][key])
    )

  losses = step(per_replica("query"), per_replica("cand"), per_replica("ids"))
  want = sum(np.bincount(p["ids"][: p["query"].shape[0]], minlength=9) for p in parts)
  for copy in strategy.experimental_local_results(est.counts):
    np.testing.assert_array_equal(copy.numpy(), want)
  assert all(np.isfinite(x.numpy()) for x in strategy.experimental_local_results(losses))


# ---- negative_sampler: extra negatives appended to the in-batch block --------------------------


class _FixedSampler:
  """Contract-A sampler returning fixed extra negatives ([A, N] ids from a table), log Q_s."""

  def __init__(self, table, ids, log_q, positive_log_q):
    self.table, self.ids = table, ids
    self.log_q, self.positive_log_q = log_q, positive_log_q

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
  ):
    del seed, sequence_ids, item_table
    from tfrs_logq.tf_keras.negatives import scoring

    emb = tf.gather(self.table, self.ids)  # [A, N, d]
    scores = tf.einsum("ad,and->an", query, emb) / temperature
    return scoring.ScoredCandidates(
      tf.reduce_sum(query * positive_embeddings, -1) / temperature,
      scores,
      tf.constant(self.log_q, tf.float32),
      tf.not_equal(tf.constant(self.ids), tf.cast(positive_ids, tf.int64)[:, None]),
      None if self.positive_log_q is None else tf.constant(self.positive_log_q, tf.float32),
    )


def _sampler_case(seed, a=6, n=5, d=4, num_items=8, temperature=0.5):
  rng = np.random.default_rng(seed)
  table = rng.normal(size=(num_items, d)).astype(np.float32)
  ids = rng.integers(0, num_items, size=a)
  ids[1] = ids[0]  # an in-batch accidental hit
  extra = rng.integers(0, num_items, size=(a, n))
  extra[2, 0] = ids[2]  # a sampled accidental hit
  q_b = rng.dirichlet(np.ones(num_items))  # in-batch proposal (given Q)
  q_s = rng.dirichlet(np.ones(num_items))  # the sampler's proposal
  query = rng.normal(size=(a, d)).astype(np.float32)
  return dict(table=table, ids=ids, extra=extra, q_b=q_b, q_s=q_s, query=query, t=temperature)


def _two_block_oracle(c, correction, q_prime="exact"):
  """Per-row loss of the in-batch block + sampler block, from the formulas: every negative is
  corrected with its own block's proposal, and Q' excludes p from that proposal."""
  s_in = c["query"].astype(np.float64) @ c["table"][c["ids"]].T.astype(np.float64) / c["t"]
  emb = c["table"][c["extra"]].astype(np.float64)
  s_ex = np.einsum("ad,and->an", c["query"].astype(np.float64), emb) / c["t"]
  a = len(c["ids"])
  lq_in = np.log(c["q_b"][c["ids"]])
  lq_ex = np.log(c["q_s"][c["extra"]])
  lp_b, lp_s = np.log(c["q_b"][c["ids"]]), np.log(c["q_s"][c["ids"]])
  # In-batch hits are masked under corrected (remove_accidental_hits=False otherwise, as TFRS:
  # only the positive's own column leaves); the sampler masks its own hits.
  in_batch = (
    c["ids"][:, None] != c["ids"][None, :] if correction == "corrected" else ~np.eye(a, dtype=bool)
  )
  valid = np.concatenate([in_batch, c["extra"] != c["ids"][:, None]], axis=1)
  if correction == "corrected":
    if q_prime == "exact":
      lq_in = lq_in[None, :] - np.log1p(-np.exp(lp_b))[:, None]
      lq_ex = lq_ex - np.log1p(-np.exp(lp_s))[:, None]
    lq = np.concatenate([np.broadcast_to(lq_in, (a, a)), lq_ex], axis=1)
    out = ref.loss_and_grads(
      np.diag(s_in), np.concatenate([s_in, s_ex], 1), lq, lp_b, valid, "corrected", q_prime="proxy"
    )
  else:
    lq = np.concatenate([np.broadcast_to(lq_in, (a, a)), lq_ex], axis=1)
    out = ref.loss_and_grads(
      np.diag(s_in), np.concatenate([s_in, s_ex], 1), lq, lp_b, valid, correction
    )
  return out[0]


@pytest.mark.parametrize(
  "correction,q_prime",
  [
    ("corrected", "exact"),
    ("corrected", "proxy"),
    ("standard", "exact"),
    ("standard_no_positive", "exact"),
    ("none", "exact"),
  ],
)
def test_sampler_block_uses_its_own_proposal(correction, q_prime):
  c = _sampler_case(30)
  sampler = _FixedSampler(
    c["table"], c["extra"], np.log(c["q_s"][c["extra"]]), np.log(c["q_s"][c["ids"]])
  )
  task = retrieval.Retrieval(
    correction=correction,
    q_prime=q_prime,
    temperature=c["t"],
    negative_sampler=sampler,
    loss=tf.keras.losses.CategoricalCrossentropy(
      from_logits=True, reduction=tf.keras.losses.Reduction.NONE
    ),
  )
  got = task(
    tf.constant(c["query"]),
    tf.constant(c["table"][c["ids"]]),
    candidate_ids=tf.constant(c["ids"]),
    candidate_sampling_probability=tf.constant(c["q_b"][c["ids"]], tf.float32),
  )
  np.testing.assert_allclose(
    got.numpy(), _two_block_oracle(c, correction, q_prime), rtol=2e-5, atol=1e-5
  )


def test_sampler_errors():
  c = _sampler_case(31)
  sampler = _FixedSampler(c["table"], c["extra"], np.log(c["q_s"][c["extra"]]), None)
  call = dict(
    candidate_ids=tf.constant(c["ids"]),
    candidate_sampling_probability=tf.constant(c["q_b"][c["ids"]], tf.float32),
  )
  with pytest.raises(ValueError, match="positive_log_q"):
    retrieval.Retrieval(negative_sampler=sampler)(
      tf.constant(c["query"]), tf.constant(c["table"][c["ids"]]), **call
    )
  with pytest.raises(ValueError, match="max-sim"):
    retrieval.Retrieval(negative_sampler=sampler)(tf.ones([6, 2, 4]), tf.ones([6, 4]), **call)
  with pytest.raises(TypeError, match="negative_sampler"):
    retrieval.Retrieval(negative_sampler=object())


class _Towers(tfrs.Model):
  """A two-tower tfrs.Model whose task gets log Q from an estimator and extra per-query uniform
  negatives from a sampler: the model code passes only ids and `training`."""

  def __init__(self, num_users, num_items, d, task_factory):
    super().__init__()
    self.user = tf.keras.layers.Embedding(num_users, d, name="user")
    self.item = tf.keras.layers.Embedding(num_items + 1, d, name="item")  # id 0 unused
    self.task = task_factory(self.item)

  def compute_loss(self, features, training=False):
    return self.task(
      self.user(features["user"]),
      self.item(features["item"]),
      candidate_ids=features["item"],
      compute_metrics=False,
      training=training,
    )


def _mixed_task(num_items, k):
  from tfrs_logq.tf_keras import negatives

  return lambda item: retrieval.Retrieval(
    correction="corrected",
    frequency_estimator=frequency.ExactCounts(num_items + 1),
    negative_sampler=negatives.UniformNegatives(item, k, id_range=(1, num_items + 1), per="query"),
  )


def test_two_tower_with_estimator_and_per_query_uniform_negatives():
  """In-batch negatives (log Q from ExactCounts updated with the batch) + k per-query uniform
  negatives (log Q = −log |D|): one step's loss equals the numpy formula, and fit decreases it."""
  num_users, num_items, d, k, n = 60, 40, 8, 6, 2048
  rng = np.random.default_rng(0)
  pop = 1.0 / np.arange(1, num_users + 1)
  users = rng.choice(num_users, size=n, p=pop / pop.sum())
  items = (users * 7 + rng.integers(0, 2, size=n)) % num_items + 1  # ids 1..num_items
  tf.keras.utils.set_random_seed(0)
  model = _Towers(num_users, num_items, d, _mixed_task(num_items, k))

  # One call with a fixed seed against the formula.
  batch_users, batch_items = users[:32], items[:32].astype(np.int64)
  seed = tf.constant([3, 4], tf.int64)
  loss = model.task(
    model.user(batch_users),
    model.item(batch_items),
    candidate_ids=batch_items,
    training=True,
    seed=seed,
  ).numpy()
  drawn = model.task.negative_sampler.sample_ids(seed, num_rows=32).numpy()  # [A, k]
  u_table, i_table = model.user.embeddings.numpy(), model.item.embeddings.numpy()
  q, c = u_table[batch_users].astype(np.float64), i_table[batch_items].astype(np.float64)
  counts = np.bincount(batch_items, minlength=num_items + 1)
  log_q_b = np.log(np.maximum(counts, 1) / counts.sum())
  s_in, s_ex = q @ c.T, np.einsum("ad,akd->ak", q, i_table[drawn].astype(np.float64))
  lq_prime = np.concatenate(
    [
      log_q_b[batch_items][None, :] - np.log1p(-np.exp(log_q_b[batch_items]))[:, None],
      np.full(drawn.shape, -np.log(num_items)) - np.log1p(-1.0 / num_items),
    ],
    axis=1,
  )
  valid = np.concatenate(
    [batch_items[:, None] != batch_items[None, :], drawn != batch_items[:, None]], axis=1
  )
  want, _, _, _ = ref.loss_and_grads(
    np.diag(s_in),
    np.concatenate([s_in, s_ex], 1),
    lq_prime,
    np.zeros(32),
    valid,
    "corrected",
    q_prime="proxy",
  )
  np.testing.assert_allclose(loss, want.sum(), rtol=1e-5)

  # A few epochs of fit (fresh model and estimator).
  model = _Towers(num_users, num_items, d, _mixed_task(num_items, k))
  model.compile(optimizer=tf.keras.optimizers.Adam(0.05))
  ds = tf.data.Dataset.from_tensor_slices({"user": users, "item": items.astype(np.int64)})
  history = model.fit(ds.batch(128), epochs=4, verbose=0).history["loss"]
  assert np.all(np.isfinite(history)) and history[-1] < 0.8 * history[0], history
  assert model.task.frequency_estimator.total.numpy() == 4 * n  # updated once per step
