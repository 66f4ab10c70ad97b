"""Uniform negatives: k_u ids drawn uniformly (with replacement) from the catalog.

The catalog D is either an id range ``[lo, hi)`` or a table of distinct candidate ids. Each of the
``k_u`` slots is an independent draw, so the per-draw probability is exact:

    Q(d) = 1 / |D|,   log Q(d) = -log |D|   for every d in D.

Duplicates among the ``k_u`` draws are kept (they are separate draws of the same proposal). The
embeddings come from the caller's candidate tower / embedding layer (``ids -> [k, d]``), so
feature-based towers work as well as id tables.
"""

import math
from typing import Callable, Optional, Sequence, Tuple

import numpy as np

import tfrs_logq  # noqa: F401
import tensorflow as tf

from tfrs_logq.negatives.base import Negatives, as_float, as_ids, check_rank


def call_embedder(candidate_embedder: Callable, ids: tf.Tensor) -> tf.Tensor:
  """Embeds ids with the caller's tower and checks the result is ``[len(ids), d]`` float."""
  emb = candidate_embedder(ids)
  emb = as_float(emb, "candidate_embedder(ids)")
  check_rank(emb, ids.shape.rank + 1, "candidate_embedder(ids) (rank of ids + 1)")
  if ids.shape[0] is not None and emb.shape[0] is not None and ids.shape[0] != emb.shape[0]:
    raise ValueError(f"candidate_embedder returned {emb.shape[0]} rows for {ids.shape[0]} ids")
  return emb


class UniformNegatives:
  """``k_u`` uniform negatives from an id range or an id table; log Q(d) = -log |D|.

  Args:
    candidate_embedder: callable or Keras layer mapping int64 ids ``[k]`` to ``[k, d]``.
    num_negatives: ``k_u`` (positive int).
    id_range: ``(lo, hi)``: the catalog is the ids ``lo <= id < hi`` (``hi > lo``).
    candidate_ids: alternatively a 1-D table of distinct integer ids (the catalog).
  """

  def __init__(self, candidate_embedder: Callable, num_negatives: int, *,
               id_range: Optional[Tuple[int, int]] = None,
               candidate_ids: Optional[Sequence[int]] = None):
    if not callable(candidate_embedder):
      raise TypeError("candidate_embedder must be callable (ids -> embeddings)")
    if not isinstance(num_negatives, int) or num_negatives <= 0:
      raise ValueError(f"num_negatives must be a positive int, got {num_negatives!r}")
    if (id_range is None) == (candidate_ids is None):
      raise ValueError("give exactly one of id_range=(lo, hi) or candidate_ids")
    self.candidate_embedder = candidate_embedder
    self.num_negatives = num_negatives
    if id_range is not None:
      if len(id_range) != 2 or not all(isinstance(v, (int, np.integer)) for v in id_range):
        raise ValueError(f"id_range must be (lo, hi) ints, got {id_range!r}")
      lo, hi = int(id_range[0]), int(id_range[1])
      if hi <= lo:
        raise ValueError(f"id_range must satisfy hi > lo, got ({lo}, {hi})")
      self.id_range = (lo, hi)
      self.candidate_ids = None
      self.catalog_size = hi - lo
    else:
      table = np.asarray(candidate_ids)
      if table.ndim != 1 or table.size == 0:
        raise ValueError(f"candidate_ids must be a non-empty 1-D table, got shape {table.shape}")
      if not np.issubdtype(table.dtype, np.integer):
        raise TypeError(f"candidate_ids must be integer ids, got dtype {table.dtype}")
      if np.unique(table).size != table.size:
        raise ValueError("candidate_ids has duplicate ids: uniform over rows would not be "
                         "uniform over items")
      self.id_range = None
      self.candidate_ids = tf.constant(table.astype(np.int64))
      self.catalog_size = int(table.size)
    self._log_q_value = -math.log(self.catalog_size)

  def log_q(self, ids) -> tf.Tensor:
    """log Q(d) = -log |D| for every id (float32, shape of ``ids``)."""
    ids = as_ids(ids, "ids")
    return tf.fill(tf.shape(ids), tf.constant(self._log_q_value, tf.float32))

  def sample_ids(self, seed=None) -> tf.Tensor:
    """``k_u`` ids drawn uniformly with replacement (int64 ``[k_u]``).

    Args:
      seed: optional ``[2]`` int seed of the stateless RNG; None uses the stateful global RNG.
    """
    k = self.num_negatives
    if self.id_range is not None:
      lo, hi = self.id_range
      if seed is None:
        return tf.random.uniform([k], lo, hi, dtype=tf.int64)
      return tf.random.stateless_uniform([k], tf.cast(seed, tf.int64), lo, hi, dtype=tf.int64)
    n = self.catalog_size
    if seed is None:
      rows = tf.random.uniform([k], 0, n, dtype=tf.int64)
    else:
      rows = tf.random.stateless_uniform([k], tf.cast(seed, tf.int64), 0, n, dtype=tf.int64)
    return tf.gather(self.candidate_ids, rows)

  def __call__(self, positive_ids=None, *, seed=None) -> Negatives:
    """Draws ``k_u`` uniform negatives and embeds them with the candidate tower.

    Args:
      positive_ids: optional integer ``[A]``, the queries' positives (only used for
        ``positive_log_q = -log |D|``).
      seed: optional ``[2]`` stateless seed.

    Returns:
      ``Negatives(ids [k_u], embeddings [k_u, d], log_q [k_u], positive_log_q [A] or None)``.
    """
    ids = self.sample_ids(seed)
    emb = call_embedder(self.candidate_embedder, ids)
    positive_log_q = None
    if positive_ids is not None:
      positive_ids = as_ids(positive_ids, "positive_ids")
      check_rank(positive_ids, 1, "positive_ids")
      positive_log_q = self.log_q(positive_ids)
    return Negatives(ids=ids, embeddings=emb, log_q=self.log_q(ids),
                     positive_log_q=positive_log_q)
