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

import numbers
import warnings
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union, cast

import keras
from keras import ops

from tfrs_logq.core import negatives as negatives_core
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3._tensors import Seed, Tensor
from tfrs_logq.keras3.negatives import base, in_batch, scoring
from tfrs_logq.keras3.negatives.in_batch import InBatchNegatives
from tfrs_logq.keras3.negatives.sampler import NegativeSampler
from tfrs_logq.keras3.negatives.uniform import UniformNegatives

__all__ = ["MixedNegatives", "mixture_log_q"]

# The former (flat) constructor's arguments after k_u: the layer's config keeps this form.
_FLAT = ("id_range", "candidate_ids", "seed", "per", "cross_replica", "num_in_batch")


def mixture_log_q(
  log_q_unigram: Tensor, num_in_batch: Tensor, num_uniform: int, catalog_size: int
) -> Tensor:
  """log q(d) = log((n_b q_uni(d) + k_u / |D|) / (n_b + k_u)), in log space (float32).

  Args:
    log_q_unigram: float, log q_uni(d) (may be -inf for unseen items).
    num_in_batch: ``n_b`` >= 0 (scalar, may be a tensor).
    num_uniform: ``k_u`` > 0.
    catalog_size: ``|D|`` > 0.
  """
  return negatives_core.mixture_log_q(
    ops,
    _tensors.as_float32(log_q_unigram, "log_q_unigram"),
    ops.cast(num_in_batch, "float32"),
    num_uniform,
    catalog_size,
  )


def in_batch_seed(seed: int) -> int:
  """The seed of the k_b subsample's generator, distinct from the uniform block's ``seed``."""
  return (int(seed) * 2654435761 + 0x9E3779B9) % (2**31 - 1)


def _blocks_from_flat(
  num_uniform: int, flat: Dict[str, Any]
) -> Tuple[InBatchNegatives, UniformNegatives]:
  """(InBatchNegatives, UniformNegatives) of the flat arguments (the layer's config)."""
  unknown = set(flat) - set(_FLAT)
  if unknown:
    raise TypeError(f"MixedNegatives got unexpected arguments {sorted(unknown)}")
  uniform = UniformNegatives(
    None,
    num_uniform,
    id_range=flat.get("id_range"),
    candidate_ids=flat.get("candidate_ids"),
    seed=flat.get("seed"),
    per=flat.get("per") or "batch",
    name="uniform",
  )
  sampler = InBatchNegatives(
    None,
    num_negatives=in_batch.check_num_negatives(flat.get("num_in_batch"), "num_in_batch"),
    cross_replica=bool(flat.get("cross_replica", True)),
  )
  return sampler, uniform


@keras.saving.register_keras_serializable(package="tfrs_logq")
class MixedNegatives(keras.layers.Layer, NegativeSampler):
  """In-batch + k_u uniform negatives with log Q under one convention (module docstring): the
  tf-keras ``MixedNegatives`` with the same arguments, as a sampler of the shared protocol.

  ``call(positive_ids [B], positive_embeddings [B, d], *, candidate_embedder=None,
  log_q_unigram=None, valid=None, sequence_ids=None, in_batch_keys=None, seed=None)``:
  ``candidate_embedder`` maps int ids ([k_u] or [B, k_u]) to embeddings (default: the uniform
  block's), ``log_q_unigram`` maps ids to log q_uni (default: ``in_batch.frequency_estimator``'s
  ``log_q``). Returns Negatives(ids, embeddings, log_q, valid of [P + k_u] (per ``"batch"``) or
  [B, P + k_u] (per ``"sequence"`` / ``"query"``), positive_log_q [B]); P = B, or k_b when
  ``in_batch.num_negatives`` = k_b < B.

  Args:
    in_batch: an ``InBatchNegatives`` (its ``num_negatives`` k_b, ``cross_replica`` and
      ``frequency_estimator``; its own ``convention`` is ignored: this sampler's applies).
    uniform: a ``UniformNegatives`` (its catalog gives ``|D|``, its ``per`` the uniform layout,
      its ``seed`` the draws; the k_b subsample has a generator of its own, from that seed).
    convention: ``unigram`` (the paper's), ``mixture`` or ``expected_count``.

  ``MixedNegatives(num_uniform, id_range=..., convention=..., seed=..., per=...,
  cross_replica=..., num_in_batch=...)`` (the former Keras 3 form) still works, with a
  DeprecationWarning; the layer's config keeps that flat form (no estimator, no embedder).
  """

  def __init__(
    self,
    in_batch: Union[InBatchNegatives, int],
    uniform: Union[UniformNegatives, Sequence[int], None] = None,
    *,
    convention: str = "unigram",
    **kwargs: Any,
  ) -> None:
    flat = {k: kwargs.pop(k) for k in _FLAT if k in kwargs}
    if isinstance(in_batch, numbers.Integral) and not isinstance(in_batch, bool):
      warnings.warn(
        "MixedNegatives(num_uniform, id_range=..., ...) is deprecated: use "
        "MixedNegatives(InBatchNegatives(estimator, num_negatives=k_b), "
        "UniformNegatives(embedder, k_u, id_range=...), convention=...) as on tf-keras",
        DeprecationWarning,
        stacklevel=2,
      )
      if uniform is not None:  # the former second positional argument
        flat.setdefault("id_range", uniform)
      in_batch, uniform = _blocks_from_flat(cast(int, in_batch), flat)  # an int or numpy int
    elif flat:
      raise TypeError(
        f"MixedNegatives(in_batch, uniform) takes no {sorted(flat)}: they are the blocks' own "
        "arguments"
      )
    super().__init__(**kwargs)
    if not isinstance(in_batch, InBatchNegatives):
      raise TypeError(f"in_batch must be an InBatchNegatives, got {type(in_batch).__name__}")
    if not isinstance(uniform, UniformNegatives):
      raise TypeError(f"uniform must be a UniformNegatives, got {type(uniform).__name__}")
    if convention not in base.CONVENTIONS:
      raise ValueError(f"convention must be one of {base.CONVENTIONS}, got {convention!r}")
    self.in_batch = in_batch
    self.uniform = uniform
    self.convention = convention
    self.num_in_batch = in_batch.num_negatives
    self.cross_replica = in_batch.cross_replica
    self.in_batch_seed_generator = None
    if self.num_in_batch is not None:
      self.in_batch_seed_generator = keras.random.SeedGenerator(
        None if uniform.seed is None else in_batch_seed(uniform.seed)
      )
    self.built = True

  def log_q(
    self,
    log_q_unigram: Tensor,
    num_in_batch: Tensor,
    num_draws: Optional[Tensor] = None,
    num_distinct: Optional[Tensor] = None,
  ) -> Tensor:
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

  def _seeds(self, seed: Optional[Seed]) -> Tuple[Optional[Seed], Optional[Seed]]:
    """(the k_b subsample's seed, the uniform draws' seed): the generators, or from a call's
    int seed (or one ``keras.random.SeedGenerator`` for both)."""
    if seed is None:
      return self.in_batch_seed_generator, None
    if isinstance(seed, numbers.Integral):
      return in_batch_seed(int(seed)), int(seed)
    return seed, seed

  def blocks(
    self,
    positive_ids: Tensor,
    positive_embeddings: Tensor,
    *,
    candidate_embedder: Optional[Callable] = None,
    log_q_unigram: Optional[Callable] = None,
    valid: Optional[Tensor] = None,
    sequence_ids: Optional[Tensor] = None,
    in_batch_keys: Optional[Tensor] = None,
    num_sequences: Optional[int] = None,
    seed: Optional[Seed] = None,
  ) -> Tuple[base.Negatives, Tuple[Tuple[str, Tensor], Tuple[str, Tensor]]]:
    """(Negatives with ``embeddings=None``, ((layout, embeddings), ...)) for ``score_blocks``:
    the negatives of ``call`` (same arguments and draws) and their embeddings by block (module
    docstring). ``num_sequences`` = B: the A rows are a row-major [B, L] grid, so per-sequence
    uniform draws form a [B, k_u, d] block (else [A, k_u, d])."""
    if candidate_embedder is None:
      candidate_embedder = self.uniform.candidate_embedder
    if log_q_unigram is None:
      log_q_unigram = self.in_batch.unigram_log_q
    if not callable(candidate_embedder) or not callable(log_q_unigram):
      raise TypeError("candidate_embedder and log_q_unigram must be callables of ids")
    seed_b, seed_u = self._seeds(seed)
    ids = ops.cast(_tensors.as_ids(positive_ids, "positive_ids"), "int32")
    pool = in_batch.in_batch_pool(
      ids,
      positive_embeddings,
      ops.zeros(ops.shape(ids)),
      valid,
      self.cross_replica,
      num_negatives=self.num_in_batch,
      seed=seed_b,
      keys=in_batch_keys,
    )
    batch = pool.negatives
    log_q = lambda x: self.log_q(
      _tensors.as_float32(log_q_unigram(x), "log_q_unigram(ids)"),
      pool.num_kept,
      pool.num_draws,
      pool.num_distinct,
    )
    k_u = self.uniform.num_negatives
    if self.uniform.shared:
      uniform_ids = self.uniform(seed=seed_u)
      all_ids = ops.concatenate([batch.ids, uniform_ids])
      slot_valid = ops.concatenate([batch.valid, ops.ones((k_u,), "bool")])
    else:
      rows = ids.shape[0]
      uniform_ids = self.uniform(
        num_queries=rows, sequence_ids=sequence_ids, valid=valid, seed=seed_u
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
    positive_ids: Tensor,
    positive_embeddings: Tensor,
    *,
    candidate_embedder: Optional[Callable] = None,
    log_q_unigram: Optional[Callable] = None,
    valid: Optional[Tensor] = None,
    sequence_ids: Optional[Tensor] = None,
    in_batch_keys: Optional[Tensor] = None,
    seed: Optional[Seed] = None,
  ) -> base.Negatives:
    """``in_batch_keys``: optional int32 [B], the keys of the k_b subsample (instead of a draw
    from the layer's generator); ``seed``: an int or a ``keras.random.SeedGenerator`` instead of
    the layer's generators."""
    negatives, ((_, pool), (layout, uniform)) = self.blocks(
      positive_ids,
      positive_embeddings,
      candidate_embedder=candidate_embedder,
      log_q_unigram=log_q_unigram,
      valid=valid,
      sequence_ids=sequence_ids,
      in_batch_keys=in_batch_keys,
      seed=seed,
    )
    if layout == "shared":
      embeddings = ops.concatenate([pool, uniform], axis=0)
    else:
      rows = uniform.shape[0]
      embeddings = ops.concatenate(
        [ops.broadcast_to(ops.expand_dims(pool, 0), (rows,) + tuple(pool.shape)), uniform], axis=1
      )
    return negatives._replace(embeddings=embeddings)

  def _embedder(self, item_table: Optional[Tensor]) -> Callable[[Tensor], Tensor]:
    embedder = self.uniform.candidate_embedder
    return lambda ids: scoring.embed_ids(
      ids, candidate_embedder=embedder, item_table=item_table, owner="MixedNegatives"
    )

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
  ) -> base.Negatives:
    """``call`` on the queries' positives, the uniform block embedded by its
    ``candidate_embedder`` or from ``item_table`` (per-query layouts materialise [A, N, d])."""
    del query_embeddings
    return self(
      positive_ids,
      positive_embeddings,
      candidate_embedder=self._embedder(item_table),
      valid=valid,
      sequence_ids=sequence_ids,
      seed=seed,
    )

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
    """Scores of the shared in-batch block (one matmul) joined with the uniform block's, by
    ``score_blocks`` (no [A, N, d] tensor for the in-batch block), log Q under the convention:
    positive_scores [A], negative_scores [A, P + k_u], negative_log_q, valid_mask, positive_log_q
    [A]."""
    if not temperature > 0:
      raise ValueError(f"temperature must be > 0, got {temperature!r}")
    negatives, blocks = self.blocks(
      positive_ids,
      positive_embeddings,
      candidate_embedder=self._embedder(item_table),
      valid=valid,
      sequence_ids=sequence_ids,
      seed=seed,
    )
    return scoring.score_blocks(
      query_embeddings, positive_ids, positive_embeddings, negatives, blocks, temperature
    )

  def get_config(self) -> Dict[str, Any]:
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

  @classmethod
  def from_config(cls, config: Mapping[str, Any]) -> "MixedNegatives":
    """From the flat config of `get_config` (no DeprecationWarning)."""
    config = dict(config)
    num_uniform = config.pop("num_uniform")
    flat = {k: config.pop(k) for k in _FLAT if k in config}
    sampler, uniform = _blocks_from_flat(num_uniform, flat)
    return cls(sampler, uniform, **config)
