"""``NegativeSampler``, the base class of the Keras 3 samplers (the twin of
``tfrs_logq.tf_keras.negatives.sampler``): ``sample_negatives`` draws the step's ``Negatives``
(``negatives.base``), ``score`` scores A queries against their positive and them
(``negatives.scoring``).
"""

from typing import Any, Dict, Mapping, Optional, Type, TypeVar

from tfrs_logq.keras3._tensors import Seed, Tensor
from tfrs_logq.keras3.negatives import scoring
from tfrs_logq.keras3.negatives.base import Negatives

__all__ = ["NegativeSampler"]

_Sampler = TypeVar("_Sampler", bound="NegativeSampler")


class NegativeSampler:
  """The sampler protocol of both fronts (``tfrs_logq.tf_keras.negatives.NegativeSampler``):
  ``sample_negatives`` draws the step's ``Negatives``, ``score`` scores A queries against their
  positive and them, returning the ``ScoredCandidates`` that ``sampled_softmax_loss`` takes.

  Both take ``(query_embeddings [A, d], positive_ids [A], positive_embeddings [A, d], *,
  seed=None, sequence_ids=None, item_table=None, valid=None)`` (``score`` also ``temperature``);
  a sampler ignores the arguments it does not need. Subclasses implement ``sample_negatives``;
  the default ``score`` is ``sample_negatives`` followed by ``scoring.score_negatives`` (one
  [A, d] x [d, N] matmul for shared negatives); samplers with per-query negatives override it.
  ``from_config(config)`` is ``cls(**config)``.
  """

  def sample_negatives(
    self,
    query_embeddings: Tensor,
    positive_ids: Tensor,
    positive_embeddings: Tensor,
    *,
    seed: Optional[Seed] = None,
    sequence_ids: Optional[Tensor] = None,
    item_table: Optional[Tensor] = None,
    valid: Optional[Tensor] = None,
  ) -> Negatives:
    """The negatives of one step."""
    raise NotImplementedError(f"{type(self).__name__} must implement sample_negatives")

  def score(
    self,
    query_embeddings: Tensor,
    positive_ids: Tensor,
    positive_embeddings: Tensor,
    *,
    temperature: float = 1.0,
    seed: Optional[Seed] = None,
    sequence_ids: Optional[Tensor] = None,
    item_table: Optional[Tensor] = None,
    valid: Optional[Tensor] = None,
  ) -> scoring.ScoredCandidates:
    """ScoredCandidates(positive_scores [A], negative_scores [A, N], negative_log_q, valid_mask
    [A, N], positive_log_q [A])."""
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
    """Constructor arguments (round trip: ``cls.from_config(config)``)."""
    raise NotImplementedError(f"{type(self).__name__} does not implement get_config")

  @classmethod
  def from_config(cls: Type[_Sampler], config: Mapping[str, Any]) -> _Sampler:
    return cls(**config)
