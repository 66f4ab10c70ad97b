"""Retrieval: a drop-in for ``tfrs.tasks.Retrieval`` with a choice of logQ correction.

Same constructor and ``call`` as TFRS 0.7.7, plus ``correction`` (and ``q_prime``)::

    task = tfrs_logq.tasks.Retrieval(correction="corrected", metrics=...)   # the one changed line
    loss = task(query_embeddings, candidate_embeddings,
                candidate_sampling_probability=q, candidate_ids=ids)

Row a of ``query_embeddings`` is paired with row a of ``candidate_embeddings`` (its positive).
Every other candidate row is a negative for it: the other positives of the batch (in-batch
negatives) and, when num_candidates > num_queries, the extra rows (negatives shared by all
queries, e.g. uniform negatives for mixed negative sampling). Scores are
s = <q, c> / temperature; candidate_sampling_probability[c] is Q(c) of candidate column c (its
positive's entry is Q(p)). The per-row loss is :func:`tfrs_logq.losses.sampled_softmax_loss`
over the row's negatives, i.e. all columns but its own, minus masked ones:

* accidental hits (candidate id == the row's positive id): masked when
  ``remove_accidental_hits=True`` and always under ``correction="corrected"`` (the formula
  samples negatives from Q', which excludes p), which therefore needs ``candidate_ids``;
* ``score_mask[a, c] == False`` (the positive itself is never masked);
* with ``num_hard_negatives=k``, all but the k highest corrected negative logits.

``correction="standard"`` reproduces ``tfrs.tasks.Retrieval`` with
``candidate_sampling_probability`` exactly (without TFRS's 1e-6 clip of Q), and
``correction="none"`` reproduces it without. The loss reduction follows the Keras loss given as
``loss`` (default: a sum over the batch, as TFRS), with ``sample_weight`` per query.
"""

from typing import List, Optional, Sequence, Text, Union

import tfrs_logq  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf
import tensorflow_recommenders as tfrs

from tfrs_logq import accidental_hits
from tfrs_logq import log_q as log_q_lib
from tfrs_logq import losses as losses_lib

_REDUCTIONS = {
    tf.keras.losses.Reduction.SUM: "sum",
    tf.keras.losses.Reduction.NONE: "none",
    tf.keras.losses.Reduction.SUM_OVER_BATCH_SIZE: "mean",
    tf.keras.losses.Reduction.AUTO: "mean",
}


def _reduction_of(loss: Optional[tf.keras.losses.Loss]) -> str:
  """Maps TFRS's ``loss`` argument onto a reduction; only softmax cross-entropy makes sense."""
  if loss is None:
    return "sum"
  if not isinstance(loss, tf.keras.losses.CategoricalCrossentropy):
    raise ValueError(
        "tfrs_logq.tasks.Retrieval computes a sampled softmax cross-entropy; `loss` may only be "
        "a tf.keras.losses.CategoricalCrossentropy(from_logits=True) (used for its reduction), "
        f"got {type(loss).__name__}")
  config = loss.get_config()
  if not config.get("from_logits", False) or config.get("label_smoothing", 0.0):
    raise ValueError("`loss` must be CategoricalCrossentropy(from_logits=True) without "
                     "label smoothing")
  return _REDUCTIONS[loss.reduction]


class Retrieval(tf.keras.layers.Layer, tfrs.tasks.base.Task):
  """A factorized retrieval task with none / standard / corrected logQ (module docstring)."""

  def __init__(self,
               loss: Optional[tf.keras.losses.Loss] = None,
               metrics: Optional[Union[Sequence[tfrs.metrics.Factorized],
                                       tfrs.metrics.Factorized]] = None,
               batch_metrics: Optional[List[tf.keras.metrics.Metric]] = None,
               loss_metrics: Optional[List[tf.keras.metrics.Metric]] = None,
               temperature: Optional[float] = None,
               num_hard_negatives: Optional[int] = None,
               remove_accidental_hits: bool = False,
               name: Optional[Text] = None,
               correction: str = "corrected",
               q_prime: str = "exact") -> None:
    """Initializes the task.

    Args:
      loss: Optional ``tf.keras.losses.CategoricalCrossentropy(from_logits=True)``; only its
        reduction is used (default: SUM over the batch, as TFRS).
      metrics: Factorized top-K metrics (``tfrs.metrics.FactorizedTopK``), as in TFRS.
      batch_metrics: Keras metrics over the batch's logits, as in TFRS.
      loss_metrics: Keras metrics summarising the loss, as in TFRS.
      temperature: Scores are divided by it before any correction.
      num_hard_negatives: Keep only the k hardest negatives of each row (by corrected logit).
      remove_accidental_hits: Mask candidates sharing the positive's id (needs candidate_ids).
      name: Layer name.
      correction: ``none`` | ``standard`` | ``standard_no_positive`` | ``corrected``.
      q_prime: For ``corrected``: ``exact`` uses log Q'(d) = log Q(d) - log(1 - Q(p)),
        ``proxy`` uses log Q(d) in its place (the paper's industrial setup).
    """
    super().__init__(name=name, dtype="float32")
    if correction not in losses_lib.CORRECTIONS:
      raise ValueError(f"correction must be one of {losses_lib.CORRECTIONS}, got {correction!r}")
    if q_prime not in losses_lib.Q_PRIME_MODES:
      raise ValueError(f"q_prime must be one of {losses_lib.Q_PRIME_MODES}, got {q_prime!r}")
    if num_hard_negatives is not None and num_hard_negatives <= 0:
      num_hard_negatives = None  # TFRS: non-positive keeps all negatives.
    if temperature is not None and temperature <= 0:
      raise ValueError(f"temperature must be positive, got {temperature}")
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
    self._remove_accidental_hits = remove_accidental_hits
    self.correction = correction
    self.q_prime = q_prime

  @property
  def factorized_metrics(self):
    return self._factorized_metrics

  @factorized_metrics.setter
  def factorized_metrics(self, value):
    if not isinstance(value, Sequence):
      value = []
    self._factorized_metrics = value

  def call(self,
           query_embeddings: tf.Tensor,
           candidate_embeddings: tf.Tensor,
           sample_weight: Optional[tf.Tensor] = None,
           candidate_sampling_probability: Optional[tf.Tensor] = None,
           candidate_ids: Optional[tf.Tensor] = None,
           compute_metrics: bool = True,
           compute_batch_metrics: bool = True,
           score_mask: Optional[tf.Tensor] = None,
           candidate_log_sampling_probability: Optional[tf.Tensor] = None) -> tf.Tensor:
    """Computes the loss (and updates metrics).

    Args:
      query_embeddings: [A, d], or [A, heads, d] for max-sim scoring (as TFRS).
      candidate_embeddings: [C, d], C >= A; row a < A is query a's positive.
      sample_weight: [A] per-query weights.
      candidate_sampling_probability: [C] per-draw Q of each candidate column.
      candidate_ids: [C] ids (int or string) for accidental hits and id-based metrics.
      compute_metrics: Update factorized metrics.
      compute_batch_metrics: Update batch metrics.
      score_mask: [A, C] bool, False drops the candidate from the row's negatives.
      candidate_log_sampling_probability: [C] log Q instead of Q (use for Q < 1e-6).

    Returns:
      The reduced loss (a scalar; [A] with reduction NONE).
    """
    if query_embeddings.shape.rank == 3:
      scores = tf.einsum("qne,ce->qnc", query_embeddings, candidate_embeddings)
      scores = tf.reduce_max(scores, axis=1)
    else:
      scores = tf.linalg.matmul(query_embeddings, candidate_embeddings, transpose_b=True)
    scores = tf.cast(scores, tf.float32)
    num_queries = tf.shape(scores)[0]
    num_candidates = tf.shape(scores)[1]
    checks = [
        tf.debugging.assert_positive(num_queries, message="empty batch: no queries"),
        tf.debugging.assert_greater_equal(
            num_candidates, num_queries,
            message="candidate_embeddings needs at least one row (the positive) per query"),
    ]
    with tf.control_dependencies(checks):
      scores = tf.identity(scores)
    if self._temperature is not None:
      scores = scores / self._temperature

    log_q = log_q_lib.resolve_log_q(candidate_sampling_probability,
                                    candidate_log_sampling_probability)
    if log_q is not None and log_q.shape.rank not in (None, 1):
      raise ValueError(f"candidate sampling probabilities must be [C], got {log_q.shape}")
    if self.correction != "none" and log_q is None:
      raise ValueError(
          f"correction={self.correction!r} needs candidate_sampling_probability (or "
          "candidate_log_sampling_probability); use correction='none' for no correction")
    mask_hits = self._remove_accidental_hits or self.correction == "corrected"
    if mask_hits and candidate_ids is None:
      raise ValueError(
          "candidate_ids are needed: " +
          ("accidental-hit removal is enabled" if self._remove_accidental_hits else
           "correction='corrected' masks negatives equal to the positive"))

    if mask_hits:
      # Row a's own column has the positive's id, so this also leaves the positive out.
      candidate_ids = tf.convert_to_tensor(candidate_ids)
      valid = accidental_hits.accidental_hit_mask(candidate_ids[:num_queries], candidate_ids)
    else:
      valid = tf.not_equal(tf.range(num_queries)[:, tf.newaxis],
                           tf.range(num_candidates)[tf.newaxis, :])
    if score_mask is not None:
      valid = tf.logical_and(valid, tf.cast(score_mask, tf.bool))

    positive_scores = tf.linalg.diag_part(scores)
    positive_log_q = log_q[:num_queries] if log_q is not None else None
    if self._num_hard_negatives is not None:
      valid = self._keep_hardest(scores, log_q, valid)

    out = losses_lib.sampled_softmax_loss(
        positive_scores, scores, log_q if self.correction != "none" else None,
        correction=self.correction,
        positive_log_q=positive_log_q if self.correction != "none" else None,
        valid_mask=valid, q_prime=self.q_prime)
    per_example = out.loss
    if sample_weight is not None:
      per_example = per_example * tf.cast(tf.reshape(sample_weight, [-1]), tf.float32)
    if self._reduction == "sum":
      loss = tf.reduce_sum(per_example)
    elif self._reduction == "mean":
      loss = tf.reduce_sum(per_example) / tf.cast(num_queries, tf.float32)
    else:
      loss = per_example

    update_ops = [metric.update_state(loss) for metric in self._loss_metrics]
    if compute_metrics and query_embeddings.shape.rank == 2:
      for metric in self._factorized_metrics:
        update_ops.append(metric.update_state(
            query_embeddings, candidate_embeddings[:tf.shape(query_embeddings)[0]],
            true_candidate_ids=candidate_ids, sample_weight=sample_weight))
    if compute_batch_metrics and self._batch_metrics:
      labels = tf.eye(num_queries, num_candidates)
      is_positive = tf.cast(labels, tf.bool)
      metric_logits = scores
      if log_q is not None and self.correction != "none":
        metric_logits = scores - log_q
      metric_logits = tf.where(tf.logical_or(valid, is_positive), metric_logits,
                               accidental_hits.lowest_logit(tf.float32))
      for metric in self._batch_metrics:
        update_ops.append(metric.update_state(labels, metric_logits, sample_weight=sample_weight))
    with tf.control_dependencies(update_ops):
      return tf.identity(loss)

  def _keep_hardest(self, scores, log_q, valid):
    """valid AND (at least the k-th largest corrected negative logit of the row)."""
    # log Q' = log Q - log(1 - Q(p)) is a per-row shift: it does not change a row's ranking.
    logits = scores if self.correction == "none" else scores - log_q
    k = tf.minimum(self._num_hard_negatives, tf.shape(scores)[1])
    masked = tf.where(valid, logits, tf.fill(tf.shape(logits), -float("inf")))
    kth_largest = tf.math.top_k(masked, k=k, sorted=True).values[:, -1:]
    # Ties with the k-th value are all kept (TFRS keeps an arbitrary k of them).
    return tf.logical_and(valid, masked >= kth_largest)
