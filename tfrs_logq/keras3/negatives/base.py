"""The ``Negatives`` record and the static-shape dedup of the Keras 3 samplers.

Static shapes (jit-safe): instead of dropping duplicates, a pool keeps all B rows and marks the
ones that take part (the first valid occurrence of each id); a sort groups equal ids and the
smallest row index of each group wins::

    first[r]   = valid[r] and r = min{r' valid : id[r'] = id[r]}
    segment[r] = #{distinct valid ids whose first row comes before id[r]'s first row}

(``segment``: the rank of a row's id among the distinct valid ids in order of first occurrence,
the numbering of per-sequence negative sets.)
"""

from typing import Any, NamedTuple, Optional, Tuple

from keras import ops

from tfrs_logq.core import checks as core_checks
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3._tensors import Tensor

__all__ = [
  "Negatives",
  "CONVENTIONS",
  "first_occurrence_mask",
  "first_occurrence_segments",
  "validate_negatives",
]

CONVENTIONS = core_checks.LOG_Q_CONVENTIONS


class Negatives(NamedTuple):
  """ids [N] or [A, N], embeddings [N, d] or [A, N, d] (None until embedded), log_q [N] or
  [A, N] (float32 per-draw log Q), valid bool [N], [A, N] or None (slots that take part),
  positive_log_q [A] or None (log Q(p) of the queries' positives under the same proposal)."""

  ids: Any
  embeddings: Any
  log_q: Any
  valid: Any = None
  positive_log_q: Any = None


def _sorted_runs(ids: Tensor, valid: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
  """(order, run [B] of each sorted row, rank [B]: row index, + B for an invalid row)."""
  b = ids.shape[0]
  index = ops.arange(b, dtype="int32")
  rank = index if valid is None else ops.where(valid, index, index + b)
  order = ops.cast(ops.argsort(ids), "int32")
  sorted_ids = ops.take(ids, order)
  first = ops.concatenate([ops.ones((1,), "bool"), ops.not_equal(sorted_ids[1:], sorted_ids[:-1])])
  run = ops.cumsum(ops.cast(first, "int32")) - 1
  return order, run, ops.take(rank, order)


def first_occurrence_mask(ids: Tensor, valid: Optional[Tensor] = None) -> Tensor:
  """bool [B]: True at the first row of each distinct id among the valid rows (dedup)."""
  ids = _tensors.as_ids(ids, "ids")
  _tensors.check_rank(ids, 1, "ids")
  b = ids.shape[0]
  if valid is not None:
    valid = ops.cast(valid, "bool")
  order, run, sorted_rank = _sorted_runs(ids, valid)
  best = -ops.segment_max(-sorted_rank, run, num_segments=b)
  winner = ops.cast(ops.equal(sorted_rank, ops.take(best, run)), "int32")
  keep = ops.cast(ops.scatter(ops.expand_dims(order, 1), winner, (b,)), "bool")
  return keep if valid is None else ops.logical_and(keep, valid)


def first_occurrence_segments(ids: Tensor, valid: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
  """(first bool [B], segment int32 [B]): ``first_occurrence_mask`` and each row's rank among
  the distinct valid ids in order of first occurrence (an id without a valid row: B - 1)."""
  ids = _tensors.as_ids(ids, "ids")
  _tensors.check_rank(ids, 1, "ids")
  b = ids.shape[0]
  first = first_occurrence_mask(ids, valid)
  rank_of_first = ops.cumsum(ops.cast(first, "int32")) - 1  # valid at first rows
  order, run, _ = _sorted_runs(ids, None)
  sorted_first = ops.take(first, order)
  marked = ops.where(sorted_first, ops.take(rank_of_first, order), -1)
  per_run = ops.segment_max(marked, run, num_segments=b)
  segment = ops.take(per_run, run)
  segment = ops.where(segment < 0, b - 1, segment)  # sorted order
  return first, ops.cast(ops.scatter(ops.expand_dims(order, 1), segment, (b,)), "int32")


def validate_negatives(negatives: Negatives) -> Negatives:
  """Checks ranks, dtypes and matching sizes of a `Negatives` (the tf-keras function's rules);
  returns it with float32 embeddings and log Q (static shapes: the checks are at trace time).

  Raises:
    TypeError: non-integer ids, non-floating embeddings / log Q, non-bool valid.
    ValueError: ranks or sizes that do not fit ``ids [N] | [A, N]``, ``embeddings [N, d] |
      [A, N, d]``, ``log_q [N] | [A, N]``, ``valid`` of the shape of ids.
  """
  if not isinstance(negatives, Negatives):
    raise TypeError(f"expected a Negatives, got {type(negatives).__name__}")
  ids = _tensors.as_ids(negatives.ids, "Negatives.ids")
  emb = _tensors.as_float32(negatives.embeddings, "Negatives.embeddings")
  log_q = _tensors.as_float32(negatives.log_q, "Negatives.log_q")
  _tensors.check_rank(ids, (1, 2), "Negatives.ids")
  rank = len(ids.shape)
  _tensors.check_rank(emb, rank + 1, "Negatives.embeddings (rank of ids + 1)")
  _tensors.check_rank(log_q, (1, 2), "Negatives.log_q")
  _tensors.check_same_dim(ids, -1, emb, -2, "Negatives ids vs embeddings")
  _tensors.check_same_dim(ids, -1, log_q, -1, "Negatives ids vs log_q")
  if rank == 2:
    _tensors.check_same_dim(ids, 0, emb, 0, "Negatives ids vs embeddings (rows)")
    if len(log_q.shape) == 2:
      _tensors.check_same_dim(ids, 0, log_q, 0, "Negatives ids vs log_q (rows)")
  valid = negatives.valid
  if valid is not None:
    valid = ops.convert_to_tensor(valid)
    if _tensors.dtype_of(valid) != "bool":
      raise TypeError(f"Negatives.valid must be bool, got {_tensors.dtype_of(valid)}")
    _tensors.check_rank(valid, rank, "Negatives.valid (rank of ids)")
    _tensors.check_same_dim(ids, -1, valid, -1, "Negatives ids vs valid")
    if rank == 2:
      _tensors.check_same_dim(ids, 0, valid, 0, "Negatives ids vs valid (rows)")
  pos = negatives.positive_log_q
  if pos is not None:
    pos = _tensors.as_float32(pos, "Negatives.positive_log_q")
    _tensors.check_rank(pos, 1, "Negatives.positive_log_q")
  return Negatives(ids, emb, log_q, valid, pos)
