r"""Lloyd's k-means, the building blocks of the MIDX codebooks (any array backend).

    assignment      a(x) = argmin_k ||x - c_k||^2 = argmin_k (||c_k||^2 - 2 <x, c_k>)
                    (ties: lowest k)
    distance        ||x - c_{a(x)}||^2 = max(||x||^2 + ||c_a||^2 - 2 <x, c_a>, 0)
    centroid update c_k <- mean{x : a(x) = k}; a cluster left empty keeps its previous centroid
    initialisation  c_k = x_{pi(k mod m)}, pi = the m = min(n, K) points with the largest random
                    keys (K distinct points; with n < K every point once, repeated: clusters
                    stay empty)

The fronts own the randomness (the keys: ``tf.random.stateless_uniform`` on the tf-keras path,
``keras.random.uniform`` on the Keras 3 path) and the loops (``tf.while_loop`` / ``tf.map_fn``
over chunks of points on the tf-keras path, Python loops over static shapes on the Keras 3
path); every formula above is written once, here.
"""

from typing import Tuple

from tfrs_logq.core.ops import Ops, Tensor

__all__ = ["nearest_centroid", "lloyd_update", "largest_keys", "initial_centroids"]


def nearest_centroid(ops: Ops, points: Tensor, centroids: Tensor) -> Tuple[Tensor, Tensor]:
  """(a(x) int32 [n], ||x - c_a(x)||^2 float [n]) of points [n, d] and centroids [K, d]."""
  c_sq = ops.sum(ops.square(centroids), axis=1)  # [K]
  partial = ops.expand_dims(c_sq, 0) - 2.0 * ops.matmul(points, ops.transpose(centroids))  # [n, K]
  assign = ops.cast(ops.argmin(partial, axis=1), "int32")
  x_sq = ops.sum(ops.square(points), axis=1)
  best = ops.squeeze(ops.take_along_axis(partial, ops.expand_dims(assign, 1), axis=-1), 1)
  return assign, ops.maximum(x_sq + best, 0.0)


def lloyd_update(
  ops: Ops, points: Tensor, assign: Tensor, centroids: Tensor, num_clusters: int
) -> Tensor:
  """c_k = mean of the points assigned to k; an empty cluster keeps its centroid. [K, d]."""
  sums = ops.segment_sum(points, assign, num_segments=num_clusters)
  counts = ops.segment_sum(
    ops.ones_like(ops.cast(assign, points.dtype)), assign, num_segments=num_clusters
  )
  updated = sums / ops.expand_dims(ops.maximum(counts, 1.0), 1)
  return ops.where(ops.expand_dims(counts > 0.0, 1), updated, centroids)


def largest_keys(ops: Ops, keys: Tensor, size: Tensor) -> Tensor:
  """Indices of the ``size`` largest keys (a uniform random subset of distinct indices when the
  keys are iid uniform), in decreasing key order."""
  return ops.top_k(keys, size, sorted=True)[1]


def initial_centroids(
  ops: Ops, points: Tensor, keys: Tensor, num_clusters: int, num_taken: Tensor
) -> Tensor:
  """c_k = points[pi(k mod m)]: pi the m = ``num_taken`` = min(n, K) points with the largest
  ``keys`` [n]. [K, d]."""
  chosen = largest_keys(ops, keys, num_taken)
  rows = ops.take(
    chosen, ops.mod(ops.arange(num_clusters, dtype="int32"), ops.cast(num_taken, "int32"))
  )
  return ops.take(points, rows, axis=0)
