"""Retrieval: the TFRS-style retrieval task with a choice of logQ correction, Keras 3.

The Keras 3 twin of ``tfrs_logq.tf_keras.Retrieval`` (same arguments and semantics, minus
TFRS's
metric objects; evaluate with ``keras_rs.layers.BruteForceRetrieval``)::

    task = tfrs_logq.keras3.Retrieval(correction="corrected")
    loss = task(query_embeddings, candidate_embeddings,
                candidate_sampling_probability=q, candidate_ids=ids)

Row a of ``query_embeddings`` [A, d] is paired with row a of ``candidate_embeddings`` [C, d]
(its positive, C >= A); every other row is a negative for it: the other positives of the batch
and the extra rows (negatives shared by all queries, e.g. uniform negatives). Scores are
s = <q, c> / temperature; ``candidate_sampling_probability[c]`` is the per-draw Q of column c
(its positive's entry is Q(p)). The per-row loss is ``tfrs_logq.keras3.losses
.sampled_softmax_loss`` over the row's negatives: all columns but its own, minus

* accidental hits (candidate id == the row's positive id): masked with
  ``remove_accidental_hits=True`` and always under ``correction="corrected"`` (which therefore
  needs ``candidate_ids``);
* ``score_mask[a, c] == False``;
* with ``num_hard_negatives=k``, all but the k highest (corrected) negative logits.

The result is reduced by ``reduction``: ``"sum"`` over the batch (TFRS's default), ``"mean"``
(sum / A) or ``"none"`` ([A]), after multiplying by ``sample_weight`` [A] (a row of weight 0
contributes exactly 0, even if its loss is infinite).

With a ``frequency_estimator`` (a ``tfrs_logq.keras3.frequency`` layer) log Q of every candidate
column is read from it, after counting the A positives' ids when ``update_frequency`` says so
(``"training"``: in training calls only; ``"always"``; ``"never"``), as the tf-keras task does.

Use it from a custom ``compute_loss`` / ``train_step`` (the keras-rs pattern), or call it in the
model's ``call`` and ``self.add_loss(...)`` the result, then ``model.compile(optimizer)`` and
``fit`` need no ``loss``. Everything is jit-safe (static shapes, no data-dependent branches).
"""

from typing import Optional

import keras
from keras import ops

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import retrieval as retrieval_core
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3 import accidental_hits
from tfrs_logq.keras3 import log_q as log_q_lib
from tfrs_logq.keras3 import losses as losses_lib

__all__ = ["Retrieval", "REDUCTIONS", "UPDATE_FREQUENCY_MODES"]

REDUCTIONS = retrieval_core.REDUCTIONS
UPDATE_FREQUENCY_MODES = ("training", "always", "never")


@keras.saving.register_keras_serializable(package="tfrs_logq")
class Retrieval(keras.layers.Layer):
  """A factorized retrieval task with none / standard / corrected logQ (module docstring).

  Args:
    correction: ``none`` | ``standard`` | ``standard_no_positive`` | ``corrected``.
    q_prime: for ``corrected``: ``exact`` (log Q' = log Q - log(1 - Q(p))) or ``proxy``.
    temperature: scores are divided by it before any correction.
    num_hard_negatives: keep only the k hardest negatives of each row (non-positive: all).
    remove_accidental_hits: mask candidates sharing the positive's id (needs candidate_ids).
    reduction: ``sum`` | ``mean`` | ``none``.
    frequency_estimator: optional estimator layer giving log Q of the candidates' ids.
    update_frequency: ``training`` | ``always`` | ``never`` (estimator updates).
    check_scores: raise ValueError on non-finite concrete scores (eager only).
    ratio_floor: the clamp of the paper's script for ``corrected`` (0 = off).
  """

  def __init__(
    self,
    correction: str = "corrected",
    q_prime: str = "exact",
    temperature: Optional[float] = None,
    num_hard_negatives: Optional[int] = None,
    remove_accidental_hits: bool = False,
    reduction: str = "sum",
    frequency_estimator=None,
    update_frequency: str = "training",
    check_scores: bool = False,
    ratio_floor: float = 0.0,
    **kwargs,
  ):
    kwargs["dtype"] = "float32"
    super().__init__(**kwargs)
    self.ratio_floor = core_checks.check_correction(correction, q_prime, ratio_floor)
    if update_frequency not in UPDATE_FREQUENCY_MODES:
      raise ValueError(
        f"update_frequency must be one of {UPDATE_FREQUENCY_MODES}, got {update_frequency!r}"
      )
    if frequency_estimator is not None and not (
      hasattr(frequency_estimator, "log_q") and hasattr(frequency_estimator, "update")
    ):
      raise TypeError(
        "frequency_estimator must have update(ids) and log_q(ids) (a "
        "tfrs_logq.keras3.frequency estimator), got "
        f"{type(frequency_estimator).__name__}"
      )
    if reduction not in REDUCTIONS:
      raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if temperature is not None and not temperature > 0:
      raise ValueError(f"temperature must be positive, got {temperature}")
    if num_hard_negatives is not None and num_hard_negatives <= 0:
      num_hard_negatives = None  # as TFRS: non-positive keeps all negatives
    self.correction = correction
    self.q_prime = q_prime
    self.temperature = None if temperature is None else float(temperature)
    self.num_hard_negatives = None if num_hard_negatives is None else int(num_hard_negatives)
    self.remove_accidental_hits = bool(remove_accidental_hits)
    self.reduction = reduction
    self.frequency_estimator = frequency_estimator
    self.update_frequency = update_frequency
    self.check_scores = bool(check_scores)
    self.built = True

  def call(
    self,
    query_embeddings,
    candidate_embeddings,
    sample_weight=None,
    candidate_sampling_probability=None,
    candidate_ids=None,
    score_mask=None,
    candidate_log_sampling_probability=None,
    training=None,
  ):
    """The reduced loss (a scalar; [A] with reduction ``none``).

    Args:
      query_embeddings: [A, d], or [A, heads, d] for max-sim scoring.
      candidate_embeddings: [C, d], C >= A; row a < A is query a's positive.
      sample_weight: [A] per-query weights.
      candidate_sampling_probability: [C] per-draw Q of each candidate column.
      candidate_ids: [C] integer ids (accidental hits).
      score_mask: [A, C] bool, False drops the candidate from the row's negatives.
      candidate_log_sampling_probability: [C] log Q instead of Q (use for Q < 1e-6).
      training: whether this is a training step (estimator updates); Keras fills it in.
    """
    query = _tensors.as_float32(query_embeddings, "query_embeddings")
    candidates = _tensors.as_float32(candidate_embeddings, "candidate_embeddings")
    _tensors.check_rank(query, (2, 3), "query_embeddings")
    _tensors.check_rank(candidates, 2, "candidate_embeddings")
    if len(query.shape) == 3:
      scores = ops.max(ops.einsum("qne,ce->qnc", query, candidates), axis=1)
    else:
      scores = ops.matmul(query, ops.transpose(candidates))
    num_queries, num_candidates = scores.shape
    rows = ops.shape(scores)[0]
    if num_queries == 0:
      raise ValueError("empty batch: no queries")
    if num_queries is not None and num_candidates is not None and num_candidates < num_queries:
      raise ValueError(
        "candidate_embeddings needs at least one row (the positive) per query: "
        f"{num_candidates} candidates for {num_queries} queries"
      )
    if self.temperature is not None:
      scores = scores / self.temperature

    if self.check_scores:
      value = _tensors.concrete(scores)
      if value is not None and not bool((abs(value) < float("inf")).all()):
        raise ValueError(
          f"{self.name}: scores <q, c> / temperature have NaN or inf "
          "(check_scores=True): look for NaN or inf in the embeddings"
        )
    log_q = log_q_lib.resolve_log_q(
      candidate_sampling_probability, candidate_log_sampling_probability
    )
    if log_q is not None:
      _tensors.check_rank(log_q, 1, "candidate sampling probabilities")
    if self.frequency_estimator is not None:
      log_q = self._estimator_log_q(log_q, candidate_ids, rows, training)
    mask_hits = core_checks.check_retrieval_inputs(
      self.correction, log_q is not None, self.remove_accidental_hits, candidate_ids is not None
    )

    if mask_hits:
      # Row a's own column has the positive's id, so this also leaves the positive out.
      candidate_ids = _tensors.as_ids(candidate_ids, "candidate_ids")
      valid = accidental_hits.accidental_hit_mask(candidate_ids[:rows], candidate_ids)
    else:
      valid = ops.not_equal(
        ops.expand_dims(ops.arange(rows), 1), ops.expand_dims(ops.arange(ops.shape(scores)[1]), 0)
      )
    if score_mask is not None:
      valid = ops.logical_and(valid, ops.cast(score_mask, "bool"))
    if self.num_hard_negatives is not None:
      valid = self._keep_hardest(scores, log_q, valid)

    use_q = self.correction != "none"
    out = losses_lib.sampled_softmax_loss(
      ops.diagonal(scores),
      scores,
      log_q if use_q else None,
      correction=self.correction,
      positive_log_q=log_q[:rows] if use_q else None,
      valid_mask=valid,
      q_prime=self.q_prime,
      ratio_floor=self.ratio_floor,
    )
    weight = (
      None
      if sample_weight is None
      else ops.reshape(_tensors.as_float32(sample_weight, "sample_weight"), (-1,))
    )
    return retrieval_core.weighted_reduction(ops, out.loss, weight, self.reduction, rows)

  def _estimator_log_q(self, log_q, candidate_ids, num_queries, training):
    """log Q [C] read from the estimator, after counting the positives when configured."""
    core_checks.check_estimator_inputs(log_q is not None, candidate_ids is not None)
    positives = candidate_ids[:num_queries]
    if self.update_frequency == "always" or (self.update_frequency == "training" and training):
      self.frequency_estimator.update(positives)
    if self.correction == "none":
      return None
    return _tensors.as_float32(self.frequency_estimator.log_q(candidate_ids), "log Q")

  def _keep_hardest(self, scores, log_q, valid):
    """valid AND (at least the k-th largest corrected negative logit of the row); ties kept."""
    logits = scores if self.correction == "none" else scores - log_q
    k = self.num_hard_negatives
    if scores.shape[1] is not None:
      k = min(k, scores.shape[1])
    return retrieval_core.keep_hardest(ops, logits, valid, k)

  def get_config(self):
    return {
      **super().get_config(),
      "correction": self.correction,
      "q_prime": self.q_prime,
      "temperature": self.temperature,
      "num_hard_negatives": self.num_hard_negatives,
      "remove_accidental_hits": self.remove_accidental_hits,
      "reduction": self.reduction,
      "frequency_estimator": (
        None
        if self.frequency_estimator is None
        else keras.saving.serialize_keras_object(self.frequency_estimator)
      ),
      "update_frequency": self.update_frequency,
      "check_scores": self.check_scores,
      "ratio_floor": self.ratio_floor,
    }

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    if config.get("frequency_estimator") is not None:
      config["frequency_estimator"] = keras.saving.deserialize_keras_object(
        config["frequency_estimator"]
      )
    return cls(**config)
