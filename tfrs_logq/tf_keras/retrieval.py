r"""Retrieval: a drop-in for ``tfrs.tasks.Retrieval`` with a choice of logQ correction.

(One class in one file on purpose: the drop-in is one Keras layer whose ``call`` composes
scores, log Q, masks and the loss from tfrs_logq/core/, negatives/ and frequency/; the docstring
documents the blocks and the arguments TFRS users know. Nothing here recomputes a formula.)

Same constructor and ``call`` as TFRS 0.7.7, plus ``correction`` (and ``q_prime``), an optional
``frequency_estimator`` that supplies log Q, and an optional ``negative_sampler`` of extra
negatives::

    task = tlt.Retrieval(                             # import tfrs_logq.tf_keras as tlt
        correction="corrected",
        frequency_estimator=tlt.frequency.HashArrayEstimator())   # Q estimated in-graph
    loss = task(query_embeddings, candidate_embeddings, candidate_ids=ids, training=training)

Scores and blocks. Row a of ``query_embeddings`` ([A, d]) is paired with row a of
``candidate_embeddings`` ([C, d], C >= A), its positive p_a. Scores are
s[a, c] = <q_a, x_c> / temperature, computed in float32 whatever the embeddings' dtype
(float16 / bfloat16 / mixed policies). The negatives of row a are

* the in-batch block: every candidate column c != a (the other positives of the batch and, when
  C > A, extra rows shared by all queries), with log Q(c) from
  ``candidate_(log_)sampling_probability`` or from the frequency estimator;
* optionally the sampler block: ``negative_sampler.score(...)`` ([A, N] scores, log Q from the
  sampler's own proposal, its own accidental-hit mask), appended after the in-batch block.

A negative is dropped from a row when it has the row's positive id (accidental hit: with
``remove_accidental_hits=True`` and always under ``correction="corrected"``, which samples from
Q' and therefore needs ``candidate_ids``), when ``score_mask[a, c]`` is False, and, with
``num_hard_negatives=k``, when it is not among the k highest corrected logits
s - log Q of the row (ties with the k-th are kept). The per-row loss is
``tfrs_logq.tf_keras.losses.SampledSoftmaxLoss`` over the remaining negatives:

    none:                 L = -(s_p - log(e^{s_p} + sum_i e^{s_i}))
    standard:             L = -((s_p - log Q_p) - log(e^{s_p - log Q_p} + sum_i e^{s_i - log Q_i}))
    standard_no_positive: L = -(s_p - log(e^{s_p} + sum_i e^{s_i - log Q_i}))
    corrected:            L = -w (s_p - LSE_i(s_i - log Q'_i)),  w = sg(1 - P_hat),
                          P_hat = sigmoid(s_p - (LSE_i(s_i - log Q'_i) - log n))

with n the number of valid negatives of the row. ``correction="standard"`` reproduces
``tfrs.tasks.Retrieval`` with ``candidate_sampling_probability`` (without TFRS's 1e-6 clip of Q)
and ``correction="none"`` reproduces it without.

The positive's log Q with two blocks (the convention of this task). Q' excludes the positive from
the proposal that drew each negative, so each block uses its own proposal's Q(p):

    in-batch negative c:   log Q'(c) = log Q_b(c) - log(1 - Q_b(p))    Q_b: estimator / given Q
    sampler negative d:    log Q'(d) = log Q_s(d) - log(1 - Q_s(p))    Q_s(p): the sampler's
                                                                        positive_log_q

and (1/n) sum_i e^{s_i} / Q'(d_i) over all n slots is an average of per-block unbiased estimates
of sum_{d != p} e^{s_d}. The loss receives one positive log Q per row, Q_b(p) (which is also the
log Q(p) of the ``standard`` positive logit), and the sampler block's log Q is shifted by
log(1 - Q_s(p)) - log(1 - Q_b(p)) per row so that the loss's Q' step yields the line above.
``q_prime="proxy"`` uses log Q in place of log Q' in both blocks; ``standard`` and
``standard_no_positive`` use each block's log Q unchanged.

The frequency estimator (``tfrs_logq.tf_keras.frequency``): on a training call (``training=True``,
or ``update_frequency="always"``) it is first updated with the ids of the A positives,
``candidate_ids[:A]`` (each row is one draw of the unigram distribution; under ``tf.distribute`` the
estimator all-gathers them, so it counts the global batch), then read for all C candidates: log Q(c)
= ``frequency_estimator.log_q(candidate_ids)``. It replaces ``candidate_sampling_probability``;
passing both is an error.

Reduction follows the Keras loss given as ``loss`` (default: a sum over the batch, as TFRS),
with ``sample_weight`` per query. ``check_scores=True`` asserts that every score is finite (a NaN
embedding then fails with a clear error instead of a NaN loss).
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Text, Tuple, Union

from tfrs_logq.tf_keras import accidental_hits, logq_correction
from tfrs_logq.tf_keras import log_q as log_q_lib
from tfrs_logq.tf_keras import losses as losses_lib

import tensorflow as tf
import tensorflow_recommenders as tfrs

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import retrieval as retrieval_core
from tfrs_logq.core.ops import tf_ops

__all__ = ["Retrieval", "UPDATE_FREQUENCY_MODES"]

# When the frequency estimator is updated: on training calls, on every call, or never (it is
# updated elsewhere, or holds fixed counts).
UPDATE_FREQUENCY_MODES = ("training", "always", "never")


def _reduction_of(loss: Optional[tf.keras.losses.Loss]) -> str:
  """Maps TFRS's ``loss`` argument onto a reduction; only softmax cross-entropy makes sense."""
  if loss is None:
    return "sum"
  if not isinstance(loss, tf.keras.losses.CategoricalCrossentropy):
    raise ValueError(
      "tfrs_logq.tf_keras.Retrieval computes a sampled softmax cross-entropy; `loss` may only be "
      "a tf.keras.losses.CategoricalCrossentropy(from_logits=True) (used for its reduction), "
      f"got {type(loss).__name__}"
    )
  return retrieval_core.loss_reduction(loss.get_config(), loss.reduction)


def _as_float32(x: tf.Tensor, name: str) -> tf.Tensor:
  x = tf.convert_to_tensor(x)
  if not x.dtype.is_floating:
    raise TypeError(f"{name} must be a floating tensor, got {x.dtype.name}")
  return tf.cast(x, tf.float32)


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class Retrieval(tf.keras.layers.Layer, tfrs.tasks.base.Task):
  r"""Factorized retrieval task with none / standard / corrected logQ.

  Scores s[a, c] = <q_a, x_c> / temperature (float32); row a's positive is candidate a, its
  negatives are the other candidate columns (plus the ``negative_sampler``'s block), minus
  accidental hits, ``score_mask`` and non-hard negatives. Per row, with n valid negatives:

      none:      L = -(s_p - log(e^{s_p} + sum_i e^{s_i}))
      standard:  L = -((s_p - log Q(p)) - log(e^{s_p - log Q(p)} + sum_i e^{s_i - log Q(d_i)}))
      standard_no_positive:  L = -(s_p - log(e^{s_p} + sum_i e^{s_i - log Q(d_i)}))
      corrected: L = -w (s_p - Z),  Z = LSE_i(s_i - log Q'(d_i)),
                 log Q'(d) = log Q(d) - log(1 - Q(p)),  w = sg(1 - sigmoid(s_p - Z + log n))

  reduced as the ``loss``'s reduction (default: sum, as TFRS) with per-query ``sample_weight``.
  Q is the per-draw sampling probability (sums to 1 over the catalog): given per candidate
  (``candidate_sampling_probability`` or its log), or read from ``frequency_estimator`` after
  updating it with the batch's positive ids on training calls. The sampler block's negatives
  use their own proposal for Q and for Q(p) in Q' (see the ``tfrs_logq.tf_keras.retrieval`` module
  docstring for the convention).

  Args:
    loss: Optional ``tf.keras.losses.CategoricalCrossentropy(from_logits=True)``; only its
      reduction is used (default: SUM over the batch, as TFRS).
    metrics: Factorized top-K metrics (``tfrs.metrics.FactorizedTopK``), as in TFRS.
    batch_metrics: Keras metrics over the batch's (corrected, masked) logits, as in TFRS.
    loss_metrics: Keras metrics summarising the loss, as in TFRS.
    temperature: Scores are divided by it before any correction (> 0).
    num_hard_negatives: Keep only the k hardest negatives of each row (by s - log Q);
      non-positive keeps all (as TFRS).
    remove_accidental_hits: Mask candidates sharing the positive's id (needs candidate_ids).
    name: Layer name.
    correction: ``none`` | ``standard`` | ``standard_no_positive`` | ``corrected``.
    q_prime: For ``corrected``: ``exact`` uses log Q'(d) = log Q(d) - log(1 - Q(p)),
      ``proxy`` uses log Q(d) in its place (the paper's industrial setup).
    frequency_estimator: Optional ``tfrs_logq.tf_keras.frequency`` estimator supplying log Q of
    every
      candidate (``candidate_ids`` needed); replaces ``candidate_sampling_probability``.
    negative_sampler: Optional ``tfrs_logq.tf_keras.negatives`` sampler of extra negatives (anything
    with
      ``score(query, positive_ids, positive_embeddings, *, temperature, seed, sequence_ids,
      item_table) -> ScoredCandidates``, e.g. per-query uniform negatives). Not with max-sim.
    update_frequency: When the estimator is updated: ``training`` (calls with
      ``training=True``; a call with ``training`` unknown raises), ``always`` or ``never``.
    check_scores: Assert that every score is finite (costs one pass over the scores).
    ratio_floor: r in [0, 1), ``corrected`` only (ValueError otherwise); r > 0 clamps the ratio
      inside the log as the paper's released script does (r = 1e-10):
      L = -w max(s_p - max(Z, log r), log r) (see ``tfrs_logq.tf_keras.losses``); 0 (default) = off.
  """

  def __init__(
    self,
    loss: Optional[tf.keras.losses.Loss] = None,
    metrics: Optional[Union[Sequence[tfrs.metrics.Factorized], tfrs.metrics.Factorized]] = None,
    batch_metrics: Optional[List[tf.keras.metrics.Metric]] = None,
    loss_metrics: Optional[List[tf.keras.metrics.Metric]] = None,
    temperature: Optional[float] = None,
    num_hard_negatives: Optional[int] = None,
    remove_accidental_hits: bool = False,
    name: Optional[Text] = None,
    correction: str = "corrected",
    q_prime: str = "exact",
    *,
    frequency_estimator: Any = None,
    negative_sampler: Any = None,
    update_frequency: str = "training",
    check_scores: bool = False,
    ratio_floor: float = 0.0,
    **kwargs: Any,
  ) -> None:
    kwargs["dtype"] = "float32"  # scores and losses are always computed in float32
    super().__init__(name=name, **kwargs)
    # The loss's validation of (correction, q_prime, ratio_floor).
    ratio_floor = core_checks.check_correction(correction, q_prime, ratio_floor)
    if update_frequency not in UPDATE_FREQUENCY_MODES:
      raise ValueError(
        f"update_frequency must be one of {UPDATE_FREQUENCY_MODES}, got {update_frequency!r}"
      )
    if num_hard_negatives is not None and num_hard_negatives <= 0:
      num_hard_negatives = None  # TFRS: non-positive keeps all negatives.
    if temperature is not None and not temperature > 0:
      raise ValueError(f"temperature must be positive, got {temperature}")
    if frequency_estimator is not None and not (
      hasattr(frequency_estimator, "log_q") and hasattr(frequency_estimator, "update")
    ):
      raise TypeError(
        "frequency_estimator must have update(ids) and log_q(ids) (a "
        f"tfrs_logq.tf_keras.frequency estimator), got {type(frequency_estimator).__name__}"
      )
    if negative_sampler is not None and not callable(getattr(negative_sampler, "score", None)):
      raise TypeError(
        "negative_sampler must have score(query, positive_ids, "
        "positive_embeddings, ...) (a tfrs_logq.tf_keras.negatives sampler), got "
        f"{type(negative_sampler).__name__}"
      )
    self._loss_object = loss
    self._reduction = _reduction_of(loss)
    if metrics is None:
      metrics = []
    if not isinstance(metrics, Sequence):
      metrics = [metrics]
    self._factorized_metrics = metrics
    self._batch_metrics = batch_metrics or []
    self._loss_metrics = loss_metrics or []
    self._temperature = temperature
    self._num_hard_negatives = num_hard_negatives
    self._remove_accidental_hits = bool(remove_accidental_hits)
    self.correction = correction
    self.q_prime = q_prime
    self.frequency_estimator = frequency_estimator
    self.negative_sampler = negative_sampler
    self.update_frequency = update_frequency
    self.check_scores = bool(check_scores)
    self.ratio_floor = ratio_floor
    self._log_q_correction = logq_correction.SamplingProbabilityCorrection(
      from_log=True, dtype="float32", name="log_q_correction"
    )
    self._softmax_loss = losses_lib.SampledSoftmaxLoss(
      correction=correction, q_prime=q_prime, ratio_floor=ratio_floor, name="sampled_softmax_loss"
    )

  @property
  def factorized_metrics(self) -> Sequence[tfrs.metrics.Factorized]:
    return self._factorized_metrics

  @factorized_metrics.setter
  def factorized_metrics(self, value: object) -> None:
    if not isinstance(value, Sequence):
      value = []
    self._factorized_metrics = value

  # ---- call ----------------------------------------------------------------------------------
  def call(
    self,
    query_embeddings: tf.Tensor,
    candidate_embeddings: tf.Tensor,
    sample_weight: Optional[tf.Tensor] = None,
    candidate_sampling_probability: Optional[tf.Tensor] = None,
    candidate_ids: Optional[tf.Tensor] = None,
    compute_metrics: bool = True,
    compute_batch_metrics: bool = True,
    score_mask: Optional[tf.Tensor] = None,
    candidate_log_sampling_probability: Optional[tf.Tensor] = None,
    training: Union[bool, tf.Tensor, None] = None,
    seed: Optional[tf.Tensor] = None,
    item_table: Optional[tf.Tensor] = None,
  ) -> tf.Tensor:
    """Computes the loss (and updates metrics, and the frequency estimator when training).

    Args:
      query_embeddings: [A, d], or [A, heads, d] for max-sim scoring (as TFRS).
      candidate_embeddings: [C, d], C >= A; row a < A is query a's positive.
      sample_weight: [A] per-query weights.
      candidate_sampling_probability: [C] per-draw Q of each candidate column.
      candidate_ids: [C] ids (int or string) for accidental hits, the frequency estimator and
        id-based metrics.
      compute_metrics: Update factorized metrics.
      compute_batch_metrics: Update batch metrics.
      score_mask: [A, C] bool, False drops the candidate from the row's negatives.
      candidate_log_sampling_probability: [C] log Q instead of Q (use for Q < 1e-6).
      training: Whether this is a training step (updates the frequency estimator under
        ``update_frequency="training"``); Keras fills it from the calling context.
      seed: Optional stateless [2] int seed for the negative sampler.
      item_table: Optional [V, d] table of all candidate embeddings for the negative sampler.

    Returns:
      The reduced loss (a scalar; [A] with reduction NONE), float32.
    """
    query = _as_float32(query_embeddings, "query_embeddings")
    candidates = _as_float32(candidate_embeddings, "candidate_embeddings")
    max_sim = query.shape.rank == 3
    if max_sim:
      scores = tf.reduce_max(tf.einsum("qne,ce->qnc", query, candidates), axis=1)
    else:
      scores = tf.linalg.matmul(query, candidates, transpose_b=True)
    num_queries = tf.shape(scores)[0]
    num_candidates = tf.shape(scores)[1]
    checks = [
      tf.debugging.assert_positive(num_queries, message="empty batch: no queries"),
      tf.debugging.assert_greater_equal(
        num_candidates,
        num_queries,
        message="candidate_embeddings needs at least one row (the positive) per query",
      ),
    ]
    with tf.control_dependencies(checks):
      scores = tf.identity(scores)
    if self._temperature is not None:
      scores = scores / self._temperature
    scores = self._maybe_check(scores)

    if candidate_ids is not None:
      candidate_ids = tf.convert_to_tensor(candidate_ids)
    if self.negative_sampler is not None:
      if max_sim:
        raise ValueError("negative_sampler needs [A, d] query embeddings (no max-sim)")
      if candidate_ids is None:
        raise ValueError(
          "candidate_ids are needed with a negative_sampler (its negatives equal "
          "to the positive are masked)"
        )
    log_q = self._candidate_log_q(
      candidate_sampling_probability,
      candidate_log_sampling_probability,
      candidate_ids,
      num_queries,
      training,
    )
    corrected_q = self.correction != "none"
    mask_hits = core_checks.check_retrieval_inputs(
      self.correction,
      log_q is not None,
      self._remove_accidental_hits,
      candidate_ids is not None,
      log_q_sources="candidate_log_sampling_probability, or a frequency_estimator",
    )

    # Row a's own column has the positive's id, so the hit mask also leaves the positive out.
    hits = (
      accidental_hits.accidental_hit_mask(candidate_ids[:num_queries], candidate_ids)
      if mask_hits and candidate_ids is not None  # (mask_hits needs them)
      else None
    )
    valid = retrieval_core.in_batch_valid(tf_ops(), num_queries, num_candidates, hits, score_mask)
    positive_scores, positive_log_q = retrieval_core.positives(tf_ops(), scores, log_q, num_queries)
    negative_scores, negative_log_q = scores, log_q

    if self.negative_sampler is not None:
      assert candidate_ids is not None  # checked above
      negative_scores, negative_log_q, valid = self._append_sampled(
        query,
        candidates[:num_queries],
        candidate_ids[:num_queries],
        positive_log_q,
        scores,
        log_q,
        valid,
        seed,
        item_table,
      )

    if self._num_hard_negatives is not None:
      valid = self._keep_hardest(negative_scores, negative_log_q, valid)

    out = self._softmax_loss(
      positive_scores,
      negative_scores,
      negative_log_q if corrected_q else None,
      positive_log_q if corrected_q else None,
      valid,
    )
    weight = None if sample_weight is None else tf.cast(tf.reshape(sample_weight, [-1]), tf.float32)
    loss = retrieval_core.weighted_reduction(
      tf_ops(), out.loss, weight, self._reduction, num_queries
    )

    update_ops = [metric.update_state(loss) for metric in self._loss_metrics]
    if compute_metrics and not max_sim:
      for metric in self._factorized_metrics:
        update_ops.append(
          metric.update_state(
            query_embeddings,
            candidate_embeddings[: tf.shape(query_embeddings)[0]],
            true_candidate_ids=candidate_ids,
            sample_weight=sample_weight,
          )
        )
    if compute_batch_metrics and self._batch_metrics:
      logits = self._logits(negative_scores, negative_log_q)
      labels = tf.eye(num_queries, tf.shape(logits)[1])
      keep = tf.logical_or(valid, tf.cast(labels, tf.bool))
      logits = tf.where(keep, logits, accidental_hits.lowest_logit(tf.float32))
      for metric in self._batch_metrics:
        update_ops.append(metric.update_state(labels, logits, sample_weight=sample_weight))
    with tf.control_dependencies(update_ops):
      return tf.identity(loss)

  # ---- pieces --------------------------------------------------------------------------------
  def _maybe_check(self, scores: tf.Tensor) -> tf.Tensor:
    if not self.check_scores:
      return scores
    return tf.debugging.assert_all_finite(
      scores,
      f"{self.name}: scores <q, c> / temperature have NaN or inf (check_scores=True): "
      "look for NaN or inf in the query or candidate embeddings",
    )

  def _candidate_log_q(
    self,
    probability: Optional[tf.Tensor],
    log_probability: Optional[tf.Tensor],
    candidate_ids: Optional[tf.Tensor],
    num_queries: tf.Tensor,
    training: Union[bool, tf.Tensor, None],
  ) -> Optional[tf.Tensor]:
    """log Q [C] from the arguments, or from the estimator (updated first when training)."""
    log_q = log_q_lib.resolve_log_q(probability, log_probability)
    if log_q is not None and log_q.shape.rank not in (None, 1):
      raise ValueError(f"candidate sampling probabilities must be [C], got {log_q.shape}")
    estimator = self.frequency_estimator
    if estimator is None:
      return log_q
    core_checks.check_estimator_inputs(log_q is not None, candidate_ids is not None)
    assert candidate_ids is not None  # check_estimator_inputs raised otherwise
    self._maybe_update(candidate_ids[:num_queries], training)
    if self.correction == "none":
      return None
    return tf.cast(estimator.log_q(candidate_ids), tf.float32)

  def _maybe_update(self, positive_ids: tf.Tensor, training: Union[bool, tf.Tensor, None]) -> None:
    if self.update_frequency == "never":
      return
    if self.update_frequency == "always":
      self.frequency_estimator.update(positive_ids)
      return
    if training is None:
      raise ValueError(
        f"{self.name} has a frequency_estimator updated on training calls "
        "(update_frequency='training') but does not know whether this is one: pass "
        "training=... (tfrs.Model.compute_loss receives it), or construct the task with "
        "update_frequency='always' or 'never'"
      )
    static = tf.get_static_value(training)
    if static is not None:
      if bool(static):
        self.frequency_estimator.update(positive_ids)
      return
    tf.cond(
      tf.cast(training, tf.bool),
      lambda: self._update_and_flag(positive_ids),
      lambda: tf.constant(False),
    )

  def _update_and_flag(self, positive_ids: tf.Tensor) -> tf.Tensor:
    self.frequency_estimator.update(positive_ids)
    return tf.constant(True)

  def _append_sampled(
    self,
    query: tf.Tensor,
    positive_embeddings: tf.Tensor,
    positive_ids: tf.Tensor,
    positive_log_q: Optional[tf.Tensor],
    scores: tf.Tensor,
    log_q: Optional[tf.Tensor],
    valid: tf.Tensor,
    seed: Optional[tf.Tensor],
    item_table: Optional[tf.Tensor],
  ) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Joins the in-batch block [A, C] and the sampler's block [A, N] (module docstring)."""
    extra = self.negative_sampler.score(
      query,
      positive_ids,
      positive_embeddings,
      temperature=1.0 if self._temperature is None else self._temperature,
      seed=seed,
      sequence_ids=None,
      item_table=item_table,
    )
    extra_scores = self._maybe_check(tf.cast(extra.negative_scores, tf.float32))
    extra_positive_log_q = extra.positive_log_q
    if extra_positive_log_q is not None:
      extra_positive_log_q = tf.cast(extra_positive_log_q, tf.float32)
    extra_log_q = retrieval_core.sampled_block_log_q(
      tf_ops(),
      self.correction,
      self.q_prime,
      tf.cast(extra.negative_log_q, tf.float32),
      extra_positive_log_q,
      positive_log_q,
      extra.valid_mask,
    )
    return retrieval_core.join_blocks(
      tf_ops(), (scores, log_q, valid), (extra_scores, extra_log_q, extra.valid_mask)
    )

  def _logits(self, scores: tf.Tensor, log_q: Optional[tf.Tensor]) -> tf.Tensor:
    """s - log Q (SamplingProbabilityCorrection), or s under correction="none"."""
    if self.correction == "none" or log_q is None:
      return scores
    return self._log_q_correction(scores, log_q)

  def _keep_hardest(
    self, scores: tf.Tensor, log_q: Optional[tf.Tensor], valid: tf.Tensor
  ) -> tf.Tensor:
    """valid AND (at least the k-th largest corrected negative logit of the row)."""
    # log Q' = log Q - log(1 - Q(p)) is a per-row shift: it does not change a row's ranking.
    logits = self._logits(scores, log_q)
    k = tf.minimum(self._num_hard_negatives, tf.shape(scores)[1])
    # Ties with the k-th value are all kept (TFRS keeps an arbitrary k of them).
    return retrieval_core.keep_hardest(tf_ops(), logits, valid, k)

  # ---- serialisation -------------------------------------------------------------------------
  def get_config(self) -> Dict[str, Any]:
    """Config of the task; metrics holding candidates and negative samplers are not serialisable
    (NotImplementedError, as Keras expects)."""
    if self._factorized_metrics or self.negative_sampler is not None:
      raise NotImplementedError(
        f"{self.name}: factorized metrics and negative samplers hold candidate towers and "
        "cannot be serialised; save the model with tf.saved_model / checkpoints instead"
      )
    config = super().get_config()
    config.update(
      # `loss` only carries a reduction (a CategoricalCrossentropy(from_logits=True)).
      loss_reduction=None if self._loss_object is None else self._loss_object.reduction,
      batch_metrics=[tf.keras.metrics.serialize(m) for m in self._batch_metrics],
      loss_metrics=[tf.keras.metrics.serialize(m) for m in self._loss_metrics],
      temperature=self._temperature,
      num_hard_negatives=self._num_hard_negatives,
      remove_accidental_hits=self._remove_accidental_hits,
      correction=self.correction,
      q_prime=self.q_prime,
      frequency_estimator=(
        None
        if self.frequency_estimator is None
        else tf.keras.layers.serialize(self.frequency_estimator)
      ),
      update_frequency=self.update_frequency,
      check_scores=self.check_scores,
      ratio_floor=self.ratio_floor,
    )
    return config

  @classmethod
  def from_config(cls, config: Mapping[str, Any]) -> "Retrieval":
    config = dict(config)
    reduction = config.pop("loss_reduction", None)
    if reduction is not None:
      config["loss"] = tf.keras.losses.CategoricalCrossentropy(
        from_logits=True, reduction=reduction
      )
    for key in ("batch_metrics", "loss_metrics"):
      config[key] = [tf.keras.metrics.deserialize(m) for m in config.get(key) or []]
    if config.get("frequency_estimator") is not None:
      config["frequency_estimator"] = tf.keras.layers.deserialize(config["frequency_estimator"])
    return cls(**config)
