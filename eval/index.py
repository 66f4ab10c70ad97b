"""Top-k retrieval over item embeddings through a ScaNN index (the exact top-k it is checked
against is `tfrs_logq.tf_keras.top_k.exact_top_k`).

Scores are dot products s(u, d) = <q_u, c_d> (the temperature does not change the ranking).
Item embeddings come as the exported matrix [num_items + 1, d] whose row 0 is padding: the
index holds rows 1..num_items only and returns *item ids* (row numbers), never 0.

ScaNN configuration (``IndexConfig``, in `eval.index_config`, which needs no TensorFlow):
* catalogs with at most ``brute_force_max_items`` items (default 20,000) use ScaNN's
  brute-force float32 scorer, which gives the exact top-k;
* larger ones use a k-means tree (``num_leaves`` partitions, ``num_leaves_to_search`` probed
  per query, trained on ``training_sample_size`` points), anisotropic asymmetric hashing
  (``dimensions_per_block`` dims per 4-bit code, ``anisotropic_quantization_threshold`` η)
  to score the probed points, and exact float32 re-scoring of the best ``reorder_k`` of them.

Rated-item filtering with an approximate index: the searcher cannot exclude items per
query, so ``ScannIndex.search_filtered`` over-fetches K = k + |unique(H_u)| candidates
(the most H_u can remove), drops H_u with ``top_k_lib.filter_rated`` (the target too, unless
``targets`` are given: see `tfrs_logq.tf_keras.top_k`) and keeps the top k. Queries are sorted by
|unique(H_u)| and searched in batches so each batch over-fetches only k + (its longest
history), capped at the catalog size. The exact top-k instead masks H_u in the score matrix
before ``tf.math.top_k``.
"""

import time
from typing import Dict, List, Optional, Sequence, Tuple

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import top_k as top_k_lib

import numpy as np
import tensorflow as tf

from eval.index_config import IndexConfig

BACKENDS = ("pybind", "tf")


def scann_builder(
  item_embeddings, num_neighbors: int, config: IndexConfig, backend: str = "pybind"
):
  """A ScaNN builder over rows 1..N of ``item_embeddings`` (dot product), configured.

  Returns:
    (builder, resolved IndexConfig). ``builder.build()`` gives the searcher: the pybind
    ``ScannSearcher`` (backend "pybind") or the TF-ops searcher (backend "tf", serializable
    into a SavedModel with ``serialize_to_module``).
  """
  emb = top_k_lib.as_item_table(item_embeddings)
  db = emb[1:]
  cfg = config.resolve(db.shape[0], num_neighbors)
  if backend == "pybind":
    from scann.scann_ops.py import scann_ops_pybind as ops
  elif backend == "tf":
    from scann.scann_ops.py import scann_ops as ops
  else:
    raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
  builder = ops.builder(db, num_neighbors, "dot_product")
  if cfg.training_threads:
    builder = builder.set_n_training_threads(cfg.training_threads)
  if cfg.mode == "brute_force":
    builder = builder.score_brute_force()
  else:
    builder = (
      builder.tree(
        num_leaves=cfg.num_leaves,
        num_leaves_to_search=cfg.num_leaves_to_search,
        training_sample_size=cfg.training_sample_size,
      )
      .score_ah(
        cfg.dimensions_per_block,
        anisotropic_quantization_threshold=cfg.anisotropic_quantization_threshold,
        training_sample_size=cfg.training_sample_size,
      )
      .reorder(cfg.reorder_k)
    )
  return builder, cfg


class ScannIndex:
  """A built ScaNN searcher returning item ids (row numbers of the embedding matrix)."""

  def __init__(
    self,
    item_embeddings,
    num_neighbors: int = 100,
    config: Optional[IndexConfig] = None,
    backend: str = "pybind",
  ):
    emb = top_k_lib.as_item_table(item_embeddings)
    self.num_items = emb.shape[0] - 1
    self.dim = emb.shape[1]
    self.num_neighbors = num_neighbors
    self.backend = backend
    builder, self.config = scann_builder(emb, num_neighbors, config or IndexConfig(), backend)
    start = time.perf_counter()
    self.searcher = builder.build()
    self.build_seconds = time.perf_counter() - start

  def search(
    self, queries, k: int, leaves_to_search: Optional[int] = None, reorder_k: Optional[int] = None
  ) -> Tuple[np.ndarray, np.ndarray]:
    """Approximate top-k by dot product: (ids int64 [Q, k] in 1..N, scores float32 [Q, k]).

    ``leaves_to_search`` / ``reorder_k`` override the built configuration for this call
    (tree mode only), which lets a benchmark sweep them without rebuilding.
    """
    q = top_k_lib.as_queries(queries, self.dim)
    if int(k) != k or not 1 <= k <= self.num_items:
      raise ValueError(f"k must be in [1, {self.num_items}], got {k}")
    pre, leaves = None, None
    if self.config.mode == "tree_ah":
      pre = max(k, reorder_k or self.config.reorder_k)
      leaves = leaves_to_search
    if self.backend == "pybind":
      idx, dist = self.searcher.search_batched_parallel(
        q, final_num_neighbors=k, pre_reorder_num_neighbors=pre, leaves_to_search=leaves
      )
    else:
      idx, dist = self.searcher.search_batched(
        tf.constant(q),
        final_num_neighbors=k,
        pre_reorder_num_neighbors=pre,
        leaves_to_search=leaves,
      )
      idx, dist = idx.numpy(), dist.numpy()
    idx = np.asarray(idx, np.int64)
    dist = np.asarray(dist, np.float32)
    # Fewer than k points found (too few leaves probed): pad as empty slots.
    if idx.shape[1] < k:
      pad = k - idx.shape[1]
      idx = np.pad(idx, ((0, 0), (0, pad)), constant_values=-1)
      dist = np.pad(dist, ((0, 0), (0, pad)), constant_values=np.finfo(np.float32).min)
    # The pybind searcher pads missing results with index 0 and a NaN score, the TF ops
    # with index -1: both become empty slots (id -1, score float32 min).
    found = (idx >= 0) & np.isfinite(dist)
    ids = np.where(found, idx + 1, top_k_lib.EMPTY_SLOT)
    dist = np.where(found, dist, np.finfo(np.float32).min).astype(np.float32)
    return ids, dist

  def search_filtered(
    self, queries, history: Sequence[np.ndarray], k: int, targets=None, batch_size: int = 1024
  ) -> Tuple[np.ndarray, np.ndarray]:
    """Top-k with rated-item filtering by over-fetching (see the module docstring).

    Args:
      queries: float [Q, d].
      history: Q int arrays (or int [Q, L] with 0 = padding): the rated items H_u.
      k: items per query after filtering.
      targets: optional int [Q], never filtered (the "except target" protocol).
      batch_size: queries per search call.
    Returns:
      (ids int64 [Q, k], scores float32 [Q, k]); -1 for slots left empty.
    """
    q = top_k_lib.as_queries(queries, self.dim)
    rows = [np.unique(np.asarray(h, np.int64)) for h in history]
    rows = [r[r > 0] for r in rows]
    if len(rows) != q.shape[0]:
      raise ValueError(f"history has {len(rows)} rows for {q.shape[0]} queries")
    if targets is not None:
      targets = np.asarray(targets, np.int64)
    lengths = np.array([r.size for r in rows])
    order = np.argsort(lengths, kind="stable")
    ids = np.full((q.shape[0], k), top_k_lib.EMPTY_SLOT, np.int64)
    scores = np.full((q.shape[0], k), np.finfo(np.float32).min, np.float32)
    for start in range(0, len(order), batch_size):
      sel = order[start : start + batch_size]
      fetch = int(min(self.num_items, k + lengths[sel].max()))
      got_ids, got_scores = self.search(q[sel], fetch)
      f_ids, f_scores = top_k_lib.filter_rated(
        got_ids,
        got_scores,
        [rows[i] for i in sel],
        k,
        targets=None if targets is None else targets[sel],
      )
      ids[sel], scores[sel] = f_ids, f_scores
    return ids, scores


def agreement_at_k(approx_ids, exact_ids, k: int) -> float:
  """Mean over queries of |approx top-k ∩ exact top-k| / |exact top-k| (empty slots ignored)."""
  a = np.asarray(approx_ids)[:, :k]
  e = np.asarray(exact_ids)[:, :k]
  if a.shape != e.shape or a.shape[0] == 0:
    raise ValueError(f"need matching non-empty [Q, >=k] lists, got {a.shape} and {e.shape}")
  fractions = []
  for ar, er in zip(a, e):
    er = er[er >= 0]
    if er.size:
      fractions.append(np.isin(er, ar).mean())
  return float(np.mean(fractions)) if fractions else 1.0


def timed(fn, *args, repeats: int = 1, **kwargs) -> Tuple[object, List[float]]:
  """Runs fn(*args, **kwargs) ``repeats`` times: (last result, list of wall seconds)."""
  times, result = [], None
  for _ in range(max(1, repeats)):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    times.append(time.perf_counter() - start)
  return result, times


def throughput(num_queries: int, seconds: Sequence[float]) -> Dict[str, float]:
  """Queries per second from repeat timings: best (min time) and median."""
  s = np.asarray(seconds, np.float64)
  return {
    "qps_best": float(num_queries / max(s.min(), 1e-9)),
    "qps_median": float(num_queries / max(np.median(s), 1e-9)),
    "seconds_min": float(s.min()),
    "seconds_median": float(np.median(s)),
  }
