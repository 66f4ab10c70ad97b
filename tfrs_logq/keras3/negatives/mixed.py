r"""Mixed negatives (Yang et al. 2020) on the Keras 3 path: in-batch block + uniform block.

The n_b deduplicated in-batch rows (all B rows kept, duplicates and padding masked; with
``num_in_batch = k_b`` < B, k_b slots holding a uniform subset of min(U, k_b) distinct ids; the
global batch under ``keras.distribution``, see ``cross_replica``), then k_u uniform rows of the
layout ``per`` (shared by the batch, one set per sequence or per query). With q_uni the
estimator's per-draw unigram probability, B the valid pool rows, U their distinct ids (n_b = U,
or min(U, k_b)) and D the
uniform catalog, log Q of every slot and of each query's positive follows one convention
(formulas in ``tfrs_logq.core.negatives``, those of
``tfrs_logq.tf_keras.negatives.MixedNegatives``)::

    unigram (the paper's):  log Q(d) = log q_uni(d);  where q_uni(d) = 0 (never seen):
                            log(k_u / ((n_b + k_u) |D|))
    mixture:                Q(d) = (n_b q_uni(d) + k_u / |D|) / (n_b + k_u)
    expected_count:         Q(d) = (pi(d) n_b / U + k_u / |D|) / (n_b + k_u),
                            pi(d) = 1 - (1 - q_uni(d))^B

all in log space. Q' (positive excluded) for the corrected loss is log Q(d) - log(1 - Q(p)) per
row, from the returned ``positive_log_q`` (same convention).

``blocks(...)`` returns the same negatives without their embeddings, and the embeddings block by
block for ``scoring.score_blocks``: ("shared", the in-batch pool [P, d]), then the uniform block
(``UniformNegatives.block``: shared [k_u, d], per sequence [B, k_u, d] on a [B, L] grid of rows,
or per query [A, k_u, d]); ``call`` lays the blocks out as one [P + k_u, d] or [A, P + k_u, d]
tensor. So a model scores the negatives of a SASRec step without forming [A, P + k_u, d].
"""

from typing import Callable, Optional, Sequence, Tuple

import keras
from keras import ops

from tfrs_logq.core import negatives as negatives_core
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3.negatives import base
from tfrs_logq.keras3.negatives import in_batch
from tfrs_logq.keras3.negatives.uniform import UniformNegatives

__all__ = ["MixedNegatives"]


def in_batch_seed(seed: int) -> int:
  """The seed of the k_b subsample's generator, distinct from the uniform block's ``seed``."""
  return (int(seed) * 2654435761 + 0x9E3779B9) % (2**31 - 1)


@keras.saving.register_keras_serializable(package="tfrs_logq")
class MixedNegatives(keras.layers.Layer):
  """In-batch + k_u uniform negatives with log Q under one convention (module docstring).

  ``call(positive_ids [B], positive_embeddings [B, d], *, candidate_embedder, log_q_unigram,
  valid=None, sequence_ids=None)``: ``candidate_embedder`` maps int ids ([k_u] or [B, k_u]) to
  embeddings ([k_u, d] or [B, k_u, d]; the candidate tower), ``log_q_unigram`` maps ids to
  log q_uni (e.g. a ``keras3.frequency`` estimator's ``log_q``); Keras 3 wants these two
  non-tensor arguments as keywords. Returns Negatives(ids, embeddings, log_q, valid of
  [P + k_u] (per ``"batch"``) or [B, P + k_u] (per ``"sequence"`` / ``"query"``),
  positive_log_q [B]); P = B, or k_b when ``num_in_batch`` = k_b < B.

  Args:
    num_uniform: k_u.
    id_range / candidate_ids: the uniform catalog (as ``UniformNegatives``).
    convention: ``unigram`` (the paper's), ``mixture`` or ``expected_count``.
    seed: seed of the uniform draws.
    per: layout of the uniform block: ``batch`` | ``sequence`` | ``query``.
    cross_replica: lay the in-batch pool out on every device under ``keras.distribution``.
    num_in_batch: k_b, keep at most this many distinct in-batch ids (a uniform subset, the
      tf-keras ``InBatchNegatives(num_negatives=k_b)``; None: all); n_b = min(U, k_b). Its
      randomness: the layer's own ``keras.random.SeedGenerator`` (from ``seed``).
  """

  def __init__(
    self,
    num_uniform: int,
    id_range: Optional[Tuple[int, int]] = None,
    candidate_ids: Optional[Sequence[int]] = None,
    convention: str = "unigram",
    seed: Optional[int] = None,
    per: str = "batch",
    cross_replica: bool = True,
    num_in_batch: Optional[int] = None,
    **kwargs,
  ):
    super().__init__(**kwargs)
    if convention not in base.CONVENTIONS:
      raise ValueError(f"convention must be one of {base.CONVENTIONS}, got {convention!r}")
    self.num_in_batch = in_batch.check_num_negatives(num_in_batch, "num_in_batch")
    self.convention = convention
    self.cross_replica = bool(cross_replica)
    self.uniform = UniformNegatives(
      num_uniform,
      id_range=id_range,
      candidate_ids=candidate_ids,
      seed=seed,
      per=per,
      name="uniform",
    )
    self.in_batch_seed_generator = None
    if self.num_in_batch is not None:
      self.in_batch_seed_generator = keras.random.SeedGenerator(
        None if seed is None else in_batch_seed(seed)
      )
    self.built = True

  def log_q(self, log_q_unigram, num_in_batch, num_draws=None, num_distinct=None):
    """log Q under the convention, from log q_uni (float32) and n_b (float32 scalar);
    ``expected_count`` also needs B (``num_draws``) and U (``num_distinct``)."""
    k_u, size = self.uniform.num_negatives, self.uniform.catalog_size
    if self.convention == "mixture":
      return negatives_core.mixture_log_q(ops, log_q_unigram, num_in_batch, k_u, size)
    if self.convention == "expected_count":
      if num_draws is None or num_distinct is None:
        raise ValueError("convention='expected_count' needs num_draws (B) and num_distinct (U)")
      in_batch_part = negatives_core.expected_count_log_q(
        ops, log_q_unigram, num_draws, num_distinct, num_in_batch
      )
      return negatives_core.two_block_log_q(ops, in_batch_part, num_in_batch, k_u, size)
    return negatives_core.unigram_log_q(ops, log_q_unigram, num_in_batch, k_u, size)

  def blocks(
    self,
    positive_ids,
    positive_embeddings,
    *,
    candidate_embedder: Callable,
    log_q_unigram: Callable,
    valid=None,
    sequence_ids=None,
    in_batch_keys=None,
    num_sequences: Optional[int] = None,
  ):
    """(Negatives with ``embeddings=None``, ((layout, embeddings), ...)) for ``score_blocks``:
    the negatives of ``call`` (same arguments and draws) and their embeddings by block (module
    docstring). ``num_sequences`` = B: the A rows are a row-major [B, L] grid, so per-sequence
    uniform draws form a [B, k_u, d] block (else [A, k_u, d])."""
    if not callable(candidate_embedder) or not callable(log_q_unigram):
      raise TypeError("candidate_embedder and log_q_unigram must be callables of ids")
    ids = ops.cast(_tensors.as_ids(positive_ids, "positive_ids"), "int32")
    pool = in_batch.in_batch_pool(
      ids,
      positive_embeddings,
      ops.zeros(ops.shape(ids)),
      valid,
      self.cross_replica,
      num_negatives=self.num_in_batch,
      seed=self.in_batch_seed_generator,
      keys=in_batch_keys,
    )
    batch = pool.negatives
    log_q = lambda x: self.log_q(  # noqa: E731
      _tensors.as_float32(log_q_unigram(x), "log_q_unigram(ids)"),
      pool.num_kept,
      pool.num_draws,
      pool.num_distinct,
    )
    k_u = self.uniform.num_negatives
    if self.uniform.shared:
      uniform_ids = self.uniform()
      all_ids = ops.concatenate([batch.ids, uniform_ids])
      slot_valid = ops.concatenate([batch.valid, ops.ones((k_u,), "bool")])
    else:
      rows = ids.shape[0]
      uniform_ids = self.uniform(
        num_queries=rows, sequence_ids=sequence_ids, valid=valid
      )  # [A, k_u]
      pool_size = batch.ids.shape[0]
      all_ids = ops.concatenate(
        [ops.broadcast_to(batch.ids, (rows, pool_size)), uniform_ids], axis=1
      )
      slot_valid = ops.concatenate(
        [ops.broadcast_to(batch.valid, (rows, pool_size)), ops.ones((rows, k_u), "bool")], axis=1
      )
    uniform_block = self.uniform.block(uniform_ids, candidate_embedder, num_sequences)
    negatives = base.Negatives(
      ids=all_ids,
      embeddings=None,
      log_q=log_q(all_ids),
      valid=slot_valid,
      positive_log_q=log_q(ids),
    )
    return negatives, (("shared", batch.embeddings), uniform_block)

  def call(
    self,
    positive_ids,
    positive_embeddings,
    *,
    candidate_embedder: Callable,
    log_q_unigram: Callable,
    valid=None,
    sequence_ids=None,
    in_batch_keys=None,
  ):  # pylint: disable=arguments-differ
    """``in_batch_keys``: optional int32 [B], the keys of the k_b subsample (instead of a draw
    from the layer's generator)."""
    negatives, ((_, pool), (layout, uniform)) = self.blocks(
      positive_ids,
      positive_embeddings,
      candidate_embedder=candidate_embedder,
      log_q_unigram=log_q_unigram,
      valid=valid,
      sequence_ids=sequence_ids,
      in_batch_keys=in_batch_keys,
    )
    if layout == "shared":
      embeddings = ops.concatenate([pool, uniform], axis=0)
    else:
      rows = uniform.shape[0]
      embeddings = ops.concatenate(
        [ops.broadcast_to(ops.expand_dims(pool, 0), (rows,) + tuple(pool.shape)), uniform], axis=1
      )
    return negatives._replace(embeddings=embeddings)

  def get_config(self):
    u = self.uniform
    return {
      **super().get_config(),
      "num_uniform": u.num_negatives,
      "id_range": None if u.id_range is None else list(u.id_range),
      "candidate_ids": u.candidate_ids,
      "convention": self.convention,
      "seed": u.seed,
      "per": u.per,
      "cross_replica": self.cross_replica,
      "num_in_batch": self.num_in_batch,
    }
