"""Deterministic k-means (Lloyd's algorithm) in TensorFlow, used to build MIDX codebooks.

The formulas (assignment, update, initialisation) are ``tfrs_logq.core.kmeans``'s, evaluated
with ``core.ops.tf_ops()``; this module holds the TensorFlow loops and the stateless random keys.

Formulas:
  assignment      a(x) = argmin_k ||x - c_k||^2 = argmin_k (||c_k||^2 - 2 <x, c_k>)
                  (ties: lowest k)
  centroid update c_k <- (1 / |{x : a(x) = k}|) * sum_{x : a(x) = k} x; a cluster left empty keeps
                  its previous centroid (it stays empty in the final assignment unless points
                  move to it).
  initialisation  K distinct training points chosen uniformly at random with a stateless seed
                  (when there are fewer than K points, every point once and then repeats, which
                  leaves clusters empty).

Everything is stateless given ``seed``, so two calls with the same inputs and seed return the same
codebook (on CPU; GPU segment sums use atomics and may differ in the last bits).
Distances are computed in chunks of ``chunk_size`` rows so memory stays O(chunk_size * K).
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from tfrs_logq.core import kmeans as kmeans_core
from tfrs_logq.core.ops import tf_ops

__all__ = ["kmeans", "nearest_centroid"]


def _check_points(points: tf.Tensor) -> tf.Tensor:
  points = tf.convert_to_tensor(points)
  if not points.dtype.is_floating:
    raise TypeError(f"k-means points must be floating point, got {points.dtype.name}")
  if points.shape.rank != 2:
    raise ValueError(f"k-means points must have shape [num_points, dim], got {points.shape}")
  return tf.cast(points, tf.float32)


def nearest_centroid(
  points: tf.Tensor, centroids: tf.Tensor, chunk_size: int = 16384
) -> tuple[tf.Tensor, tf.Tensor]:
  """Index and squared distance of the nearest centroid for every point.

  a(x) = argmin_k ||x - c_k||^2 (ties go to the lowest k), computed as
  argmin_k(||c_k||^2 - 2<x, c_k>) over chunks of ``chunk_size`` points.

  Args:
    points: float [N, d].
    centroids: float [K, d].
    chunk_size: rows per distance block (memory O(chunk_size * K)).

  Returns:
    (assignments int32 [N], squared_distances float32 [N]).
  """
  points = _check_points(points)
  centroids = tf.cast(tf.convert_to_tensor(centroids), tf.float32)
  n = tf.shape(points)[0]
  d = tf.shape(points)[1]
  num_chunks = (n + chunk_size - 1) // chunk_size
  padded = tf.pad(points, [[0, num_chunks * chunk_size - n], [0, 0]])
  blocks = tf.reshape(padded, [num_chunks, chunk_size, d])

  def assign_block(block: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    return kmeans_core.nearest_centroid(tf_ops(), block, centroids)

  idx, dist = tf.map_fn(
    assign_block,
    blocks,
    fn_output_signature=(
      tf.TensorSpec([chunk_size], tf.int32),
      tf.TensorSpec([chunk_size], tf.float32),
    ),
  )
  return tf.reshape(idx, [-1])[:n], tf.reshape(dist, [-1])[:n]


def _random_subset(n: tf.Tensor, size: int, seed: tf.Tensor) -> tf.Tensor:
  """``size`` distinct indices of range(n) chosen uniformly (top-k of iid uniforms); size <= n."""
  return kmeans_core.largest_keys(tf_ops(), tf.random.stateless_uniform([n], seed=seed), size)


def kmeans(
  points: tf.Tensor,
  num_clusters: int,
  num_iterations: int = 10,
  seed: tf.Tensor | Sequence[int] = (0, 0),
  max_points: int | None = None,
  chunk_size: int = 16384,
) -> tf.Tensor:
  """Lloyd's k-means with a stateless random initialisation.

  Codebook learning: init c_k = x_{pi(k)} for K distinct random points pi(k), then
  ``num_iterations`` times: assign a(x) = argmin_k ||x - c_k||^2, update c_k = mean{x : a(x) = k}
  (empty clusters keep their centroid). When ``max_points`` is set and N > max_points, the codebook
  is learned on a random subset of ``max_points`` points (the caller assigns all points with
  ``nearest_centroid`` after).

  Args:
    points: float [N, d], N >= 1.
    num_clusters: K >= 1.
    num_iterations: Lloyd iterations (>= 0; 0 returns the initial centroids).
    seed: shape [2] integer seed of the stateless random ops.
    max_points: optional cap on the number of training points.
    chunk_size: rows per distance block.

  Returns:
    centroids float32 [K, d].
  """
  points = _check_points(points)
  if num_clusters < 1:
    raise ValueError(f"num_clusters must be >= 1, got {num_clusters}")
  if num_iterations < 0:
    raise ValueError(f"num_iterations must be >= 0, got {num_iterations}")
  seed = tf.cast(tf.convert_to_tensor(seed), tf.int64)
  init_seed, subset_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
  n = tf.shape(points)[0]
  tf.debugging.assert_positive(n, message="k-means needs at least one point")
  if max_points is not None:
    if max_points < 1:
      raise ValueError(f"max_points must be >= 1, got {max_points}")
    points = tf.cond(
      n > max_points,
      lambda: tf.gather(points, _random_subset(n, max_points, subset_seed)),
      lambda: points,
    )
    n = tf.shape(points)[0]
  # K distinct random points; with n < K take all n (random order) and repeat them.
  init = kmeans_core.initial_centroids(
    tf_ops(),
    points,
    tf.random.stateless_uniform([n], seed=init_seed),
    num_clusters,
    tf.minimum(n, num_clusters),
  )

  def lloyd_step(i: tf.Tensor, centroids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    assign, _ = nearest_centroid(points, centroids, chunk_size)
    return i + 1, kmeans_core.lloyd_update(tf_ops(), points, assign, centroids, num_clusters)

  _, centroids = tf.while_loop(
    lambda i, _: i < num_iterations,
    lloyd_step,
    (tf.constant(0), init),
    shape_invariants=(tf.TensorShape([]), init.shape),
  )
  return centroids
