"""Scores queries against their positive and a ``Negatives`` record (Keras 3).

    positive_scores[a]    = <q_a, c_{p_a}> / T                                  [A]
    negative_scores[a, i] = <q_a, c_{d_i}> / T                                  [A, N]
    valid_mask[a, i]      = Negatives.valid[(a,) i] and d_i != p_a (accidental hits)

The results are the arguments of ``tfrs_logq.keras3.losses.sampled_softmax_loss`` (one matmul for
shared negatives [N, d], an einsum for per-query ones [A, N, d]). ``score_blocks`` gives the same
result from the negatives' embeddings in blocks (shared [k, d], per sequence [B, k, d], per query
[A, k, d]), so that the [A, N, d] embeddings of a step are never formed.
"""

from typing import NamedTuple

from keras import ops

from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3 import accidental_hits
from tfrs_logq.keras3.negatives.base import Negatives

__all__ = ["ScoredCandidates", "score_negatives", "score_blocks", "BLOCK_LAYOUTS"]

BLOCK_LAYOUTS = ("shared", "sequence", "query")


class ScoredCandidates(NamedTuple):
  """Inputs of ``sampled_softmax_loss``: positive_scores [A], negative_scores [A, N],
  negative_log_q [N] or [A, N], valid_mask bool [A, N], positive_log_q [A] or None."""

  positive_scores: object
  negative_scores: object
  negative_log_q: object
  valid_mask: object
  positive_log_q: object = None

  def loss_kwargs(self) -> dict:
    """``sampled_softmax_loss(**scored.loss_kwargs(), correction=...)`` arguments."""
    return dict(
      positive_scores=self.positive_scores,
      negative_scores=self.negative_scores,
      negative_log_q=self.negative_log_q,
      positive_log_q=self.positive_log_q,
      valid_mask=self.valid_mask,
    )


def score_negatives(
  query_embeddings,
  positive_ids,
  positive_embeddings,
  negatives: Negatives,
  *,
  temperature: float = 1.0,
  positive_log_q=None,
  remove_accidental_hits: bool = True,
) -> ScoredCandidates:
  """Scores A queries against their positive and the negatives, with the validity mask.

  positive_scores[a] = <q_a, c_{p_a}> / T; negative_scores[a, i] = <q_a, c_{d_i}> / T (one
  matmul for shared negatives, an einsum for per-query ones [A, N, d]); valid_mask[a, i] =
  negatives.valid[(a,) i] and (d_i != p_a when ``remove_accidental_hits``).
  """
  if not temperature > 0:
    raise ValueError(f"temperature must be > 0, got {temperature!r}")
  if negatives.embeddings is None:
    raise ValueError(
      "negatives have no embeddings: embed their ids with the candidate tower "
      "(negatives._replace(embeddings=tower(negatives.ids)))"
    )
  query = _tensors.as_float32(query_embeddings, "query_embeddings")
  pos_ids = _tensors.as_ids(positive_ids, "positive_ids")
  pos_emb = _tensors.as_float32(positive_embeddings, "positive_embeddings")
  neg_emb = _tensors.as_float32(negatives.embeddings, "Negatives.embeddings")
  _tensors.check_rank(query, 2, "query_embeddings")
  _tensors.check_rank(pos_emb, 2, "positive_embeddings")
  _tensors.check_rank(neg_emb, (2, 3), "Negatives.embeddings")
  _tensors.check_same_dim(query, 0, pos_ids, 0, "query_embeddings vs positive_ids")
  _tensors.check_same_dim(query, 1, neg_emb, -1, "query vs negative embedding dimension")
  inv_t = 1.0 / float(temperature)
  positive_scores = ops.sum(query * pos_emb, axis=-1) * inv_t
  if len(neg_emb.shape) == 2:
    negative_scores = ops.matmul(query, ops.transpose(neg_emb)) * inv_t
  else:
    negative_scores = ops.einsum("ad,and->an", query, neg_emb) * inv_t
  if remove_accidental_hits:
    valid = accidental_hits.accidental_hit_mask(pos_ids, negatives.ids)
    valid = ops.broadcast_to(valid, ops.shape(negative_scores))
  else:
    valid = ops.ones_like(negative_scores, dtype="bool")
  if negatives.valid is not None:
    valid = ops.logical_and(valid, ops.cast(negatives.valid, "bool"))
  if positive_log_q is None:
    positive_log_q = negatives.positive_log_q
  return ScoredCandidates(
    positive_scores,
    negative_scores,
    _tensors.as_float32(negatives.log_q, "Negatives.log_q"),
    valid,
    positive_log_q,
  )


def score_blocks(
  query_embeddings,
  positive_ids,
  positive_embeddings,
  negatives: Negatives,
  blocks,
  temperature: float = 1.0,
) -> ScoredCandidates:
  """``score_negatives``'s result with the negatives' embeddings given block by block.

  ``blocks``: ((layout, embeddings), ...) in the order of ``negatives.ids``' columns; layout
  "shared" [k, d] (a matmul), "sequence" [B, k, d] (the A = B·L rows of sequence b share its
  draws: a batched matmul), "query" [A, k, d] (an einsum). ``negatives.embeddings`` is ignored.
  """
  inv_t = 1.0 / float(temperature)
  q = ops.convert_to_tensor(query_embeddings)
  a, d = q.shape
  parts = []
  for layout, emb in blocks:
    if layout == "shared":
      parts.append(ops.matmul(q, ops.transpose(emb)))
    elif layout == "sequence":
      b = emb.shape[0]
      per_seq = ops.einsum("bld,bnd->bln", ops.reshape(q, (b, a // b, d)), emb)
      parts.append(ops.reshape(per_seq, (a, emb.shape[1])))
    elif layout == "query":
      parts.append(ops.einsum("ad,and->an", q, emb))
    else:
      raise ValueError(f"block layout must be one of {BLOCK_LAYOUTS}, got {layout!r}")
  negative_scores = (parts[0] if len(parts) == 1 else ops.concatenate(parts, axis=1)) * inv_t
  valid = ops.broadcast_to(
    accidental_hits.accidental_hit_mask(positive_ids, negatives.ids), ops.shape(negative_scores)
  )
  if negatives.valid is not None:
    valid = ops.logical_and(valid, ops.cast(negatives.valid, "bool"))
  return ScoredCandidates(
    ops.sum(q * positive_embeddings, axis=-1) * inv_t,
    negative_scores,
    negatives.log_q,
    valid,
    negatives.positive_log_q,
  )
