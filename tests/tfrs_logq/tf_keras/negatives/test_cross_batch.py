"""Cross-batch negatives (tf-keras): the FIFO memory of the last M pushes (valid ids = the distinct
ids of the last min(T, M) pushes, newest copy first, warm-up and padding left out), log Q under
unigram / expected_count, the corrected loss over the valid slots, the k < B subsample, ids mode
(current table, gradient into it) vs embeddings mode (stored, no gradient), fp16 / bf16, exact
resume from a checkpoint, MirroredStrategy (the global batch in replica order), XLA, errors; and
JoinedNegatives / join_blocks (each block keeps its own Q' after the loss's step).

The oracle is a Python list of pushes, in float64 loops, written from the docstring of
tfrs_logq/core/cross_batch.py."""

import math

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import losses
from tfrs_logq.tf_keras.frequency import ExactCounts
from tfrs_logq.tf_keras.negatives import (
  CrossBatchNegatives,
  InBatchNegatives,
  JoinedNegatives,
  ScoredCandidates,
  UniformNegatives,
  join_blocks,
)

import numpy as np
import pytest
import tensorflow as tf

NUM_ITEMS, DIM = 12, 4
# Item 3 is never counted: log q_uni = -inf with the stub, so a slot holding it is left out.
COUNTS = np.array([5, 1, 3, 0, 2, 9, 4, 7, 1, 2, 6, 3], np.float64)
RNG = np.random.default_rng(0)
TABLE = RNG.normal(size=(NUM_ITEMS, DIM)).astype(np.float32)


class Counts:
  """A stub estimator: log q_uni(d) = log(#d / N) from fixed counts (-inf for #d = 0)."""

  def __init__(self, counts=COUNTS):
    with np.errstate(divide="ignore"):
      self.np_table = np.log(np.asarray(counts, np.float64) / np.sum(counts))
    self.table = tf.constant(self.np_table, tf.float32)

  def log_q(self, ids):
    return tf.gather(self.table, ids)

  def q(self, i):
    return math.exp(self.np_table[i])


# ---- the oracle --------------------------------------------------------------------------------


class FifoOracle:
  """The memory as a Python list of pushes (the last M count), deduplicated newest first."""

  def __init__(self, num_batches):
    self.m = num_batches
    self.pushes = []

  def push(self, ids, valid=None, emb=None, kept=None):
    """kept: the ids a subsample kept (default: every distinct valid id of the push)."""
    rows = [r for r in range(len(ids)) if valid is None or valid[r]]
    distinct, first = [], []
    for r in rows:
      if ids[r] not in distinct:
        distinct.append(int(ids[r]))
        first.append(r)
    keep = first if kept is None else [r for r in first if int(ids[r]) in set(kept)]
    self.pushes.append(
      dict(
        ids=[int(ids[r]) for r in keep],
        emb=None if emb is None else [np.asarray(emb[r], np.float64) for r in keep],
        draws=len(rows),
        distinct=len(distinct),
        kept=len(keep),
      )
    )

  def in_memory(self):
    return self.pushes[-self.m :]

  def contents(self, counts):
    """[(id, embedding or None)] newest first: newest copy wins, ids with q = 0 left out."""
    seen, out = set(), []
    for p in reversed(self.in_memory()):
      for j, i in enumerate(p["ids"]):
        if i in seen or counts.q(i) == 0.0:
          continue
        seen.add(i)
        out.append((i, None if p["emb"] is None else p["emb"][j]))
    return out

  def log_q(self, counts, ids, convention):
    u_m = len(self.contents(counts))
    out = []
    for i in ids:
      q = counts.q(i)
      if convention == "unigram":
        out.append(math.log(q))
        continue
      not_in = 1.0
      for p in self.in_memory():
        if p["draws"] == 0 or p["kept"] == 0:
          continue
        not_in *= 1.0 - (1.0 - (1.0 - q) ** p["draws"]) * p["kept"] / p["distinct"]
      out.append(math.log(1.0 - not_in) - math.log(max(u_m, 1)))
    return np.array(out)


def np_corrected_loss(s_p, s_n, lq_n, lq_p, valid):
  """DESIGN.md: L = -w (s_p - Z), Z = LSE_i(s_i - log Q'(d_i)), w = 1 - sigma(s_p - (Z - log n))."""
  out = []
  for r in range(len(s_p)):
    idx = [i for i in range(s_n.shape[1]) if valid[r][i]]
    if not idx:
      out.append(0.0)
      continue
    shift = math.log(1.0 - math.exp(lq_p[r]))
    logits = [s_n[r][i] - (lq_n[i] - shift) for i in idx]
    mx = max(logits)
    z = mx + math.log(sum(math.exp(x - mx) for x in logits))
    p_hat = 1.0 / (1.0 + math.exp(-(s_p[r] - (z - math.log(len(idx))))))
    out.append(-(1.0 - p_hat) * (s_p[r] - z))
  return np.array(out)


def _valid_ids(sampler, **kwargs):
  mem = sampler.memory(**kwargs)
  return mem, mem.ids.numpy()[mem.valid.numpy()].tolist()


def _last_kept(sampler):
  """The ids the last push kept, from the state's layout (block (T - 1) mod M)."""
  t = int(sampler.num_pushed.numpy()) - 1
  s = sampler.slots_per_batch
  block = slice((t % sampler.num_batches) * s, (t % sampler.num_batches + 1) * s)
  return sampler.ids.numpy()[block][sampler.filled.numpy()[block]].tolist()


# Pushes of B = 5 rows: duplicates within a push and across pushes, item 3 (q = 0), and padding
# rows (valid False) holding item 11, which is nowhere else.
PUSHES = [
  ([1, 2, 1, 11, 4], [True, True, True, False, True]),
  ([4, 5, 6, 5, 3], [True] * 5),
  ([7, 1, 11, 11, 8], [True, True, False, False, True]),
  ([2, 2, 9, 0, 1], [True] * 5),
  ([11, 11, 11, 11, 11], [False] * 5),  # an all-padding push: empty
  ([10, 4, 6, 10, 0], [True] * 5),
]


# ---- FIFO, masks -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["ids", "embeddings"])
def test_fifo_holds_the_distinct_ids_of_the_last_pushes_newest_copy_first(mode):
  m, b = 3, 5
  counts = Counts()
  sampler = CrossBatchNegatives(counts, m, b, mode=mode, embedding_dim=DIM)
  oracle = FifoOracle(m)
  mem, ids = _valid_ids(sampler, item_table=TABLE)
  assert ids == [] and mem.ids.shape == (m * b,) and float(mem.num_distinct) == 0.0
  for t, (push, valid) in enumerate(PUSHES):
    emb = RNG.normal(size=(b, DIM)).astype(np.float32)  # each push embeds an id differently
    sampler.update(push, emb, valid=valid)
    oracle.push(push, valid, emb)
    mem, ids = _valid_ids(sampler, item_table=TABLE)
    want = oracle.contents(counts)
    assert ids == [i for i, _ in want], (t, ids, want)
    assert 11 not in ids and 3 not in ids  # padding rows never enter; q = 0 is left out
    assert float(mem.num_distinct) == len(want)
    assert mem.valid.numpy().sum() == len(want)  # warm-up / duplicate / empty slots invalid
    got_emb = mem.embeddings.numpy()[mem.valid.numpy()]
    if mode == "embeddings":  # the newest push's embedding of an id
      np.testing.assert_allclose(got_emb, np.array([e for _, e in want]).reshape(-1, DIM))
    else:  # the table's row
      np.testing.assert_allclose(got_emb, TABLE[ids].reshape(-1, DIM))
    assert np.all(np.isfinite(mem.log_q.numpy())) and np.all(mem.log_q.numpy()[~mem.valid] == 0)
  assert int(sampler.num_pushed.numpy()) == len(PUSHES)
  np.testing.assert_array_equal(sampler.push_draws.numpy(), [5, 0, 5])  # pushes 3, 4, 5
  np.testing.assert_array_equal(sampler.push_distinct.numpy(), [4, 0, 4])


def test_each_row_masks_its_own_positive():
  sampler = CrossBatchNegatives(Counts(), 2, 5)
  for push, valid in PUSHES[:2]:
    sampler.update(push, valid=valid)
  positives = np.array([4, 1, 7, 5])  # 4 and 5 are in memory (once each), 1 too, 7 is not
  query = RNG.normal(size=(4, DIM)).astype(np.float32)
  scored = sampler.score(query, positives, TABLE[positives], item_table=TABLE)
  mem, _ = _valid_ids(sampler, item_table=TABLE)
  want = mem.valid.numpy()[None, :] & (mem.ids.numpy()[None, :] != positives[:, None])
  np.testing.assert_array_equal(scored.valid_mask.numpy(), want)
  assert scored.negative_scores.shape == (4, sampler.memory_size)
  np.testing.assert_allclose(
    scored.negative_scores.numpy(), query @ TABLE[mem.ids.numpy()].T, rtol=1e-5, atol=1e-6
  )


def test_sasrec_positions_push_flattened_with_padding_left_out():
  """A [B, L] batch of targets pushes its B L positions (``valid`` False at the padding)."""
  ids = np.array([[1, 2, 0, 0], [4, 1, 5, 0]])  # padding id 0 at the end of each sequence
  valid = ids != 0
  emb = RNG.normal(size=(2, 4, DIM)).astype(np.float32)
  grid = CrossBatchNegatives(Counts(), 2, 8, mode="embeddings", embedding_dim=DIM)
  flat = CrossBatchNegatives(Counts(), 2, 8, mode="embeddings", embedding_dim=DIM)
  grid.update(ids, emb, valid=valid)
  flat.update(ids.reshape(-1), emb.reshape(-1, DIM), valid=valid.reshape(-1))
  for x, y in zip(_state(grid), _state(flat)):
    np.testing.assert_array_equal(x, y)
  assert _valid_ids(grid)[1] == [1, 2, 4, 5]
  # Each position masks its own target.
  targets = ids[valid]
  scored = grid.score(RNG.normal(size=(5, DIM)), targets, RNG.normal(size=(5, DIM)))
  mem = grid.memory()
  want = mem.valid.numpy()[None, :] & (mem.ids.numpy()[None, :] != targets[:, None])
  np.testing.assert_array_equal(scored.valid_mask.numpy(), want)


# ---- log Q, the corrected loss -----------------------------------------------------------------


@pytest.mark.parametrize("convention", ["unigram", "expected_count"])
@pytest.mark.parametrize("slots", [None, 3])
def test_log_q_of_slots_and_positives_match_the_oracle(convention, slots):
  m, b = 3, 5
  counts = Counts(COUNTS + 1.0)  # a real estimator: ExactCounts over a fixed table
  estimator = ExactCounts(NUM_ITEMS, counts=COUNTS + 1.0)
  sampler = CrossBatchNegatives(
    estimator, m, b, slots_per_batch=slots, convention=convention, seed=3
  )
  oracle = FifoOracle(m)
  for push, valid in PUSHES:
    sampler.update(push, valid=valid)
    oracle.push(push, valid, kept=_last_kept(sampler) if slots else None)
    mem, ids = _valid_ids(sampler, item_table=TABLE)
    assert ids == [i for i, _ in oracle.contents(counts)]
    got = mem.log_q.numpy()[mem.valid.numpy()]
    np.testing.assert_allclose(got, oracle.log_q(counts, ids, convention), rtol=1e-5)
    assert np.all(got <= 0)
  positives = np.arange(NUM_ITEMS)  # in the memory or not
  np.testing.assert_allclose(
    sampler.log_q(positives).numpy(), oracle.log_q(counts, positives, convention), rtol=1e-5
  )
  if convention == "expected_count":  # a memory slot is never given log Q = 0
    assert np.all(sampler.log_q(positives).numpy() < 0)


@pytest.mark.parametrize("convention", ["unigram", "expected_count"])
def test_corrected_loss_equals_the_oracle_over_the_valid_slots(convention):
  m, b = 3, 5
  counts = Counts()
  sampler = CrossBatchNegatives(counts, m, b, convention=convention)
  oracle = FifoOracle(m)
  for push, valid in PUSHES[:4]:
    sampler.update(push, valid=valid)
    oracle.push(push, valid)
  positives = np.array([1, 4, 9, 6, 0, 10])
  query = RNG.normal(size=(len(positives), DIM)).astype(np.float32)
  scored = sampler.score(query, positives, TABLE[positives], item_table=TABLE, temperature=0.5)
  out = losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected")

  want_ids = [i for i, _ in oracle.contents(counts)]
  s_p = (query.astype(np.float64) * TABLE[positives]).sum(-1) / 0.5
  s_n = query.astype(np.float64) @ TABLE[want_ids].T.astype(np.float64) / 0.5
  valid = [[d != p for d in want_ids] for p in positives]
  lq_n = oracle.log_q(counts, want_ids, convention)
  lq_p = oracle.log_q(counts, positives, convention)
  np.testing.assert_allclose(out.loss.numpy(), np_corrected_loss(s_p, s_n, lq_n, lq_p, valid), 1e-4)
  np.testing.assert_array_equal(out.num_valid.numpy(), np.sum(valid, axis=1))


@pytest.mark.parametrize("convention", ["unigram", "expected_count"])
def test_an_empty_memory_gives_a_finite_loss(convention):
  sampler = CrossBatchNegatives(
    Counts(), 2, 5, convention=convention, mode="embeddings", embedding_dim=DIM
  )
  positives = np.array([1, 4, 9])
  query = RNG.normal(size=(3, DIM)).astype(np.float32)
  for step in range(2):  # before any push, then after an all-padding push
    scored = sampler.score(query, positives, TABLE[positives])
    assert not scored.valid_mask.numpy().any()
    assert np.all(np.isfinite(scored.negative_log_q.numpy()))
    for correction in ("corrected", "standard", "none"):
      out = losses.sampled_softmax_loss(**scored.loss_kwargs(), correction=correction)
      assert np.all(np.isfinite(out.loss.numpy())), (step, correction)
    sampler.update([11] * 5, np.zeros([5, DIM]), valid=[False] * 5)


# ---- the subsample -----------------------------------------------------------------------------


def test_subsample_keeps_min_u_k_distinct_ids_of_the_push_deterministically():
  b, k = 8, 3
  pushes = [
    np.array([0, 1, 2, 3, 4, 0, 1, 2]),  # U = 5 > k
    np.array([5, 5, 6, 5, 6, 6, 5, 6]),  # U = 2 < k
    np.array([7, 8, 9, 10, 11, 7, 8, 9]),
  ]
  valid = np.array([True] * 7 + [False])
  a = CrossBatchNegatives(Counts(COUNTS + 1), 2, b, slots_per_batch=k, seed=11)
  a2 = CrossBatchNegatives(Counts(COUNTS + 1), 2, b, slots_per_batch=k, seed=11)
  kept = []
  for push in pushes:
    a.update(push, valid=valid)
    a2.update(push, valid=valid)
    got = _last_kept(a)
    distinct = list(dict.fromkeys(push[valid].tolist()))
    assert len(got) == min(len(distinct), k) == int(a.push_kept.numpy()[(len(kept)) % 2])
    assert len(set(got)) == len(got) and set(got) <= set(distinct)
    assert got == [i for i in distinct if i in got]  # in first-occurrence order
    assert got == _last_kept(a2)  # the same seed, the same subset
    kept.append(got)
  np.testing.assert_array_equal(a.push_draws.numpy(), [7, 7])
  # An explicit [2] seed keeps what the in-batch rule keeps with that seed.
  in_batch = InBatchNegatives(Counts(COUNTS + 1), num_negatives=k, cross_replica=False)
  subsets = set()
  for s in range(6):
    seed = tf.constant([s, 5], tf.int64)
    a.update(pushes[0], valid=valid, seed=seed)
    neg = in_batch(pushes[0], TABLE[pushes[0]], valid=valid, seed=seed)
    assert _last_kept(a) == neg.ids.numpy().tolist()
    subsets.add(tuple(_last_kept(a)))
  assert len(subsets) > 1  # the subset is random


# ---- ids vs embeddings mode: staleness, gradients ----------------------------------------------


def test_ids_mode_scores_with_the_current_table():
  sampler = CrossBatchNegatives(Counts(), 2, 5)
  sampler.update(PUSHES[0][0], valid=PUSHES[0][1])
  table = tf.Variable(TABLE)
  query = RNG.normal(size=(2, DIM)).astype(np.float32)
  pos = np.array([0, 5])
  before = sampler.score(query, pos, TABLE[pos], item_table=table).negative_scores.numpy()
  table.assign(TABLE * 2.0 + 1.0)
  after = sampler.score(query, pos, TABLE[pos], item_table=table).negative_scores.numpy()
  ids = sampler.memory(item_table=table).ids.numpy()
  np.testing.assert_allclose(after, query @ (TABLE[ids] * 2.0 + 1.0).T, rtol=1e-5, atol=1e-5)
  assert not np.allclose(before, after)
  # A candidate_embedder is used when given (and no table is needed).
  embedder = CrossBatchNegatives(Counts(), 2, 5, candidate_embedder=lambda i: tf.gather(table, i))
  embedder.update(PUSHES[0][0], valid=PUSHES[0][1])
  np.testing.assert_allclose(embedder.score(query, pos, TABLE[pos]).negative_scores, after)


def test_embeddings_mode_stores_the_push_and_passes_no_gradient():
  source = tf.Variable(TABLE)
  sampler = CrossBatchNegatives(Counts(), 2, 5, mode="embeddings", embedding_dim=DIM)
  query = tf.Variable(RNG.normal(size=(2, DIM)).astype(np.float32))
  push, valid = PUSHES[0]
  pos = np.array([0, 5])
  with tf.GradientTape(persistent=True) as tape:
    sampler.update(push, tf.gather(source, push) * 3.0, valid=valid)
    scored = sampler.score(query, pos, tf.constant(TABLE[pos]))
    loss = tf.reduce_sum(
      losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected").loss
    )
  grad = tape.gradient(loss, source)
  assert grad is None or not np.any(tf.convert_to_tensor(grad).numpy())
  assert np.any(tape.gradient(loss, query).numpy())  # the memory's scores do train the query
  source.assign(TABLE * 0.0)  # stale: the memory keeps the embeddings of push time
  mem = sampler.memory()
  np.testing.assert_allclose(
    mem.embeddings.numpy()[mem.valid.numpy()], TABLE[_valid_ids(sampler)[1]] * 3.0, rtol=1e-6
  )
  assert sampler.embeddings.dtype == tf.float32


def test_ids_mode_gradient_reaches_the_table_rows_of_the_memory_ids():
  table = tf.Variable(TABLE)
  sampler = CrossBatchNegatives(Counts(), 2, 5)
  sampler.update(PUSHES[0][0], valid=PUSHES[0][1])
  sampler.update(PUSHES[1][0], valid=PUSHES[1][1])
  query = tf.constant(RNG.normal(size=(2, DIM)).astype(np.float32))
  pos = np.array([0, 10])  # not in memory: every valid slot is a negative of both rows
  with tf.GradientTape() as tape:
    scored = sampler.score(query, pos, tf.constant(TABLE[pos]), item_table=table)
    loss = tf.reduce_sum(
      losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected").loss
    )
  grad = tf.convert_to_tensor(tape.gradient(loss, table)).numpy()
  rows_with_grad = set(np.flatnonzero(np.any(grad != 0, axis=1)).tolist())
  assert rows_with_grad == set(_valid_ids(sampler, item_table=table)[1]) == {1, 2, 4, 5, 6}


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
@pytest.mark.parametrize("mode", ["ids", "embeddings"])
def test_half_precision_embeddings_give_the_float32_masks_and_a_finite_loss(dtype, mode):
  def run(dt):
    sampler = CrossBatchNegatives(Counts(), 2, 5, mode=mode, embedding_dim=DIM)
    table = tf.cast(TABLE, dt)
    for push, valid in PUSHES[:3]:
      sampler.update(push, tf.gather(table, push), valid=valid)
    pos = np.array([1, 7, 0])
    query = tf.cast(RNG.normal(size=(3, DIM)), dt)
    scored = sampler.score(query, pos, tf.gather(table, pos), item_table=table)
    out = losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected")
    return scored, out

  half, out = run(dtype)
  full, _ = run(tf.float32)
  np.testing.assert_array_equal(half.valid_mask.numpy(), full.valid_mask.numpy())
  np.testing.assert_array_equal(half.negative_log_q.numpy(), full.negative_log_q.numpy())
  assert half.negative_scores.dtype == tf.float32
  assert np.all(np.isfinite(out.loss.numpy()))


# ---- checkpoint, distribution, XLA -------------------------------------------------------------


def _state(sampler):
  return [v.numpy() for v in sampler.variables if "random_seed" not in v.name]


def test_checkpoint_resumes_exactly(tmp_path):
  make = lambda: CrossBatchNegatives(
    Counts(COUNTS + 1),
    3,
    5,
    slots_per_batch=2,
    mode="embeddings",
    embedding_dim=DIM,
    convention="expected_count",
  )  # seed None: a random base seed, kept in the state
  run = make()
  before = tf.train.Checkpoint(memory=make()).save(str(tmp_path / "empty"))  # before any push
  tf.train.Checkpoint(memory=make()).restore(before).assert_existing_objects_matched()
  embs = [RNG.normal(size=(5, DIM)).astype(np.float32) for _ in PUSHES]
  for (push, valid), emb in zip(PUSHES[:3], embs):
    run.update(push, emb, valid=valid)
  path = tf.train.Checkpoint(memory=run).save(str(tmp_path / "ckpt"))
  resumed = make()
  tf.train.Checkpoint(memory=resumed).restore(path).assert_consumed()
  assert int(resumed.random_seed.numpy()) == int(run.random_seed.numpy())
  pos = np.array([1, 4, 7])
  query = RNG.normal(size=(3, DIM)).astype(np.float32)
  for (push, valid), emb in zip(PUSHES[3:], embs[3:]):
    a, b = run.score(query, pos, TABLE[pos]), resumed.score(query, pos, TABLE[pos])
    for x, y in zip(a, b):
      np.testing.assert_array_equal(x.numpy(), y.numpy())
    run.update(push, emb, valid=valid)  # the subsample's keys: the base seed and the push number
    resumed.update(push, emb, valid=valid)
    for x, y in zip(_state(run), _state(resumed)):
      np.testing.assert_array_equal(x, y)


def test_mirrored_strategy_memory_holds_the_global_batch_in_replica_order(mirrored_strategy):
  strategy = mirrored_strategy
  b, m = 8, 2
  pushes = [
    (np.array([1, 2, 2, 5, 7, 1, 9, 0]), np.array([1, 1, 1, 0, 1, 1, 1, 1], bool)),
    (np.array([4, 6, 8, 10, 6, 4, 11, 2]), np.array([1, 1, 1, 1, 1, 1, 0, 1], bool)),
  ]
  embs = [RNG.normal(size=(b, DIM)).astype(np.float32) for _ in pushes]
  single = CrossBatchNegatives(
    Counts(),
    m,
    b,
    mode="embeddings",
    embedding_dim=DIM,
    seed=2,
    slots_per_batch=5,
    convention="expected_count",
  )
  with strategy.scope():
    dist = CrossBatchNegatives(
      Counts(),
      m,
      b,
      mode="embeddings",
      embedding_dim=DIM,
      seed=2,
      slots_per_batch=5,
      convention="expected_count",
    )
  pos = np.array([1, 4, 6, 0])
  query = RNG.normal(size=(4, DIM)).astype(np.float32)

  @tf.function
  def step(ids, emb, valid):
    def replica_fn(ids, emb, valid):
      scored = dist.score(tf.constant(query), tf.constant(pos), tf.constant(TABLE[pos]))
      dist.update(ids, emb, valid=valid)
      return scored.negative_log_q, scored.valid_mask

    return strategy.run(replica_fn, args=(ids, emb, valid))

  for (ids, valid), emb in zip(pushes, embs):
    half = lambda x: strategy.experimental_distribute_values_from_function(
      lambda ctx: tf.constant(np.split(x, 2)[ctx.replica_id_in_sync_group])
    )
    got_log_q, got_mask = step(half(ids), half(emb), half(valid))
    want = single.score(query, pos, TABLE[pos])
    single.update(ids, emb, valid=valid)
    for lq, mask in zip(
      strategy.experimental_local_results(got_log_q), strategy.experimental_local_results(got_mask)
    ):
      np.testing.assert_allclose(lq.numpy(), want.negative_log_q.numpy(), rtol=1e-6)
      np.testing.assert_array_equal(mask.numpy(), want.valid_mask.numpy())
  for var, ref in zip(dist.variables, single.variables):
    for copy in strategy.experimental_local_results(var):  # every replica holds the global push
      np.testing.assert_array_equal(copy.numpy(), ref.numpy())
  assert 11 not in single.memory().ids.numpy()[single.memory().valid.numpy()]


@pytest.mark.parametrize("mode", ["ids", "embeddings"])
def test_compiled_update_and_score_equal_eager(mode):
  make = lambda: CrossBatchNegatives(
    Counts(),
    2,
    5,
    slots_per_batch=3,
    mode=mode,
    embedding_dim=DIM,
    convention="expected_count",
    seed=7,
  )
  eager, compiled = make(), make()
  update = tf.function(lambda i, e, v: compiled.update(i, e, valid=v), jit_compile=True)
  score = tf.function(
    lambda q, p, e: compiled.score(q, p, e, item_table=tf.constant(TABLE)), jit_compile=True
  )
  pos = np.array([1, 4, 7])
  query = RNG.normal(size=(3, DIM)).astype(np.float32)
  for push, valid in PUSHES:
    emb = TABLE[push] + 0.5
    a = eager.score(query, pos, TABLE[pos], item_table=TABLE)
    b = score(tf.constant(query), tf.constant(pos), tf.constant(TABLE[pos]))
    np.testing.assert_array_equal(a.valid_mask.numpy(), b.valid_mask.numpy())
    np.testing.assert_allclose(a.negative_scores.numpy(), b.negative_scores.numpy(), 1e-5, 1e-6)
    np.testing.assert_allclose(a.negative_log_q.numpy(), b.negative_log_q.numpy(), 1e-5)
    np.testing.assert_allclose(a.positive_log_q.numpy(), b.positive_log_q.numpy(), 1e-5)
    eager.update(push, emb, valid=valid)
    update(tf.constant(push), tf.constant(emb), tf.constant(valid))
    for x, y in zip(_state(eager), _state(compiled)):
      np.testing.assert_array_equal(x, y)


# ---- configuration and errors ------------------------------------------------------------------


def test_config_round_trip_and_memory_size():
  sampler = CrossBatchNegatives(
    Counts(), 4, 6, slots_per_batch=2, mode="embeddings", embedding_dim=3, seed=1, name="mem"
  )
  assert sampler.memory_size == 8
  config = sampler.get_config()
  clone = CrossBatchNegatives.from_config(config)
  assert clone.get_config() == config
  assert config["frequency_estimator"] is sampler.frequency_estimator


@pytest.mark.parametrize(
  "kwargs, error, message",
  [
    (dict(num_batches=0), ValueError, "num_batches must be a positive int"),
    (dict(batch_size=-1), ValueError, "batch_size must be a positive int"),
    (dict(slots_per_batch=6), ValueError, "slots_per_batch (6) must be at most batch_size (5)"),
    (dict(mode="vectors"), ValueError, "mode must be one of"),
    (dict(convention="popularity"), ValueError, "convention must be one of"),
    (dict(mode="embeddings"), ValueError, "mode='embeddings' needs embedding_dim"),
    (dict(frequency_estimator=object()), TypeError, "must have a log_q(ids) method"),
  ],
)
def test_bad_arguments_raise_clear_errors(kwargs, error, message):
  args = dict(frequency_estimator=Counts(), num_batches=2, batch_size=5)
  args.update(kwargs)
  with pytest.raises(error, match=__import__("re").escape(message)):
    CrossBatchNegatives(**args)


def test_bad_pushes_raise_clear_errors():
  sampler = CrossBatchNegatives(Counts(), 2, 5, mode="embeddings", embedding_dim=DIM)
  with pytest.raises(ValueError, match="needs positive_embeddings at update"):
    sampler.update([1, 2, 3, 4, 5])
  with pytest.raises(ValueError, match="batch_size=5"):
    sampler.update([1, 2, 3], np.zeros([3, DIM], np.float32))
  with pytest.raises(ValueError, match="embedding_dim=4"):
    sampler.update([1, 2, 3, 4, 5], np.zeros([5, 2], np.float32))
  with pytest.raises(TypeError, match="integer"):
    sampler.update([1.0, 2.0, 3.0, 4.0, 5.0], np.zeros([5, DIM], np.float32))
  with pytest.raises(TypeError, match="valid must be bool"):
    sampler.update([1, 2, 3, 4, 5], np.zeros([5, DIM], np.float32), valid=[1, 1, 1, 1, 1])
  update = tf.function(
    lambda i: sampler.update(i, tf.zeros([tf.shape(i)[0], DIM])),
    input_signature=[tf.TensorSpec([None], tf.int64)],
  )
  with pytest.raises(tf.errors.InvalidArgumentError, match="batch_size=5"):
    update(tf.constant([1, 2, 3, 4, 5, 6], tf.int64))
  assert int(sampler.num_pushed.numpy()) == 0  # nothing was written
  update(tf.constant([1, 2, 3, 4, 5], tf.int64))
  assert int(sampler.num_pushed.numpy()) == 1
  with pytest.raises(ValueError, match="needs a candidate_embedder or an item_table"):
    CrossBatchNegatives(Counts(), 2, 5).score(np.ones([1, DIM]), [1], np.ones([1, DIM]))


# ---- joined blocks -----------------------------------------------------------------------------


def test_join_blocks_rebases_each_block_to_its_own_q_prime():
  a, n1, n2 = 3, 4, 2
  rng = np.random.default_rng(5)
  pos_1 = np.log(np.array([0.1, 0.4, 0.02]))
  pos_2 = np.log(np.array([0.3, 0.05, 0.9]))
  lq_1 = np.log(rng.uniform(0.01, 0.3, size=n1))
  lq_2 = np.log(rng.uniform(0.01, 0.3, size=n2))
  f = lambda x: tf.constant(x, tf.float32)
  block = lambda n, lq, pq: ScoredCandidates(
    f(rng.normal(size=a)), f(rng.normal(size=(a, n))), f(lq), tf.ones([a, n], tf.bool), f(pq)
  )
  b1, b2 = block(n1, lq_1, pos_1), block(n2, lq_2, pos_2)
  joined = join_blocks([b1, b2], rebase_q_prime=True)
  assert joined.negative_log_q.shape == (a, n1 + n2)
  np.testing.assert_array_equal(joined.positive_log_q.numpy(), b1.positive_log_q.numpy())
  np.testing.assert_array_equal(joined.positive_scores.numpy(), b1.positive_scores.numpy())
  got = joined.negative_log_q.numpy().astype(np.float64)
  for r in range(a):
    loss_step = lambda x: x - math.log(1.0 - math.exp(pos_1[r]))  # the loss's one Q' step
    np.testing.assert_allclose(
      loss_step(got[r, :n1]), lq_1 - math.log(1 - math.exp(pos_1[r])), rtol=1e-5
    )
    np.testing.assert_allclose(
      loss_step(got[r, n1:]), lq_2 - math.log(1 - math.exp(pos_2[r])), rtol=1e-5
    )
  plain = join_blocks([b1, b2], rebase_q_prime=False)
  np.testing.assert_allclose(plain.negative_log_q.numpy(), np.concatenate([lq_1, lq_2]), 1e-6)
  with pytest.raises(
    ValueError, match=r"needs every block.s positive_log_q; blocks \[1\] have none"
  ):
    join_blocks([b1, b2._replace(positive_log_q=None)], rebase_q_prime=True)
  join_blocks([b1, b2._replace(positive_log_q=None)], rebase_q_prime=False)
  with pytest.raises(ValueError, match="at least one block"):
    join_blocks([], rebase_q_prime=True)


def test_joined_negatives_scores_in_batch_and_memory_and_updates_the_memory(tmp_path):
  counts = Counts(COUNTS + 1)
  memory = CrossBatchNegatives(counts, 2, 5, convention="expected_count")
  uniform = UniformNegatives(None, 4, id_range=(0, NUM_ITEMS))
  joined = JoinedNegatives([InBatchNegatives(counts), memory, uniform])
  pos = np.array([1, 4, 7, 4, 2])
  query = RNG.normal(size=(5, DIM)).astype(np.float32)
  seed = tf.constant([3, 4], tf.int64)
  for push, valid in PUSHES[:2]:
    joined.update(push, TABLE[push], valid=valid)
  assert int(memory.num_pushed.numpy()) == 2
  scored = joined.score(query, pos, TABLE[pos], seed=seed, item_table=TABLE)
  again = joined.score(query, pos, TABLE[pos], seed=seed, item_table=TABLE)
  np.testing.assert_array_equal(scored.negative_scores.numpy(), again.negative_scores.numpy())
  parts = [
    blk.score(query, pos, TABLE[pos], seed=s, item_table=TABLE)
    for blk, s in zip(joined.blocks, tf.random.experimental.stateless_split(seed, 3))
  ]
  np.testing.assert_allclose(
    scored.negative_log_q.numpy(),
    join_blocks(parts, rebase_q_prime=True).negative_log_q.numpy(),
  )
  n_ib = parts[0].negative_scores.shape[1]
  mem = slice(n_ib, n_ib + memory.memory_size)
  mem_log_q = scored.negative_log_q.numpy()[:, mem]
  mem_valid = parts[1].valid_mask.numpy()
  np.testing.assert_array_equal(scored.valid_mask.numpy()[:, mem], mem_valid)
  assert mem_valid.any() and not mem_valid.all()
  own_q_prime = (
    parts[1].negative_log_q.numpy()[None, :]
    - np.log1p(-np.exp(parts[1].positive_log_q.numpy().astype(np.float64)))[:, None]
  )  # the memory's own log Q' (its Q(p))
  after_loss_step = (
    mem_log_q - np.log1p(-np.exp(parts[0].positive_log_q.numpy().astype(np.float64)))[:, None]
  )  # the loss's Q' step with the first block's Q(p)
  np.testing.assert_allclose(after_loss_step[mem_valid], own_q_prime[mem_valid], 1e-5, 1e-6)
  # Masked entries keep the block's own log Q (finite, <= 0).
  own = np.broadcast_to(parts[1].negative_log_q.numpy(), mem_log_q.shape)
  np.testing.assert_array_equal(mem_log_q[~mem_valid], own[~mem_valid])
  out = losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected")
  assert np.all(np.isfinite(out.loss.numpy()))
  plain = JoinedNegatives(joined.blocks, rebase_q_prime=False)
  unchanged = plain.score(query, pos, TABLE[pos], seed=seed, item_table=TABLE)
  assert unchanged.negative_log_q.shape.rank == 1  # every block's log Q shared, unchanged
  np.testing.assert_array_equal(
    unchanged.negative_log_q.numpy()[mem], parts[1].negative_log_q.numpy()
  )
  # A checkpoint of the joined sampler holds the memory.
  path = tf.train.Checkpoint(negatives=joined).save(str(tmp_path / "joined"))
  fresh = CrossBatchNegatives(counts, 2, 5, convention="expected_count")
  tf.train.Checkpoint(
    negatives=JoinedNegatives([InBatchNegatives(counts), fresh, uniform])
  ).restore(path)
  np.testing.assert_array_equal(fresh.ids.numpy(), memory.ids.numpy())
