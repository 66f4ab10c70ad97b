"""Row gathers that also work on partitioned tables (`tf.distribute` ShardedVariable).

Under ``tf.distribute.ParameterServerStrategy`` with a ``variable_partitioner``, a large table (an
item-embedding table, an estimator's hash array or count-min sketch) is a
``ShardedVariable``: its rows are split into contiguous blocks, one per parameter server.
Two traps of ``tf.gather`` on a ShardedVariable (TF 2.20): it only takes 1-D indices
("ShardedVariable: indices must be 1D Tensor for sparse operations"), while the estimators read
a ``[m, ...]`` grid of slots at once; and with 1-D indices that fall into several shards it
returns the rows grouped by shard, not in the order of the indices (silently wrong values).

``read_markers(variables)`` gives one tiny read of each variable (its first element), to put
in ``tf.control_dependencies`` so that what follows waits for every earlier write to them
(TensorFlow orders ops on one resource in program order) without moving the variables: a
``tf.identity(variable)`` reads it whole, which under ParameterServerStrategy copies it from its
ps to the worker at every step (measured: 24 MiB per step for a 2^20-bucket hash array).

``gather_rows(table, indices)`` is ``tf.gather(table, indices)`` for any table and any index
shape: for a ShardedVariable it is an embedding lookup over its shards ("div" partitioning, each
shard read on its own parameter server, rows stitched back in the order of the indices), shape
``indices.shape + row shape``. A plain variable or tensor goes straight to ``tf.gather``, so
single-device and mirrored programs are unchanged.
"""

from typing import Iterable, List, Union

import tensorflow as tf
from tensorflow.python.distribute import sharded_variable

__all__ = ["gather_rows", "is_sharded", "read_markers"]


def is_sharded(table: object) -> bool:
  """True when ``table`` is a partitioned variable (`tf.distribute` ShardedVariable)."""
  return isinstance(table, sharded_variable.ShardedVariableMixin)


def gather_rows(table: Union[tf.Variable, tf.Tensor], indices: tf.Tensor) -> tf.Tensor:
  """``table[indices]`` along axis 0: shape ``indices.shape + table.shape[1:]``.

  Args:
    table: a variable, a ShardedVariable or a tensor.
    indices: integer indices of any rank.
  """
  if not is_sharded(table):
    return tf.gather(table, indices)
  # embedding_lookup stitches the rows of each shard back in the order of the indices; in
  # TF 2.20, tf.gather / sparse_read on a ShardedVariable returns them grouped by shard.
  return tf.compat.v1.nn.embedding_lookup(list(table.variables), indices, partition_strategy="div")


def read_markers(variables: Iterable[tf.Variable]) -> List[tf.Tensor]:
  """One element read from each variable (the scalar itself for rank 0; each shard of a
  ShardedVariable): control-dependency markers that order after every earlier write to the
  variables, without reading them whole (module docstring)."""
  markers = []
  for v in variables:
    for part in v.variables if is_sharded(v) else [v]:
      if part.shape.rank == 0:
        markers.append(tf.identity(part))
      else:
        markers.append(tf.gather(part, tf.zeros([1], tf.int32)))
  return markers
