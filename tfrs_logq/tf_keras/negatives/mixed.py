"""Mixed negative sampling (Yang et al. 2020): a shared in-batch block + a uniform block.

The negatives of a step are the ``n_b`` deduplicated in-batch negatives (`in_batch`, ``n_b <= k_b``,
counted over the global batch under ``tf.distribute``), shared by every query, followed by the
``k_u`` uniform negatives (`uniform`) of whichever layout the `UniformNegatives` has: shared by
the batch, one set per sequence, or one set per query (the paper code's per-position draws).
Each row has ``n = n_b + k_u`` slots. log Q of every negative (and of each query's positive, for
Q') follows one explicit convention, with q_uni the frequency estimator's per-draw unigram
probability, B the in-batch pool size (valid rows of the global batch) and U its distinct ids:

* ``"unigram"`` (the paper's, §4.1: "log Q values are based on unigram frequencies and not
  adjusted for the uniform portion"): for both blocks

      log Q(d) = log q_uni(d).

  A uniform draw that the estimator has never seen has ``q_uni(d) = 0``; its log Q would be
  ``-inf`` (an infinite logit after correction), so, and only then, it gets the per-slot
  probability of the slot that produced it, ``log(k_u / ((n_b + k_u) |D|))``. (The paper's
  script clamps Q' at 1e-10 there instead.)
* ``"mixture"``: the per-slot mixture, the probability that one slot chosen uniformly among the
  ``n`` slots holds d, each in-batch slot counted as one unigram draw:

      Q(d) = (n_b * q_uni(d) + k_u / |D|) / (n_b + k_u).

* ``"expected_count"``: log Q_eff(d) = log E[#times d is among the row's n negatives] - log n,
  the sum of both blocks' expected counts (deduplicated in-batch: pi(d) n_b / U with
  pi(d) = 1 - (1 - q_uni(d))^B; uniform: k_u / |D|):

      Q_eff(d) = (pi(d) * n_b / U + k_u / |D|) / (n_b + k_u),

  so that the importance weights e^{s_i} / (n Q_eff(d_i)) = e^{s_i} / E[count(d_i)] are
  Horvitz-Thompson weights (sum_d Q_eff(d) = (n_b E[U] / U + k_u) / n ~ 1).

All three are computed in log space (``tfrs_logq.core.negatives``: logaddexp of the two blocks'
terms). Q' (positive
excluded) for the corrected loss is ``log Q'(d) = log Q(d) - log(1 - Q(p))`` per row, from the
returned ``positive_log_q`` (same convention).
"""

from typing import Any, Dict, Mapping, Optional, Tuple

from tfrs_logq.tf_keras import _static_shapes
from tfrs_logq.tf_keras.negatives import scoring
from tfrs_logq.tf_keras.negatives.base import ItemTable, Negatives, as_float
from tfrs_logq.tf_keras.negatives.in_batch import (
  CONVENTIONS,
  InBatchNegatives,
  InBatchPool,
  expected_count_log_q,
)
from tfrs_logq.tf_keras.negatives.sampler import NegativeSampler
from tfrs_logq.tf_keras.negatives.uniform import UniformNegatives

import tensorflow as tf

from tfrs_logq.core import negatives as negatives_core
from tfrs_logq.core.ops import tf_ops

__all__ = ["MixedNegatives", "CONVENTIONS", "mixture_log_q"]


def mixture_log_q(
  log_q_unigram: tf.Tensor, num_in_batch: tf.Tensor, num_uniform: int, catalog_size: int
) -> tf.Tensor:
  """log q(d) = log((n_b q_uni(d) + k_u / |D|) / (n_b + k_u)), in log space.

  Args:
    log_q_unigram: float, log q_uni(d) (may be -inf for unseen items).
    num_in_batch: ``n_b`` >= 0 (scalar, may be a tensor).
    num_uniform: ``k_u`` > 0.
    catalog_size: ``|D|`` > 0.
  """
  return negatives_core.mixture_log_q(
    tf_ops(),
    as_float(log_q_unigram, "log_q_unigram"),
    tf.cast(num_in_batch, tf.float32),
    num_uniform,
    catalog_size,
  )


class MixedNegatives(NegativeSampler):
  """In-batch + uniform negatives with log Q under one convention (module docstring).

  With n_b in-batch and k_u uniform slots, q_uni the unigram per-draw probability:
  ``unigram`` log Q = log q_uni; ``mixture`` Q = (n_b q_uni + k_u/|D|) / (n_b + k_u);
  ``expected_count`` Q = (pi n_b / U + k_u/|D|) / (n_b + k_u), pi = 1 - (1 - q_uni)^B.

  Args:
    in_batch: an `InBatchNegatives` with a ``frequency_estimator`` (q_uni is needed for the
      uniform draws too); its own ``convention`` is ignored (this sampler's applies).
    uniform: a `UniformNegatives` (its catalog gives ``|D|``, its ``per`` the uniform layout).
    convention: ``"unigram"``, ``"mixture"`` or ``"expected_count"``.
  """

  def __init__(
    self, in_batch: InBatchNegatives, uniform: UniformNegatives, *, convention: str = "unigram"
  ) -> None:
    if not isinstance(in_batch, InBatchNegatives):
      raise TypeError(f"in_batch must be an InBatchNegatives, got {type(in_batch).__name__}")
    if not isinstance(uniform, UniformNegatives):
      raise TypeError(f"uniform must be a UniformNegatives, got {type(uniform).__name__}")
    if in_batch.frequency_estimator is None:
      raise ValueError(
        "mixed negatives need in_batch.frequency_estimator: log q_uni of the "
        "uniform draws is part of every convention"
      )
    if convention not in CONVENTIONS:
      raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    self.in_batch = in_batch
    self.uniform = uniform
    self.convention = convention

  def get_config(self) -> Dict[str, Any]:
    """Nested configs of both blocks and the convention."""
    return dict(
      in_batch=self.in_batch.get_config(),
      uniform=self.uniform.get_config(),
      convention=self.convention,
    )

  @classmethod
  def from_config(cls, config: Mapping[str, Any]) -> "MixedNegatives":
    config = dict(config)
    in_batch, uniform = config.pop("in_batch"), config.pop("uniform")
    if isinstance(in_batch, dict):
      in_batch = InBatchNegatives.from_config(in_batch)
    if isinstance(uniform, dict):
      uniform = UniformNegatives.from_config(uniform)
    return cls(in_batch, uniform, **config)

  def log_q(self, ids: tf.Tensor, pool: InBatchPool) -> tf.Tensor:
    """log Q(d) of any ids under the convention, given this step's in-batch ``pool``."""
    log_q_uni = self.in_batch.unigram_log_q(ids)
    n_b = tf.cast(pool.num_kept, tf.float32)
    k_u, size = self.uniform.num_negatives, self.uniform.catalog_size
    if self.convention == "mixture":
      return mixture_log_q(log_q_uni, n_b, k_u, size)
    if self.convention == "expected_count":
      return negatives_core.two_block_log_q(
        tf_ops(), expected_count_log_q(log_q_uni, pool), n_b, k_u, size
      )
    return negatives_core.unigram_log_q(tf_ops(), log_q_uni, n_b, k_u, size)

  def _in_batch_pool(
    self,
    positive_ids: tf.Tensor,
    positive_embeddings: tf.Tensor,
    seed: Optional[tf.Tensor],
    valid: Optional[tf.Tensor] = None,
  ) -> Tuple[InBatchPool, Optional[tf.Tensor]]:
    """(the in-batch pool, the uniform block's seed): the step seed is split in two."""
    seed_b = seed_u = None
    if seed is not None:
      seed_b, seed_u = tf.unstack(
        tf.random.experimental.stateless_split(_static_shapes.stateless_seed(seed), 2)
      )
    pool = self.in_batch.pool(positive_ids, positive_embeddings, valid=valid, seed=seed_b)
    return pool, seed_u

  def __call__(
    self,
    positive_ids: tf.Tensor,
    positive_embeddings: tf.Tensor,
    *,
    valid: Optional[tf.Tensor] = None,
    seed: Optional[tf.Tensor] = None,
    sequence_ids: Optional[tf.Tensor] = None,
    item_table: Optional[ItemTable] = None,
  ) -> Negatives:
    """Mixed negatives of one step: in-batch rows first, then the ``k_u`` uniform rows.

    Args:
      positive_ids: integer ``[B]`` (the queries' positives; the in-batch pool).
      positive_embeddings: ``[B, d]`` (reused for the in-batch block).
      valid: optional bool ``[B]`` (padding rows left out of the pool and of the numbering of
        per-query / per-sequence uniform draws).
      seed: optional ``[2]`` stateless seed (split between the two blocks).
      sequence_ids: optional integer ``[B]`` (a per-sequence uniform block).
      item_table: optional table to embed the uniform block from (no candidate embedder).

    Returns:
      ``Negatives(ids [N] or [B, N], embeddings [N, d] or [B, N, d], log_q [N] or [B, N],
      positive_log_q [B], valid)``, ``N = n_b + k_u``, log Q under ``self.convention``;
      per-query layouts when the uniform block is not shared; ``valid`` (shape of ids) is set
      when the in-batch block has static shapes (its padding slots).
    """
    pool, seed_u = self._in_batch_pool(positive_ids, positive_embeddings, seed, valid)
    batch = pool.negatives
    uni = self.uniform(
      positive_ids, seed=seed_u, sequence_ids=sequence_ids, item_table=item_table, valid=valid
    )
    batch_valid = batch.valid
    if uni.shared:
      ids = tf.concat([batch.ids, uni.ids], axis=0)
      emb = tf.concat([batch.embeddings, uni.embeddings], axis=0)
      if batch_valid is not None:
        batch_valid = tf.concat([batch_valid, tf.ones_like(uni.ids, tf.bool)], axis=0)
    else:
      rows = tf.shape(uni.ids)[0]
      n_b = tf.shape(batch.ids)[0]
      ids = tf.concat([tf.broadcast_to(batch.ids, tf.stack([rows, n_b])), uni.ids], axis=1)
      emb = tf.concat(
        [
          tf.broadcast_to(
            batch.embeddings[tf.newaxis], tf.concat([[rows], tf.shape(batch.embeddings)], 0)
          ),
          uni.embeddings,
        ],
        axis=1,
      )
      if batch_valid is not None:
        batch_valid = tf.concat(
          [tf.broadcast_to(batch_valid, tf.stack([rows, n_b])), tf.ones_like(uni.ids, tf.bool)],
          axis=1,
        )
    return Negatives(
      ids=ids,
      embeddings=emb,
      log_q=self.log_q(ids, pool),
      positive_log_q=self.log_q(positive_ids, pool),
      valid=batch_valid,
    )

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
    """`__call__` on the queries' positives (per-query layouts materialise [A, N, d])."""
    del query_embeddings
    return self(
      positive_ids,
      positive_embeddings,
      seed=seed,
      sequence_ids=sequence_ids,
      item_table=item_table,
      valid=valid,
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
    """Scores of the shared in-batch block (one matmul) joined with the uniform block's (its own
    cheapest path), log Q under the convention.

    Returns:
      ``ScoredCandidates(positive_scores [A], negative_scores [A, n_b + k_u], negative_log_q
      [n_b + k_u] or [A, n_b + k_u], valid_mask [A, n_b + k_u], positive_log_q [A])``.
    """
    pool, seed_u = self._in_batch_pool(positive_ids, positive_embeddings, seed, valid)
    log_q_fn = lambda ids: self.log_q(ids, pool)
    batch = pool.negatives
    in_batch = scoring.score_negatives(
      query_embeddings,
      positive_ids,
      positive_embeddings,
      batch._replace(log_q=log_q_fn(batch.ids), positive_log_q=None),
      temperature=temperature,
    )
    uniform = self.uniform._score_with_log_q(
      query_embeddings,
      positive_ids,
      positive_embeddings,
      temperature=temperature,
      seed=seed_u,
      sequence_ids=sequence_ids,
      item_table=item_table,
      log_q_fn=log_q_fn,
      valid=valid,
    )
    return scoring.ScoredCandidates.concat(in_batch, uniform, positive_log_q=uniform.positive_log_q)
