r"""Exact filtered top-k over a whole catalog, on the device, chunked over items (any backend).

For one chunk of queries q_u [B, d] and the item table C [V, d] (row d holds item id d; row 0 is
padding; rows above N pad the table to a whole number of item chunks), with s(u, d) = <q_u, c_d>
and R_u the query's rated items (``rated`` int [B, H], 0 = padding; the "except target" protocol
passes R_u without t_u), the allowed items and the result are

    A_u      = {d : 1 <= d <= N, d not in R_u}
    top_k(u) = the first k items of A_u ordered by (-s(u, d), d)      (ties: lower id first)

(`tfrs_logq.core.ranking`'s protocol: `ranking.exact_top_k_np` is the same search in numpy and
the oracle of the tests). Items are taken ``item_chunk`` = C_i at a time: chunk c = [o, o + C_i)
is scored [B, C_i], its rated items are found with one scatter of the rows' rated ids that fall
in the chunk (ids outside it go to a spare column C_i), disallowed items take the score LOW, and
its own top k is merged with the running top k (the running list first: its ids are lower, so a
stable top_k keeps the lower id on a tie). Memory: B (C_i + 1) scores and counts at a time, and
B 2k for the merge, whatever V. A slot that no allowed item fills (fewer than k allowed) holds
id -1 (``ranking.EMPTY_SLOT``) and score LOW = float32 min, as in the numpy search.

Host side (numpy, no framework): `layout` checks the arguments (``ranking.check_top_k_args``)
and lays them out in static shapes: queries padded to a whole number of query chunks, the rated
rows as int32 [Q, H], the table padded to a whole number of item chunks. A front compiles
`filtered_top_k` once per (B, V, H, k) and calls it per query chunk (`tfrs_logq.tf_keras.top_k`,
`tfrs_logq.keras3.top_k`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Tuple

import numpy as np
import numpy.typing as npt

from tfrs_logq.core import ranking
from tfrs_logq.core.ops import Ops, Tensor

__all__ = ["LOW", "TopKLayout", "filtered_top_k", "item_chunk_size", "layout", "run_layout"]

LOW = float(np.finfo(np.float32).min)


class TopKLayout(NamedTuple):
  """The static-shape arguments of `filtered_top_k` for a whole query set."""

  queries: np.ndarray  # float32 [Qp, d], Qp a multiple of chunk_size (padding rows zero)
  table: np.ndarray  # float32 [V, d], V = N + 1 or a multiple of item_chunk
  rated: np.ndarray  # int32 [Qp, H], 0 = padding
  num_queries: int  # Q, the real queries (rows 0..Q-1)
  num_items: int  # N
  chunk_size: int  # B, queries per call
  item_chunk: int  # C_i, items per chunk


def item_chunk_size(
  num_rows: int,
  k: int,
  chunk_size: int,
  item_chunk: Optional[int] = None,
  max_chunk_scores: int = 1 << 25,
) -> int:
  """C_i: ``item_chunk`` if given, else the most items with chunk_size * C_i <= max_chunk_scores
  (128 MB of float32 by default), never below k nor above the table's rows."""
  if item_chunk is None:
    item_chunk = max_chunk_scores // max(chunk_size, 1)
  item_chunk = int(item_chunk)
  if item_chunk < k:
    raise ValueError(f"item_chunk={item_chunk} must be >= k={k}")
  return min(item_chunk, num_rows)


def layout(
  queries: npt.ArrayLike,
  item_embeddings: npt.ArrayLike,
  k: int,
  rated: Optional[ranking.History] = None,
  targets: Optional[npt.ArrayLike] = None,
  chunk_size: Optional[int] = None,
  item_chunk: Optional[int] = None,
  max_chunk_scores: int = 1 << 25,
) -> TopKLayout:
  """Checks the arguments of an exact top-k (those of ``ranking.exact_top_k_np``, plus
  ``item_chunk``) and returns their `TopKLayout`. With ``targets``, t_u is left out of R_u."""
  emb, q, rows, targets, chunk_size = ranking.check_top_k_args(
    queries, item_embeddings, k, rated, targets, chunk_size, max_chunk_scores
  )
  num_q, num_items = q.shape[0], emb.shape[0] - 1
  chunk_size = min(chunk_size, num_q)
  c_i = item_chunk_size(emb.shape[0], k, chunk_size, item_chunk, max_chunk_scores)
  if c_i < emb.shape[0]:  # several chunks: pad the table to a whole number of them
    pad = -emb.shape[0] % c_i
    emb = np.concatenate([emb, np.zeros((pad, emb.shape[1]), np.float32)])
  q_pad = -num_q % chunk_size
  q = np.concatenate([q, np.zeros((q_pad, q.shape[1]), np.float32)]) if q_pad else q
  width = 1 if rows is None else max(1, max((r.size for r in rows), default=1))
  mat = np.zeros((num_q + q_pad, width), np.int32)
  if rows is not None:
    for j, r in enumerate(rows):
      if targets is not None:
        r = np.where(r == targets[j], 0, r)
      mat[j, : r.size] = r
  return TopKLayout(q, emb, mat, num_q, num_items, chunk_size, c_i)


def filtered_top_k(
  ops: Ops,
  queries: Tensor,
  table: Tensor,
  rated: Tensor,
  *,
  k: int,
  num_items: int,
  item_chunk: int,
) -> Tuple[Tensor, Tensor]:
  """(ids int32 [B, k], scores [B, k]) of the module's formula for one query chunk.

  Args:
    ops: the array namespace (``keras.ops`` or ``core.ops.tf_ops()``).
    queries: float [B, d].
    table: float [V, d], V = N + 1 or a multiple of ``item_chunk`` (rows > N are ignored).
    rated: int32 [B, H] rated ids (0 = padding).
    k, num_items, item_chunk: Python ints (static): k <= item_chunk.
  """
  num_rows = int(table.shape[0])
  batch = int(queries.shape[0])
  rows = ops.expand_dims(ops.arange(batch, dtype="int32"), 1) + ops.zeros_like(rated)
  rows = ops.reshape(rows, [-1])
  flat_rated = ops.reshape(rated, [-1])
  best_scores = best_ids = None
  for start in range(0, num_rows, item_chunk):
    width = min(item_chunk, num_rows - start)
    scores = ops.matmul(queries, ops.transpose(table[start : start + width]))
    local = flat_rated - start
    inside = ops.logical_and(local >= 0, local < width)
    col = ops.where(inside, local, width)
    counts = ops.scatter(ops.stack([rows, col], axis=1), ops.ones_like(col), (batch, width + 1))
    ids = ops.arange(start, start + width, dtype="int32")
    outside = ops.logical_or(ops.equal(ids, 0), ids > num_items)
    drop = ops.logical_or(counts[:, :width] > 0, ops.expand_dims(outside, 0))
    scores = ops.where(drop, LOW, scores)
    top, pos = ops.top_k(scores, min(k, width), sorted=True)
    top_ids = ops.cast(pos, "int32") + start
    if best_scores is None:
      best_scores, best_ids = top, top_ids
    else:
      merged = ops.concatenate([best_scores, top], axis=1)
      merged_ids = ops.concatenate([best_ids, top_ids], axis=1)
      best_scores, pos = ops.top_k(merged, k, sorted=True)
      best_ids = ops.take_along_axis(merged_ids, ops.cast(pos, "int32"), axis=-1)
  if best_scores is None:  # unreachable: the layout has at least one item chunk
    raise ValueError("filtered_top_k needs at least one item chunk")
  best_ids = ops.where(best_scores > LOW, best_ids, ranking.EMPTY_SLOT)
  return best_ids, best_scores


def run_layout(
  lay: TopKLayout,
  call: Callable[[np.ndarray, np.ndarray], Tuple[Tensor, Tensor]],
  to_numpy: Callable[[Tensor], npt.ArrayLike],
) -> Tuple[np.ndarray, np.ndarray]:
  """(ids int64 [Q, k], scores float32 [Q, k]): ``call(queries, rated)`` (a front's compiled
  `filtered_top_k` with the table bound) on each query chunk of ``lay``; every call is issued
  before the first result is read (``to_numpy``), so an asynchronous backend pipelines them."""
  outs = [
    call(lay.queries[s : s + lay.chunk_size], lay.rated[s : s + lay.chunk_size])
    for s in range(0, lay.queries.shape[0], lay.chunk_size)
  ]
  ids = np.concatenate([np.asarray(to_numpy(i)) for i, _ in outs])[: lay.num_queries]
  scores = np.concatenate([np.asarray(to_numpy(s)) for _, s in outs])[: lay.num_queries]
  return ids.astype(np.int64), scores.astype(np.float32)
