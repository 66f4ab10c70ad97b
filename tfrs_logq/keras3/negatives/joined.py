"""Several negative sources as one sampler (Keras 3): e.g. MIDX + a cross-batch memory.

``JoinedNegatives(blocks, rebase_q_prime=True)`` scores the queries against every block's
negatives (``block.score(...)``, the sampler protocol of ``tfrs_logq.tf_keras.negatives``) and
joins them along N with ``scoring.join_blocks``: each block keeps its own proposal's Q(p) in Q'
(``tfrs_logq.core.cross_batch.rebased_block_log_q``) when ``rebase_q_prime`` is True (the
corrected loss with ``q_prime="exact"``); otherwise each block's log Q is used as it is.
``update(...)`` pushes the step into every block that keeps a memory (``CrossBatchNegatives``),
after the step has been scored. Randomness: each block's own seed generator (Keras 3 samplers
keep theirs); a ``seed`` argument is passed to every block unchanged.
"""

import numbers
from typing import Any, List, NoReturn, Optional, Sequence

import keras

from tfrs_logq.keras3._tensors import Seed, Tensor
from tfrs_logq.keras3.negatives import scoring
from tfrs_logq.keras3.negatives.sampler import NegativeSampler

__all__ = ["JoinedNegatives"]


class JoinedNegatives(keras.layers.Layer, NegativeSampler):
  """Blocks of negatives scored one after the other and joined (module docstring).

  Args:
    blocks: samplers with ``score(query, positive_ids, positive_embeddings, *, temperature,
      seed, sequence_ids, item_table, valid) -> ScoredCandidates``; the first block's
      positive log Q is the loss's.
    rebase_q_prime: True for ``correction="corrected"`` with ``q_prime="exact"``.
  """

  def __init__(self, blocks: Sequence[Any], *, rebase_q_prime: bool = True, **kwargs: Any) -> None:
    super().__init__(**kwargs)
    blocks = list(blocks)
    if not blocks:
      raise ValueError("JoinedNegatives needs at least one block")
    for block in blocks:
      if not callable(getattr(block, "score", None)):
        raise TypeError(f"every block needs a score(...) method, got {type(block).__name__}")
    self.blocks = blocks
    self.rebase_q_prime = bool(rebase_q_prime)
    self.built = True

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
  ) -> NoReturn:
    """Not available: the blocks are scored one by one (`score`)."""
    del query_embeddings, positive_ids, positive_embeddings, seed, sequence_ids, item_table, valid
    raise NotImplementedError(
      "JoinedNegatives scores block by block (score); sample each block's negatives from it"
    )

  def _block_seeds(self, seed: Optional[Seed]) -> List[Optional[Seed]]:
    """One seed per block: an int seed k-th block gets seed + k (distinct draws); None or a
    ``keras.random.SeedGenerator`` (it advances at every draw) is shared."""
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
      return [int(seed) + k for k in range(len(self.blocks))]
    return [seed] * len(self.blocks)

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
    """Every block's ``score`` (one seed each) joined along N (``scoring.join_blocks``)."""
    scored = [
      block.score(
        query_embeddings,
        positive_ids,
        positive_embeddings,
        temperature=temperature,
        seed=block_seed,
        sequence_ids=sequence_ids,
        item_table=item_table,
        valid=valid,
      )
      for block, block_seed in zip(self.blocks, self._block_seeds(seed))
    ]
    return scoring.join_blocks(scored, rebase_q_prime=self.rebase_q_prime)

  def update(
    self,
    positive_ids: Tensor,
    positive_embeddings: Optional[Tensor] = None,
    *,
    valid: Optional[Tensor] = None,
    seed: Optional[Seed] = None,
  ) -> None:
    """Pushes the step into the blocks that keep a memory (after scoring)."""
    for block in self.blocks:
      if callable(getattr(block, "update", None)):
        block.update(positive_ids, positive_embeddings, valid=valid, seed=seed)
