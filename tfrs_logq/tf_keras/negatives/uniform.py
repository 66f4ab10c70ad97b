"""Uniform negatives: k ids drawn uniformly (with replacement) from the catalog, per batch,
per sequence or per query.

The catalog D is either an id range ``[lo, hi)`` or a table of distinct candidate ids. Each slot
is an independent uniform draw, so the per-draw probability is exact for every layout:

    Q(d) = 1 / |D|,   log Q(d) = -log |D|   for every d in D.

Duplicates among the draws are kept (they are separate draws of the same proposal). Layouts
(``per``):

* ``"batch"``: k ids shared by every query of the step (scores: one [A, d] x [d, k] matmul);
* ``"sequence"``: k ids per distinct ``sequence_ids`` value, shared by that sequence's queries
  (a SASRec sequence's positions); scored with one batched matmul per sequence, far cheaper than
  per query when a sequence has many positions. ``sequence_ids=None`` makes every query its own
  sequence;
* ``"query"``: k fresh ids per query (the paper code's per-position negatives); scored by gather
  + contraction, or by one [A, V] matmul + gather when a table is given and V <= 0.4 k d.

The accidental hits d == p of each row are masked. Embeddings come from the caller's candidate
tower / embedding layer (``ids -> [m, d]``), so feature-based towers work as well as id tables,
or, without a ``candidate_embedder``, from the rows of the ``item_table`` passed to the call.
Randomness: a ``[2]`` stateless seed gives the same draws on every call (and on every replica:
per-query and per-sequence draws then fold in the replica id, so replicas draw independent
negatives for their own queries); without a seed the stateful global RNG is used.

Padding queries (``valid``, static-shape batches): the per-query sets are numbered by the rank of
each valid query among the valid ones, and the per-sequence sets by the distinct sequences of the
valid queries in first-occurrence order, so the draws do not depend on where the padding is: with
a seed, a padded batch gets exactly the draws of its valid queries alone (the stateless integer
draws of m rows are the first m rows of a larger draw). With static shapes (``static_shapes=True``
or inside ``tf.function(jit_compile=True)``) the sets are drawn for all A rows and per-sequence
negatives are scored like per-query ones (one ``[A, k]`` gather, no segment grouping).
"""

from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple

from tfrs_logq.tf_keras import _static_shapes, accidental_hits
from tfrs_logq.tf_keras.negatives import scoring
from tfrs_logq.tf_keras.negatives.base import (
  ItemTable,
  Negatives,
  as_ids,
  check_positive_int,
  check_rank,
)
from tfrs_logq.tf_keras.negatives.sampler import NegativeSampler

import numpy as np
import tensorflow as tf

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import negatives as negatives_core

__all__ = ["UniformNegatives", "UNIFORM_PER"]

UNIFORM_PER = core_checks.UNIFORM_PER


class _Draw(NamedTuple):
  """ids [k] (batch), [A, k] (query) or [R, k] sets with segment [A] int32 in [0, R), the set of
  each query; ``grouped``: score the queries of a segment together (`per_segment_scores`)."""

  ids: tf.Tensor
  segment: Optional[tf.Tensor] = None
  grouped: bool = False

  def row_ids(self) -> tf.Tensor:
    """[k] or [A, k] ids of each query's negatives."""
    return self.ids if self.segment is None else tf.gather(self.ids, self.segment)


def _replica_seed(seed: tf.Tensor) -> tf.Tensor:
  """Folds the replica id into a stateless seed under a multi-replica strategy."""
  ctx = tf.distribute.get_replica_context()
  if ctx is None or ctx.num_replicas_in_sync == 1:
    return seed
  return tf.random.experimental.stateless_fold_in(
    _static_shapes.stateless_seed(seed), tf.cast(ctx.replica_id_in_sync_group, tf.int64)
  )


class UniformNegatives(NegativeSampler):
  """k uniform negatives from an id range or an id table, per batch / sequence / query.

  log Q(d) = -log |D| exactly for every slot (module docstring); accidental hits are masked per
  row.

  Args:
    candidate_embedder: callable or Keras layer mapping int64 ids ``[m]`` to ``[m, d]``, or None
      to embed from the ``item_table`` given to `score` / `sample_negatives`.
    num_negatives: k (positive int).
    id_range: ``(lo, hi)``: the catalog is the ids ``lo <= id < hi`` (``hi > lo``).
    candidate_ids: alternatively a 1-D table of distinct integer ids (the catalog).
    per: ``"batch"`` | ``"sequence"`` | ``"query"`` (module docstring).
    jit_compile: score per-query negatives with XLA-compiled table paths.
    static_shapes: draw and score with static shapes (module docstring); None (default) = only
      while compiled by XLA.
  """

  def __init__(
    self,
    candidate_embedder: Optional[Callable],
    num_negatives: int,
    *,
    id_range: Optional[Tuple[int, int]] = None,
    candidate_ids: Optional[Sequence[int]] = None,
    per: str = "batch",
    jit_compile: bool = False,
    static_shapes: Optional[bool] = None,
  ) -> None:
    if candidate_embedder is not None and not callable(candidate_embedder):
      raise TypeError("candidate_embedder must be callable (ids -> embeddings) or None")
    self.num_negatives = check_positive_int(num_negatives, "num_negatives")
    if (id_range is None) == (candidate_ids is None):
      raise ValueError("give exactly one of id_range=(lo, hi) or candidate_ids")
    if per not in UNIFORM_PER:
      raise ValueError(f"per must be one of {UNIFORM_PER}, got {per!r}")
    self.candidate_embedder = candidate_embedder
    self.per = per
    self.jit_compile = bool(jit_compile)
    self.static_shapes = None if static_shapes is None else bool(static_shapes)
    self.id_range, table = core_checks.check_catalog(id_range, candidate_ids)
    if self.id_range is not None:
      lo, hi = self.id_range
      self.candidate_ids = None
      self.catalog_size = hi - lo
      self._id_bound = hi
    else:
      assert table is not None  # check_catalog returns one of the two
      self.candidate_ids = tf.constant(table.astype(np.int64))
      self.catalog_size = int(table.size)
      self._id_bound = int(table.max()) + 1
    self._log_q_value = negatives_core.uniform_log_q(self.catalog_size)

  # -- configuration ----------------------------------------------------------------------------
  def get_config(self) -> Dict[str, Any]:
    """Constructor arguments; ``candidate_embedder`` is returned as the object itself."""
    return dict(
      candidate_embedder=self.candidate_embedder,
      num_negatives=self.num_negatives,
      id_range=self.id_range,
      candidate_ids=(None if self.candidate_ids is None else self.candidate_ids.numpy().tolist()),
      per=self.per,
      jit_compile=self.jit_compile,
      static_shapes=self.static_shapes,
    )

  # -- sampling ---------------------------------------------------------------------------------
  def log_q(self, ids: tf.Tensor) -> tf.Tensor:
    """log Q(d) = -log |D| for every id (float32, shape of ``ids``)."""
    ids = as_ids(ids, "ids")
    return tf.fill(tf.shape(ids), tf.constant(self._log_q_value, tf.float32))

  def sample_ids(
    self, seed: Optional[tf.Tensor] = None, num_rows: Optional[tf.Tensor] = None
  ) -> tf.Tensor:
    """Ids drawn uniformly with replacement: int64 ``[k]``, or ``[num_rows, k]``.

    Args:
      seed: optional ``[2]`` int seed of the stateless RNG (the low 32 bits of each component
        count, as under XLA); None uses the stateful global RNG.
      num_rows: None for one shared set, else the number of independent sets (scalar).
    """
    shape = (
      [self.num_negatives]
      if num_rows is None
      else tf.stack([tf.cast(num_rows, tf.int32), self.num_negatives])
    )
    if self.id_range is not None:
      lo, hi = self.id_range
    else:
      lo, hi = 0, self.catalog_size
    if seed is None:
      draws = tf.random.uniform(shape, lo, hi, dtype=tf.int64)
    else:
      draws = tf.random.stateless_uniform(
        shape, _static_shapes.stateless_seed(seed), lo, hi, dtype=tf.int64
      )
    return draws if self.id_range is not None else tf.gather(self.candidate_ids, draws)

  def _draw(
    self,
    positive_ids: Optional[tf.Tensor],
    sequence_ids: Optional[tf.Tensor],
    seed: Optional[tf.Tensor],
    valid: Optional[tf.Tensor] = None,
  ) -> _Draw:
    if self.per == "batch":
      return _Draw(self.sample_ids(seed))
    if seed is not None:
      seed = _replica_seed(tf.cast(seed, tf.int64))
    a = tf.shape(positive_ids)[0]
    static = _static_shapes.use_static_shapes(self.static_shapes)
    if valid is not None:
      valid = tf.convert_to_tensor(valid)
      if valid.dtype != tf.bool:
        raise TypeError(f"valid must be bool, got {valid.dtype.name}")
      check_rank(valid, 1, "valid")
    if self.per == "sequence" and sequence_ids is not None:
      seq = as_ids(sequence_ids, "sequence_ids")
      check_rank(seq, 1, "sequence_ids")
      with tf.control_dependencies(
        [
          tf.debugging.assert_equal(
            tf.shape(seq)[0], a, message="sequence_ids must have one entry per query"
          )
        ]
      ):
        seq = tf.identity(seq)
      if valid is None and not static:
        distinct, segment = tf.unique(seq, out_idx=tf.int32)
        return _Draw(self.sample_ids(seed, tf.shape(distinct)[0]), segment, grouped=True)
      _, segment, num_distinct = _static_shapes.first_occurrence(seq, valid)
      rows = a if static else tf.maximum(num_distinct, 1)
      return _Draw(self.sample_ids(seed, rows), tf.minimum(segment, rows - 1), grouped=not static)
    if valid is None:
      return _Draw(self.sample_ids(seed, a))
    rank = tf.minimum(_static_shapes.valid_rank(valid), tf.maximum(a - 1, 0))
    return _Draw(self.sample_ids(seed, a), rank)

  def _embed(self, ids: tf.Tensor, item_table: Optional[ItemTable]) -> tf.Tensor:
    return scoring.embed_ids(ids, candidate_embedder=self.candidate_embedder, item_table=item_table)

  def _raw_scores(
    self, query: tf.Tensor, draw: _Draw, item_table: Optional[ItemTable]
  ) -> tf.Tensor:
    """<q_a, c_{d}> (no temperature) of each query's negatives, [A, k]."""
    if self.per == "batch":
      return tf.matmul(query, self._embed(draw.ids, item_table), transpose_b=True)
    if draw.grouped:
      return scoring.per_segment_scores(query, draw.segment, self._embed(draw.ids, item_table))
    return scoring.per_query_scores(
      query,
      draw.row_ids(),
      item_table=item_table,
      candidate_embedder=self.candidate_embedder,
      num_rows=self._id_bound,
      jit_compile=self.jit_compile,
    )

  def __call__(
    self,
    positive_ids: Optional[tf.Tensor] = None,
    *,
    seed: Optional[tf.Tensor] = None,
    sequence_ids: Optional[tf.Tensor] = None,
    item_table: Optional[ItemTable] = None,
    valid: Optional[tf.Tensor] = None,
  ) -> Negatives:
    """Draws the negatives and embeds them (``[k, d]``, or ``[A, k, d]`` unless per="batch").

    Args:
      positive_ids: integer ``[A]``, the queries' positives (gives ``positive_log_q`` and, unless
        per="batch", the number of queries A; required then).
      seed: optional ``[2]`` stateless seed.
      sequence_ids: optional integer ``[A]`` (per="sequence").
      item_table: optional ``[V, d]`` table to embed from when there is no candidate_embedder.
      valid: optional bool ``[A]``, False for padding queries (module docstring).

    Returns:
      ``Negatives(ids [k] or [A, k], embeddings [k, d] or [A, k, d], log_q [k],
      positive_log_q [A] or None)``.
    """
    positive_log_q = None
    if positive_ids is not None:
      positive_ids = as_ids(positive_ids, "positive_ids")
      check_rank(positive_ids, 1, "positive_ids")
      positive_log_q = self.log_q(positive_ids)
    elif self.per != "batch":
      raise ValueError(f"per={self.per!r} draws negatives per query: pass positive_ids")
    draw = self._draw(positive_ids, sequence_ids, seed, valid)
    ids = draw.row_ids()
    emb = self._embed(ids, item_table)
    log_q = tf.fill([self.num_negatives], tf.constant(self._log_q_value, tf.float32))
    return Negatives(ids=ids, embeddings=emb, log_q=log_q, positive_log_q=positive_log_q)

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
    """`Negatives` of one step (see `__call__`; per-query layouts materialise [A, k, d])."""
    del query_embeddings, positive_embeddings
    return self(
      positive_ids, seed=seed, sequence_ids=sequence_ids, item_table=item_table, valid=valid
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
    """`NegativeSampler.score` with the cheapest exact path of the layout (module docstring).

    Returns:
      ``ScoredCandidates(positive_scores [A], negative_scores [A, k], negative_log_q [k]
      (= -log |D|), valid_mask [A, k], positive_log_q [A] (= -log |D|))``.
    """
    return self._score_with_log_q(
      query_embeddings,
      positive_ids,
      positive_embeddings,
      temperature=temperature,
      seed=seed,
      sequence_ids=sequence_ids,
      item_table=item_table,
      valid=valid,
    )

  def _score_with_log_q(
    self,
    query_embeddings: tf.Tensor,
    positive_ids: tf.Tensor,
    positive_embeddings: tf.Tensor,
    *,
    temperature: float = 1.0,
    seed: Optional[tf.Tensor] = None,
    sequence_ids: Optional[tf.Tensor] = None,
    item_table: Optional[ItemTable] = None,
    log_q_fn: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
    valid: Optional[tf.Tensor] = None,
  ) -> scoring.ScoredCandidates:
    """`score`, with log Q of the drawn ids and of the positives from ``log_q_fn(ids)`` instead
    of -log |D| (a mixed sampler's convention); ``log_q_fn`` gets ``[k]`` or ``[A, k]`` ids."""
    if not temperature > 0:
      raise ValueError(f"temperature must be > 0, got {temperature!r}")
    inv_t = 1.0 / float(temperature)
    query, pos_ids, pos_emb = scoring.check_queries(
      query_embeddings, positive_ids, positive_embeddings
    )
    draw = self._draw(pos_ids, sequence_ids, seed, valid)
    row_ids = draw.row_ids()
    scores = self._raw_scores(query, draw, item_table) * inv_t
    valid = tf.broadcast_to(accidental_hits.accidental_hit_mask(pos_ids, row_ids), tf.shape(scores))
    if log_q_fn is None:
      log_q = tf.fill([self.num_negatives], tf.constant(self._log_q_value, tf.float32))
      pos_log_q = self.log_q(pos_ids)
    else:
      log_q, pos_log_q = log_q_fn(row_ids), log_q_fn(pos_ids)
    return scoring.ScoredCandidates(
      tf.reduce_sum(query * pos_emb, axis=-1) * inv_t, scores, log_q, valid, pos_log_q
    )
