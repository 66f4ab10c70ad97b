"""tf.distribute strategy selection for the training binary.

* ``default``: the default (no-op) strategy, one device.
* ``mirrored``: `tf.distribute.MirroredStrategy` over the local devices (GPUs, or the logical
  CPU devices the process created).
* ``multi_worker``: `tf.distribute.MultiWorkerMirroredStrategy`; the cluster comes from the
  ``TF_CONFIG`` environment variable ({"cluster": {"worker": [host:port, ...]}, "task":
  {"type": "worker", "index": i}}), which must be set before the strategy is created.
* ``tpu``: `tf.distribute.TPUStrategy` on the TPU named by ``--tpu`` ("" or "local" for a TPU VM).

The batch size is always GLOBAL: each replica gets batch_size / num_replicas_in_sync rows.
"""

from __future__ import annotations

import json
import os

import tfrs_logq  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")


def parse_tf_config() -> dict:
  """The parsed TF_CONFIG (empty dict when unset); raises ValueError when malformed."""
  raw = os.environ.get("TF_CONFIG", "")
  if not raw:
    return {}
  try:
    cfg = json.loads(raw)
  except json.JSONDecodeError as e:
    raise ValueError(f"TF_CONFIG is not valid JSON: {e}") from e
  if not isinstance(cfg, dict) or "cluster" not in cfg or "task" not in cfg:
    raise ValueError("TF_CONFIG must have 'cluster' and 'task' entries")
  return cfg


def mirrored_strategy(devices=None) -> tf.distribute.MirroredStrategy:
  """MirroredStrategy over ``devices`` (default: the local GPUs, else the logical CPUs).

  On CPU devices the cross-device reductions use `tf.distribute.ReductionToOneDevice`: with the
  default collective implementation, a step that mixes all-reduces with the uneven all-gathers
  of cross-replica in-batch negatives (and their gradients) fails in TF 2.20 with "Collective
  instance N expected type 0 ... but got type 2" between the replica threads.
  """
  if devices is None:
    devices = [d.name for d in tf.config.list_logical_devices("GPU")] or [
        d.name for d in tf.config.list_logical_devices("CPU")]
  if all("CPU" in d.upper() for d in devices):
    return tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
  return tf.distribute.MirroredStrategy(devices)


def make_strategy(name: str, tpu: str | None = None) -> tf.distribute.Strategy:
  """Creates the strategy named ``name`` (one of STRATEGIES)."""
  if name == "default":
    return tf.distribute.get_strategy()
  if name == "mirrored":
    return mirrored_strategy()
  if name == "multi_worker":
    cfg = parse_tf_config()
    if not cfg:
      raise ValueError("--strategy=multi_worker needs the TF_CONFIG environment variable "
                       "(cluster.worker list and task.index of this process)")
    return tf.distribute.MultiWorkerMirroredStrategy()
  if name == "tpu":
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu="" if tpu in (None, "local") else tpu)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
  raise ValueError(f"unknown strategy {name!r}: expected one of {STRATEGIES}")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
  """True for the process that writes summaries, metrics and exports (worker 0)."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return True
  task_type, task_id = resolver.task_type, resolver.task_id
  return task_type in (None, "chief") or (task_type == "worker" and task_id == 0)


def worker_dir(path: str, strategy: tf.distribute.Strategy) -> str:
  """``path`` for the chief; a private temporary sub-folder for the other workers.

  MultiWorkerMirroredStrategy needs every worker to save checkpoints (the save is a collective),
  but only the chief's copy is kept.
  """
  if is_chief(strategy):
    return path
  resolver = strategy.cluster_resolver
  return os.path.join(path, ".workers", f"{resolver.task_type}_{resolver.task_id}")
