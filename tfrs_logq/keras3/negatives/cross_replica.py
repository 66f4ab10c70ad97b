"""Cross-replica in-batch candidates under ``keras.distribution`` data parallelism (JAX).

With ``keras.distribution.set_distribution(keras.distribution.DataParallel(...))`` on JAX,
``model.fit`` shards each batch along its first axis over the devices of the mesh and compiles
the step for the **global** batch (GSPMD): the positives a step sees are all R replicas' rows,

    pool = rows of replica 0, then replica 1, ..., then replica R - 1    (B = sum_r B_r rows)

so the in-batch pool, its deduplication, the counts B, U, n_b of the log Q conventions and the
estimators' updates are those of the global batch, as under ``tf.distribute`` on the tf-keras
path (``tfrs_logq.tf_keras.negatives.cross_replica``), and the gradient of a pool row is summed over
every query that scored it and lands on the replica that holds the row.

``all_gather_rows`` places the pool rows on every device (a replicated layout, the all-gather of
the tf-keras path): each replica then scores its own queries against the whole pool, locally.
Values never change (identity without a distribution, on other backends and outside a
compiled step it only moves data).
"""

from typing import List, Optional, Sequence

import keras

from tfrs_logq.keras3._tensors import Tensor

__all__ = ["all_gather_rows", "data_parallel_mesh", "num_replicas"]


def data_parallel_mesh() -> Optional[keras.distribution.DeviceMesh]:
  """The device mesh of the current ``keras.distribution`` distribution on JAX, or None."""
  if keras.backend.backend() != "jax":
    return None
  distribution = keras.distribution.distribution()
  return None if distribution is None else distribution.device_mesh


def num_replicas() -> int:
  """Number of devices the batch is split over under the current ``keras.distribution``: the
  size of its mesh's batch axis (1 without one, or off JAX). The tf-keras function counts the
  current tf.distribute strategy's replicas."""
  mesh = data_parallel_mesh()
  if mesh is None:
    return 1
  distribution = keras.distribution.distribution()
  axis = getattr(distribution, "batch_dim_name", None)
  names = list(mesh.axis_names)
  return int(mesh.shape[names.index(axis)] if axis in names else mesh.shape[0])


def all_gather_rows(tensors: Sequence[Tensor]) -> List[Tensor]:
  """Each tensor with every row on every device (replicated layout) under a distribution.

  Args:
    tensors: tensors of rank >= 1 (ids, embeddings, log Q, masks of the pool rows).

  Returns:
    The same values, replicated over the mesh of the current distribution (identity without
    one). Differentiable (a sharding constraint: the gradient flows back to each row's replica).

  Raises:
    ValueError: a scalar tensor.
  """
  out = []
  mesh = data_parallel_mesh()
  for t in tensors:
    t = keras.ops.convert_to_tensor(t)
    if len(t.shape) == 0:
      raise ValueError("all_gather_rows needs tensors of rank >= 1, got a scalar")
    if mesh is not None:
      t = keras.distribution.distribute_tensor(
        t, keras.distribution.TensorLayout([None] * len(t.shape), mesh)
      )
    out.append(t)
  return out
