"""The MIDX inverted multi-index on the Keras 3 path: k-means codebooks and cells (keras.ops).

The Keras 3 twin of ``tfrs_logq.tf_keras.negatives.midx_index`` / ``kmeans``: the same definitions
(``tfrs_logq.core.midx``: pq / rq codebooks, codes k_l(i) = nearest codeword, cells
c = k1 K + k2, counts, exclusive-cumsum offsets, items sorted by cell; ``tfrs_logq.core.kmeans``:
Lloyd's assignment and update, K distinct random initial points, codebooks learned on at most
``max_points`` random items), evaluated with ``keras.ops`` on static shapes (Python loops over
the iterations and over chunks of ``chunk_size`` points). Randomness: ``keras.random`` with
integer seeds derived from a seed tuple (``derive_seed``), so an index is a pure function of the
embeddings and the seed on each backend (the backends' random streams differ).
"""

from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

import keras
import numpy as np
from keras import ops

from tfrs_logq.core import kmeans as kmeans_core
from tfrs_logq.core import midx as midx_core
from tfrs_logq.keras3._tensors import Tensor

__all__ = ["MultiIndex", "derive_seed", "nearest_centroid", "kmeans", "build_index"]


class MultiIndex(NamedTuple):
  codebook_1: object  # float32 [K, d1]
  codebook_2: object  # float32 [K, d2]
  item_codes: object  # int32 [N, 2]: (k1(i), k2(i))
  sorted_items: object  # int32 [N]: item rows sorted by cell
  cell_counts: object  # int32 [K*K]: |Omega_c|
  cell_offsets: object  # int32 [K*K]: start of cell c in sorted_items


def derive_seed(*entropy: int) -> int:
  """A 31-bit integer seed for ``keras.random`` from a tuple of non-negative ints (SeedSequence:
  distinct tuples give unrelated streams)."""
  words = [int(e) & 0xFFFFFFFFFFFFFFFF for e in entropy]
  return int(np.random.SeedSequence(words).generate_state(1, np.uint32)[0] >> 1)


def nearest_centroid(
  points: Tensor, centroids: Tensor, chunk_size: int = 16384
) -> Tuple[Tensor, Tensor]:
  """(a(x) int32 [N], ||x - c_a(x)||^2 float32 [N]) over chunks of ``chunk_size`` points."""
  n = points.shape[0]
  parts = [
    kmeans_core.nearest_centroid(ops, points[i : i + chunk_size], centroids)
    for i in range(0, n, chunk_size)
  ]
  if len(parts) == 1:
    return parts[0]
  return (ops.concatenate([p[0] for p in parts]), ops.concatenate([p[1] for p in parts]))


def kmeans(
  points: Tensor,
  num_clusters: int,
  num_iterations: int = 10,
  seed: Sequence[int] = (0,),
  max_points: Optional[int] = None,
  chunk_size: int = 16384,
) -> Tensor:
  """Lloyd's k-means (``core.kmeans``) of float points [N, d] -> centroids float32 [K, d]."""
  points = ops.cast(points, "float32")
  n = points.shape[0]
  if max_points is not None and n > max_points:
    keys = keras.random.uniform((n,), seed=derive_seed(*seed, 1))
    points = ops.take(points, kmeans_core.largest_keys(ops, keys, max_points), axis=0)
    n = max_points
  keys = keras.random.uniform((n,), seed=derive_seed(*seed, 0))
  centroids = kmeans_core.initial_centroids(ops, points, keys, num_clusters, min(n, num_clusters))
  for _ in range(num_iterations):
    assign, _ = nearest_centroid(points, centroids, chunk_size)
    centroids = kmeans_core.lloyd_update(ops, points, assign, centroids, num_clusters)
  return centroids


def build_index(
  emb: Tensor,
  num_codewords: int,
  quantizer: str,
  seed: Sequence[int],
  *,
  num_iterations: int,
  max_points: Optional[int],
  chunk_size: int,
) -> MultiIndex:
  """Both codebooks and the inverted multi-index of ``emb`` float32 [N, d] (every item lands in
  exactly one cell); the codebooks' seeds are ``seed + (1,)`` and ``seed + (2,)``."""
  k = num_codewords
  emb = ops.cast(emb, "float32")
  opts: Dict[str, Any] = dict(
    num_iterations=num_iterations, max_points=max_points, chunk_size=chunk_size
  )
  seed = tuple(int(s) for s in seed)
  x1, x2 = midx_core.split_query(quantizer, emb, emb.shape[-1])
  c1 = kmeans(x1, k, seed=seed + (1,), **opts)
  k1, _ = nearest_centroid(x1, c1, chunk_size)
  if quantizer == "rq":
    x2 = emb - ops.take(c1, k1, axis=0)
  c2 = kmeans(x2, k, seed=seed + (2,), **opts)
  k2, _ = nearest_centroid(x2, c2, chunk_size)
  codes, sorted_items, counts, offsets = midx_core.index_from_codes(ops, k1, k2, k, "int32")
  return MultiIndex(c1, c2, codes, sorted_items, counts, offsets)
