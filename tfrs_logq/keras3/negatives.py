"""Negative samplers for the Keras 3 path: in-batch, uniform (shared / per query) and mixed.

The Keras 3 twin of ``tfrs_logq.negatives`` with static shapes (jit-safe): instead of dropping
duplicates, in-batch negatives keep all B rows and mark the ones that take part in
``Negatives.valid`` (first occurrence of each id, and not padding), so the loss sees exactly the
deduplicated pool of the tf-keras path. log Q follows the same conventions (formulas in
``tfrs_logq.core.negatives``):

* in-batch: log Q(d) = log q_uni(d) (the frequency estimator's per-draw unigram probability);
* uniform, k_u draws with replacement from a catalog D (an id range or an id table):
  log Q(d) = -log |D|, shared ([k_u]) or one set per query ([A, k_u], ``per_query=True``);
* mixed (Yang et al. 2020: the n_b distinct in-batch rows, then k_u uniform rows, shared):
  ``"unigram"`` (the paper's): log q_uni(d) for both halves, log(k_u / ((n_b + k_u)|D|)) for an
  item the estimator has never seen (q_uni = 0); ``"mixture"``: the per-slot
  log((n_b q_uni(d) + k_u/|D|) / (n_b + k_u)).

``score_negatives`` turns queries, positives and a ``Negatives`` into the arguments of
``tfrs_logq.keras3.losses.sampled_softmax_loss`` (accidental hits and invalid rows masked).
Random draws use a ``keras.random.SeedGenerator`` owned by the sampler layer, so they advance
inside a compiled JAX step. The ``k_b`` subsample of the tf-keras in-batch sampler and
cross-replica gathering are not part of this path.
"""

import numbers
from typing import Callable, NamedTuple, Optional, Sequence, Tuple

import numpy as np

import keras
from keras import ops

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import negatives as negatives_core
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3 import accidental_hits

__all__ = ["Negatives", "first_occurrence_mask", "in_batch_negatives", "UniformNegatives",
           "MixedNegatives", "CONVENTIONS", "ScoredCandidates", "score_negatives"]

CONVENTIONS = core_checks.MIXED_CONVENTIONS


class Negatives(NamedTuple):
  """ids [N] or [A, N], embeddings [N, d] or [A, N, d] (None until embedded), log_q [N] or
  [A, N] (float32 per-draw log Q), valid bool [N] or None (rows that take part), positive_log_q
  [A] or None (log Q(p) of the queries' positives under the same proposal)."""
  ids: object
  embeddings: object
  log_q: object
  valid: object = None
  positive_log_q: object = None


def first_occurrence_mask(ids, valid=None):
  """bool [B]: True at the first row of each distinct id among the valid rows (dedup).

  Static shapes: a sort groups equal ids, the smallest row index of each group wins.
  """
  ids = _tensors.as_ids(ids, "ids")
  _tensors.check_rank(ids, 1, "ids")
  b = ids.shape[0]
  index = ops.arange(b, dtype="int32")
  if valid is None:
    rank = index
  else:
    valid = ops.cast(valid, "bool")
    rank = ops.where(valid, index, index + b)   # a padding row never beats a valid one
  order = ops.cast(ops.argsort(ids), "int32")
  sorted_ids = ops.take(ids, order)
  first = ops.concatenate([ops.ones((1,), "bool"),
                           ops.not_equal(sorted_ids[1:], sorted_ids[:-1])])
  run = ops.cumsum(ops.cast(first, "int32")) - 1
  sorted_rank = ops.take(rank, order)
  best = -ops.segment_max(-sorted_rank, run, num_segments=b)
  winner = ops.cast(ops.equal(sorted_rank, ops.take(best, run)), "int32")
  keep = ops.scatter(ops.expand_dims(order, 1), winner, (b,))
  keep = ops.cast(keep, "bool")
  return keep if valid is None else ops.logical_and(keep, valid)


def in_batch_negatives(positive_ids, positive_embeddings, log_q, valid=None) -> Negatives:
  """The batch's positives as shared negatives, duplicates and padding marked invalid.

  Args:
    positive_ids: integer [B].
    positive_embeddings: [B, d] (reused; gradients reach the first row of each id).
    log_q: float [B], log q_uni of each row's item.
    valid: optional bool [B], False for padding rows.

  Returns:
    Negatives(ids [B], embeddings [B, d], log_q [B], valid [B], positive_log_q=log_q).
  """
  ids = _tensors.as_ids(positive_ids, "positive_ids")
  emb = _tensors.as_float32(positive_embeddings, "positive_embeddings")
  log_q = _tensors.as_float32(log_q, "log_q")
  _tensors.check_rank(emb, 2, "positive_embeddings")
  _tensors.check_same_dim(ids, 0, emb, 0, "positive_ids vs positive_embeddings")
  _tensors.check_same_dim(ids, 0, log_q, 0, "positive_ids vs log_q")
  if ids.shape[0] == 0:
    raise ValueError("positive_ids is empty: a batch needs at least one row")
  return Negatives(ids, emb, log_q, first_occurrence_mask(ids, valid), log_q)


@keras.saving.register_keras_serializable(package="tfrs_logq")
class UniformNegatives(keras.layers.Layer):
  """k_u uniform draws (with replacement) from an id range or an id table; log Q = -log |D|.

  ``call(num_queries=None)`` returns int32 ids [k_u] (shared), or [num_queries, k_u] with
  ``per_query=True``. Embed them with the candidate tower yourself.

  Args:
    num_negatives: k_u, a positive Python or numpy int (stored as int; bool and float raise).
    id_range: (lo, hi): the catalog is lo <= id < hi (Python or numpy ints).
    candidate_ids: alternatively a 1-D table of distinct integer ids.
    per_query: one set of k_u draws per query.
    seed: seed of the layer's ``keras.random.SeedGenerator``.
  """

  def __init__(self, num_negatives: int, id_range: Optional[Tuple[int, int]] = None,
               candidate_ids: Optional[Sequence[int]] = None, per_query: bool = False,
               seed: Optional[int] = None, **kwargs):
    super().__init__(**kwargs)
    if (isinstance(num_negatives, bool) or not isinstance(num_negatives, numbers.Integral)
        or num_negatives <= 0):
      raise ValueError(f"num_negatives must be a positive int, got {num_negatives!r}")
    num_negatives = int(num_negatives)
    if (id_range is None) == (candidate_ids is None):
      raise ValueError("give exactly one of id_range=(lo, hi) or candidate_ids")
    self.num_negatives = num_negatives
    self.per_query = bool(per_query)
    self.seed = seed
    self.id_range, table = core_checks.check_catalog(id_range, candidate_ids)
    if self.id_range is not None:
      self.candidate_ids = None
      self.catalog_size = self.id_range[1] - self.id_range[0]
    else:
      self.candidate_ids = [int(v) for v in table]
      self.catalog_size = int(table.size)
    self.seed_generator = keras.random.SeedGenerator(seed)
    self.built = True

  def log_q(self, ids):
    """log Q(d) = -log |D| for every id (float32, shape of ids)."""
    return ops.full(ops.shape(ids), negatives_core.uniform_log_q(self.catalog_size), "float32")

  def call(self, num_queries: Optional[int] = None):  # pylint: disable=arguments-differ
    if self.per_query:
      if num_queries is None:
        raise ValueError("per_query=True needs num_queries")
      shape = (int(num_queries), self.num_negatives)
    else:
      shape = (self.num_negatives,)
    if self.id_range is not None:
      lo, hi = self.id_range
      return keras.random.randint(shape, lo, hi, dtype="int32", seed=self.seed_generator)
    rows = keras.random.randint(shape, 0, self.catalog_size, dtype="int32",
                                seed=self.seed_generator)
    return ops.take(ops.convert_to_tensor(np.asarray(self.candidate_ids, np.int32)), rows)

  def get_config(self):
    return {**super().get_config(), "num_negatives": self.num_negatives,
            "id_range": None if self.id_range is None else list(self.id_range),
            "candidate_ids": self.candidate_ids, "per_query": self.per_query, "seed": self.seed}


@keras.saving.register_keras_serializable(package="tfrs_logq")
class MixedNegatives(keras.layers.Layer):
  """In-batch + k_u shared uniform negatives with log Q under ``unigram`` or ``mixture``.

  ``call(positive_ids [B], positive_embeddings [B, d], *, candidate_embedder, log_q_unigram,
  valid=None)``: ``candidate_embedder`` maps int ids [k_u] to [k_u, d] (the candidate tower),
  ``log_q_unigram`` maps ids to log q_uni (e.g. a ``keras3.frequency`` estimator's ``log_q``);
  Keras 3 wants these two non-tensor arguments as keywords.
  Returns Negatives(ids [B + k_u], embeddings [B + k_u, d], log_q [B + k_u], valid [B + k_u],
  positive_log_q [B]); n_b = the number of valid (distinct, non-padding) in-batch rows.

  Args:
    num_uniform: k_u.
    id_range / candidate_ids: the uniform catalog (as ``UniformNegatives``).
    convention: ``unigram`` (the paper's) or ``mixture``.
    seed: seed of the uniform draws.
  """

  def __init__(self, num_uniform: int, id_range: Optional[Tuple[int, int]] = None,
               candidate_ids: Optional[Sequence[int]] = None, convention: str = "unigram",
               seed: Optional[int] = None, **kwargs):
    super().__init__(**kwargs)
    if convention not in CONVENTIONS:
      raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    self.convention = convention
    self.uniform = UniformNegatives(num_uniform, id_range=id_range, candidate_ids=candidate_ids,
                                    seed=seed, name="uniform")
    self.built = True

  def log_q(self, log_q_unigram, num_in_batch):
    """log Q under the convention, from log q_uni (float32) and n_b (float32 scalar)."""
    k_u, size = self.uniform.num_negatives, self.uniform.catalog_size
    if self.convention == "mixture":
      return negatives_core.mixture_log_q(ops, log_q_unigram, num_in_batch, k_u, size)
    return negatives_core.unigram_log_q(ops, log_q_unigram, num_in_batch, k_u, size)

  def call(self, positive_ids, positive_embeddings, *, candidate_embedder: Callable,
           log_q_unigram: Callable, valid=None):  # pylint: disable=arguments-differ
    ids = _tensors.as_ids(positive_ids, "positive_ids")
    emb = _tensors.as_float32(positive_embeddings, "positive_embeddings")
    if not callable(candidate_embedder) or not callable(log_q_unigram):
      raise TypeError("candidate_embedder and log_q_unigram must be callables of ids")
    keep = first_occurrence_mask(ids, valid)
    n_b = ops.sum(ops.cast(keep, "float32"))
    uniform_ids = self.uniform()
    uniform_emb = _tensors.as_float32(candidate_embedder(uniform_ids), "candidate_embedder(ids)")
    _tensors.check_rank(uniform_emb, 2, "candidate_embedder(ids)")
    all_ids = ops.concatenate([ops.cast(ids, "int32"), uniform_ids])
    lq_uni = _tensors.as_float32(log_q_unigram(all_ids), "log_q_unigram(ids)")
    lq_pos = _tensors.as_float32(log_q_unigram(ids), "log_q_unigram(ids)")
    return Negatives(
        ids=all_ids,
        embeddings=ops.concatenate([emb, uniform_emb], axis=0),
        log_q=self.log_q(lq_uni, n_b),
        valid=ops.concatenate([keep, ops.ones((self.uniform.num_negatives,), "bool")]),
        positive_log_q=self.log_q(lq_pos, n_b))

  def get_config(self):
    u = self.uniform
    return {**super().get_config(), "num_uniform": u.num_negatives,
            "id_range": None if u.id_range is None else list(u.id_range),
            "candidate_ids": u.candidate_ids, "convention": self.convention, "seed": u.seed}


class ScoredCandidates(NamedTuple):
  """Inputs of ``sampled_softmax_loss``: positive_scores [A], negative_scores [A, N],
  negative_log_q [N] or [A, N], valid_mask bool [A, N], positive_log_q [A] or None."""
  positive_scores: object
  negative_scores: object
  negative_log_q: object
  valid_mask: object
  positive_log_q: object = None

  def loss_kwargs(self) -> dict:
    """``sampled_softmax_loss(**scored.loss_kwargs(), correction=...)`` arguments."""
    return dict(positive_scores=self.positive_scores, negative_scores=self.negative_scores,
                negative_log_q=self.negative_log_q, positive_log_q=self.positive_log_q,
                valid_mask=self.valid_mask)


def score_negatives(query_embeddings, positive_ids, positive_embeddings, negatives: Negatives,
                    *, temperature: float = 1.0, positive_log_q=None,
                    remove_accidental_hits: bool = True) -> ScoredCandidates:
  """Scores A queries against their positive and the negatives, with the validity mask.

  positive_scores[a] = <q_a, c_{p_a}> / T; negative_scores[a, i] = <q_a, c_{d_i}> / T (one
  matmul for shared negatives, an einsum for per-query ones [A, N, d]); valid_mask[a, i] =
  negatives.valid[(a,) i] and (d_i != p_a when ``remove_accidental_hits``).
  """
  if not temperature > 0:
    raise ValueError(f"temperature must be > 0, got {temperature!r}")
  if negatives.embeddings is None:
    raise ValueError("negatives have no embeddings: embed their ids with the candidate tower "
                     "(negatives._replace(embeddings=tower(negatives.ids)))")
  query = _tensors.as_float32(query_embeddings, "query_embeddings")
  pos_ids = _tensors.as_ids(positive_ids, "positive_ids")
  pos_emb = _tensors.as_float32(positive_embeddings, "positive_embeddings")
  neg_emb = _tensors.as_float32(negatives.embeddings, "Negatives.embeddings")
  _tensors.check_rank(query, 2, "query_embeddings")
  _tensors.check_rank(pos_emb, 2, "positive_embeddings")
  _tensors.check_rank(neg_emb, (2, 3), "Negatives.embeddings")
  _tensors.check_same_dim(query, 0, pos_ids, 0, "query_embeddings vs positive_ids")
  _tensors.check_same_dim(query, 1, neg_emb, -1, "query vs negative embedding dimension")
  inv_t = 1.0 / float(temperature)
  positive_scores = ops.sum(query * pos_emb, axis=-1) * inv_t
  if len(neg_emb.shape) == 2:
    negative_scores = ops.matmul(query, ops.transpose(neg_emb)) * inv_t
  else:
    negative_scores = ops.einsum("ad,and->an", query, neg_emb) * inv_t
  if remove_accidental_hits:
    valid = accidental_hits.accidental_hit_mask(pos_ids, negatives.ids)
    valid = ops.broadcast_to(valid, ops.shape(negative_scores))
  else:
    valid = ops.ones_like(negative_scores, dtype="bool")
  if negatives.valid is not None:
    valid = ops.logical_and(valid, ops.cast(negatives.valid, "bool"))
  if positive_log_q is None:
    positive_log_q = negatives.positive_log_q
  return ScoredCandidates(positive_scores, negative_scores,
                          _tensors.as_float32(negatives.log_q, "Negatives.log_q"), valid,
                          positive_log_q)
