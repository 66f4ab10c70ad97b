"""The inverted multi-index of the MIDX sampler, built from item embeddings q_i (i = 0..N-1).

  * product quantization ("pq"): q_i = [q_i^1, q_i^2] (first d//2 dims, the rest); codebook C^l is
    k-means on the sub-vectors q^l; k_l(i) = argmin_k ||q_i^l - c_k^l||.
  * residual quantization ("rq"): C^1 is k-means on q_i; C^2 is k-means on the residuals
    q_i - c^1_{k_1(i)}; both codebooks live in R^d.
  * cells Omega_{k1,k2} = {i : k_1(i) = k1, k_2(i) = k2}; items sorted by cell c = k1 * K + k2
    (stable), cell_offsets = exclusive cumsum of cell_counts = |Omega_c|.

The index formulas (codes -> counts, offsets, sorted items) are ``tfrs_logq.core.midx``'s, the
k-means steps ``tfrs_logq.core.kmeans``'s. Pure functions of the embeddings and a seed;
`MIDXSampler` (midx.py) stores the result in its variables and draws from the proposal it
defines.
"""

from typing import Any, Dict, NamedTuple, Optional

from tfrs_logq.tf_keras.negatives import kmeans as kmeans_lib

import tensorflow as tf

from tfrs_logq.core import midx as midx_core
from tfrs_logq.core.midx import QUANTIZERS, check_int, split_dims, split_query
from tfrs_logq.core.ops import tf_ops

__all__ = ["QUANTIZERS", "MultiIndex", "build_index", "split_dims", "split_query", "check_int"]


class MultiIndex(NamedTuple):
  codebook_1: tf.Tensor  # float32 [K, d1]
  codebook_2: tf.Tensor  # float32 [K, d2]
  item_codes: tf.Tensor  # int32 [N, 2]: (k1(i), k2(i))
  sorted_items: tf.Tensor  # int64 [N]: item rows sorted by cell
  cell_counts: tf.Tensor  # int64 [K*K]: |Omega_c|
  cell_offsets: tf.Tensor  # int64 [K*K]: start of cell c in sorted_items


def build_index(
  emb: tf.Tensor,
  num_codewords: int,
  quantizer: str,
  seed: tf.Tensor,
  *,
  num_iterations: int,
  max_points: Optional[int],
  chunk_size: int,
) -> MultiIndex:
  """Both codebooks (k-means with seeds split from ``seed`` [2]) and the inverted multi-index of
  ``emb`` float32 [N, d]; every item lands in exactly one cell."""
  k = num_codewords
  seed_1, seed_2 = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
  opts: Dict[str, Any] = dict(
    num_iterations=num_iterations, max_points=max_points, chunk_size=chunk_size
  )
  if quantizer == "pq":
    x1, x2 = split_query(quantizer, emb, emb.shape[-1])
    c1 = kmeans_lib.kmeans(x1, k, seed=seed_1, **opts)
    k1, _ = kmeans_lib.nearest_centroid(x1, c1, chunk_size)
    c2 = kmeans_lib.kmeans(x2, k, seed=seed_2, **opts)
    k2, _ = kmeans_lib.nearest_centroid(x2, c2, chunk_size)
  else:
    c1 = kmeans_lib.kmeans(emb, k, seed=seed_1, **opts)
    k1, _ = kmeans_lib.nearest_centroid(emb, c1, chunk_size)
    residual = emb - tf.gather(c1, k1)
    c2 = kmeans_lib.kmeans(residual, k, seed=seed_2, **opts)
    k2, _ = kmeans_lib.nearest_centroid(residual, c2, chunk_size)
  codes, sorted_items, counts, offsets = midx_core.index_from_codes(tf_ops(), k1, k2, k, "int64")
  return MultiIndex(
    codebook_1=c1,
    codebook_2=c2,
    item_codes=codes,
    sorted_items=sorted_items,
    cell_counts=counts,
    cell_offsets=offsets,
  )
