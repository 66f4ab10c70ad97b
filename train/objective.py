"""One replica's share of the training loss, composed of library objects.

    q, p, seq = model.training_queries(batch)        models.TrainingQueries: [A, d], [A], [A]
    scored    = sampler.score(q, p, c_p, seq)         tfrs_logq.tf_keras.negatives (from the config)
    L_a       = loss(scored) | full_softmax(q, p)     tfrs_logq.tf_keras.losses
    loss_r    = (1 / A) sum_{a on replica r} L_a,     A = sum_r A_r (the global batch)

so that the gradients summed over replicas equal the gradient of the global-batch mean. Samplers:
``uniform`` (k per batch / sequence / query), ``in_batch`` (k_b = k of the global batch),
``mixed`` (k // 2 in-batch + the rest uniform), ``midx``; bce / gbce use uniform negatives.
With ``--cross_batch=M`` a memory of the last M global batches' positives (`build_memory`) is one
more block (``JoinedNegatives``: each block keeps its own Q(p) in Q'); the step scores it, then
pushes its own positives (training steps only).
Randomness is stateless: negatives use a seed from (seed, step) shared by all replicas, dropout
one that also folds in the replica id. The frequency estimator is updated once per step with the
global batch's positive ids (unless ``frequency == "exact"``) before log Q is read.

Static shapes (``static_shapes=True``, or automatically while the step is compiled by XLA, e.g.
``tf.function(replica_fn, jit_compile=True)``): the model returns every position (A = B * L for
SASRec, padding has positive id 0), the padding rows are masked (``valid = positive_id != 0``)
in the in-batch pool, the uniform draws' numbering, the estimator update and the loss, and no op
has a value-dependent shape. The loss, its gradient and the estimator state equal the dynamic
path's (tests/train/test_compiled_step.py).
"""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import _static_shapes, full_softmax, gbce, losses, sharded
from tfrs_logq.tf_keras import negatives as neg_lib

import tensorflow as tf

from train import negatives_plan
from train.choices import NEGATIVES  # noqa: F401  (defined there)


def step_seeds(seed: int, step):
  """(shared negative seed, per-replica dropout seed), int64 [2] each, from (seed, step)."""
  # 32-bit seed components: XLA's stateless kernels read only those bits (compiled == not).
  base = _static_shapes.stateless_seed(
    tf.stack([tf.constant(seed, tf.int64), tf.cast(step, tf.int64)])
  )
  shared = _static_shapes.stateless_seed(tf.random.experimental.stateless_fold_in(base, 1))
  dropout = _static_shapes.stateless_seed(tf.random.experimental.stateless_fold_in(base, 2))
  ctx = tf.distribute.get_replica_context()
  if ctx is not None and ctx.num_replicas_in_sync > 1:
    dropout = _static_shapes.stateless_seed(
      tf.random.experimental.stateless_fold_in(
        dropout, tf.cast(ctx.replica_id_in_sync_group, tf.int64)
      )
    )
  return shared, dropout


def global_sum(x):
  """Sum of a per-replica value over all replicas (identity without tf.distribute)."""
  ctx = tf.distribute.get_replica_context()
  if ctx is None or ctx.num_replicas_in_sync == 1:
    return x
  return ctx.all_reduce(tf.distribute.ReduceOp.SUM, x)


def build_sampler(config, model, num_items: int, estimator=None, midx=None, static_shapes=None):
  """The library sampler of the config's `train.negatives_plan.NegativesPlan` (None for the
  full softmax)."""
  plan = negatives_plan.negatives_plan(config)
  uniform = lambda n: neg_lib.UniformNegatives(
    model.item_embeddings,
    n,
    id_range=(1, num_items + 1),
    per=plan.uniform_per,
    jit_compile=config.jit_compile,
    static_shapes=static_shapes,
  )
  if plan.source == "full":
    return None
  if plan.source == "uniform":
    return uniform(plan.num_uniform)
  if plan.source == "midx":
    if midx is None:
      raise ValueError("negatives='midx' needs a MIDXSampler")
    midx.num_negatives = plan.num_midx if midx.num_negatives is None else midx.num_negatives
    return midx
  in_batch = neg_lib.InBatchNegatives(
    estimator,
    num_negatives=plan.num_in_batch,
    convention=plan.convention,
    static_shapes=static_shapes,
  )
  if plan.source == "in_batch":
    return in_batch
  return neg_lib.MixedNegatives(in_batch, uniform(plan.num_uniform), convention=plan.convention)


def build_memory(config, model, estimator):
  """The --cross_batch memory of the plan (None when 0): the last M global batches' positives,
  log Q under --log_q_convention, scored with the current item table (ids) or kept
  embeddings."""
  plan = negatives_plan.negatives_plan(config)
  if plan.memory is None:
    return None
  if estimator is None:
    raise ValueError("cross_batch needs a frequency estimator (log q_uni of the memory's ids)")
  m = plan.memory
  return neg_lib.CrossBatchNegatives(
    estimator,
    m.num_batches,
    m.batch_size,
    slots_per_batch=m.slots_per_batch,
    mode=m.mode,
    embedding_dim=config.embedding_dim if m.mode == "embeddings" else None,
    convention=plan.convention,
    candidate_embedder=model.item_embeddings,
    seed=config.seed,
    name="cross_batch",
  )


def pad_rows(x, rows: int, value=0):
  """``x`` [n, ...] padded with ``value`` to ``rows`` rows along axis 0 (n <= rows)."""
  extra = rows - tf.shape(x)[0]
  pad = tf.concat([[[0, extra]], tf.zeros([tf.rank(x) - 1, 2], tf.int32)], axis=0)
  return tf.pad(x, pad, constant_values=value)


class Objective:
  """``objective(batch, step, training) -> dict(loss, loss_sum, weight_sum, count)``.

  Args:
    config: a `train.config.RunConfig` (fields loss, negatives, num_negatives,
      uniform_negatives, logq, q_prime, log_q_convention, ratio_floor, temperature, gbce_t, seed,
      jit_compile, frequency).
    model: a query model (`models.queries` interface).
    num_items: catalog size (ids 1..num_items, 0 = padding).
    estimator: a `tfrs_logq.tf_keras.frequency` estimator (in_batch / mixed negatives).
    midx: a `tfrs_logq.tf_keras.negatives.MIDXSampler` (``negatives="midx"``).
    static_shapes: the static-shape step (module docstring); None (default) = only while
      compiled by XLA.
  """

  def __init__(self, config, model, num_items: int, estimator=None, midx=None, static_shapes=None):
    self.config, self.model, self.estimator = config, model, estimator
    self.static_shapes = None if static_shapes is None else bool(static_shapes)
    self.sampler = build_sampler(config, model, num_items, estimator, midx, self.static_shapes)
    self.memory = build_memory(config, model, estimator)
    if self.memory is not None:
      rebase = config.logq == "corrected" and config.q_prime == "exact"
      self.sampler = neg_lib.JoinedNegatives([self.sampler, self.memory], rebase_q_prime=rebase)
    if config.loss == "full_softmax":
      self.loss = full_softmax.FullSoftmaxLoss(config.temperature, id_offset=1)
    elif config.loss == "sampled_softmax":
      self.loss = losses.SampledSoftmaxLoss(
        config.logq, config.q_prime, ratio_floor=config.ratio_floor
      )
    else:
      beta = (
        gbce.gbce_beta(config.num_negatives, num_items, config.gbce_t)
        if config.loss == "gbce"
        else 1.0
      )
      self.loss = gbce.GBCELoss(beta)

  def __call__(self, batch, step, training=True):
    """Returns dict(loss: scaled replica loss, loss_sum, weight_sum, count) for one step."""
    c = self.config
    shared_seed, dropout_seed = step_seeds(c.seed, step)
    static = _static_shapes.use_static_shapes(self.static_shapes)
    q, pos_ids, seq_ids = self.model.training_queries(
      batch, training=training, seed=dropout_seed, static_shapes=static
    )
    valid = tf.not_equal(pos_ids, 0) if static else None  # padding positions
    count = (
      tf.reduce_sum(tf.cast(valid, tf.float32))
      if static
      else tf.cast(tf.shape(pos_ids)[0], tf.float32)
    )
    # Cross-replica collectives (this sum, the estimator's all-gather, the in-batch pool's
    # all-gather) must run in the same order on every replica: chain them by dependencies.
    total = global_sum(count)
    with tf.control_dependencies([total]):
      pos_ids = tf.identity(pos_ids)
    if self.estimator is not None and c.frequency != "exact" and training:
      self.estimator.update(pos_ids, valid=valid)
      # After the update, without reading the state whole (a ps -> worker copy per step).
      with tf.control_dependencies(sharded.read_markers(self.estimator.weights)):
        pos_ids, q = tf.identity(pos_ids), tf.identity(q)
    out = self.per_query_loss(q, pos_ids, seq_ids, shared_seed, valid=valid)
    loss, weight = out.loss, out.weight
    if valid is not None:
      loss = tf.where(valid, loss, tf.zeros_like(loss))
      weight = tf.where(valid, weight, tf.zeros_like(weight))
    loss_sum = tf.reduce_sum(loss)
    if self.memory is not None and training:
      with tf.control_dependencies([loss_sum]):  # the step scores the memory, then pushes
        self._push(pos_ids, valid)
    return dict(
      loss=loss_sum / tf.maximum(total, 1.0),
      loss_sum=loss_sum,
      weight_sum=tf.reduce_sum(weight),
      count=count,
    )

  def _push(self, pos_ids, valid):
    """This replica's positives (padded to its static share of a push) into the memory."""
    rows = self.memory.batch_size // max(neg_lib.num_replicas(), 1)
    if valid is None:
      valid = tf.ones_like(pos_ids, tf.bool)
    ids = pad_rows(pos_ids, rows)
    valid = pad_rows(valid, rows, False)
    emb = None
    if self.memory.mode == "embeddings":
      emb = self.model.item_embeddings(ids)
    self.memory.update(ids, emb, valid=valid)

  def per_query_loss(self, q, pos_ids, seq_ids, seed, valid=None) -> losses.LossOutput:
    """`LossOutput` of the A queries ``q`` with positives ``pos_ids`` (negatives from ``seed``);
    ``valid`` (bool [A]) marks the real queries of a static-shape batch: padding rows are left
    out of the negatives and get a finite loss that the caller drops."""
    if self.sampler is None:
      ids = pos_ids if valid is None else tf.where(valid, pos_ids, tf.ones_like(pos_ids))
      return self.loss(q, ids, self.model.all_item_embeddings()[1:])
    s = self.sampler.score(
      q,
      pos_ids,
      self.model.item_embeddings(pos_ids),
      temperature=self.config.temperature,
      seed=seed,
      sequence_ids=seq_ids,
      item_table=self.model.all_item_embeddings,
      valid=valid,
    )
    if self.config.loss == "sampled_softmax":
      return self.loss(
        s.positive_scores, s.negative_scores, s.negative_log_q, s.positive_log_q, s.valid_mask
      )
    return self.loss(s.positive_scores, s.negative_scores, s.valid_mask)
