"""The inverted multi-index of the MIDX sampler, built from item embeddings q_i (i = 0..N-1).

  * product quantization ("pq"): q_i = [q_i^1, q_i^2] (first d//2 dims, the rest); codebook C^l is
    k-means on the sub-vectors q^l; k_l(i) = argmin_k ||q_i^l - c_k^l||.
  * residual quantization ("rq"): C^1 is k-means on q_i; C^2 is k-means on the residuals
    q_i - c^1_{k_1(i)}; both codebooks live in R^d.
  * cells Omega_{k1,k2} = {i : k_1(i) = k1, k_2(i) = k2}; items sorted by cell c = k1 * K + k2
    (stable), cell_offsets = exclusive cumsum of cell_counts = |Omega_c|.

Pure functions of the embeddings and a seed; `MIDXSampler` (midx.py) stores the result in its
variables and draws from the proposal it defines.
"""

import numbers
from typing import NamedTuple, Optional

import tfrs_logq  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

from tfrs_logq.negatives import kmeans as kmeans_lib

__all__ = ["QUANTIZERS", "MultiIndex", "build_index", "split_dims", "split_query", "check_int"]

QUANTIZERS = ("pq", "rq")


def check_int(value, name: str, minimum: int) -> int:
  """Returns ``int(value)`` for a Python / numpy integer >= ``minimum`` (not bool); ValueError
  otherwise (floats such as 8.0 are rejected too)."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
    raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
  return int(value)


class MultiIndex(NamedTuple):
  codebook_1: tf.Tensor    # float32 [K, d1]
  codebook_2: tf.Tensor    # float32 [K, d2]
  item_codes: tf.Tensor    # int32 [N, 2]: (k1(i), k2(i))
  sorted_items: tf.Tensor  # int64 [N]: item rows sorted by cell
  cell_counts: tf.Tensor   # int64 [K*K]: |Omega_c|
  cell_offsets: tf.Tensor  # int64 [K*K]: start of cell c in sorted_items


def split_dims(quantizer: str, dim: int):
  """(d1, d2): the sub-vector sizes of z^1, z^2 (pq: d//2 and d - d//2; rq: d and d)."""
  if quantizer == "pq":
    return dim // 2, dim - dim // 2
  return dim, dim


def split_query(quantizer: str, z, dim: int):
  """(z^1, z^2) of z [A, d]: pq splits the dimensions at d//2; rq uses z for both."""
  if quantizer == "pq":
    d1 = dim // 2
    return z[:, :d1], z[:, d1:]
  return z, z


def build_index(emb, num_codewords: int, quantizer: str, seed, *, num_iterations: int,
                max_points: Optional[int], chunk_size: int) -> MultiIndex:
  """Both codebooks (k-means with seeds split from ``seed`` [2]) and the inverted multi-index of
  ``emb`` float32 [N, d]; every item lands in exactly one cell."""
  k = num_codewords
  seed_1, seed_2 = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
  opts = dict(num_iterations=num_iterations, max_points=max_points, chunk_size=chunk_size)
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
  cell = tf.cast(k1, tf.int64) * k + tf.cast(k2, tf.int64)
  counts = tf.math.bincount(cell, minlength=k * k, maxlength=k * k, dtype=tf.int64)
  return MultiIndex(codebook_1=c1, codebook_2=c2, item_codes=tf.stack([k1, k2], axis=1),
                    sorted_items=tf.cast(tf.argsort(cell, stable=True), tf.int64),
                    cell_counts=counts, cell_offsets=tf.cumsum(counts, exclusive=True))
