"""Scores queries against their positive and the sampled negatives: the loss layer's inputs.

For queries ``q_a`` ([A, d]: a two-tower batch, or the A non-padding positions of a SASRec batch),
positives ``p_a`` with embeddings ``c_{p_a}`` and negatives ``d_1..d_N``:

    positive_scores[a]    = <q_a, c_{p_a}> / temperature                      [A]
    negative_scores[a, i] = <q_a, c_{d_i}> / temperature                      [A, N]
    valid_mask[a, i]      = d_i != p_a   (accidental hits of the row's positive are masked;
                                          so are padding slots, ``Negatives.valid`` False)
    negative_log_q        = log Q(d_i)   [N] or [A, N], unchanged, or, with ``apply_q_prime``,
    log Q'(d_i | p_a)     = log Q(d_i) - log(1 - Q(p_a))                      [A, N]
                            (`tfrs_logq.tf_keras.log_q.log_q_prime`; the mask is
                             `tfrs_logq.tf_keras.accidental_hits.accidental_hit_mask`)

These are exactly the arguments of
``tfrs_logq.tf_keras.losses.sampled_softmax_loss(positive_scores, negative_scores, negative_log_q,
*, correction, positive_log_q, valid_mask)``: ``ScoredCandidates.loss_kwargs()`` returns them, and
``ScoredCandidates.concat`` joins blocks of negatives (e.g. in-batch + uniform) along N.

Scoring paths (all exact; they differ in cost only):

* shared negatives ``[N, d]``: one ``[A, d] x [d, N]`` matmul (`score_negatives`);
* per-query negatives ids ``[A, k]`` (`per_query_scores`): gather the ``[A, k, d]`` embeddings and
  contract (memory ~ A k d), or, given the full candidate table ``[V, d]``, score the whole table
  once (``[A, V]``) and gather the ``[A, k]`` entries (compute ~ A V d, no [A, k, d] tensor),
  chosen when ``V <= 0.4 k d`` (e.g. ML-1M: V = 3,417, k = d = 128). The gradients are the same
  either way (the gather's gradient scatters into [A, V]);
* per-sequence negatives ``[U, k, d]`` shared by the queries of each of U sequences
  (`per_segment_scores`): queries are grouped into a padded ``[U, L, d]`` block and scored with
  one batched ``[L, d] x [d, k]`` matmul per sequence (compute ~ A k d, memory ~ U (L + k) d).

`task_candidates` instead lays shared candidates out for the drop-in
``tfrs_logq.tf_keras.Retrieval`` (candidate rows beyond the A positives are shared
negatives).
"""

from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple

from tfrs_logq.tf_keras import _static_shapes, accidental_hits, compiled, sharded
from tfrs_logq.tf_keras import log_q as log_q_lib
from tfrs_logq.tf_keras.negatives.base import (
  ItemTable,
  Negatives,
  as_float,
  as_ids,
  check_rank,
  check_same_dim,
  validate_negatives,
)

import tensorflow as tf

from tfrs_logq.core import cross_batch as cross_batch_core
from tfrs_logq.core.ops import tf_ops

__all__ = [
  "ScoredCandidates",
  "join_blocks",
  "score_negatives",
  "task_candidates",
  "per_query_scores",
  "per_segment_scores",
  "embed_ids",
  "MATMUL_GATHER_RATIO",
]

MATMUL_GATHER_RATIO = 0.4
"""Per-query negatives are scored by [A, V] matmul + gather when V <= this * k * d."""

_KEEP = object()


class ScoredCandidates(NamedTuple):
  """The inputs of ``tfrs_logq.tf_keras.losses.sampled_softmax_loss`` for A queries and N negatives.

  Attributes:
    positive_scores: [A] s_p = <q_a, c_{p_a}> / T.
    negative_scores: [A, N] s_i = <q_a, c_{d_i}> / T (d_i shared, or per row).
    negative_log_q: [N] or [A, N] log Q(d_i), the per-draw log probability of each negative.
    valid_mask: bool [A, N], False where d_i == p_a (accidental hit) or otherwise masked.
    positive_log_q: [A] log Q(p_a) under the same proposal, or None.
  """

  positive_scores: tf.Tensor
  negative_scores: tf.Tensor
  negative_log_q: tf.Tensor
  valid_mask: tf.Tensor
  positive_log_q: Optional[tf.Tensor] = None

  def loss_kwargs(self) -> Dict[str, Any]:
    """``sampled_softmax_loss(**scored.loss_kwargs(), correction=...)`` arguments."""
    return dict(
      positive_scores=self.positive_scores,
      negative_scores=self.negative_scores,
      negative_log_q=self.negative_log_q,
      positive_log_q=self.positive_log_q,
      valid_mask=self.valid_mask,
    )

  @staticmethod
  def concat(
    *blocks: "ScoredCandidates", positive_log_q: Optional[tf.Tensor] = _KEEP
  ) -> "ScoredCandidates":
    """Joins blocks of negatives of the same A queries along N.

    ``negative_scores`` and ``valid_mask`` are concatenated along axis 1; ``negative_log_q``
    too, kept ``[N]`` when every block's is ``[N]`` and otherwise broadcast to ``[A, N_b]`` per
    block first. ``positive_scores`` and, unless ``positive_log_q`` is given, ``positive_log_q``
    are the first block's: every block must score the same queries and positives, and their
    log Q must follow one convention (the caller's responsibility).

    Raises:
      ValueError: no block, or a block that is not a `ScoredCandidates`.
    """
    if not blocks:
      raise ValueError("ScoredCandidates.concat needs at least one block")
    for b in blocks:
      if not isinstance(b, ScoredCandidates):
        raise ValueError(f"ScoredCandidates.concat takes ScoredCandidates, got {type(b).__name__}")
    first = blocks[0]
    pos_log_q = first.positive_log_q if positive_log_q is _KEEP else positive_log_q
    if len(blocks) == 1:
      return first._replace(positive_log_q=pos_log_q)
    scores = [tf.cast(b.negative_scores, tf.float32) for b in blocks]
    log_qs = [tf.cast(b.negative_log_q, tf.float32) for b in blocks]
    if any(lq.shape.rank != 1 for lq in log_qs):
      log_qs = [tf.broadcast_to(lq, tf.shape(s)) for lq, s in zip(log_qs, scores)]
      log_q = tf.concat(log_qs, axis=1)
    else:
      log_q = tf.concat(log_qs, axis=0)
    valid = [
      tf.broadcast_to(tf.cast(b.valid_mask, tf.bool), tf.shape(s)) for b, s in zip(blocks, scores)
    ]
    return ScoredCandidates(
      first.positive_scores, tf.concat(scores, axis=1), log_q, tf.concat(valid, axis=1), pos_log_q
    )


def join_blocks(blocks: Sequence[ScoredCandidates], *, rebase_q_prime: bool) -> ScoredCandidates:
  """Joins blocks of negatives of the same A queries along N, each with its own proposal.

  As `ScoredCandidates.concat` (scores, masks and log Q concatenated along N; positive_scores
  and positive_log_q from the first block). The loss takes one positive log Q per row, the
  first block's Q_1(p), for log Q' = log Q - log(1 - Q(p)); with ``rebase_q_prime`` (use it
  with ``correction="corrected"`` and ``q_prime="exact"``) every block k >= 1 has its log Q
  replaced by `tfrs_logq.core.cross_batch.rebased_block_log_q` ([A, N_k]), so that the loss's
  Q' step yields the block's own log Q_k(d) - log(1 - Q_k(p)). Without it (``"proxy"``,
  ``standard``, ``standard_no_positive``) the blocks' log Q are used unchanged.

  Entries a block masks (``valid_mask`` False) keep their own log Q (finite, <= 0; the shift
  could lift them above 0, which the loss rejects, and they take no part in it).

  Raises:
    ValueError: no block, a block that is not a `ScoredCandidates`, or (``rebase_q_prime``) a
      block without ``positive_log_q``.
  """
  blocks = list(blocks)
  if not blocks:
    raise ValueError("join_blocks needs at least one block")
  for b in blocks:
    if not isinstance(b, ScoredCandidates):
      raise ValueError(f"join_blocks takes ScoredCandidates, got {type(b).__name__}")
  if rebase_q_prime:
    missing = [k for k, b in enumerate(blocks) if b.positive_log_q is None]
    if missing:
      raise ValueError(
        f"join_blocks(rebase_q_prime=True) needs every block's positive_log_q; blocks {missing} "
        "have none"
      )
    ops = tf_ops()
    reference = tf.cast(blocks[0].positive_log_q, tf.float32)
    rebased = blocks[:1]
    for b in blocks[1:]:
      log_q = tf.cast(b.negative_log_q, tf.float32)
      # Masked entries (padding slots, accidental hits) keep their own finite log Q <= 0: the
      # shift could lift them above 0, which the loss's check of log Q rejects.
      valid = tf.broadcast_to(tf.cast(b.valid_mask, tf.bool), tf.shape(b.negative_scores))
      shifted = cross_batch_core.rebased_block_log_q(
        ops, log_q, tf.cast(b.positive_log_q, tf.float32), reference, valid
      )
      rebased.append(b._replace(negative_log_q=shifted))
    blocks = rebased
  return ScoredCandidates.concat(*blocks)


def check_queries(
  query_embeddings: tf.Tensor, positive_ids: tf.Tensor, positive_embeddings: tf.Tensor
) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """(query float32 [A, d], positive ids int64 [A], positive embeddings float32 [A, d]).

  Raises TypeError / ValueError for bad dtypes, ranks or sizes (runtime asserts when unknown).
  """
  query = as_float(query_embeddings, "query_embeddings")
  pos_ids = as_ids(positive_ids, "positive_ids")
  pos_emb = as_float(positive_embeddings, "positive_embeddings")
  check_rank(query, 2, "query_embeddings")
  check_rank(pos_ids, 1, "positive_ids")
  check_rank(pos_emb, 2, "positive_embeddings")
  deps = check_same_dim(query, 0, pos_ids, 0, "query_embeddings vs positive_ids")
  deps += check_same_dim(query, 0, pos_emb, 0, "query_embeddings vs positive_embeddings")
  deps += check_same_dim(query, 1, pos_emb, 1, "query vs positive embedding dimension")
  with tf.control_dependencies(deps):
    query = tf.identity(query)
  return query, pos_ids, pos_emb


def _check_temperature(temperature: float) -> float:
  if not temperature > 0:
    raise ValueError(f"temperature must be > 0, got {temperature!r}")
  return 1.0 / float(temperature)


def positive_scores(
  query: tf.Tensor, positive_embeddings: tf.Tensor, temperature: float = 1.0
) -> tf.Tensor:
  """<q_a, c_{p_a}> / temperature, [A] float32."""
  inv_t = _check_temperature(temperature)
  return (
    tf.reduce_sum(
      as_float(query, "query_embeddings") * as_float(positive_embeddings, "positive_embeddings"),
      axis=-1,
    )
    * inv_t
  )


def call_embedder(candidate_embedder: Callable, ids: tf.Tensor) -> tf.Tensor:
  """Embeds ids [k] with the caller's tower and checks the result is ``[k, d]`` float."""
  emb = candidate_embedder(ids)
  emb = as_float(emb, "candidate_embedder(ids)")
  check_rank(emb, ids.shape.rank + 1, "candidate_embedder(ids) (rank of ids + 1)")
  if ids.shape[0] is not None and emb.shape[0] is not None and ids.shape[0] != emb.shape[0]:
    raise ValueError(f"candidate_embedder returned {emb.shape[0]} rows for {ids.shape[0]} ids")
  return emb


def _resolve_table(
  item_table: Optional[ItemTable], keep_sharded: bool = False
) -> Optional[tf.Tensor]:
  """The table as a float32 tensor; with ``keep_sharded`` a partitioned table (ShardedVariable,
  ParameterServerStrategy) is returned as is, for row gathers shard by shard."""
  if item_table is None:
    return None
  table = item_table() if callable(item_table) else item_table
  if keep_sharded and sharded.is_sharded(table):
    check_rank(table, 2, "item_table")
    return table
  table = as_float(table, "item_table")
  check_rank(table, 2, "item_table")
  return table


def embed_ids(
  ids: tf.Tensor,
  *,
  candidate_embedder: Optional[Callable] = None,
  item_table: Optional[ItemTable] = None,
) -> tf.Tensor:
  """Embeddings ``[..., d]`` of integer ids of any shape, from the embedder or the table.

  ``candidate_embedder`` (ids [k] -> [k, d]) is preferred; otherwise rows of ``item_table``
  ([V, d] or a zero-argument callable returning it; row i embeds id i) are gathered.

  Raises:
    ValueError: neither is given.
  """
  ids = as_ids(ids, "ids")
  if candidate_embedder is not None:
    if ids.shape.rank == 1:
      return call_embedder(candidate_embedder, ids)
    flat = call_embedder(candidate_embedder, tf.reshape(ids, [-1]))
    return tf.reshape(flat, tf.concat([tf.shape(ids), tf.shape(flat)[1:]], axis=0))
  if item_table is None:
    raise ValueError("embedding negatives needs a candidate_embedder or an item_table")
  return sharded.gather_rows(_resolve_table(item_table, keep_sharded=True), ids)


def _matmul_then_gather(query: tf.Tensor, table: tf.Tensor, ids: tf.Tensor) -> tf.Tensor:
  return tf.gather(tf.matmul(query, table, transpose_b=True), ids, batch_dims=1)


def _gather_then_dot(query: tf.Tensor, table: tf.Tensor, ids: tf.Tensor) -> tf.Tensor:
  return tf.einsum("ad,akd->ak", query, tf.cast(sharded.gather_rows(table, ids), query.dtype))


_matmul_then_gather_xla = compiled.compile_function(
  _matmul_then_gather, jit_compile=True, reduce_retracing=True
)
_gather_then_dot_xla = compiled.compile_function(
  _gather_then_dot, jit_compile=True, reduce_retracing=True
)


def _num_rows(item_table: Optional[ItemTable], num_rows: Optional[int]) -> Optional[int]:
  if item_table is not None and not callable(item_table):
    rows = tf.convert_to_tensor(item_table).shape[0]
    if rows is not None:
      return int(rows)
  return num_rows


def per_query_scores(
  query_embeddings: tf.Tensor,
  ids: tf.Tensor,
  *,
  item_table: Optional[ItemTable] = None,
  candidate_embedder: Optional[Callable] = None,
  num_rows: Optional[int] = None,
  jit_compile: bool = False,
) -> tf.Tensor:
  """<q_a, c_{ids[a, j]}> for per-query negative ids ``[A, k]`` -> ``[A, k]`` float32.

  Path (module docstring): with ``item_table`` and ``V <= MATMUL_GATHER_RATIO * k * d`` one
  ``[A, V]`` matmul + gather; otherwise the ``[A, k, d]`` embeddings are gathered from
  ``item_table`` (a tensor) or embedded with ``candidate_embedder`` and contracted.

  Args:
    query_embeddings: float ``[A, d]``.
    ids: integer ``[A, k]``, rows of the table (ids index it directly).
    item_table: optional ``[V, d]`` tensor, or a zero-argument callable returning it (called only
      when a table path is taken; then ``num_rows`` gives V for the choice).
    candidate_embedder: optional callable ids ``[m]`` -> ``[m, d]``.
    num_rows: V when ``item_table`` is a callable or has an unknown static size.
    jit_compile: run the table paths as XLA-compiled functions (ignored while the caller is
      itself being compiled by XLA: it is already one program).

  Raises:
    ValueError: neither ``item_table`` nor ``candidate_embedder``.
  """
  query = as_float(query_embeddings, "query_embeddings")
  ids = as_ids(ids, "ids")
  check_rank(query, 2, "query_embeddings")
  check_rank(ids, 2, "ids")
  if item_table is None and candidate_embedder is None:
    raise ValueError("per-query scoring needs an item_table or a candidate_embedder")
  k, d = ids.shape[-1], query.shape[-1]
  v = _num_rows(item_table, num_rows)
  cheap = None not in (k, d, v) and v <= MATMUL_GATHER_RATIO * k * d
  # Inside a program XLA already compiles, a nested jit function would be compiled again at
  # every call of the outer one (measured: the whole train step recompiled at every step).
  jit_compile = jit_compile and not _static_shapes.in_xla_context()
  if item_table is not None and cheap:
    fn = _matmul_then_gather_xla if jit_compile else _matmul_then_gather
    return fn(query, _resolve_table(item_table), ids)
  if item_table is not None and (candidate_embedder is None or not callable(item_table)):
    table = _resolve_table(item_table, keep_sharded=True)
    if sharded.is_sharded(table):  # only the k rows of each query are read, shard by shard
      return _gather_then_dot(query, table, ids)
    fn = _gather_then_dot_xla if jit_compile else _gather_then_dot
    return fn(query, table, ids)
  emb = embed_ids(ids, candidate_embedder=candidate_embedder)
  return tf.einsum("ad,akd->ak", query, emb)


def per_segment_scores(
  query_embeddings: tf.Tensor, segment_ids: tf.Tensor, embeddings: tf.Tensor
) -> tf.Tensor:
  """Scores of A queries against the negatives of their segment (sequence): ``[A, k]``.

  ``out[a, j] = <q_a, embeddings[segment_ids[a], j]>``. The queries are placed in a padded
  ``[U, L, d]`` block (L = the largest segment) and scored with one batched matmul against
  ``embeddings [U, k, d]``; any order of ``segment_ids`` works.

  Args:
    query_embeddings: float ``[A, d]``.
    segment_ids: integer ``[A]`` in ``[0, U)``.
    embeddings: float ``[U, k, d]``.
  """
  query = as_float(query_embeddings, "query_embeddings")
  emb = as_float(embeddings, "embeddings")
  seg = tf.cast(segment_ids, tf.int32)
  num_segments = tf.shape(emb)[0]
  a = tf.shape(query)[0]
  order = tf.argsort(seg, stable=True)
  counts = tf.math.bincount(seg, minlength=num_segments, maxlength=num_segments, dtype=tf.int32)
  starts = tf.cumsum(counts, exclusive=True)
  sorted_seg = tf.gather(seg, order)
  rank_sorted = tf.range(a, dtype=tf.int32) - tf.gather(starts, sorted_seg)
  rank = tf.scatter_nd(order[:, tf.newaxis], rank_sorted, tf.shape(seg))
  index = tf.stack([seg, rank], axis=1)  # [A, 2]
  block_shape = tf.stack([num_segments, tf.reduce_max(counts), tf.shape(query)[1]])
  block = tf.scatter_nd(index, query, block_shape)  # [U, L, d]
  return tf.gather_nd(tf.matmul(block, emb, transpose_b=True), index)  # [A, k]


def score_negatives(
  query_embeddings: tf.Tensor,
  positive_ids: tf.Tensor,
  positive_embeddings: tf.Tensor,
  negatives: Negatives,
  *,
  temperature: float = 1.0,
  positive_log_q: Optional[tf.Tensor] = None,
  apply_q_prime: bool = False,
  remove_accidental_hits: bool = True,
) -> ScoredCandidates:
  """Positive / negative scores, log Q (or log Q') and the accidental-hit mask of A queries.

  Args:
    query_embeddings: float ``[A, d]``.
    positive_ids: integer ``[A]``.
    positive_embeddings: float ``[A, d]``.
    negatives: a `Negatives`, shared (``ids [N]``) or per query (``ids [A, N]``).
    temperature: scores are divided by it (> 0).
    positive_log_q: optional float ``[A]``, log Q(p_a); defaults to
      ``negatives.positive_log_q``. Needed when ``apply_q_prime``.
    apply_q_prime: return log Q' = log Q - log(1 - Q(p_a)) ([A, N]) instead of log Q.
    remove_accidental_hits: when False, ``valid_mask`` is all True.

  Returns:
    `ScoredCandidates` (positive_scores [A], negative_scores [A, N], negative_log_q [N] or
    [A, N], valid_mask bool [A, N], positive_log_q [A] or None).

  Raises:
    TypeError / ValueError: dtypes, ranks or sizes that do not match, temperature <= 0,
      ``apply_q_prime`` without a positive log Q.
  """
  inv_t = _check_temperature(temperature)
  negatives = validate_negatives(negatives)
  query, pos_ids, pos_emb = check_queries(query_embeddings, positive_ids, positive_embeddings)
  deps = check_same_dim(query, 1, negatives.embeddings, -1, "query vs negative embedding dimension")
  if not negatives.shared:
    deps += check_same_dim(query, 0, negatives.ids, 0, "query_embeddings vs per-query negatives")
  if positive_log_q is None:
    positive_log_q = negatives.positive_log_q
  if positive_log_q is not None:
    positive_log_q = as_float(positive_log_q, "positive_log_q")
    check_rank(positive_log_q, 1, "positive_log_q")
    deps += check_same_dim(query, 0, positive_log_q, 0, "query_embeddings vs positive_log_q")
  with tf.control_dependencies(deps):
    query = tf.identity(query)

  pos_scores = tf.reduce_sum(query * pos_emb, axis=-1) * inv_t
  if negatives.shared:
    negative_scores = tf.matmul(query, negatives.embeddings, transpose_b=True) * inv_t
  else:
    negative_scores = tf.einsum("ad,and->an", query, negatives.embeddings) * inv_t
  if remove_accidental_hits:
    valid = accidental_hits.accidental_hit_mask(pos_ids, negatives.ids)
    valid = tf.broadcast_to(valid, tf.shape(negative_scores))
  else:
    valid = tf.ones_like(negative_scores, dtype=tf.bool)
  if negatives.valid is not None:  # padding slots of a static-shape pool
    valid = tf.logical_and(valid, negatives.valid)
  negative_log_q = negatives.log_q
  if apply_q_prime:
    if positive_log_q is None:
      raise ValueError("apply_q_prime needs positive_log_q (argument or Negatives.positive_log_q)")
    negative_log_q = log_q_lib.log_q_prime(negative_log_q, positive_log_q)
  return ScoredCandidates(pos_scores, negative_scores, negative_log_q, valid, positive_log_q)


def task_candidates(
  positive_ids: tf.Tensor,
  positive_embeddings: tf.Tensor,
  positive_log_q: tf.Tensor,
  negatives: Negatives,
) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """Candidate rows for the drop-in task: the A positives, then the N shared negatives.

  ``tfrs_logq.tf_keras.Retrieval`` scores every query against all rows; rows ``0..A-1``
  are the batch's positives (its own in-batch negatives, as in TFRS) and rows beyond ``A`` are extra
  shared negatives. So pass here negatives that the batch rows do not already provide (e.g. the
  uniform ones, or in-batch negatives from other replicas), not a second copy of the batch.

  Returns:
    ``(candidate_ids [A + N] int64, candidate_embeddings [A + N, d] float32,
    candidate_log_q [A + N] float32)``.

  Raises:
    ValueError: per-query negatives (the task takes only shared rows) or mismatched shapes.
  """
  negatives = validate_negatives(negatives)
  if not negatives.shared or negatives.log_q.shape.rank != 1:
    raise ValueError(
      "task_candidates needs shared negatives (ids [N], log_q [N]); use "
      "score_negatives for per-query negatives"
    )
  if negatives.valid is not None:
    raise ValueError(
      "task_candidates takes negatives without padding slots (Negatives.valid is "
      "set, a static-shape pool); use score_negatives, which masks them"
    )
  pos_ids = as_ids(positive_ids, "positive_ids")
  pos_emb = as_float(positive_embeddings, "positive_embeddings")
  pos_log_q = as_float(positive_log_q, "positive_log_q")
  check_rank(pos_ids, 1, "positive_ids")
  check_rank(pos_emb, 2, "positive_embeddings")
  check_rank(pos_log_q, 1, "positive_log_q")
  deps = check_same_dim(pos_ids, 0, pos_emb, 0, "positive_ids vs positive_embeddings")
  deps += check_same_dim(pos_ids, 0, pos_log_q, 0, "positive_ids vs positive_log_q")
  deps += check_same_dim(pos_emb, 1, negatives.embeddings, 1, "embedding dimension")
  with tf.control_dependencies(deps):
    pos_ids = tf.identity(pos_ids)
  return (
    tf.concat([pos_ids, negatives.ids], 0),
    tf.concat([pos_emb, negatives.embeddings], 0),
    tf.concat([pos_log_q, negatives.log_q], 0),
  )
