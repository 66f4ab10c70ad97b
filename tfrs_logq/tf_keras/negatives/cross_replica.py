"""Cross-replica in-batch candidates: all-gather ids, embeddings and log Q over replicas.

Under ``tf.distribute`` each replica sees its local batch ``B_r``. Gathering the candidate rows of
every replica (in replica order 0, 1, ..., R-1, concatenated along axis 0) gives every query the
**global batch** ``B = sum_r B_r`` as its in-batch pool. ``ReplicaContext.all_gather`` is
differentiable: the gradient of a gathered row is summed over the replicas that used it and sent
back to the replica that produced the row, so the candidate tower trains exactly as if the global
batch were on one device.

How this changes Q: the sampling unit becomes the global batch. Each of the ``B`` global rows is
still one draw from the unigram distribution, so the per-draw Q(d) = #d / N is unchanged, but
(i) the pool holds ``B`` draws instead of ``B_r`` (more negatives per query), (ii) deduplication
runs over the global batch, so an item present on two replicas counts once, and the dedup
approximation described in `in_batch` (one distinct item ~ one draw, exact only while
``B * Q(d) << 1``) is made against ``B``, not ``B_r``, and (iii) any quantity that counts the
in-batch slots (the ``mixture`` convention's ``k_b``) uses the global count. The frequency
estimator must therefore be updated with the global batch's ids (the estimators of
`tfrs_logq.tf_keras.frequency` gather across replicas in ``update``).

Compiled replica steps. ``ReplicaContext.all_gather`` goes through ``merge_call``, which a
replica function compiled by XLA (``strategy.run(tf.function(fn, jit_compile=True))``, the
merge-call-free path MirroredStrategy offers on GPUs) cannot contain. There the rows are gathered
by an all-reduce instead (``method="all_reduce"``, the default inside XLA): replica r writes its
rows into block r of a zero ``[R * B_r, ...]`` tensor and the blocks are summed over replicas,
which is exact (x + 0 = x) and differentiable (the gradient is the all-reduce of the incoming
gradient, sliced back to block r). It needs the same ``B_r`` on every replica (static shapes).
"""

from typing import Callable, List, Sequence, Tuple

from tfrs_logq.tf_keras import _static_shapes

import tensorflow as tf

__all__ = ["METHODS", "all_gather_rows", "in_replica_context_with_peers", "num_replicas"]

METHODS = ("auto", "all_gather", "all_reduce")


def num_replicas() -> int:
  """Number of replicas in sync of the current strategy (1 outside tf.distribute)."""
  return tf.distribute.get_strategy().num_replicas_in_sync


def in_replica_context_with_peers() -> bool:
  """True inside ``strategy.run`` of a strategy with more than one replica."""
  ctx = tf.distribute.get_replica_context()
  return ctx is not None and tf.distribute.has_strategy() and ctx.num_replicas_in_sync > 1


def all_gather_rows(tensors: Sequence[tf.Tensor], method: str = "auto") -> List[tf.Tensor]:
  """All-gathers each tensor along axis 0 across replicas (identity with one replica).

  Args:
    tensors: tensors with the same leading size ``B_r`` on a replica (sizes may differ between
      replicas with ``"all_gather"``); each of rank >= 1.
    method: ``"all_gather"`` (``ReplicaContext.all_gather``), ``"all_reduce"`` (block placement
      + all-reduce sum; equal ``B_r`` on every replica; works inside XLA-compiled replica
      functions) or ``"auto"`` (``"all_reduce"`` while compiled by XLA, else ``"all_gather"``).

  Returns:
    The gathered tensors, ``[sum_r B_r, ...]``, rows of replica 0 first. Differentiable.

  Raises:
    RuntimeError: called in a cross-replica context of a multi-replica strategy (all-gather
      needs every replica to participate: call it inside ``strategy.run``).
    ValueError: a scalar tensor, or an unknown ``method``.
  """
  if method not in METHODS:
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")
  tensors = [tf.convert_to_tensor(t) for t in tensors]
  for t in tensors:
    if t.shape.rank == 0:
      raise ValueError("all_gather_rows needs tensors of rank >= 1, got a scalar")
  if not tf.distribute.has_strategy():
    return list(tensors)
  ctx = tf.distribute.get_replica_context()
  if ctx is None:
    if num_replicas() > 1:
      raise RuntimeError(
        "cross-replica in-batch negatives must be computed inside strategy.run (replica "
        "context); got a cross-replica context"
      )
    return list(tensors)
  if ctx.num_replicas_in_sync == 1:
    return list(tensors)
  if method == "all_reduce" or (method == "auto" and _static_shapes.in_xla_context()):
    return [
      _static_shapes.all_gather_by_all_reduce(
        ctx, _dense_gradient(t) if t.dtype.is_floating else tf.stop_gradient(t)
      )
      for t in tensors
    ]
  # One all-gather per tensor: the gradient of a nested all-gather packs the gradients of all
  # members into one concat, which fails for a mix of integer ids and float rows.
  out = []
  for t in tensors:
    if t.dtype.is_floating:
      out.append(_dense_gradient(ctx.all_gather(t, axis=0)))
    elif t.dtype == tf.bool:  # collectives take numbers
      out.append(tf.cast(ctx.all_gather(tf.cast(t, tf.int64), axis=0), tf.bool))
    else:
      out.append(tf.stop_gradient(ctx.all_gather(t, axis=0)))
  return out


@tf.custom_gradient
def _dense_gradient(x: tf.Tensor) -> Tuple[tf.Tensor, Callable[[tf.Tensor], tf.Tensor]]:
  """Identity whose gradient is made dense: the all-gather gradient (an all-reduce of the
  incoming gradient) does not accept the IndexedSlices that a later ``tf.gather`` produces."""

  def grad(dy: tf.Tensor) -> tf.Tensor:
    return tf.convert_to_tensor(dy)

  return tf.identity(x), grad
