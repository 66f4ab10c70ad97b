"""Static-shape building blocks for XLA / TPU: grouping equal keys by sorting, not `tf.unique`.

A compiled step (``tf.function(jit_compile=True)``, TPU) needs every intermediate shape to be a
function of the input shapes. `tf.unique`, one-argument `tf.where` and `tf.boolean_mask` are not:
their output size depends on the values. The replacements here keep every tensor at the size of
its input and carry a validity mask instead:

* ``sorted_runs(keys)``: a stable ascending sort of S keys; ``run[j]`` numbers the runs of equal
  keys of the sorted keys (0, 1, ...), so a per-key total is ``unsorted_segment_sum(x, run, S)``
  (at most S runs: a static number of segments).
* ``first_occurrence(keys, valid)``: ``first[i]`` is True at the first valid row of each distinct
  key (row order), ``segment[i]`` is the rank of row i's key among the distinct valid keys in
  first-occurrence order, i.e. what ``tf.unique(boolean_mask(keys, valid))`` would number it.
  Dropping the rows where ``first`` is False gives exactly ``tf.unique``'s distinct keys.
* ``valid_rank(valid)``: the index of each valid row among the valid rows (exclusive cumsum), so a
  per-row draw of a static ``[S, k]`` block taken at that rank equals the draw of the compacted
  ``[sum(valid), k]`` block (the stateless generators are prefix-consistent: the first m rows of a
  ``[S, k]`` draw are the ``[m, k]`` draw with the same seed).

``all_gather_by_all_reduce(ctx, x)`` all-gathers rows inside an XLA-compiled replica function,
where ``ReplicaContext.all_gather`` (a ``merge_call``) cannot run: replica r writes its rows into
block r of a zero ``[R * B_r, ...]`` tensor and the blocks are summed over replicas.

``stateless_seed(seed)``: XLA's stateless random kernels read the low 32 bits of each seed
component, TensorFlow's CPU kernels all 64; a seed reduced to [0, 2^32) per component gives the
same draws compiled or not (the integer draws; the float ones differ in their last bits, so the
library ranks and samples with integers).

``use_static_shapes(None)`` is True while a function is being traced for XLA (inside
``tf.function(jit_compile=True)``, including functions it calls), so library code picks the
static path exactly when it is compiled; True / False force either path.
"""

from typing import NamedTuple, Optional, Tuple

import tensorflow as tf

# no public API tells whether XLA compiles a trace
from tensorflow.python.framework import ops as _ops
from tensorflow.python.ops import control_flow_util as _cf_util

__all__ = [
  "in_xla_context",
  "use_static_shapes",
  "SortedRuns",
  "sorted_runs",
  "run_total",
  "first_occurrence",
  "valid_rank",
  "unsort",
  "all_gather_by_all_reduce",
  "stateless_seed",
]


def in_xla_context() -> bool:
  """True while tracing a function that XLA compiles (``jit_compile=True`` or a TPU step)."""
  return bool(_cf_util.GraphOrParentsInXlaContext(_ops.get_default_graph()))


def use_static_shapes(static_shapes: Optional[bool]) -> bool:
  """``static_shapes`` when given, else whether the caller is being compiled by XLA."""
  if static_shapes is None:
    return in_xla_context()
  return bool(static_shapes)


def stateless_seed(seed: tf.Tensor) -> tf.Tensor:
  """A ``[2]`` stateless seed as int64 with each component reduced to its low 32 bits (the bits
  XLA reads), so that draws agree with and without XLA."""
  return tf.bitwise.bitwise_and(tf.cast(seed, tf.int64), tf.constant(0xFFFFFFFF, tf.int64))


class SortedRuns(NamedTuple):
  """A stable ascending sort of S keys and the runs of equal keys.

  Attributes:
    order: int32 [S], ``keys[order]`` is sorted; equal keys keep their row order.
    keys: [S] the sorted keys.
    run: int32 [S], run index of each sorted key (0 for the first run, +1 at each new key).
  """

  order: tf.Tensor
  keys: tf.Tensor
  run: tf.Tensor


def sorted_runs(keys: tf.Tensor) -> SortedRuns:
  """Stable sort of a 1-D tensor and the run number of each sorted element (static shapes)."""
  keys = tf.convert_to_tensor(keys)
  order = tf.argsort(keys, stable=True)
  sorted_keys = tf.gather(keys, order)
  new_run = tf.concat(
    [tf.zeros([1], tf.int32), tf.cast(tf.not_equal(sorted_keys[1:], sorted_keys[:-1]), tf.int32)], 0
  )
  # An empty input gives an empty `new_run` slice above only when S = 0; keep S rows.
  new_run = new_run[: tf.shape(keys)[0]]
  return SortedRuns(order, sorted_keys, tf.cumsum(new_run))


def run_total(runs: SortedRuns, values: tf.Tensor, reduce: str = "sum") -> tf.Tensor:
  """For each sorted element, the sum (or max / min) of ``values`` (sorted order) over its run."""
  n = tf.shape(runs.run)[0]
  fn = dict(
    sum=tf.math.unsorted_segment_sum,
    max=tf.math.unsorted_segment_max,
    min=tf.math.unsorted_segment_min,
  )[reduce]
  return tf.gather(fn(values, runs.run, n), runs.run)


def unsort(runs: SortedRuns, sorted_values: tf.Tensor) -> tf.Tensor:
  """Puts values given in sorted order back in row order."""
  return tf.gather(sorted_values, tf.math.invert_permutation(runs.order))


def valid_rank(valid: tf.Tensor) -> tf.Tensor:
  """int32 [S]: number of valid rows before each row (a valid row's index among the valid)."""
  return tf.cumsum(tf.cast(valid, tf.int32), exclusive=True)


def first_occurrence(
  keys: tf.Tensor, valid: Optional[tf.Tensor] = None
) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """First valid occurrence of each distinct key, with static shapes.

  Args:
    keys: 1-D integer keys [S].
    valid: optional bool [S]; invalid rows are never a first occurrence and do not count.

  Returns:
    ``(first bool [S], segment int32 [S], num_distinct int32 scalar)``: ``first`` marks the first
    valid row of each distinct key; ``segment`` is the rank of each row's key among the distinct
    valid keys in order of first occurrence (for an invalid row whose key has no valid row it is
    an arbitrary index in [0, S)); ``num_distinct`` = U = ``sum(first)``.
  """
  keys = tf.convert_to_tensor(keys)
  n = tf.shape(keys)[0]
  if valid is None:
    valid = tf.ones([n], tf.bool)
  runs = sorted_runs(keys)
  valid_sorted = tf.gather(valid, runs.order)
  # The smallest valid row of each run (n when the run has no valid row).
  first_row = run_total(runs, tf.where(valid_sorted, runs.order, n), "min")
  first_sorted = tf.logical_and(valid_sorted, tf.equal(runs.order, first_row))
  first = unsort(runs, first_sorted)
  rank_of_first = valid_rank(first)  # row order
  segment_sorted = tf.gather(rank_of_first, tf.minimum(first_row, n - 1))
  segment = unsort(runs, segment_sorted)
  return first, segment, tf.reduce_sum(tf.cast(first, tf.int32))


def all_gather_by_all_reduce(ctx: tf.distribute.ReplicaContext, x: tf.Tensor) -> tf.Tensor:
  """``ctx.all_gather(x, axis=0)`` as an all-reduce sum of per-replica blocks (no merge_call).

  Replica r places its ``[B_r, ...]`` rows in block r of a zero ``[R * B_r, ...]`` tensor; the sum
  over replicas is the all-gather (same ``B_r`` on every replica, rows of replica 0 first).
  Exact: every other replica adds zeros (integers and bools travel as int64; float blocks are
  placed with `tf.where`, so inf and NaN come back unchanged). Differentiable for floats: the
  gradient is the all-reduce of the incoming gradient, block r kept.

  Args:
    ctx: the `tf.distribute.ReplicaContext`.
    x: a tensor of known rank >= 1.
  """
  if x.shape.rank is None or x.shape.rank == 0:
    raise ValueError(f"all_gather_by_all_reduce needs a tensor of known rank >= 1, got {x.shape}")
  r = ctx.num_replicas_in_sync
  dtype = x.dtype
  if not dtype.is_floating:
    x = tf.cast(x, tf.int64)
  mine = tf.equal(tf.range(r), tf.cast(ctx.replica_id_in_sync_group, tf.int32))  # [R]
  mine = tf.reshape(mine, [r] + [1] * x.shape.rank)
  tiled = tf.broadcast_to(x[tf.newaxis], tf.concat([[r], tf.shape(x)], 0))  # [R, B_r, ...]
  blocks = tf.where(mine, tiled, tf.zeros_like(tiled))
  shape = tf.concat([[r * tf.shape(x)[0]], tf.shape(x)[1:]], 0)
  out = ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.reshape(blocks, shape))
  return out if dtype.is_floating else tf.cast(out, dtype)
