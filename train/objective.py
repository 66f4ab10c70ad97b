"""One replica's share of the training loss: queries -> negatives -> scores -> per-query loss.

For a global batch with A queries in all (SASRec: the non-padding positions of every sequence;
two-tower: the batch rows), replica r holds A_r of them and computes

    loss_r = (1 / A) * sum_{a in replica r} w_a-weighted per-query loss L_a      (A = sum_r A_r)

so that the gradients summed over replicas (what MirroredStrategy / MultiWorkerMirroredStrategy
do) equal the gradient of the global-batch mean. Negatives:

* ``uniform``: k ids uniform over 1..|I|, log Q = -log |I|; shared by the batch (one
  [A, d] x [d, k] matmul) or, with ``per_position``, k fresh ids per query (the reference code).
* ``in_batch``: the deduplicated positives of the GLOBAL batch (all-gathered across replicas),
  a uniform subset of at most k, log Q = log q_uni from the frequency estimator.
* ``mixed``: k_b = k // 2 in-batch + k_u = k - k_b uniform (uniform part per query with
  ``per_position``), log Q under the paper's "unigram" convention (not adjusted for the uniform
  portion).
* ``midx``: k ids per query from the MIDX proposal Q(i | q) (exact query-dependent log Q).

Randomness is stateless: the step seed is (seed, global step); negatives use a seed shared by
all replicas (so they draw the same shared negatives as one device would), dropout a seed that
also folds in the replica id. The frequency estimator is updated once per step with the global
batch's positive ids before log Q is read.
"""

from __future__ import annotations

import dataclasses
import math

import tfrs_logq  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

from models.sasrec import SASRec
from models import training_losses
from tfrs_logq import accidental_hits
from tfrs_logq import losses
from tfrs_logq import negatives as neg_lib

NEGATIVES = ("uniform", "in_batch", "mixed", "midx")
CORRECTIONS = losses.CORRECTIONS


@dataclasses.dataclass
class ObjectiveConfig:
  """What the loss of one step is made of (see the module docstring)."""
  num_items: int
  loss: str = "sampled_softmax"
  negatives: str = "mixed"
  num_negatives: int = 256
  per_position: bool = False
  logq: str = "corrected"
  q_prime: str = "exact"
  temperature: float = 1.0
  gbce_t: float = 0.75
  seed: int = 0
  update_estimator: bool = True
  jit_compile: bool = False

  def validate(self):
    if self.loss not in training_losses.LOSSES:
      raise ValueError(f"loss must be one of {training_losses.LOSSES}, got {self.loss!r}")
    if self.negatives not in NEGATIVES:
      raise ValueError(f"negatives must be one of {NEGATIVES}, got {self.negatives!r}")
    if self.logq not in CORRECTIONS:
      raise ValueError(f"logq must be one of {CORRECTIONS}, got {self.logq!r}")
    if self.q_prime not in losses.Q_PRIME_MODES:
      raise ValueError(f"q_prime must be exact or proxy, got {self.q_prime!r}")
    if self.num_negatives < 1:
      raise ValueError(f"num_negatives must be >= 1, got {self.num_negatives}")
    if self.loss == "sampled_softmax" and self.negatives == "mixed" and self.num_negatives < 2:
      raise ValueError("mixed negatives need num_negatives >= 2 (split in-batch / uniform)")
    if self.loss in ("bce", "gbce") and self.negatives != "uniform":
      raise ValueError(f"--loss={self.loss} draws uniform negatives (gSASRec's alpha is the "
                       f"uniform sampling rate); got --negatives={self.negatives}")
    if not self.temperature > 0:
      raise ValueError(f"temperature must be > 0, got {self.temperature}")
    return self


def per_query_scores(queries, table, ids):
  """<q_a, table[ids[a, j]]> for per-query negatives ids [A, k] -> [A, k].

  Two exact ways, picked by cost: gather the [A, k, d] embeddings and contract (memory ~ A k d),
  or score the whole table once, [A, V] = q table^T, and gather the [A, k] entries (compute
  ~ A V d, no [A, k, d] tensor; cheaper while V <= 0.4 k d, e.g. ML-1M: V = 3,417, k = d = 128).
  Gradients are the same either way (the gather's gradient scatters into [A, V]).
  """
  k, d = ids.shape[-1], queries.shape[-1]
  v = table.shape[0]
  if None not in (k, d, v) and v <= 0.4 * k * d:
    return tf.gather(tf.matmul(queries, table, transpose_b=True), ids, batch_dims=1)
  return tf.einsum("ad,akd->ak", queries, tf.gather(table, ids))


_per_query_scores_xla = tf.function(per_query_scores, jit_compile=True, reduce_retracing=True)


def step_seeds(seed: int, step):
  """(shared negative seed, per-replica dropout seed), int64 [2] each, from (seed, step)."""
  base = tf.stack([tf.constant(seed, tf.int64), tf.cast(step, tf.int64)])
  shared = tf.random.experimental.stateless_fold_in(base, 1)
  dropout = tf.random.experimental.stateless_fold_in(base, 2)
  ctx = tf.distribute.get_replica_context()
  if ctx is not None and ctx.num_replicas_in_sync > 1:
    dropout = tf.random.experimental.stateless_fold_in(
        dropout, tf.cast(ctx.replica_id_in_sync_group, tf.int64))
  return shared, dropout


def global_sum(x):
  """Sum of a per-replica value over all replicas (identity without tf.distribute)."""
  ctx = tf.distribute.get_replica_context()
  if ctx is None or ctx.num_replicas_in_sync == 1:
    return x
  return ctx.all_reduce(tf.distribute.ReduceOp.SUM, x)


class Objective:
  """Computes one replica's loss terms; see the module docstring.

  Args:
    config: an `ObjectiveConfig`.
    model: a `models.SASRec` or `models.TwoTower`.
    estimator: a `tfrs_logq.frequency` estimator (needed for in_batch / mixed / logQ).
    midx: a `tfrs_logq.negatives.MIDXSampler` (needed for ``negatives="midx"``).
  """

  def __init__(self, config: ObjectiveConfig, model, estimator=None, midx=None):
    self.config = config.validate()
    self.model = model
    self.estimator = estimator
    self.midx = midx
    c = config
    k = c.num_negatives
    embed = model.item_embeddings
    self.uniform = None
    self.in_batch = None
    self.mixed = None
    if c.loss == "sampled_softmax":
      needs_estimator = c.negatives in ("in_batch", "mixed")
      if needs_estimator and estimator is None:
        raise ValueError(f"--negatives={c.negatives} needs a frequency estimator")
      if c.negatives == "midx" and midx is None:
        raise ValueError("--negatives=midx needs a MIDXSampler")
      if c.negatives == "uniform":
        self.uniform = neg_lib.UniformNegatives(embed, k, id_range=(1, c.num_items + 1))
      elif c.negatives == "in_batch":
        self.in_batch = neg_lib.InBatchNegatives(estimator, num_negatives=k)
      elif c.negatives == "mixed":
        k_b = k // 2
        self.in_batch = neg_lib.InBatchNegatives(estimator, num_negatives=k_b)
        self.uniform = neg_lib.UniformNegatives(embed, k - k_b, id_range=(1, c.num_items + 1))
        self.mixed = neg_lib.MixedNegatives(self.in_batch, self.uniform, convention="unigram")
    self.gbce_beta = (training_losses.gbce_beta(k, c.num_items, c.gbce_t)
                      if c.loss == "gbce" else 1.0)

  # ---------------------------------------------------------------------------------------------
  def queries(self, batch, dropout_seed, training=True):
    """(queries [A, d], positive ids [A]) of the local batch."""
    if isinstance(self.model, SASRec):
      q, pos, _ = self.model.training_queries(batch["inputs"], batch["targets"],
                                              training=training, seed=dropout_seed)
      return q, pos
    return self.model.training_queries(batch, training=training, seed=dropout_seed)

  def _uniform_ids(self, shape, seed):
    return tf.random.stateless_uniform(shape, seed, 1, self.config.num_items + 1, tf.int64)

  def _per_query_scores(self, q, ids):
    """[A, k] scores (before the temperature) of per-query negatives ``ids`` [A, k]."""
    table = self.model.all_item_embeddings()
    score = _per_query_scores_xla if self.config.jit_compile else per_query_scores
    return score(q, table, ids)

  def __call__(self, batch, step, training=True):
    """Returns dict(loss: scaled replica loss, loss_sum, weight_sum, count) for one step."""
    c = self.config
    shared_seed, dropout_seed = step_seeds(c.seed, step)
    q, pos_ids = self.queries(batch, dropout_seed, training)
    count = tf.cast(tf.shape(pos_ids)[0], tf.float32)
    # Cross-replica collectives (this sum, the estimator's all-gather, the in-batch pool's
    # all-gather) must run in the same order on every replica: chain them by dependencies.
    total = global_sum(count)
    with tf.control_dependencies([total]):
      pos_ids = tf.identity(pos_ids)
    if self.estimator is not None and c.update_estimator and training:
      self.estimator.update(pos_ids)
      with tf.control_dependencies([tf.identity(v) for v in self.estimator.weights]):
        pos_ids, q = tf.identity(pos_ids), tf.identity(q)
    out = self._per_query_loss(q, pos_ids, shared_seed)
    loss_sum = tf.reduce_sum(out.loss)
    return dict(loss=loss_sum / tf.maximum(total, 1.0), loss_sum=loss_sum,
                weight_sum=tf.reduce_sum(out.weight), count=count)

  def _per_query_loss(self, q, pos_ids, seed):
    c = self.config
    inv_t = 1.0 / c.temperature
    if c.loss == "full_softmax":
      return training_losses.full_softmax_loss(q, pos_ids, self.model.all_item_embeddings(),
                                               temperature=c.temperature)
    pos_emb = self.model.item_embeddings(pos_ids)
    if c.loss in ("bce", "gbce"):
      k = c.num_negatives
      s_p = tf.reduce_sum(q * pos_emb, -1) * inv_t
      if c.per_position:
        ids = self._uniform_ids(tf.stack([tf.shape(q)[0], k]), seed)
        s_n = self._per_query_scores(q, ids) * inv_t
      else:
        ids = self._uniform_ids([k], seed)
        s_n = tf.matmul(q, self.model.item_embeddings(ids), transpose_b=True) * inv_t
      valid = accidental_hits.accidental_hit_mask(pos_ids, ids)
      return training_losses.gbce_loss(s_p, s_n, beta=self.gbce_beta, valid_mask=valid)
    scored = self._scored(q, pos_ids, pos_emb, seed)
    return training_losses.sampled_softmax(scored, correction=c.logq, q_prime=c.q_prime)

  def _scored(self, q, pos_ids, pos_emb, seed):
    c = self.config
    t = c.temperature
    if c.negatives == "midx":
      negs = self.midx.negatives(tf.stop_gradient(q), c.num_negatives, self.model.item_embeddings,
                                 positive_ids=pos_ids, seed=seed)
      return neg_lib.score_negatives(q, pos_ids, pos_emb, negs, temperature=t)
    if c.negatives == "in_batch":
      negs = self.in_batch(pos_ids, pos_emb, seed=seed)
      return neg_lib.score_negatives(q, pos_ids, pos_emb, negs, temperature=t)
    if c.negatives == "uniform":
      if not c.per_position:
        negs = self.uniform(pos_ids, seed=seed)
        return neg_lib.score_negatives(q, pos_ids, pos_emb, negs, temperature=t)
      ids = self._uniform_ids(tf.stack([tf.shape(q)[0], c.num_negatives]), seed)
      log_q = tf.fill(tf.shape(ids), tf.constant(-math.log(c.num_items), tf.float32))
      return neg_lib.ScoredCandidates(
          tf.reduce_sum(q * pos_emb, -1) / t, self._per_query_scores(q, ids) / t, log_q,
          accidental_hits.accidental_hit_mask(pos_ids, ids),
          tf.fill(tf.shape(pos_ids), log_q[0, 0]))
    # mixed
    if not c.per_position:
      negs = self.mixed(pos_ids, pos_emb, seed=seed)
      return neg_lib.score_negatives(q, pos_ids, pos_emb, negs, temperature=t)
    return self._mixed_per_position(q, pos_ids, pos_emb, seed)

  def _mixed_per_position(self, q, pos_ids, pos_emb, seed):
    """Shared in-batch half [n_b] + per-query uniform half [A, k_u], log Q "unigram"."""
    c = self.config
    seed_b, seed_u = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    batch = self.in_batch(pos_ids, pos_emb, seed=seed_b)
    n_b = tf.shape(batch.ids)[0]
    a = tf.shape(q)[0]
    uni_ids = self._uniform_ids(tf.stack([a, self.uniform.num_negatives]), seed_u)
    inv_t = 1.0 / c.temperature
    s_p = tf.reduce_sum(q * pos_emb, -1) * inv_t
    s_n = tf.concat([tf.matmul(q, batch.embeddings, transpose_b=True),
                     self._per_query_scores(q, uni_ids)], axis=1) * inv_t
    log_q = tf.concat([tf.broadcast_to(self.mixed.log_q(batch.ids, n_b)[None], [a, n_b]),
                       self.mixed.log_q(uni_ids, n_b)], axis=1)
    valid = tf.concat([accidental_hits.accidental_hit_mask(pos_ids, batch.ids),
                       accidental_hits.accidental_hit_mask(pos_ids, uni_ids)], axis=1)
    return neg_lib.ScoredCandidates(s_p, s_n, log_q, valid, self.mixed.log_q(pos_ids, n_b))
