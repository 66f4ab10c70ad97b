r"""In-batch negatives on the Keras 3 path: the batch's positives, deduplicated as a mask.

The pool is the B positives of the (global, see ``cross_replica``) batch; all B rows are kept
(static shapes) and ``Negatives.valid`` marks the first valid occurrence of each id, so the loss
sees exactly the deduplicated pool of ``tfrs_logq.negatives.InBatchNegatives``. With B the valid
rows, U their distinct ids and n_b = U the kept slots (no ``k_b`` subsample), log Q of a slot
(formulas in ``tfrs_logq.core.negatives``)::

    unigram / mixture:  log Q(d) = log q_uni(d)
    expected_count:     log Q(d) = log pi(d) + log n_b - log U - log n_b,  pi(d) = 1 - (1 - q_uni(d))^B

(``expected_count``: log E[count of d among the n_b negatives] - log n_b, so the importance
weights e^s / (n Q) are Horvitz-Thompson weights e^s / E[count].)
"""

from typing import NamedTuple

from keras import ops

from tfrs_logq.core import negatives as negatives_core
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3.negatives import base
from tfrs_logq.keras3.negatives import cross_replica as cross_replica_lib

__all__ = ["InBatchPool", "in_batch_pool", "convention_log_q", "in_batch_negatives"]


class InBatchPool(NamedTuple):
  """The in-batch negatives of one step (log_q = per-draw log q_uni) with B and U (float32
  scalars); n_b = U."""
  negatives: base.Negatives
  num_draws: object
  num_distinct: object

  @property
  def num_kept(self):
    return self.num_distinct


def in_batch_pool(positive_ids, positive_embeddings, log_q, valid=None,
                  cross_replica: bool = True) -> InBatchPool:
  """The pool of :func:`in_batch_negatives` under the ``unigram`` log Q, with B and U."""
  ids = _tensors.as_ids(positive_ids, "positive_ids")
  emb = _tensors.as_float32(positive_embeddings, "positive_embeddings")
  log_q = _tensors.as_float32(log_q, "log_q")
  _tensors.check_rank(ids, 1, "positive_ids")
  _tensors.check_rank(emb, 2, "positive_embeddings")
  _tensors.check_same_dim(ids, 0, emb, 0, "positive_ids vs positive_embeddings")
  _tensors.check_same_dim(ids, 0, log_q, 0, "positive_ids vs log_q")
  if ids.shape[0] == 0:
    raise ValueError("positive_ids is empty: a batch needs at least one row")
  pool_valid = (ops.ones(ops.shape(ids), "bool") if valid is None
                else ops.cast(ops.convert_to_tensor(valid), "bool"))
  _tensors.check_same_dim(ids, 0, pool_valid, 0, "positive_ids vs valid")
  positive_log_q = log_q
  if cross_replica:
    ids, emb, log_q, pool_valid = cross_replica_lib.all_gather_rows([ids, emb, log_q, pool_valid])
  keep = base.first_occurrence_mask(ids, pool_valid)
  negatives = base.Negatives(ids, emb, log_q, keep, positive_log_q)
  return InBatchPool(negatives, ops.sum(ops.cast(pool_valid, "float32")),
                     ops.sum(ops.cast(keep, "float32")))


def convention_log_q(log_q_unigram, pool: InBatchPool, convention: str):
  """log Q of in-batch slots under ``convention`` from log q_uni (float32, any shape)."""
  if convention != "expected_count":
    return log_q_unigram
  return negatives_core.expected_count_per_draw_log_q(
      ops, log_q_unigram, pool.num_draws, pool.num_distinct, pool.num_kept)


def in_batch_negatives(positive_ids, positive_embeddings, log_q, valid=None, *,
                       convention: str = "unigram", cross_replica: bool = True):
  """The batch's positives as shared negatives, duplicates and padding marked invalid.

  Args:
    positive_ids: integer [B].
    positive_embeddings: [B, d] (reused; gradients reach the first row of each id).
    log_q: float [B], log q_uni of each row's item.
    valid: optional bool [B], False for padding rows.
    convention: ``unigram`` (= ``mixture`` here) or ``expected_count`` (module docstring).
    cross_replica: under ``keras.distribution`` data parallelism (JAX) lay the pool out on
      every device (``cross_replica.all_gather_rows``; the pool is the global batch either way).

  Returns:
    Negatives(ids [B], embeddings [B, d], log_q [B], valid [B], positive_log_q [B]) with log Q
    under the convention.
  """
  if convention not in base.CONVENTIONS:
    raise ValueError(f"convention must be one of {base.CONVENTIONS}, got {convention!r}")
  pool = in_batch_pool(positive_ids, positive_embeddings, log_q, valid, cross_replica)
  negatives = pool.negatives
  return negatives._replace(
      log_q=convention_log_q(negatives.log_q, pool, convention),
      positive_log_q=convention_log_q(negatives.positive_log_q, pool, convention))
