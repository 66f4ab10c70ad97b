r"""Ranking metrics with rated-item filtering, and the exact filtered top-k, in numpy.

Protocol (gSASRec / "Correcting the LogQ Correction", §4.1): every query u has one held-out
target t_u and an input history H_u (the items u already rated). All items are scored by
s(u, d) = <q_u, c_d>, the items of H_u are removed from the ranking ("filter rated"), and the
metrics are averaged over queries:

* filtering: every item of H_u is removed, the target too when it also occurs in H_u (gSASRec's
  ``filter_rated``; with repeat consumption such a query then scores 0). Passing ``targets=`` to
  the filtering functions instead never removes t_u (the "except target" variant);
* rank r_u: the 0-based position of t_u in the filtered ranking (r_u = inf when t_u is not
  among the retrieved items);
* Recall@k(u) = 1[r_u < k]            (one target: hit rate);
* NDCG@k(u)   = 1[r_u < k] / log2(r_u + 2)   (the ideal DCG of one relevant item is 1);
* multi-target Recall@k(u) = |top_k(u) ∩ T_u| / |T_u| for a set T_u of held-out items.

Item ids are integers >= 1; id 0 is padding and is never recommended. Ranked lists are
int arrays [Q, K] of item ids, best first; -1 marks an empty slot (it never matches).

numpy only, no framework: the tf-keras front (`tfrs_logq.tf_keras.top_k`) re-exports these and adds
its TensorFlow top-k; `exact_top_k_np` is the same exact search as
`tfrs_logq.tf_keras.top_k.exact_top_k` (same checks, same ties: lower id first) for the Keras 3
binary, which runs without TensorFlow.
"""

from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__all__ = [
  "EMPTY_SLOT",
  "PAD_ID",
  "as_item_table",
  "as_queries",
  "check_top_k_args",
  "exact_top_k_np",
  "filter_rated",
  "filtered_top_k_from_scores",
  "mean_by_group",
  "multi_target_recall_at_k",
  "ndcg_at_k",
  "popularity_deciles",
  "recall_at_k",
  "retrieval_metrics",
  "target_ranks",
]

PAD_ID = 0
EMPTY_SLOT = -1

History = Union[np.ndarray, Sequence[np.ndarray]]


def _as_int_array(x: npt.ArrayLike, name: str, ndim: int) -> np.ndarray:
  x = np.asarray(x)
  if x.dtype.kind not in "iu":
    raise ValueError(f"{name} must hold integer item ids, got dtype {x.dtype}")
  if x.ndim != ndim:
    raise ValueError(f"{name} must be {ndim}-D, got shape {x.shape}")
  return x.astype(np.int64, copy=False)


def _check_lists(
  ranked_ids: npt.ArrayLike, targets: npt.ArrayLike
) -> Tuple[np.ndarray, np.ndarray]:
  ranked_ids = _as_int_array(ranked_ids, "ranked_ids", 2)
  targets = _as_int_array(targets, "targets", 1)
  if ranked_ids.shape[0] == 0:
    raise ValueError("empty batch: ranked_ids has no rows")
  if ranked_ids.shape[0] != targets.shape[0]:
    raise ValueError(
      f"ranked_ids has {ranked_ids.shape[0]} rows but targets has {targets.shape[0]}"
    )
  if np.any(targets <= PAD_ID):
    raise ValueError("targets must be item ids >= 1 (0 is padding)")
  return ranked_ids, targets


def _check_k(k: int, list_len: int) -> None:
  if int(k) != k or k < 1:
    raise ValueError(f"k must be a positive integer, got {k}")
  if k > list_len:
    raise ValueError(f"k={k} exceeds the ranked list length {list_len}: retrieve at least k items")


def target_ranks(ranked_ids: npt.ArrayLike, targets: npt.ArrayLike) -> np.ndarray:
  """0-based rank r_u of each target in its ranked list, or -1 when it is absent.

  Args:
    ranked_ids: int [Q, K] item ids, best first (already filtered).
    targets: int [Q] held-out item ids (>= 1).
  Returns:
    int64 [Q].
  """
  ranked_ids, targets = _check_lists(ranked_ids, targets)
  hits = ranked_ids == targets[:, None]
  return np.where(hits.any(axis=1), hits.argmax(axis=1), -1).astype(np.int64)


def recall_at_k(ranked_ids: npt.ArrayLike, targets: npt.ArrayLike, k: int) -> np.ndarray:
  """Per-query Recall@k = 1[r_u < k] for one held-out target. float32 [Q]."""
  ranked_ids, targets = _check_lists(ranked_ids, targets)
  _check_k(k, ranked_ids.shape[1])
  return np.any(ranked_ids[:, :k] == targets[:, None], axis=1).astype(np.float32)


def ndcg_at_k(ranked_ids: npt.ArrayLike, targets: npt.ArrayLike, k: int) -> np.ndarray:
  """Per-query NDCG@k = 1[r_u < k] / log2(r_u + 2) for one held-out target. float32 [Q]."""
  ranked_ids, targets = _check_lists(ranked_ids, targets)
  _check_k(k, ranked_ids.shape[1])
  ranks = target_ranks(ranked_ids, targets)
  hit = (ranks >= 0) & (ranks < k)
  gain = 1.0 / np.log2(np.where(hit, ranks, 0) + 2.0)
  return np.where(hit, gain, 0.0).astype(np.float32)


def multi_target_recall_at_k(
  ranked_ids: npt.ArrayLike, target_sets: Sequence[np.ndarray], k: int
) -> np.ndarray:
  """Per-query Recall@k = |top_k(u) ∩ T_u| / |T_u| for sets of held-out items. float32 [Q].

  Args:
    ranked_ids: int [Q, K] item ids, best first.
    target_sets: Q integer arrays (duplicates count once; each set must be non-empty).
    k: cut-off.
  """
  ranked_ids = _as_int_array(ranked_ids, "ranked_ids", 2)
  if ranked_ids.shape[0] == 0:
    raise ValueError("empty batch: ranked_ids has no rows")
  if len(target_sets) != ranked_ids.shape[0]:
    raise ValueError(f"{len(target_sets)} target sets for {ranked_ids.shape[0]} ranked lists")
  _check_k(k, ranked_ids.shape[1])
  out = np.zeros(ranked_ids.shape[0], np.float32)
  for q, targets in enumerate(target_sets):
    t = np.unique(_as_int_array(targets, "target set", 1))
    if t.size == 0:
      raise ValueError(f"target set {q} is empty")
    if np.any(t <= PAD_ID):
      raise ValueError("targets must be item ids >= 1 (0 is padding)")
    out[q] = np.isin(t, ranked_ids[q, :k]).sum() / t.size
  return out


def retrieval_metrics(
  ranked_ids: npt.ArrayLike, targets: npt.ArrayLike, ks: Sequence[int] = (10, 20, 100)
) -> Dict[str, float]:
  """Means over queries: {"recall@k": ..., "ndcg@k": ...} for each k in ks."""
  out = {}
  for k in ks:
    out[f"recall@{k}"] = float(np.mean(recall_at_k(ranked_ids, targets, k)))
    out[f"ndcg@{k}"] = float(np.mean(ndcg_at_k(ranked_ids, targets, k)))
  return out


def _history_rows(history: History, num_queries: int) -> List[np.ndarray]:
  if isinstance(history, np.ndarray) and history.ndim == 2:
    rows = list(history)
  else:
    rows = list(history)
  if len(rows) != num_queries:
    raise ValueError(f"history has {len(rows)} rows for {num_queries} queries")
  return [_as_int_array(r, "history row", 1) for r in rows]


def filter_rated(
  ranked_ids: npt.ArrayLike,
  ranked_scores: npt.ArrayLike,
  history: History,
  k: int,
  targets: Optional[npt.ArrayLike] = None,
) -> Tuple[np.ndarray, np.ndarray]:
  """Removes rated items (and padding id 0) from over-fetched ranked lists, keeps the top k.

  An approximate index cannot exclude items per query, so it retrieves K >= k + |H_u|
  candidates (over-fetching) and this function drops the ones in H_u afterwards; with
  K >= k + |unique(H_u)| at least k items remain whenever the catalog has them.
  Every rated item is removed; with ``targets`` the target t_u never is. Slots that stay
  empty get id -1 and score float32 min (finite).

  Args:
    ranked_ids: int [Q, K] item ids, best first.
    ranked_scores: float [Q, K] their scores.
    history: int [Q, L] (0 = padding) or a list of Q int arrays: the rated items.
    k: number of items to keep.
    targets: optional int [Q]: never filtered (the "except target" protocol).
  Returns:
    (ids int64 [Q, k], scores float32 [Q, k]).
  """
  ranked_ids = _as_int_array(ranked_ids, "ranked_ids", 2)
  ranked_scores = np.asarray(ranked_scores, np.float32)
  if ranked_scores.shape != ranked_ids.shape:
    raise ValueError(
      f"ranked_scores shape {ranked_scores.shape} != ranked_ids shape {ranked_ids.shape}"
    )
  num_q = ranked_ids.shape[0]
  if num_q == 0:
    raise ValueError("empty batch: ranked_ids has no rows")
  if int(k) != k or k < 1:
    raise ValueError(f"k must be a positive integer, got {k}")
  rows = _history_rows(history, num_q)
  if targets is not None:
    targets = _as_int_array(targets, "targets", 1)
    if targets.shape[0] != num_q:
      raise ValueError(f"targets has {targets.shape[0]} rows for {num_q} queries")
  out_ids = np.full((num_q, k), EMPTY_SLOT, np.int64)
  out_scores = np.full((num_q, k), np.finfo(np.float32).min, np.float32)
  for q in range(num_q):
    removed = rows[q]
    if targets is not None:
      removed = removed[removed != targets[q]]
    keep = ~np.isin(ranked_ids[q], removed) & (ranked_ids[q] > PAD_ID)
    ids, scores = ranked_ids[q][keep][:k], ranked_scores[q][keep][:k]
    out_ids[q, : ids.size] = ids
    out_scores[q, : ids.size] = scores
  return out_ids, out_scores


def filtered_top_k_from_scores(
  scores: npt.ArrayLike, history: History, k: int, targets: Optional[npt.ArrayLike] = None
) -> Tuple[np.ndarray, np.ndarray]:
  """Exact filtered top-k from a full score matrix (numpy reference).

  scores[u, d] is s(u, d) for item id d (column 0 = padding, never returned). Items in
  H_u (except t_u when ``targets`` is given) are excluded, then the k best remain, best first
  (ties: lower id first).

  Returns:
    (ids int64 [Q, k], scores float32 [Q, k]); empty slots as in ``filter_rated``.
  """
  scores = np.array(scores, np.float32)
  if scores.ndim != 2 or scores.shape[0] == 0 or scores.shape[1] < 2:
    raise ValueError(f"scores must be [Q >= 1, num_items + 1 >= 2], got {scores.shape}")
  num_q, vocab = scores.shape
  rows = _history_rows(history, num_q)
  if targets is not None:
    targets = _as_int_array(targets, "targets", 1)
  allowed = np.ones_like(scores, dtype=bool)
  allowed[:, PAD_ID] = False
  for q in range(num_q):
    h = rows[q]
    if np.any((h < 0) | (h >= vocab)):
      raise ValueError(f"history of query {q} has ids outside [0, {vocab})")
    if targets is not None:
      h = h[h != targets[q]]
    allowed[q, h] = False
  ids = np.full((num_q, k), EMPTY_SLOT, np.int64)
  out = np.full((num_q, k), np.finfo(np.float32).min, np.float32)
  for q in range(num_q):
    cand = np.flatnonzero(allowed[q])
    order = cand[np.lexsort((cand, -scores[q, cand]))][:k]
    ids[q, : order.size] = order
    out[q, : order.size] = scores[q, order]
  return ids, out


def as_item_table(item_embeddings: npt.ArrayLike) -> np.ndarray:
  """Checks an item table float [num_items + 1, d] (row 0 = padding); float32, contiguous."""
  emb = np.asarray(item_embeddings)
  if emb.ndim != 2 or emb.shape[0] < 2:
    raise ValueError(
      f"item_embeddings must be [num_items + 1 >= 2, d] with row 0 = padding, got shape {emb.shape}"
    )
  if emb.dtype.kind != "f":
    raise ValueError(f"item_embeddings must be floating point, got {emb.dtype}")
  emb = np.ascontiguousarray(emb, dtype=np.float32)
  if not np.all(np.isfinite(emb)):
    raise ValueError("item_embeddings contain NaN or inf")
  return emb


def as_queries(queries: npt.ArrayLike, dim: int) -> np.ndarray:
  """Checks query embeddings float [Q >= 1, dim]; float32, contiguous."""
  q = np.ascontiguousarray(np.asarray(queries, np.float32))
  if q.ndim != 2 or q.shape[1] != dim:
    raise ValueError(f"queries must be [Q, {dim}], got shape {q.shape}")
  if q.shape[0] == 0:
    raise ValueError("empty batch: no queries")
  if not np.all(np.isfinite(q)):
    raise ValueError("queries contain NaN or inf")
  return q


def popularity_deciles(item_counts: npt.ArrayLike, num_bins: int = 10) -> np.ndarray:
  """Popularity bin of every item id: 0 = the most popular tenth of the catalog.

  Items 1..N are sorted by training count, descending (ties: lower id first); the item at
  sorted position p gets bin floor(p * num_bins / N), so each bin holds N / num_bins items.
  Padding id 0 gets bin -1.

  Args:
    item_counts: [N + 1] counts indexed by item id (entry 0 ignored).
    num_bins: number of bins (10 for deciles).
  Returns:
    int64 [N + 1].
  """
  counts = np.asarray(item_counts)
  if counts.ndim != 1 or counts.shape[0] < 2:
    raise ValueError(f"item_counts must be 1-D [num_items + 1 >= 2], got {counts.shape}")
  if num_bins < 1:
    raise ValueError(f"num_bins must be >= 1, got {num_bins}")
  n = counts.shape[0] - 1
  ids = np.arange(1, n + 1)
  order = ids[np.lexsort((ids, -counts[1:]))]
  bins = np.full(n + 1, -1, np.int64)
  bins[order] = (np.arange(n) * num_bins) // n
  return bins


def mean_by_group(
  values: npt.ArrayLike, groups: npt.ArrayLike, num_groups: int
) -> Tuple[np.ndarray, np.ndarray]:
  """Mean of per-query values within each group (e.g. the target's popularity decile).

  Returns:
    (means float64 [G], counts int64 [G]); an empty group has mean 0 and count 0.
  """
  values = np.asarray(values, np.float64)
  groups = _as_int_array(groups, "groups", 1)
  if values.shape != groups.shape:
    raise ValueError(f"values shape {values.shape} != groups shape {groups.shape}")
  if np.any((groups < 0) | (groups >= num_groups)):
    raise ValueError(f"groups must lie in [0, {num_groups})")
  counts = np.bincount(groups, minlength=num_groups)
  sums = np.bincount(groups, weights=values, minlength=num_groups)
  means = np.divide(sums, counts, out=np.zeros(num_groups), where=counts > 0)
  return means, counts.astype(np.int64)


def check_top_k_args(
  queries: npt.ArrayLike,
  item_embeddings: npt.ArrayLike,
  k: int,
  rated: Optional[History] = None,
  targets: Optional[npt.ArrayLike] = None,
  chunk_size: Optional[int] = None,
  max_chunk_scores: int = 1 << 25,
) -> Tuple[np.ndarray, np.ndarray, Optional[List[np.ndarray]], Optional[np.ndarray], int]:
  """The argument checks of an exact top-k (`exact_top_k_np`, `tf_keras.top_k.exact_top_k`):
  returns (item table float32 [N + 1, d], queries float32 [Q, d], rated rows or None, targets
  int64 [Q] or None, chunk_size)."""
  emb = as_item_table(item_embeddings)
  q = as_queries(queries, emb.shape[1])
  num_items = emb.shape[0] - 1
  if int(k) != k or not 1 <= k <= num_items:
    raise ValueError(f"k must be in [1, {num_items}], got {k}")
  if chunk_size is None:
    chunk_size = int(np.clip(max_chunk_scores // (num_items + 1), 1, 1024))
  if chunk_size < 1:
    raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
  rows = None
  if rated is not None:
    rows = _history_rows(rated, q.shape[0])
    for r in rows:
      if r.size and (r.min() < 0 or r.max() > num_items):
        raise ValueError(f"rated items hold ids outside [0, {num_items}]")
  if targets is not None:
    targets = _as_int_array(targets, "targets", 1)
    if targets.shape[0] != q.shape[0]:
      raise ValueError(f"targets has {targets.shape[0]} rows for {q.shape[0]} queries")
  return emb, q, rows, targets, chunk_size


def exact_top_k_np(
  queries: npt.ArrayLike,
  item_embeddings: npt.ArrayLike,
  k: int,
  rated: Optional[History] = None,
  targets: Optional[npt.ArrayLike] = None,
  chunk_size: Optional[int] = None,
  max_chunk_scores: int = 1 << 25,
) -> Tuple[np.ndarray, np.ndarray]:
  """`tfrs_logq.tf_keras.top_k.exact_top_k` in numpy: the k best items 1..N by s(u, d) = <q_u, c_d>,
  the rated items (all but t_u with ``targets``) and padding removed, ties lower id first;
  (ids int64 [Q, k], scores float32 [Q, k]), -1 and float32 min for slots left empty. Same
  arguments and checks."""
  emb, q, rows, targets, chunk_size = check_top_k_args(
    queries, item_embeddings, k, rated, targets, chunk_size, max_chunk_scores
  )
  low = np.finfo(np.float32).min
  out_ids, out_scores = [], []
  for start in range(0, q.shape[0], chunk_size):
    stop = min(start + chunk_size, q.shape[0])
    scores = q[start:stop] @ emb.T
    scores[:, PAD_ID] = low
    if rows is not None:
      for j, r in enumerate(rows[start:stop]):
        if targets is not None:
          r = r[r != targets[start + j]]
        scores[j, r] = low
    ids = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(scores, ids, axis=1)
    out_ids.append(np.where(top > low, ids, EMPTY_SLOT).astype(np.int64))
    out_scores.append(top.astype(np.float32))
  return np.concatenate(out_ids), np.concatenate(out_scores)
