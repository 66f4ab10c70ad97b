"""Scores queries against their positive and a ``Negatives`` record (Keras 3).

    positive_scores[a]    = <q_a, c_{p_a}> / T                                  [A]
    negative_scores[a, i] = <q_a, c_{d_i}> / T                                  [A, N]
    valid_mask[a, i]      = Negatives.valid[(a,) i] and d_i != p_a (accidental hits)

The results are the arguments of ``tfrs_logq.keras3.losses.sampled_softmax_loss`` (one matmul for
shared negatives [N, d], an einsum for per-query ones [A, N, d]). ``score_blocks`` gives the same
result from the negatives' embeddings in blocks (shared [k, d], per sequence [B, k, d], per query
[A, k, d]), so that the [A, N, d] embeddings of a step are never formed.

``join_blocks`` joins the ``ScoredCandidates`` of several samplers (in-batch, cross-batch memory,
uniform, MIDX) along N; the loss takes one positive log Q per row, the first block's Q_1(p), so
with ``rebase_q_prime`` (``correction="corrected"``, ``q_prime="exact"``) every later block's
log Q is shifted to keep its own proposal's Q_k(p) in Q' (``tfrs_logq.core.cross_batch``)::

    log Q_k(d) - (log(1 - Q_k(p)) - log(1 - Q_1(p)))                              [A, N_k]
"""

from typing import Any, Callable, Dict, Iterable, NamedTuple, Optional, Sequence, Tuple

from keras import ops

from tfrs_logq.core import cross_batch as cross_batch_core
from tfrs_logq.keras3 import _tensors, accidental_hits
from tfrs_logq.keras3._tensors import Tensor
from tfrs_logq.keras3.negatives.base import Negatives

__all__ = [
  "ScoredCandidates",
  "score_negatives",
  "score_blocks",
  "join_blocks",
  "embed_ids",
  "BLOCK_LAYOUTS",
]

BLOCK_LAYOUTS = ("shared", "sequence", "query")


class ScoredCandidates(NamedTuple):
  """Inputs of ``sampled_softmax_loss``: positive_scores [A], negative_scores [A, N],
  negative_log_q [N] or [A, N], valid_mask bool [A, N], positive_log_q [A] or None."""

  positive_scores: object
  negative_scores: object
  negative_log_q: object
  valid_mask: object
  positive_log_q: object = None

  def loss_kwargs(self) -> Dict[str, Any]:
    """``sampled_softmax_loss(**scored.loss_kwargs(), correction=...)`` arguments."""
    return dict(
      positive_scores=self.positive_scores,
      negative_scores=self.negative_scores,
      negative_log_q=self.negative_log_q,
      positive_log_q=self.positive_log_q,
      valid_mask=self.valid_mask,
    )


def embed_ids(
  ids: Tensor,
  *,
  candidate_embedder: Optional[Callable] = None,
  item_table: Optional[Tensor] = None,
  owner: str = "the sampler",
) -> Tensor:
  """float32 embeddings of ``ids`` (any shape): ``candidate_embedder(ids)`` if given, else the
  rows of ``item_table`` [V, d] (row i embeds id i); ``owner`` names the sampler in the error."""
  if candidate_embedder is not None:
    return _tensors.as_float32(candidate_embedder(ids), "candidate_embedder(ids)")
  if item_table is None:
    raise ValueError(f"{owner} needs a candidate_embedder or an item_table to embed its ids")
  return ops.take(_tensors.as_float32(item_table, "item_table"), ids, axis=0)


def score_negatives(
  query_embeddings: Tensor,
  positive_ids: Tensor,
  positive_embeddings: Tensor,
  negatives: Negatives,
  *,
  temperature: float = 1.0,
  positive_log_q: Optional[Tensor] = None,
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
  query_embeddings: Tensor,
  positive_ids: Tensor,
  positive_embeddings: Tensor,
  negatives: Negatives,
  blocks: Sequence[Tuple[str, Tensor]],
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


def join_blocks(blocks: Iterable[ScoredCandidates], *, rebase_q_prime: bool) -> ScoredCandidates:
  """Several blocks' ``ScoredCandidates`` as one, concatenated along N (module docstring).

  positive_scores and positive_log_q are the first block's; valid_mask [A, sum N_k]. With
  ``rebase_q_prime`` block k >= 1 gets ``core.cross_batch.rebased_block_log_q`` ([A, N_k]),
  which needs every block's positive_log_q (ValueError otherwise); without it each block's log Q
  is kept as it is (negative_log_q [sum N_k] when every block's is shared [N_k], else
  [A, sum N_k]).
  """
  blocks = list(blocks)
  if not blocks:
    raise ValueError("join_blocks needs at least one block")
  if rebase_q_prime:
    missing = [k for k, block in enumerate(blocks) if block.positive_log_q is None]
    if missing:
      raise ValueError(
        f"join_blocks(rebase_q_prime=True) needs every block's positive_log_q; blocks {missing} "
        "have none"
      )
  first = blocks[0]
  scores, masks, log_qs = [], [], []
  for block in blocks:
    s_n = _tensors.as_float32(block.negative_scores, "negative_scores")
    _tensors.check_rank(s_n, 2, "negative_scores")
    scores.append(s_n)
    masks.append(ops.broadcast_to(ops.cast(block.valid_mask, "bool"), ops.shape(s_n)))
    log_qs.append(_tensors.as_float32(block.negative_log_q, "negative_log_q"))
  reference = None
  if rebase_q_prime:
    reference = _tensors.as_float32(first.positive_log_q, "positive_log_q")
    for k in range(1, len(blocks)):
      log_qs[k] = cross_batch_core.rebased_block_log_q(
        ops,
        log_qs[k],
        _tensors.as_float32(blocks[k].positive_log_q, "positive_log_q"),
        reference,
        masks[k],  # masked entries keep their own log Q (the shift could lift them above 0)
      )
  if all(len(lq.shape) == 1 for lq in log_qs):
    negative_log_q = ops.concatenate(log_qs, axis=0)
  else:
    negative_log_q = ops.concatenate(
      [ops.broadcast_to(lq, ops.shape(s_n)) for lq, s_n in zip(log_qs, scores)], axis=1
    )
  return ScoredCandidates(
    first.positive_scores,
    ops.concatenate(scores, axis=1),
    negative_log_q,
    ops.concatenate(masks, axis=1),
    first.positive_log_q,
  )
