"""The `Negatives` record of every sampler and the samplers' shared checks.

A sampler draws the negatives of one training step, d_1..d_N, shared by the batch or per query,
with log Q(d_i), and scores A queries against them (`negatives.sampler.NegativeSampler`). Its
``score`` returns the inputs of
``tfrs_logq.tf_keras.losses.sampled_softmax_loss`` as a
`tfrs_logq.tf_keras.negatives.ScoredCandidates`:

    positive_scores[a]    = <q_a, c_{p_a}> / T                      [A]
    negative_scores[a, i] = <q_a, c_{d_i}> / T                      [A, N]  (d_i may depend on a)
    negative_log_q        = log Q(d_i)                              [N] or [A, N]
    valid_mask[a, i]      = d_i != p_a                              [A, N]  (accidental hits)
    positive_log_q[a]     = log Q(p_a) under the same proposal      [A] or None

Q(d) is the **per-draw** probability that one negative slot holds d (it sums to 1 over the
catalog), under the convention each sampler states. The record `Negatives(ids, embeddings,
log_q, valid, positive_log_q)` (the fields in the Keras 3 front's order) holds the sampled
negatives themselves:

* ``ids``: int64 ``[N]`` (shared by every query of the batch) or ``[A, N]`` (one set per query).
* ``embeddings``: ``[N, d]`` (shared) or ``[A, N, d]`` (per query); row ``i`` is the candidate
  tower's embedding of ``ids[..., i]``.
* ``log_q``: float32 ``[N]`` or ``[A, N]``: log Q(d_i); a query-dependent proposal (MIDX) gives
  ``[A, N]``; a log Q that does not depend on the row may stay ``[N]`` with per-query ids.
* ``valid``: bool of the shape of ``ids``, or ``None`` (all valid): False marks padding slots of a
  static-shape pool (an XLA-compiled step keeps the in-batch pool at its full size and masks the
  duplicates instead of dropping them); scoring folds it into ``valid_mask``, and the log Q of a
  padding slot is finite.
* ``positive_log_q``: float32 ``[A]`` or ``None``: log Q(p) of each query's positive under the
  same proposal, which the corrected loss needs for ``log Q'(d) = log Q(d) - log(1 - Q(p))``.

Before 0.3 the last two fields were in the other order (``positive_log_q`` fourth); a fourth
positional argument that is a float tensor is still read as ``positive_log_q``, with a
DeprecationWarning.

``score(..., valid=None)``: an optional bool ``[A]`` marks padding *queries* of a static-shape
batch (e.g. SASRec's padded positions); they are left out of any in-batch pool and of the uniform
draws' numbering, their rows are still scored (finite) and the caller drops their loss.
"""

import numbers
import warnings
from typing import Callable, List, NamedTuple, Optional, Sequence, Union

import tensorflow as tf

__all__ = ["Negatives", "validate_negatives"]

ItemTable = Union[tf.Tensor, Callable[[], tf.Tensor]]
"""A candidate table ``[V, d]`` whose row i embeds id i, or a zero-argument callable returning it
(the samplers' ``item_table``)."""


class _NegativesFields(NamedTuple):
  ids: tf.Tensor
  embeddings: tf.Tensor
  log_q: tf.Tensor
  valid: Optional[tf.Tensor] = None
  positive_log_q: Optional[tf.Tensor] = None


def _is_float(value: object) -> bool:
  dtype = getattr(value, "dtype", None)
  if dtype is None:
    return False
  return bool(getattr(tf.as_dtype(dtype), "is_floating", False))


class Negatives(_NegativesFields):
  """The negatives d_1..d_N of one step.

  Attributes:
    ids: int64 [N] (shared by every query) or [A, N] (one set per query).
    embeddings: [N, d] or [A, N, d], the candidate embeddings c_{d_i}.
    log_q: [N] or [A, N] log Q(d_i) (per-draw probability; [N] may go with per-query ids when it
      does not depend on the row).
    valid: bool, shape of ``ids``: False for padding slots of a static-shape pool; None = all.
    positive_log_q: [A] log Q(p_a) of each query's positive under the same proposal, or None.
  """

  __slots__ = ()

  def __new__(
    cls,
    ids: tf.Tensor,
    embeddings: tf.Tensor,
    log_q: tf.Tensor,
    valid: Optional[tf.Tensor] = None,
    positive_log_q: Optional[tf.Tensor] = None,
  ) -> "Negatives":
    if _is_float(valid) and (
      positive_log_q is None or getattr(positive_log_q, "dtype", None) == tf.bool
    ):
      warnings.warn(
        "Negatives(ids, embeddings, log_q, positive_log_q, valid) is the former field order: "
        "the fields are now (ids, embeddings, log_q, valid, positive_log_q), as on the Keras 3 "
        "front; pass positive_log_q= by keyword",
        DeprecationWarning,
        stacklevel=2,
      )
      valid, positive_log_q = positive_log_q, valid
    return super().__new__(cls, ids, embeddings, log_q, valid, positive_log_q)

  @property
  def shared(self) -> bool:
    """True when the negatives are shared by every query (ids of rank 1)."""
    return self.ids.shape.rank == 1


def as_ids(ids: tf.Tensor, name: str) -> tf.Tensor:
  """Converts integer ids to an int64 tensor; raises TypeError for non-integer dtypes."""
  ids = tf.convert_to_tensor(ids)
  if not ids.dtype.is_integer:
    raise TypeError(f"{name} must be integer ids (int32/int64), got dtype {ids.dtype.name}")
  return tf.cast(ids, tf.int64)


def as_float(x: tf.Tensor, name: str) -> tf.Tensor:
  """Converts a float tensor to float32; raises TypeError for non-floating dtypes."""
  x = tf.convert_to_tensor(x)
  if not x.dtype.is_floating:
    raise TypeError(f"{name} must be a floating tensor, got dtype {x.dtype.name}")
  return tf.cast(x, tf.float32)


def check_rank(x: tf.Tensor, ranks: Union[int, Sequence[int]], name: str) -> None:
  """Raises ValueError when the static rank of ``x`` is known and not in ``ranks``."""
  ranks = (ranks,) if isinstance(ranks, int) else tuple(ranks)
  if x.shape.rank is not None and x.shape.rank not in ranks:
    raise ValueError(f"{name} must have rank {' or '.join(map(str, ranks))}, got shape {x.shape}")


def check_same_dim(
  a: tf.Tensor, a_axis: int, b: tf.Tensor, b_axis: int, what: str
) -> List[tf.Operation]:
  """Static check that two axes agree (when both are known); returns runtime assertions."""
  da, db = a.shape[a_axis], b.shape[b_axis]
  if da is not None and db is not None and da != db:
    raise ValueError(f"{what}: sizes differ ({da} vs {db}); shapes {a.shape} and {b.shape}")
  return [
    tf.debugging.assert_equal(
      tf.shape(a)[a_axis], tf.shape(b)[b_axis], message=f"{what}: sizes differ"
    )
  ]


def check_not_empty(x: tf.Tensor, name: str) -> List[tf.Operation]:
  """Raises ValueError for a statically empty axis 0; returns a runtime assertion otherwise."""
  if x.shape.rank is not None and x.shape.rank >= 1 and x.shape[0] == 0:
    raise ValueError(f"{name} is empty (shape {x.shape}): a batch needs at least one row")
  return [tf.debugging.assert_greater(tf.shape(x)[0], 0, message=f"{name} is empty")]


def check_positive_int(value: object, name: str) -> int:
  """Returns ``int(value)`` for a Python / numpy integer >= 1; ValueError otherwise."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
    raise ValueError(f"{name} must be a positive int, got {value!r}")
  return int(value)


def validate_negatives(negatives: Negatives) -> Negatives:
  """Checks ranks, dtypes and matching sizes of a `Negatives`; returns it with int64/float32.

  Raises:
    TypeError: non-integer ids, non-floating embeddings / log Q, non-bool valid.
    ValueError: ranks or sizes that do not fit ``ids [N] | [A, N]``, ``embeddings [N, d] |
      [A, N, d]``, ``log_q [N] | [A, N]``, ``valid`` of the shape of ids.
  """
  if not isinstance(negatives, Negatives):
    raise TypeError(f"expected a Negatives, got {type(negatives).__name__}")
  ids = as_ids(negatives.ids, "Negatives.ids")
  emb = as_float(negatives.embeddings, "Negatives.embeddings")
  log_q = as_float(negatives.log_q, "Negatives.log_q")
  check_rank(ids, (1, 2), "Negatives.ids")
  rank = ids.shape.rank
  check_rank(emb, rank + 1, "Negatives.embeddings (rank of ids + 1)")
  check_rank(log_q, (1, 2), "Negatives.log_q")
  deps = check_same_dim(ids, -1, emb, -2, "Negatives ids vs embeddings")
  deps += check_same_dim(ids, -1, log_q, -1, "Negatives ids vs log_q")
  if rank == 2:
    deps += check_same_dim(ids, 0, emb, 0, "Negatives ids vs embeddings (rows)")
    if log_q.shape.rank == 2:
      deps += check_same_dim(ids, 0, log_q, 0, "Negatives ids vs log_q (rows)")
  pos = negatives.positive_log_q
  if pos is not None:
    pos = as_float(pos, "Negatives.positive_log_q")
    check_rank(pos, 1, "Negatives.positive_log_q")
  valid = negatives.valid
  if valid is not None:
    valid = tf.convert_to_tensor(valid)
    if valid.dtype != tf.bool:
      raise TypeError(f"Negatives.valid must be bool, got dtype {valid.dtype.name}")
    check_rank(valid, rank, "Negatives.valid (rank of ids)")
    deps += check_same_dim(ids, -1, valid, -1, "Negatives ids vs valid")
  with tf.control_dependencies(deps):
    ids = tf.identity(ids)
  return Negatives(ids, emb, log_q, valid, pos)
