"""Retrieval: the TFRS-style retrieval task with a choice of logQ correction, Keras 3.

The Keras 3 twin of ``tfrs_logq.tf_keras.Retrieval``: the same constructor and ``call``
arguments, in the same order, and the same semantics (the formulas and the two-block convention
are in the ``tfrs_logq.tf_keras.retrieval`` module docstring), minus TFRS's metric objects
(evaluate with ``keras_rs.layers.BruteForceRetrieval``)::

    task = tfrs_logq.keras3.Retrieval(correction="corrected")
    loss = task(query_embeddings, candidate_embeddings,
                candidate_sampling_probability=q, candidate_ids=ids)

Row a of ``query_embeddings`` [A, d] is paired with row a of ``candidate_embeddings`` [C, d]
(its positive, C >= A); every other row is a negative for it: the other positives of the batch
and the extra rows (negatives shared by all queries, e.g. uniform negatives). Scores are
s = <q, c> / temperature; ``candidate_sampling_probability[c]`` is the per-draw Q of column c
(its positive's entry is Q(p)). With a ``negative_sampler``, its block of negatives
(``negative_sampler.score(...)``: [A, N] scores, log Q under its own proposal, its own
accidental-hit mask) is appended after the in-batch block; under ``correction="corrected"`` with
``q_prime="exact"`` each block's Q' excludes the positive from its own proposal
(``tfrs_logq.core.retrieval``). The per-row loss is ``tfrs_logq.keras3.losses
.sampled_softmax_loss`` over the row's negatives: all columns but its own, minus

* accidental hits (candidate id == the row's positive id): masked with
  ``remove_accidental_hits=True`` and always under ``correction="corrected"`` (which therefore
  needs ``candidate_ids``);
* ``score_mask[a, c] == False``;
* with ``num_hard_negatives=k``, all but the k highest (corrected) negative logits of both
  blocks.

The result is reduced as ``loss`` says: ``None`` or ``"sum"``: a sum over the batch (TFRS's
default), ``"mean"`` (sum / A) or ``"none"`` ([A]), or a
``keras.losses.CategoricalCrossentropy(from_logits=True)`` used for its reduction as the tf-keras
task does (sum -> sum, sum_over_batch_size -> mean, none -> none), after multiplying by
``sample_weight`` [A] (a row of weight 0 contributes exactly 0, even if its loss is infinite).

With a ``frequency_estimator`` (a ``tfrs_logq.keras3.frequency`` layer) log Q of every candidate
column is read from it, after counting the A positives' ids when ``update_frequency`` says so
(``"training"``: in training calls only; ``"always"``; ``"never"``), as the tf-keras task does.

Use it from a custom ``compute_loss`` / ``train_step`` (the keras-rs pattern), or call it in the
model's ``call`` and ``self.add_loss(...)`` the result, then ``model.compile(optimizer)`` and
``fit`` need no ``loss``. Everything is jit-safe (static shapes, no data-dependent branches).

Deprecated forms (DeprecationWarning, same result): ``reduction=`` (now ``loss=``, the same
names), and the former positional order ``Retrieval(correction, q_prime, temperature,
num_hard_negatives, remove_accidental_hits, reduction, frequency_estimator, update_frequency,
check_scores, ratio_floor)``, recognised by a correction name as first positional argument
(``Retrieval("none")`` therefore still means ``correction="none"``; pass ``loss="none"`` by
keyword for no reduction).
"""

import functools
import inspect
import warnings
from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

import keras
from keras import ops

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import retrieval as retrieval_core
from tfrs_logq.keras3 import _tensors, accidental_hits
from tfrs_logq.keras3 import log_q as log_q_lib
from tfrs_logq.keras3 import losses as losses_lib
from tfrs_logq.keras3._tensors import Seed, Tensor

__all__ = ["Retrieval", "REDUCTIONS", "UPDATE_FREQUENCY_MODES"]

REDUCTIONS = retrieval_core.REDUCTIONS
UPDATE_FREQUENCY_MODES = ("training", "always", "never")

# The constructor's positional order before it followed tf-keras's (deprecated).
_FORMER_ORDER = (
  "correction",
  "q_prime",
  "temperature",
  "num_hard_negatives",
  "remove_accidental_hits",
  "reduction",
  "frequency_estimator",
  "update_frequency",
  "check_scores",
  "ratio_floor",
)
# The keywords the task passes to ``negative_sampler.score`` (the tf-keras samplers' contract).
_SCORE_KEYWORDS = ("temperature", "seed", "sequence_ids", "item_table", "valid")


def _former_positional_order(init: Callable) -> Callable:
  """Reads a call in the former positional order (first argument a correction name) with a
  DeprecationWarning; the wrapper shows ``init``'s signature (``__signature__``: Keras reads it
  with ``inspect.getfullargspec``, which does not follow ``__wrapped__``)."""

  @functools.wraps(init)
  def wrapper(self: "Retrieval", *args: Any, **kwargs: Any) -> None:
    if args and isinstance(args[0], str) and args[0] in core_checks.CORRECTIONS:
      if len(args) > len(_FORMER_ORDER):
        raise TypeError(f"Retrieval takes at most {len(_FORMER_ORDER)} positional arguments")
      warnings.warn(
        "tfrs_logq.keras3.Retrieval's positional arguments now follow tfrs_logq.tf_keras"
        ".Retrieval's order (loss, metrics, batch_metrics, loss_metrics, temperature, "
        "num_hard_negatives, remove_accidental_hits, name, correction, q_prime); a first "
        "positional correction name is read in the former order (correction, q_prime, "
        "temperature, ...) for now: pass the arguments by keyword",
        DeprecationWarning,
        stacklevel=2,
      )
      for key, value in zip(_FORMER_ORDER, args):
        key = "loss" if key == "reduction" else key
        if key in kwargs:
          raise TypeError(f"Retrieval got multiple values for argument {key!r}")
        kwargs[key] = value
      args = ()
    return init(self, *args, **kwargs)

  wrapper.__signature__ = inspect.signature(init)  # type: ignore[attr-defined]
  return wrapper


def _reduction_of(loss: Any) -> str:
  """``loss`` (None, a reduction name or a CategoricalCrossentropy(from_logits=True)) -> the
  reduction (None: "sum", as TFRS)."""
  if loss is None:
    return "sum"
  if isinstance(loss, str):
    if loss not in REDUCTIONS:
      raise ValueError(
        f"loss must be a reduction name {REDUCTIONS} or a keras.losses.CategoricalCrossentropy"
        f"(from_logits=True), got {loss!r}"
      )
    return loss
  if not isinstance(loss, keras.losses.CategoricalCrossentropy):
    raise ValueError(
      "tfrs_logq.keras3.Retrieval computes a sampled softmax cross-entropy; `loss` may only be "
      f"a reduction name {REDUCTIONS} or a keras.losses.CategoricalCrossentropy"
      f"(from_logits=True) (used for its reduction), got {type(loss).__name__}"
    )
  return retrieval_core.loss_reduction(loss.get_config(), loss.reduction)


def _no_metrics(**metrics: Any) -> None:
  for name, value in metrics.items():
    if value is not None and not (isinstance(value, (list, tuple)) and not value):
      raise ValueError(
        f"{name}: tfrs_logq.keras3.Retrieval has no TFRS metric objects (the argument keeps "
        "the tf-keras task's positional order); evaluate with "
        "keras_rs.layers.BruteForceRetrieval or tfrs_logq.keras3.top_k"
      )


def _accepted_keywords(score: Callable) -> Optional[Tuple[str, ...]]:
  """The keyword arguments ``score`` takes (None: any, or its signature is unknown)."""
  try:
    params = list(inspect.signature(score).parameters.values())
  except (TypeError, ValueError):
    return None
  if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params):
    return None
  return tuple(
    p.name
    for p in params
    if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
  )


@keras.saving.register_keras_serializable(package="tfrs_logq")
class Retrieval(keras.layers.Layer):
  """A factorized retrieval task with none / standard / corrected logQ (module docstring).

  Args:
    loss: the reduction: ``None`` / ``"sum"`` (default, as TFRS), ``"mean"``, ``"none"``, or a
      ``keras.losses.CategoricalCrossentropy(from_logits=True)`` (only its reduction is used).
    metrics: no TFRS metrics on Keras 3: None (ValueError otherwise; the tf-keras position).
    batch_metrics: None, as ``metrics``.
    loss_metrics: None, as ``metrics``.
    temperature: scores are divided by it before any correction.
    num_hard_negatives: keep only the k hardest negatives of each row (non-positive: all).
    remove_accidental_hits: mask candidates sharing the positive's id (needs candidate_ids).
    name: layer name.
    correction: ``none`` | ``standard`` | ``standard_no_positive`` | ``corrected``.
    q_prime: for ``corrected``: ``exact`` (log Q' = log Q - log(1 - Q(p))) or ``proxy``.
    frequency_estimator: optional estimator layer giving log Q of the candidates' ids.
    negative_sampler: optional sampler of extra negatives: anything with ``score(query,
      positive_ids, positive_embeddings, *, temperature, seed, sequence_ids, item_table, valid)
      -> ScoredCandidates`` (``tfrs_logq.keras3.negatives``; keywords its ``score`` does not
      take are left out when the task has nothing for them). Not with
      max-sim; needs ``candidate_ids``.
    update_frequency: ``training`` | ``always`` | ``never`` (estimator updates).
    check_scores: raise ValueError on non-finite concrete scores (eager only).
    ratio_floor: the clamp of the paper's script for ``corrected`` (0 = off).
    **kwargs: Keras layer arguments; ``reduction=`` is the deprecated name of ``loss``.
  """

  @_former_positional_order
  def __init__(
    self,
    loss: Any = None,
    metrics: Any = None,
    batch_metrics: Any = None,
    loss_metrics: Any = None,
    temperature: Optional[float] = None,
    num_hard_negatives: Optional[int] = None,
    remove_accidental_hits: bool = False,
    name: Optional[str] = None,
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
    reduction = kwargs.pop("reduction", None)
    if reduction is not None:
      if loss is not None:
        raise ValueError(
          "pass the reduction as loss= (reduction= is its deprecated name), not both"
        )
      warnings.warn(
        "tfrs_logq.keras3.Retrieval(reduction=...) is deprecated: pass loss=... (the same "
        "names), as tfrs_logq.tf_keras.Retrieval's loss",
        DeprecationWarning,
        stacklevel=3,
      )
      loss = reduction
    kwargs["dtype"] = "float32"
    super().__init__(name=name, **kwargs)
    self.ratio_floor = core_checks.check_correction(correction, q_prime, ratio_floor)
    _no_metrics(metrics=metrics, batch_metrics=batch_metrics, loss_metrics=loss_metrics)
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
    if negative_sampler is not None and not callable(getattr(negative_sampler, "score", None)):
      raise TypeError(
        "negative_sampler must have score(query, positive_ids, "
        "positive_embeddings, ...) (a tfrs_logq.keras3.negatives sampler), got "
        f"{type(negative_sampler).__name__}"
      )
    reduction = _reduction_of(loss)
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
    self.negative_sampler = negative_sampler
    self._score_keywords = (
      None if negative_sampler is None else _accepted_keywords(negative_sampler.score)
    )
    self.update_frequency = update_frequency
    self.check_scores = bool(check_scores)
    self.built = True

  def call(
    self,
    query_embeddings: Tensor,
    candidate_embeddings: Tensor,
    sample_weight: Optional[Tensor] = None,
    candidate_sampling_probability: Optional[Tensor] = None,
    candidate_ids: Optional[Tensor] = None,
    score_mask: Optional[Tensor] = None,
    candidate_log_sampling_probability: Optional[Tensor] = None,
    training: Optional[bool] = None,
    seed: Optional[Seed] = None,
    item_table: Optional[Tensor] = None,
  ) -> Tensor:
    """The reduced loss (a scalar; [A] with reduction ``none``).

    Args:
      query_embeddings: [A, d], or [A, heads, d] for max-sim scoring.
      candidate_embeddings: [C, d], C >= A; row a < A is query a's positive.
      sample_weight: [A] per-query weights.
      candidate_sampling_probability: [C] per-draw Q of each candidate column.
      candidate_ids: [C] integer ids (accidental hits, the estimator, the negative sampler).
      score_mask: [A, C] bool, False drops the candidate from the row's negatives.
      candidate_log_sampling_probability: [C] log Q instead of Q (use for Q < 1e-6).
      training: whether this is a training step (estimator updates); Keras fills it in.
      seed: optional stateless seed for the negative sampler.
      item_table: optional [V, d] table of all candidate embeddings for the negative sampler.
    """
    query = _tensors.as_float32(query_embeddings, "query_embeddings")
    candidates = _tensors.as_float32(candidate_embeddings, "candidate_embeddings")
    _tensors.check_rank(query, (2, 3), "query_embeddings")
    _tensors.check_rank(candidates, 2, "candidate_embeddings")
    max_sim = len(query.shape) == 3
    if max_sim:
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
    scores = self._checked(scores)

    if self.negative_sampler is not None:
      if max_sim:
        raise ValueError("negative_sampler needs [A, d] query embeddings (no max-sim)")
      if candidate_ids is None:
        raise ValueError(
          "candidate_ids are needed with a negative_sampler (its negatives equal "
          "to the positive are masked)"
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
    if mask_hits or self.negative_sampler is not None:
      candidate_ids = _tensors.as_ids(candidate_ids, "candidate_ids")

    # Row a's own column has the positive's id, so the hit mask also leaves the positive out.
    hits = None
    if mask_hits:
      assert candidate_ids is not None  # check_retrieval_inputs raised otherwise
      hits = accidental_hits.accidental_hit_mask(candidate_ids[:rows], candidate_ids)
    valid = retrieval_core.in_batch_valid(ops, rows, ops.shape(scores)[1], hits, score_mask)
    positive_scores, positive_log_q = retrieval_core.positives(ops, scores, log_q, rows)
    negative_scores, negative_log_q = scores, log_q
    if self.negative_sampler is not None:
      assert candidate_ids is not None  # checked above: a negative_sampler needs them
      negative_scores, negative_log_q, valid = self._append_sampled(
        query,
        candidates[:rows],
        candidate_ids[:rows],
        positive_log_q,
        scores,
        log_q,
        valid,
        seed,
        item_table,
      )
    if self.num_hard_negatives is not None:
      valid = self._keep_hardest(negative_scores, negative_log_q, valid)

    use_q = self.correction != "none"
    out = losses_lib.sampled_softmax_loss(
      positive_scores,
      negative_scores,
      negative_log_q if use_q else None,
      correction=self.correction,
      positive_log_q=positive_log_q if use_q else None,
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

  def _checked(self, scores: Tensor) -> Tensor:
    """``scores``, after a ValueError for NaN / inf when ``check_scores`` and they are concrete."""
    if self.check_scores:
      value = _tensors.concrete(scores)
      if value is not None and not bool((abs(value) < float("inf")).all()):
        raise ValueError(
          f"{self.name}: scores <q, c> / temperature have NaN or inf "
          "(check_scores=True): look for NaN or inf in the embeddings"
        )
    return scores

  def _estimator_log_q(
    self,
    log_q: Optional[Tensor],
    candidate_ids: Optional[Tensor],
    num_queries: Union[int, Tensor],
    training: Optional[bool],
  ) -> Optional[Tensor]:
    """log Q [C] read from the estimator, after counting the positives when configured."""
    core_checks.check_estimator_inputs(log_q is not None, candidate_ids is not None)
    assert candidate_ids is not None  # check_estimator_inputs raised otherwise
    positives = candidate_ids[:num_queries]
    if self.update_frequency == "always" or (self.update_frequency == "training" and training):
      self.frequency_estimator.update(positives)
    if self.correction == "none":
      return None
    return _tensors.as_float32(self.frequency_estimator.log_q(candidate_ids), "log Q")

  def _score_kwargs(self, **keywords: Any) -> Dict[str, Any]:
    """``keywords`` for ``negative_sampler.score``, less those it does not take and that carry
    nothing (None); TypeError for one it does not take that carries a value."""
    accepted = self._score_keywords
    if accepted is None:
      return keywords
    out = {}
    for key, value in keywords.items():
      if key in accepted:
        out[key] = value
      elif value is not None:
        raise TypeError(
          f"{type(self.negative_sampler).__name__}.score takes no {key}= argument, which the "
          "task has a value for"
        )
    return out

  def _append_sampled(
    self,
    query: Tensor,
    positive_embeddings: Tensor,
    positive_ids: Tensor,
    positive_log_q: Optional[Tensor],
    scores: Tensor,
    log_q: Optional[Tensor],
    valid: Tensor,
    seed: Optional[Seed],
    item_table: Optional[Tensor],
  ) -> Tuple[Tensor, Tensor, Tensor]:
    """Joins the in-batch block [A, C] and the sampler's block [A, N] (module docstring)."""
    extra = self.negative_sampler.score(
      query,
      positive_ids,
      positive_embeddings,
      **self._score_kwargs(
        temperature=1.0 if self.temperature is None else self.temperature,
        seed=seed,
        sequence_ids=None,
        item_table=item_table,
        valid=None,
      ),
    )
    extra_scores = self._checked(
      _tensors.as_float32(extra.negative_scores, "negative_sampler scores")
    )
    extra_positive_log_q = extra.positive_log_q
    if extra_positive_log_q is not None:
      extra_positive_log_q = _tensors.as_float32(
        extra_positive_log_q, "negative_sampler positive_log_q"
      )
    extra_log_q = retrieval_core.sampled_block_log_q(
      ops,
      self.correction,
      self.q_prime,
      _tensors.as_float32(extra.negative_log_q, "negative_sampler log Q"),
      extra_positive_log_q,
      positive_log_q,
      extra.valid_mask,
    )
    return retrieval_core.join_blocks(
      ops, (scores, log_q, valid), (extra_scores, extra_log_q, extra.valid_mask)
    )

  def _keep_hardest(self, scores: Tensor, log_q: Optional[Tensor], valid: Tensor) -> Tensor:
    """valid AND (at least the k-th largest corrected negative logit of the row); ties kept."""
    logits = scores if self.correction == "none" or log_q is None else scores - log_q
    k = self.num_hard_negatives
    assert k is not None  # called only with num_hard_negatives set
    if scores.shape[1] is not None:
      k = min(k, scores.shape[1])
    return retrieval_core.keep_hardest(ops, logits, valid, k)

  def get_config(self) -> Dict[str, Any]:
    """Config of the task; a negative sampler is not serialisable (NotImplementedError, as
    Keras expects)."""
    if self.negative_sampler is not None:
      raise NotImplementedError(
        f"{self.name}: negative samplers hold candidate towers and cannot be serialised; save "
        "the model's weights (model.save_weights) and build the task in code instead"
      )
    return {
      **super().get_config(),
      "loss": self.reduction,  # the reduction name (a CategoricalCrossentropy maps onto one)
      "temperature": self.temperature,
      "num_hard_negatives": self.num_hard_negatives,
      "remove_accidental_hits": self.remove_accidental_hits,
      "correction": self.correction,
      "q_prime": self.q_prime,
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
  def from_config(cls, config: Mapping[str, Any]) -> "Retrieval":
    config = dict(config)
    if "reduction" in config:  # a config written before `loss` replaced it
      reduction = config.pop("reduction")
      config.setdefault("loss", reduction)
    if config.get("frequency_estimator") is not None:
      config["frequency_estimator"] = keras.saving.deserialize_keras_object(
        config["frequency_estimator"]
      )
    return cls(**config)
