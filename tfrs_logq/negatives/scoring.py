"""Scores queries against their positive and the sampled negatives: the loss layer's inputs.

For queries ``q_a`` ([A, d]: a two-tower batch, or the A non-padding positions of a SASRec batch),
positives ``p_a`` with embeddings ``c_{p_a}`` and a `Negatives` (``d_1..d_N``):

    positive_scores[a]    = <q_a, c_{p_a}> / temperature                      [A]
    negative_scores[a, i] = <q_a, c_{d_i}> / temperature                      [A, N]
                            (one [A, d] x [d, N] matmul when negatives are shared,
                             a batched dot when they are per query, [A, N, d])
    valid_mask[a, i]      = d_i != p_a   (accidental hits of the row's positive are masked)
    negative_log_q        = log Q(d_i)   [N] or [A, N], unchanged, or, with ``apply_q_prime``,
    log Q'(d_i | p_a)     = log Q(d_i) - log(1 - Q(p_a))                      [A, N]
                            (`tfrs_logq.log_q.log_q_prime`; the mask is
                             `tfrs_logq.accidental_hits.accidental_hit_mask`)

These are exactly the arguments of
``tfrs_logq.losses.sampled_softmax_loss(positive_scores, negative_scores, negative_log_q, *,
correction, positive_log_q, valid_mask)``: ``ScoredCandidates.loss_kwargs()`` returns them. Pass
log Q (the default) and let ``correction="corrected"`` form Q' from ``positive_log_q``; if you ask
for ``apply_q_prime=True`` here, call the loss with ``q_prime="proxy"`` so Q' is not applied twice.

`task_candidates` instead lays the same candidates out for the drop-in ``tfrs_logq.tasks.Retrieval``
(candidate rows beyond the A positives are shared negatives).
"""

from typing import NamedTuple, Optional

import tfrs_logq  # noqa: F401
import tensorflow as tf

from tfrs_logq import accidental_hits
from tfrs_logq import log_q as log_q_lib
from tfrs_logq.negatives.base import (Negatives, as_float, as_ids, check_rank, check_same_dim,
                                       validate_negatives)


class ScoredCandidates(NamedTuple):
  """Inputs of `sampled_softmax_loss` (see the module docstring for each formula)."""
  positive_scores: tf.Tensor
  negative_scores: tf.Tensor
  negative_log_q: tf.Tensor
  valid_mask: tf.Tensor
  positive_log_q: Optional[tf.Tensor] = None

  def loss_kwargs(self) -> dict:
    """``sampled_softmax_loss(**scored.loss_kwargs(), correction=...)`` arguments."""
    return dict(positive_scores=self.positive_scores, negative_scores=self.negative_scores,
                negative_log_q=self.negative_log_q, positive_log_q=self.positive_log_q,
                valid_mask=self.valid_mask)


def score_negatives(query_embeddings, positive_ids, positive_embeddings, negatives: Negatives, *,
                    temperature: float = 1.0, positive_log_q=None, apply_q_prime: bool = False,
                    remove_accidental_hits: bool = True) -> ScoredCandidates:
  """Positive / negative scores, log Q (or log Q') and the accidental-hit mask of A queries.

  Args:
    query_embeddings: float ``[A, d]``.
    positive_ids: integer ``[A]``.
    positive_embeddings: float ``[A, d]``.
    negatives: a `Negatives`, shared (``ids [N]``) or per query (``ids [A, N]``).
    temperature: scores are divided by it (> 0).
    positive_log_q: optional float ``[A]``, log Q(p_a); defaults to
      ``negatives.positive_log_q``. Needed when ``apply_q_prime``.
    apply_q_prime: return log Q' = log Q - log(1 - Q(p_a)) ([A, N]) instead of log Q.
    remove_accidental_hits: when False, ``valid_mask`` is all True.

  Returns:
    `ScoredCandidates` (positive_scores [A], negative_scores [A, N], negative_log_q [N] or
    [A, N], valid_mask bool [A, N], positive_log_q [A] or None).

  Raises:
    TypeError / ValueError: dtypes, ranks or sizes that do not match, temperature <= 0,
      ``apply_q_prime`` without a positive log Q.
  """
  if not temperature > 0:
    raise ValueError(f"temperature must be > 0, got {temperature!r}")
  negatives = validate_negatives(negatives)
  query = as_float(query_embeddings, "query_embeddings")
  pos_ids = as_ids(positive_ids, "positive_ids")
  pos_emb = as_float(positive_embeddings, "positive_embeddings")
  check_rank(query, 2, "query_embeddings")
  check_rank(pos_ids, 1, "positive_ids")
  check_rank(pos_emb, 2, "positive_embeddings")
  deps = check_same_dim(query, 0, pos_ids, 0, "query_embeddings vs positive_ids")
  deps += check_same_dim(query, 0, pos_emb, 0, "query_embeddings vs positive_embeddings")
  deps += check_same_dim(query, 1, pos_emb, 1, "query vs positive embedding dimension")
  deps += check_same_dim(query, 1, negatives.embeddings, -1,
                         "query vs negative embedding dimension")
  if not negatives.shared:
    deps += check_same_dim(query, 0, negatives.ids, 0, "query_embeddings vs per-query negatives")
  if positive_log_q is None:
    positive_log_q = negatives.positive_log_q
  if positive_log_q is not None:
    positive_log_q = as_float(positive_log_q, "positive_log_q")
    check_rank(positive_log_q, 1, "positive_log_q")
    deps += check_same_dim(query, 0, positive_log_q, 0, "query_embeddings vs positive_log_q")
  with tf.control_dependencies(deps):
    query = tf.identity(query)

  inv_t = 1.0 / float(temperature)
  positive_scores = tf.reduce_sum(query * pos_emb, axis=-1) * inv_t
  if negatives.shared:
    negative_scores = tf.matmul(query, negatives.embeddings, transpose_b=True) * inv_t
  else:
    negative_scores = tf.einsum("ad,and->an", query, negatives.embeddings) * inv_t
  if remove_accidental_hits:
    valid = accidental_hits.accidental_hit_mask(pos_ids, negatives.ids)
    valid = tf.broadcast_to(valid, tf.shape(negative_scores))
  else:
    valid = tf.ones_like(negative_scores, dtype=tf.bool)
  negative_log_q = negatives.log_q
  if apply_q_prime:
    if positive_log_q is None:
      raise ValueError("apply_q_prime needs positive_log_q (argument or "
                       "Negatives.positive_log_q)")
    negative_log_q = log_q_lib.log_q_prime(negative_log_q, positive_log_q)
  return ScoredCandidates(positive_scores, negative_scores, negative_log_q, valid,
                          positive_log_q)


def task_candidates(positive_ids, positive_embeddings, positive_log_q, negatives: Negatives):
  """Candidate rows for the drop-in task: the A positives, then the N shared negatives.

  ``tfrs_logq.tasks.Retrieval`` scores every query against all rows; rows ``0..A-1`` are the
  batch's positives (its own in-batch negatives, as in TFRS) and rows beyond ``A`` are extra
  shared negatives. So pass here negatives that the batch rows do not already provide (e.g. the
  uniform ones, or in-batch negatives from other replicas), not a second copy of the batch.

  Returns:
    ``(candidate_ids [A + N] int64, candidate_embeddings [A + N, d] float32,
    candidate_log_q [A + N] float32)``.

  Raises:
    ValueError: per-query negatives (the task takes only shared rows) or mismatched shapes.
  """
  negatives = validate_negatives(negatives)
  if not negatives.shared or negatives.log_q.shape.rank != 1:
    raise ValueError("task_candidates needs shared negatives (ids [N], log_q [N]); use "
                     "score_negatives for per-query negatives")
  pos_ids = as_ids(positive_ids, "positive_ids")
  pos_emb = as_float(positive_embeddings, "positive_embeddings")
  pos_log_q = as_float(positive_log_q, "positive_log_q")
  check_rank(pos_ids, 1, "positive_ids")
  check_rank(pos_emb, 2, "positive_embeddings")
  check_rank(pos_log_q, 1, "positive_log_q")
  deps = check_same_dim(pos_ids, 0, pos_emb, 0, "positive_ids vs positive_embeddings")
  deps += check_same_dim(pos_ids, 0, pos_log_q, 0, "positive_ids vs positive_log_q")
  deps += check_same_dim(pos_emb, 1, negatives.embeddings, 1, "embedding dimension")
  with tf.control_dependencies(deps):
    pos_ids = tf.identity(pos_ids)
  return (tf.concat([pos_ids, negatives.ids], 0),
          tf.concat([pos_emb, negatives.embeddings], 0),
          tf.concat([pos_log_q, negatives.log_q], 0))
