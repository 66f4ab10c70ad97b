"""In-batch negatives: the batch's positives, deduplicated by id, optionally subsampled to k_b.

Pool. The positives ``p_1 .. p_B`` of the (global, see `cross_replica`) batch, their candidate
embeddings (already computed by the candidate tower for the positive scores: reused, never
recomputed) and their log Q. Rows where ``valid`` is False (padding) are left out.

Deduplication (deterministic). Distinct ids are kept in order of **first occurrence**; the
embedding and log Q of a distinct id are those of its first row, so its gradient flows to that row
(with an id table every row of an id holds the same vector). Optionally ``num_negatives = k_b``
keeps a uniformly random subset of ``min(U, k_b)`` of the ``U`` distinct ids (without replacement,
kept in first-occurrence order). The same negatives are shared by every query; each query masks
its own positive later (accidental hits, `scoring`).

log Q convention ("per-draw probability" of a deduplicated in-batch negative). Each batch row is
one draw from the unigram distribution, so the per-draw probability of item d is

    Q(d) = q_uni(d) = #d / N   (the frequency estimator's ``log_q``),

and this module returns ``log Q(d_i) = log q_uni(d_i)`` for every distinct negative ``d_i``, the
paper's convention (its Q(d) = #d/N for in-batch sampling with deduplication). The approximation:
after deduplication an item is present once with inclusion probability
``pi(d) = 1 - (1 - Q(d))^B``, not ``B * Q(d)`` times. Weighted (self-normalised) importance
sampling only needs weights proportional to ``pi(d)``, and ``pi(d) ~ B * Q(d)`` (a constant
factor ``B``, which cancels in the softmax) while ``B * Q(d) << 1``; for items with
``B * Q(d)`` near or above 1 the true ``pi(d)`` saturates at 1, so ``log Q`` over-corrects the
most popular items by up to ``log(B * Q(d)) - log(pi(d))``. Subsampling to ``k_b`` multiplies
every ``pi(d)`` by the same ``k_b / U``: a constant, so the convention is unchanged.
"""

from typing import Optional

import tfrs_logq  # noqa: F401
import tensorflow as tf

from tfrs_logq.negatives import cross_replica
from tfrs_logq.negatives.base import (Negatives, as_float, as_ids, check_not_empty,
                                       check_rank, check_same_dim)


def dedup_first_occurrence(ids):
  """Distinct ids in order of first occurrence.

  Args:
    ids: integer ``[B]``.

  Returns:
    ``(unique_ids [U] int64, first_index [U] int32, inverse [B] int32)`` with
    ``unique_ids[inverse] == ids`` and ``ids[first_index] == unique_ids``, ``first_index``
    the smallest position of each distinct id (increasing).
  """
  ids = as_ids(ids, "ids")
  check_rank(ids, 1, "ids")
  unique_ids, inverse = tf.unique(ids, out_idx=tf.int32)
  positions = tf.range(tf.shape(ids)[0], dtype=tf.int32)
  first_index = tf.math.unsorted_segment_min(positions, inverse, tf.shape(unique_ids)[0])
  return unique_ids, first_index, inverse


def subsample_indices(n, k: int, seed=None) -> tf.Tensor:
  """``min(n, k)`` distinct indices of ``range(n)`` chosen uniformly at random, increasing.

  Args:
    n: scalar int, the pool size.
    k: the number to keep (positive int).
    seed: optional ``[2]`` int seed for the stateless RNG (same seed -> same subset, also
      across replicas); None draws from the stateful global RNG.
  """
  if not isinstance(k, int) or k <= 0:
    raise ValueError(f"num_negatives must be a positive int, got {k!r}")
  n = tf.cast(n, tf.int32)
  if seed is None:
    keys = tf.random.uniform([n])
  else:
    keys = tf.random.stateless_uniform([n], seed=tf.cast(seed, tf.int64))
  _, chosen = tf.math.top_k(keys, k=tf.minimum(n, k))
  return tf.sort(chosen)


class InBatchNegatives:
  """Deduplicated (optionally subsampled, cross-replica) in-batch negatives.

  ``log Q(d) = log q_uni(d)`` from ``frequency_estimator.log_q`` (or the caller's
  ``candidate_log_q``); see the module docstring for the convention and its approximation.
  The sampler only reads the estimator: call ``frequency_estimator.update(ids)`` once per step
  yourself (with the step's candidate ids; the `tfrs_logq.frequency` estimators gather them
  across replicas).

  SASRec: pass the A non-padding positions' targets and embeddings (or all B*L positions with
  ``valid`` = not padding) as ``positive_ids`` / ``positive_embeddings``.

  Args:
    frequency_estimator: any object with ``log_q(ids) -> float [same shape]`` (log per-draw
      unigram probability), e.g. `tfrs_logq.frequency` estimators. May be None when every call
      passes ``candidate_log_q``.
    num_negatives: ``k_b``; None keeps every distinct id.
    cross_replica: under ``tf.distribute`` (inside ``strategy.run``) all-gather the pool over
      replicas so the global batch is the in-batch pool (see `cross_replica`).
  """

  def __init__(self, frequency_estimator=None, *, num_negatives: Optional[int] = None,
               cross_replica: bool = True):
    if frequency_estimator is not None and not callable(
        getattr(frequency_estimator, "log_q", None)):
      raise TypeError("frequency_estimator must have a log_q(ids) method, got "
                      f"{type(frequency_estimator).__name__}")
    if num_negatives is not None and (not isinstance(num_negatives, int) or num_negatives <= 0):
      raise ValueError(f"num_negatives must be None or a positive int, got {num_negatives!r}")
    self.frequency_estimator = frequency_estimator
    self.num_negatives = num_negatives
    self.cross_replica = cross_replica

  def log_q(self, ids) -> tf.Tensor:
    """log Q(d) = log q_uni(d) of any ids (e.g. the queries' positives), float32."""
    if self.frequency_estimator is None:
      raise ValueError("InBatchNegatives has no frequency_estimator: pass candidate_log_q to "
                       "the call, or give an estimator to compute log Q of arbitrary ids")
    ids = as_ids(ids, "ids")
    return tf.cast(self.frequency_estimator.log_q(ids), tf.float32)

  def __call__(self, positive_ids, positive_embeddings, *, candidate_log_q=None, valid=None,
               seed=None) -> Negatives:
    """Builds the in-batch negatives of one step from the batch's positives.

    Args:
      positive_ids: integer ``[B]``, the local batch's positive ids.
      positive_embeddings: ``[B, d]``, their candidate embeddings (reused; gradients flow back
        to the first row of each distinct id, on the replica that produced it).
      candidate_log_q: optional float ``[B]``, log q_uni of each positive (overrides the
        estimator, e.g. precomputed in the input pipeline).
      valid: optional bool ``[B]``; False rows (padding) are left out of the pool.
      seed: optional ``[2]`` int stateless seed for the ``k_b`` subsample.

    Returns:
      ``Negatives(ids [N], embeddings [N, d], log_q [N], positive_log_q [B])``, with
      ``positive_log_q`` the log Q of the *local* positives (the queries' positives).

    Raises:
      TypeError / ValueError: wrong dtypes, ranks, mismatched sizes or an empty batch.
    """
    ids = as_ids(positive_ids, "positive_ids")
    emb = as_float(positive_embeddings, "positive_embeddings")
    check_rank(ids, 1, "positive_ids")
    check_rank(emb, 2, "positive_embeddings")
    deps = check_not_empty(ids, "positive_ids")
    deps += check_same_dim(ids, 0, emb, 0, "positive_ids vs positive_embeddings")
    if candidate_log_q is not None:
      log_q = as_float(candidate_log_q, "candidate_log_q")
      check_rank(log_q, 1, "candidate_log_q")
      deps += check_same_dim(ids, 0, log_q, 0, "positive_ids vs candidate_log_q")
    else:
      log_q = self.log_q(ids)
    if valid is not None:
      valid = tf.convert_to_tensor(valid)
      if valid.dtype != tf.bool:
        raise TypeError(f"valid must be bool, got {valid.dtype.name}")
      check_rank(valid, 1, "valid")
      deps += check_same_dim(ids, 0, valid, 0, "positive_ids vs valid")
    with tf.control_dependencies(deps):
      ids = tf.identity(ids)
    positive_log_q = log_q
    pool_ids, pool_emb, pool_log_q = ids, emb, log_q
    if valid is not None:
      pool_ids = tf.boolean_mask(pool_ids, valid)
      pool_emb = tf.boolean_mask(pool_emb, valid)
      pool_log_q = tf.boolean_mask(pool_log_q, valid)
    if self.cross_replica:
      pool_ids, pool_emb, pool_log_q = cross_replica.all_gather_rows(
          [pool_ids, pool_emb, pool_log_q])
    unique_ids, first_index, _ = dedup_first_occurrence(pool_ids)
    if self.num_negatives is not None:
      first_index = tf.gather(
          first_index, subsample_indices(tf.shape(first_index)[0], self.num_negatives, seed))
      unique_ids = tf.gather(pool_ids, first_index)
    return Negatives(ids=unique_ids, embeddings=tf.gather(pool_emb, first_index),
                     log_q=tf.gather(pool_log_q, first_index), positive_log_q=positive_log_q)
