"""The `Negatives` record shared by every negative sampler, and input checks they share.

A sampler returns the negatives of one training step as
``Negatives(ids, embeddings, log_q, positive_log_q)``:

* ``ids``: int64 ``[N]`` (shared by every query of the batch) or ``[A, N]`` (one set per query,
  e.g. MIDX).
* ``embeddings``: ``[N, d]`` (shared) or ``[A, N, d]`` (per query); row ``i`` is the candidate
  tower's embedding of ``ids[..., i]``.
* ``log_q``: float32 ``[N]`` or ``[A, N]``: log Q(d_i), the log **per-draw** probability that one
  negative slot holds ``d_i`` under the sampler's stated convention (see ``../shared/DESIGN.md``:
  Q sums to 1 over the catalog). A query-dependent proposal (MIDX) gives ``[A, N]``.
* ``positive_log_q``: float32 ``[A]`` or ``None``: log Q(p) of each query's positive under the
  *same* proposal, which the corrected loss needs for
  ``log Q'(d) = log Q(d) - log(1 - Q(p))``. ``None`` when the sampler does not know the
  queries' positives.
"""

from typing import NamedTuple, Optional

import tfrs_logq  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf


class Negatives(NamedTuple):
  """Negatives of one step: ids, candidate embeddings, log Q (see the module docstring)."""
  ids: tf.Tensor
  embeddings: tf.Tensor
  log_q: tf.Tensor
  positive_log_q: Optional[tf.Tensor] = None

  @property
  def shared(self) -> bool:
    """True when the negatives are shared by every query (ids of rank 1)."""
    return self.ids.shape.rank == 1


def as_ids(ids, name: str) -> tf.Tensor:
  """Converts integer ids to an int64 tensor; raises TypeError for non-integer dtypes."""
  ids = tf.convert_to_tensor(ids)
  if not (ids.dtype.is_integer):
    raise TypeError(f"{name} must be integer ids (int32/int64), got dtype {ids.dtype.name}")
  return tf.cast(ids, tf.int64)


def as_float(x, name: str) -> tf.Tensor:
  """Converts a float tensor to float32; raises TypeError for non-floating dtypes."""
  x = tf.convert_to_tensor(x)
  if not x.dtype.is_floating:
    raise TypeError(f"{name} must be a floating tensor, got dtype {x.dtype.name}")
  return tf.cast(x, tf.float32)


def check_rank(x: tf.Tensor, ranks, name: str) -> None:
  """Raises ValueError when the static rank of ``x`` is known and not in ``ranks``."""
  ranks = (ranks,) if isinstance(ranks, int) else tuple(ranks)
  if x.shape.rank is not None and x.shape.rank not in ranks:
    raise ValueError(f"{name} must have rank {' or '.join(map(str, ranks))}, "
                     f"got shape {x.shape}")


def check_same_dim(a: tf.Tensor, a_axis: int, b: tf.Tensor, b_axis: int, what: str):
  """Static check that two axes agree (when both are known); returns runtime assertions."""
  da, db = a.shape[a_axis], b.shape[b_axis]
  if da is not None and db is not None and da != db:
    raise ValueError(f"{what}: sizes differ ({da} vs {db}); shapes {a.shape} and {b.shape}")
  return [tf.debugging.assert_equal(tf.shape(a)[a_axis], tf.shape(b)[b_axis],
                                    message=f"{what}: sizes differ")]


def check_not_empty(x: tf.Tensor, name: str):
  """Raises ValueError for a statically empty axis 0; returns a runtime assertion otherwise."""
  if x.shape.rank is not None and x.shape.rank >= 1 and x.shape[0] == 0:
    raise ValueError(f"{name} is empty (shape {x.shape}): a batch needs at least one row")
  return [tf.debugging.assert_greater(tf.shape(x)[0], 0, message=f"{name} is empty")]


def validate_negatives(negatives: Negatives) -> Negatives:
  """Checks ranks, dtypes and matching sizes of a `Negatives`; returns it with int64/float32.

  Raises:
    TypeError: non-integer ids or non-floating embeddings / log Q.
    ValueError: ranks or sizes that do not fit ``ids [N] | [A, N]``, ``embeddings [N, d] |
      [A, N, d]``, ``log_q [N] | [A, N]``.
  """
  if not isinstance(negatives, Negatives):
    raise TypeError(f"expected a Negatives, got {type(negatives).__name__}")
  ids = as_ids(negatives.ids, "Negatives.ids")
  emb = as_float(negatives.embeddings, "Negatives.embeddings")
  log_q = as_float(negatives.log_q, "Negatives.log_q")
  check_rank(ids, (1, 2), "Negatives.ids")
  rank = ids.shape.rank
  check_rank(emb, rank + 1, "Negatives.embeddings (rank of ids + 1)")
  check_rank(log_q, (1, 2) if rank == 1 else 2, "Negatives.log_q")
  deps = check_same_dim(ids, -1, emb, -2, "Negatives ids vs embeddings")
  deps += check_same_dim(ids, -1, log_q, -1, "Negatives ids vs log_q")
  if rank == 2:
    deps += check_same_dim(ids, 0, emb, 0, "Negatives ids vs embeddings (rows)")
    deps += check_same_dim(ids, 0, log_q, 0, "Negatives ids vs log_q (rows)")
  pos = negatives.positive_log_q
  if pos is not None:
    pos = as_float(pos, "Negatives.positive_log_q")
    check_rank(pos, 1, "Negatives.positive_log_q")
  with tf.control_dependencies(deps):
    ids = tf.identity(ids)
  return Negatives(ids, emb, log_q, pos)
