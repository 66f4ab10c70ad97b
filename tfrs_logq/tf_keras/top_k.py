"""Retrieval metrics with rated-item filtering (the paper's evaluation protocol), tf-keras front.

The protocol, the metrics and their numpy functions are `tfrs_logq.core.ranking`'s (re-exported
here). ``exact_top_k`` is the one exact (brute-force) filtered top-k of the tf-keras front:
`tfrs_logq.core.top_k` compiled with TensorFlow, chunked over queries and items
(`ranking.exact_top_k_np` is the same search in numpy); ``filtered_top_k_tf`` masks and ranks
a score matrix already computed. ``recall_at_k_tf`` / ``ndcg_at_k_tf`` are TensorFlow
counterparts of the numpy metrics (checked against numpy in tests).
"""

import functools
from typing import Callable, Optional, Tuple

from tfrs_logq.tf_keras import compiled

import numpy as np
import numpy.typing as npt
import tensorflow as tf

from tfrs_logq.core import ops as ops_lib
from tfrs_logq.core import top_k as top_k_lib
from tfrs_logq.core.ranking import (  # re-exported: the numpy metrics
  EMPTY_SLOT,
  PAD_ID,
  History,
  as_item_table,
  as_queries,
  filter_rated,
  filtered_top_k_from_scores,
  mean_by_group,
  multi_target_recall_at_k,
  ndcg_at_k,
  popularity_deciles,
  recall_at_k,
  retrieval_metrics,
  target_ranks,
)

__all__ = [
  "EMPTY_SLOT",
  "PAD_ID",
  "as_item_table",
  "as_queries",
  "exact_top_k",
  "filter_rated",
  "filtered_top_k_from_scores",
  "filtered_top_k_tf",
  "mean_by_group",
  "multi_target_recall_at_k",
  "ndcg_at_k",
  "ndcg_at_k_tf",
  "popularity_deciles",
  "recall_at_k",
  "recall_at_k_tf",
  "retrieval_metrics",
  "target_ranks",
]


def filtered_top_k_tf(
  scores: tf.Tensor, history: tf.Tensor, k: int, targets: Optional[tf.Tensor] = None
) -> Tuple[tf.Tensor, tf.Tensor]:
  """TensorFlow exact filtered top-k: masks H_u (except t_u when ``targets`` is given) and
  padding id 0, then top_k.

  Args:
    scores: float [Q, V] scores s(u, d) for item ids d = 0..V-1.
    history: int [Q, L] rated items (0 = padding).
    k: number of items (<= V - 1).
    targets: optional int [Q], never masked (the "except target" protocol).
  Returns:
    (ids int64 [Q, k], scores float32 [Q, k]); masked items score float32 min, so a slot
    holds a masked item only when fewer than k items are allowed (its id is then set to -1).
  """
  scores = tf.convert_to_tensor(scores, tf.float32)
  history = tf.cast(tf.convert_to_tensor(history), tf.int64)
  low = tf.constant(np.finfo(np.float32).min, tf.float32)
  num_q = tf.shape(scores, out_type=tf.int64)[0]
  rows = tf.repeat(tf.range(num_q), tf.shape(history, out_type=tf.int64)[1])
  cols = tf.reshape(history, [-1])
  drop = tf.ones_like(cols, tf.bool)
  if targets is not None:
    targets = tf.cast(tf.convert_to_tensor(targets), tf.int64)
    drop = tf.not_equal(cols, tf.gather(targets, rows))
  idx = tf.stack([tf.boolean_mask(rows, drop), tf.boolean_mask(cols, drop)], axis=1)
  masked = tf.tensor_scatter_nd_update(scores, idx, tf.fill([tf.shape(idx)[0]], low))
  masked = tf.concat([tf.fill([tf.shape(scores)[0], 1], low), masked[:, 1:]], axis=1)
  top_scores, top_ids = tf.math.top_k(masked, k=k)
  top_ids = tf.cast(top_ids, tf.int64)
  top_ids = tf.where(top_scores > low, top_ids, tf.constant(EMPTY_SLOT, tf.int64))
  return top_ids, top_scores


def exact_top_k(
  queries: npt.ArrayLike,
  item_embeddings: npt.ArrayLike,
  k: int,
  rated: Optional[History] = None,
  targets: Optional[npt.ArrayLike] = None,
  chunk_size: Optional[int] = None,
  max_chunk_scores: int = 1 << 25,
  item_chunk: Optional[int] = None,
) -> Tuple[np.ndarray, np.ndarray]:
  """Exact top-k by dot product s(u, d) = <q_u, c_d> over item ids 1..N, rated items filtered,
  ties lower id first: `tfrs_logq.core.top_k`'s search in one compiled TensorFlow program per
  shape, ``chunk_size`` queries per call (default: at most ``max_chunk_scores`` scores per call,
  128 MB of float32, and at most 1,024 queries), the catalog in chunks of ``item_chunk`` items
  (default: the most that keep chunk_size * item_chunk <= max_chunk_scores), so memory stays
  bounded whatever N. Padding id 0 is never returned.

  Args:
    queries: float [Q, d].
    item_embeddings: float [N + 1, d], row 0 = padding.
    k: items per query, 1 <= k <= N.
    rated: optional Q int arrays (or int [Q, L], 0 = padding): H_u, removed from the ranking.
    targets: optional int [Q], never removed (the "except target" protocol; see module doc).
    chunk_size: queries per call.
    max_chunk_scores: bound on the scores of one item chunk.
    item_chunk: items per chunk (>= k).
  Returns:
    (ids int64 [Q, k], scores float32 [Q, k]); -1 for slots left empty.
  """
  lay = top_k_lib.layout(
    queries, item_embeddings, k, rated, targets, chunk_size, item_chunk, max_chunk_scores
  )
  table = tf.constant(lay.table)
  fn = _compiled_top_k(k, lay.num_items, lay.item_chunk)
  return top_k_lib.run_layout(lay, lambda q, r: fn(q, table, r), lambda x: x.numpy())


@functools.lru_cache(maxsize=None)
def _compiled_top_k(
  k: int, num_items: int, item_chunk: int
) -> Callable[[tf.Tensor, tf.Tensor, tf.Tensor], Tuple[tf.Tensor, tf.Tensor]]:
  """`core.top_k.filtered_top_k` as a tf.function (one trace per shape)."""
  return compiled.compile_function(
    functools.partial(
      top_k_lib.filtered_top_k, ops_lib.tf_ops(), k=k, num_items=num_items, item_chunk=item_chunk
    )
  )


def recall_at_k_tf(ranked_ids: tf.Tensor, targets: tf.Tensor, k: int) -> tf.Tensor:
  """TF Recall@k = 1[r_u < k], float32 [Q]."""
  ranked_ids = tf.cast(ranked_ids, tf.int64)[:, :k]
  targets = tf.cast(targets, tf.int64)[:, None]
  return tf.cast(tf.reduce_any(tf.equal(ranked_ids, targets), axis=1), tf.float32)


def ndcg_at_k_tf(ranked_ids: tf.Tensor, targets: tf.Tensor, k: int) -> tf.Tensor:
  """TF NDCG@k = 1[r_u < k] / log2(r_u + 2), float32 [Q]."""
  ranked_ids = tf.cast(ranked_ids, tf.int64)[:, :k]
  hits = tf.cast(tf.equal(ranked_ids, tf.cast(targets, tf.int64)[:, None]), tf.float32)
  positions = tf.cast(tf.range(tf.shape(ranked_ids)[1]), tf.float32)
  discounts = tf.math.log(2.0) / tf.math.log(positions + 2.0)
  return tf.reduce_sum(hits * discounts[None, :], axis=1)
