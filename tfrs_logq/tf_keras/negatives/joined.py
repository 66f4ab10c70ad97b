r"""Joined negatives: several samplers' blocks (in-batch, cross-batch memory, uniform, MIDX) as one.

Each block is scored by its own sampler with its own proposal and log Q (its ``positive_log_q``
too), then the blocks are joined along N by `tfrs_logq.tf_keras.negatives.join_blocks`: the
loss takes the first block's positive log Q for log Q' = log Q - log(1 - Q(p)), and with
``rebase_q_prime=True`` (``correction="corrected"``, ``q_prime="exact"``) every later block's
log Q is shifted (`tfrs_logq.core.cross_batch.rebased_block_log_q`) so that the loss's one step
yields the block's own Q'. Under ``q_prime="proxy"``, ``standard`` or ``standard_no_positive``
pass ``rebase_q_prime=False`` (the blocks' log Q unchanged).

A given ``[2]`` seed is split into one seed per block (``stateless_split``), so the blocks draw
independently and reproducibly. ``update`` forwards to the blocks that have one (a memory);
call it after the step has scored, as the memory's own ``update``.
"""

from typing import Any, Dict, List, NoReturn, Optional, Sequence

from tfrs_logq.tf_keras import _static_shapes
from tfrs_logq.tf_keras.negatives import scoring
from tfrs_logq.tf_keras.negatives.base import ItemTable
from tfrs_logq.tf_keras.negatives.sampler import NegativeSampler

import tensorflow as tf

__all__ = ["JoinedNegatives"]


class JoinedNegatives(NegativeSampler, tf.Module):
  """The negatives of several samplers, scored block by block and joined along N.

  A tf.Module, so a checkpoint of it holds the state of its blocks (a memory's slots).

  Args:
    blocks: the samplers (`NegativeSampler`), the first one's positive log Q is the loss's.
    rebase_q_prime: rebase each later block's log Q to the first block's Q(p) (`join_blocks`).

  Raises:
    ValueError: no block. TypeError: a block without ``score``.
  """

  def __init__(self, blocks: Sequence[NegativeSampler], *, rebase_q_prime: bool = True) -> None:
    blocks = tuple(blocks)
    if not blocks:
      raise ValueError("JoinedNegatives needs at least one block")
    for b in blocks:
      if not callable(getattr(b, "score", None)):
        raise TypeError(f"every block must be a NegativeSampler, got {type(b).__name__}")
    tf.Module.__init__(self, name="joined_negatives")
    self.blocks = blocks
    self.rebase_q_prime = bool(rebase_q_prime)

  def get_config(self) -> Dict[str, Any]:
    """Constructor arguments (the blocks as the sampler objects)."""
    return dict(blocks=list(self.blocks), rebase_q_prime=self.rebase_q_prime)

  def _block_seeds(self, seed: Optional[tf.Tensor]) -> List[Optional[tf.Tensor]]:
    if seed is None:
      return [None] * len(self.blocks)
    seed = _static_shapes.stateless_seed(tf.convert_to_tensor(seed))
    seeds = tf.random.experimental.stateless_split(seed, num=len(self.blocks))
    return [seeds[k] for k in range(len(self.blocks))]

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
  ) -> NoReturn:
    """Not available: the blocks are scored one by one (`score`)."""
    del query_embeddings, positive_ids, positive_embeddings, seed, sequence_ids, item_table, valid
    raise NotImplementedError(
      "JoinedNegatives scores block by block (score); sample each block's negatives from it"
    )

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
    """Every block's `NegativeSampler.score` (one seed each), joined by `join_blocks`."""
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
    positive_ids: tf.Tensor,
    positive_embeddings: Optional[tf.Tensor] = None,
    *,
    valid: Optional[tf.Tensor] = None,
    seed: Optional[tf.Tensor] = None,
  ) -> None:
    """``update`` of every block that has one (a memory), each with its own split seed."""
    for block, block_seed in zip(self.blocks, self._block_seeds(seed)):
      update = getattr(block, "update", None)
      if callable(update):
        update(positive_ids, positive_embeddings, valid=valid, seed=block_seed)
