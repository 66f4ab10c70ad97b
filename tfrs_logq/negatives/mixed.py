"""Mixed negative sampling (Yang et al. 2020): in-batch negatives + uniform negatives.

The negatives of a step are the ``n_b`` deduplicated in-batch negatives (`in_batch`, ``n_b <= k_b``,
counted over the global batch under ``tf.distribute``) followed by the ``k_u`` uniform negatives
(`uniform`), ``N = n_b + k_u`` rows shared by every query. log Q of every negative (and of each
query's positive, for Q') follows one explicit convention:

* ``"unigram"`` (the paper's, §4.1: "log Q values are based on unigram frequencies and not
  adjusted for the uniform portion"): for both halves

      log Q(d) = log q_uni(d)         (q_uni from the frequency estimator).

  A uniform draw that the estimator has never seen has ``q_uni(d) = 0``; its log Q would be
  ``-inf`` (an infinite logit after correction), so, and only then, it gets the per-slot
  probability of the slot that produced it, ``log(k_u / ((n_b + k_u) |D|))``.
* ``"mixture"``: the per-slot mixture, the probability that one slot chosen uniformly among the
  ``N`` slots holds d:

      q(d) = (n_b * q_uni(d) + k_u / |D|) / (n_b + k_u),

  computed in log space: ``logsumexp(log n_b + log q_uni(d), log k_u - log |D|) - log(n_b + k_u)``.
  ``n_b`` is the number of in-batch negatives actually present in this step (after dedup and the
  ``k_b`` subsample), and each in-batch slot counts as one unigram draw (see `in_batch` for that
  approximation).

Q' (positive excluded) for the corrected loss is ``log Q'(d) = log Q(d) - log(1 - Q(p))`` per row,
computed from ``Negatives.positive_log_q`` (same convention) by `scoring.log_q_prime`.
"""

import math

import tfrs_logq  # noqa: F401
import tensorflow as tf

from tfrs_logq.negatives.in_batch import InBatchNegatives
from tfrs_logq.negatives.base import Negatives, as_float
from tfrs_logq.negatives.uniform import UniformNegatives

CONVENTIONS = ("unigram", "mixture")


def mixture_log_q(log_q_unigram, num_in_batch, num_uniform, catalog_size) -> tf.Tensor:
  """log q(d) = log((n_b q_uni(d) + k_u / |D|) / (n_b + k_u)), in log space.

  Args:
    log_q_unigram: float, log q_uni(d) (may be -inf for unseen items).
    num_in_batch: ``n_b`` >= 0 (scalar, may be a tensor).
    num_uniform: ``k_u`` > 0.
    catalog_size: ``|D|`` > 0.
  """
  log_q_unigram = as_float(log_q_unigram, "log_q_unigram")
  n_b = tf.cast(num_in_batch, tf.float32)
  k_u = tf.cast(num_uniform, tf.float32)
  in_batch_part = tf.math.log(n_b) + log_q_unigram  # -inf when n_b == 0 or q_uni == 0
  uniform_part = tf.fill(tf.shape(log_q_unigram),
                         tf.math.log(k_u) - tf.cast(math.log(catalog_size), tf.float32))
  return (tf.reduce_logsumexp(tf.stack([in_batch_part, uniform_part]), axis=0)
          - tf.math.log(n_b + k_u))


class MixedNegatives:
  """In-batch + uniform negatives with log Q under the ``unigram`` or ``mixture`` convention.

  Args:
    in_batch: an `InBatchNegatives` with a ``frequency_estimator`` (q_uni is needed for the
      uniform draws too).
    uniform: a `UniformNegatives` (its catalog gives ``|D|``).
    convention: ``"unigram"`` or ``"mixture"`` (module docstring).
  """

  def __init__(self, in_batch: InBatchNegatives, uniform: UniformNegatives, *,
               convention: str = "unigram"):
    if not isinstance(in_batch, InBatchNegatives):
      raise TypeError(f"in_batch must be an InBatchNegatives, got {type(in_batch).__name__}")
    if not isinstance(uniform, UniformNegatives):
      raise TypeError(f"uniform must be a UniformNegatives, got {type(uniform).__name__}")
    if in_batch.frequency_estimator is None:
      raise ValueError("mixed negatives need in_batch.frequency_estimator: log q_uni of the "
                       "uniform draws is part of both conventions")
    if convention not in CONVENTIONS:
      raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    self.in_batch = in_batch
    self.uniform = uniform
    self.convention = convention

  def log_q(self, ids, num_in_batch) -> tf.Tensor:
    """log Q(d) of any ids under the convention, given this step's ``n_b``.

    Under ``unigram`` an id never seen by the estimator gets ``log(k_u / ((n_b + k_u) |D|))``.
    """
    log_q_uni = self.in_batch.log_q(ids)
    k_u, size = self.uniform.num_negatives, self.uniform.catalog_size
    if self.convention == "mixture":
      return mixture_log_q(log_q_uni, num_in_batch, k_u, size)
    n_b = tf.cast(num_in_batch, tf.float32)
    unseen = (tf.math.log(tf.constant(float(k_u))) - math.log(size) - tf.math.log(n_b + k_u))
    return tf.where(tf.math.is_finite(log_q_uni), log_q_uni, unseen)

  def __call__(self, positive_ids, positive_embeddings, *, valid=None, seed=None) -> Negatives:
    """Mixed negatives of one step: in-batch rows first, then the ``k_u`` uniform rows.

    Args:
      positive_ids: integer ``[B]`` (the queries' positives; the in-batch pool).
      positive_embeddings: ``[B, d]`` (reused for the in-batch half).
      valid: optional bool ``[B]`` (padding rows left out of the pool).
      seed: optional ``[2]`` stateless seed (split between the two halves).

    Returns:
      ``Negatives(ids [N], embeddings [N, d], log_q [N], positive_log_q [B])``,
      ``N = n_b + k_u``, log Q under ``self.convention``.
    """
    seed_b = seed_u = None
    if seed is not None:
      seed_b, seed_u = tf.unstack(
          tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 2))
    batch = self.in_batch(positive_ids, positive_embeddings, valid=valid, seed=seed_b)
    uni = self.uniform(seed=seed_u)
    ids = tf.concat([batch.ids, uni.ids], axis=0)
    n_b = tf.shape(batch.ids)[0]
    return Negatives(ids=ids,
                     embeddings=tf.concat([batch.embeddings, uni.embeddings], axis=0),
                     log_q=self.log_q(ids, n_b),
                     positive_log_q=self.log_q(positive_ids, n_b))
