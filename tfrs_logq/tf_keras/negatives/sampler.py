"""`NegativeSampler`, the base class of every sampler: ``sample_negatives`` draws the step's
`Negatives` (``negatives.base``), ``score`` scores A queries against their positive and them
(``negatives.scoring``); the record, the scores and the shapes are in ``negatives.base``.
"""

from typing import Any, Dict, Mapping, Optional, Type, TypeVar

from tfrs_logq.tf_keras.negatives import scoring
from tfrs_logq.tf_keras.negatives.base import ItemTable, Negatives

import tensorflow as tf

__all__ = ["NegativeSampler"]

_Sampler = TypeVar("_Sampler", bound="NegativeSampler")


class NegativeSampler:
  """Base class of the negative samplers: ``sample_negatives`` draws, ``score`` scores.

  For A queries q_a with positives p_a (embeddings c_{p_a}) and the step's negatives d_i,
  ``score`` returns ``ScoredCandidates(positive_scores = <q_a, c_{p_a}> / T,
  negative_scores = <q_a, c_{d_i}> / T, negative_log_q = log Q(d_i), valid_mask = d_i != p_a,
  positive_log_q = log Q(p_a))``, the arguments of
  ``tfrs_logq.tf_keras.losses.sampled_softmax_loss``.

  Subclasses implement `sample_negatives`; the default `score` is `sample_negatives` followed by
  `scoring.score_negatives` (one [A, d] x [d, N] matmul for shared negatives).
  Samplers with per-query negatives override `score` to avoid materialising [A, N, d].
  Samplers that hold configuration implement `get_config`; `from_config(config)` is
  ``cls(**config)``.
  """

  def sample_negatives(
    self,
    query_embeddings: tf.Tensor,
    positive_ids: tf.Tensor,
    positive_embeddings: tf.Tensor,
    *,
    seed: Optional[tf.Tensor] = None,
    sequence_ids: Optional[tf.Tensor] = None,
    item_table: Optional[ItemTable] = None,
    valid: Optional[tf.Tensor] = None,
  ) -> Negatives:
    """The negatives of one step (`Negatives`); arguments as in `score`."""
    raise NotImplementedError(f"{type(self).__name__} must implement sample_negatives")

  def score(
    self,
    query_embeddings: tf.Tensor,
    positive_ids: tf.Tensor,
    positive_embeddings: tf.Tensor,
    *,
    temperature: float = 1.0,
    seed: Optional[tf.Tensor] = None,
    sequence_ids: Optional[tf.Tensor] = None,
    item_table: Optional[ItemTable] = None,
    valid: Optional[tf.Tensor] = None,
  ) -> scoring.ScoredCandidates:
    """Draws the step's negatives and scores the queries against them.

    Args:
      query_embeddings: float ``[A, d]``.
      positive_ids: integer ``[A]``.
      positive_embeddings: float ``[A, d]`` (candidate embeddings of the positives).
      temperature: scores are divided by it (> 0).
      seed: optional ``[2]`` integer stateless seed (same seed, same negatives); None draws
        from the stateful global RNG.
      sequence_ids: optional integer ``[A]``: which sequence each query comes from (used by
        per-sequence uniform negatives; None = every query is its own sequence).
      item_table: optional ``[V, d]`` candidate table whose row ``i`` embeds id ``i`` (or a
        zero-argument callable returning it): per-query negatives may score through one
        [A, V] matmul + gather when that is cheaper, and samplers without a candidate
        embedder embed from it.
      valid: optional bool ``[A]``: False for padding queries of a static-shape batch (left
        out of in-batch pools; their rows are scored and must be dropped by the caller).

    Returns:
      ``ScoredCandidates(positive_scores [A], negative_scores [A, N], negative_log_q [N] or
      [A, N], valid_mask bool [A, N], positive_log_q [A] or None)``.
    """
    negatives = self.sample_negatives(
      query_embeddings,
      positive_ids,
      positive_embeddings,
      seed=seed,
      sequence_ids=sequence_ids,
      item_table=item_table,
      valid=valid,
    )
    return scoring.score_negatives(
      query_embeddings, positive_ids, positive_embeddings, negatives, temperature=temperature
    )

  def get_config(self) -> Dict[str, Any]:
    """Constructor arguments of this sampler (round trip: ``cls.from_config(config)``)."""
    raise NotImplementedError(f"{type(self).__name__} does not implement get_config")

  @classmethod
  def from_config(cls: Type[_Sampler], config: Mapping[str, Any]) -> _Sampler:
    """Rebuilds a sampler from `get_config`."""
    return cls(**config)
