"""tf.distribute strategy selection for the training binary.

* ``default``: the default (no-op) strategy, one device.
* ``mirrored``: `tf.distribute.MirroredStrategy` over the local devices (GPUs, or the logical
  CPU devices the process created).
* ``multi_worker``: `tf.distribute.MultiWorkerMirroredStrategy`; the cluster comes from the
  ``TF_CONFIG`` environment variable ({"cluster": {"worker": [host:port, ...]}, "task":
  {"type": "worker", "index": i}}), which must be set before the strategy is created.
* ``tpu``: `tf.distribute.TPUStrategy` on the TPU named by ``--tpu`` ("" or "local" for a TPU VM).
* ``parameter_server``: `tf.distribute.ParameterServerStrategy` driven by a
  `tf.distribute.coordinator.ClusterCoordinator`. TF_CONFIG names a cluster with one "chief",
  one or more "worker" and one or more "ps" tasks. The same command is started in every process:
  the chief (task type "chief") builds the model and schedules the steps; a worker or ps process
  only runs `tf.distribute.Server(...).join()` (`run_server`, called by `python -m train` before
  anything else). Variables of ``ps_min_shard_bytes`` or more (the item / user tables, large
  estimator state) are partitioned over the ps tasks
  (`tf.distribute.experimental.partitioners.MinSizePartitioner`, at most one shard per ps); small
  ones live whole on one ps. `local_cluster` starts such a cluster inside one process (tests).

The batch size is always GLOBAL: each replica gets batch_size / num_replicas_in_sync rows.
"""

from __future__ import annotations

import json
import os
import re

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import tensorflow as tf

from train.choices import PS_MIN_SHARD_BYTES, STRATEGIES  # defined there

# TF_CONFIG task types of the processes that only serve a ParameterServerStrategy cluster.
SERVER_TASKS = ("worker", "ps")


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
      d.name for d in tf.config.list_logical_devices("CPU")
    ]
  if all("CPU" in d.upper() for d in devices):
    return tf.distribute.MirroredStrategy(
      devices, cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
  return tf.distribute.MirroredStrategy(devices)


def server_task(cfg: dict | None = None):
  """(task type, index) when TF_CONFIG makes this process a worker or ps of a parameter-server
  cluster (it then only runs `run_server`); None otherwise (the chief, or no TF_CONFIG)."""
  cfg = parse_tf_config() if cfg is None else cfg
  task = cfg.get("task", {}) if cfg else {}
  if task.get("type") in SERVER_TASKS and "ps" in cfg.get("cluster", {}):
    return task["type"], int(task.get("index", 0))
  return None


def run_server(cfg: dict | None = None) -> None:
  """Serves this process's task of the TF_CONFIG cluster until it is killed (never returns).

  A worker runs the functions the chief's ClusterCoordinator schedules on it; a ps holds its
  shards of the variables. The process keeps no state of its own: a restarted worker rejoins
  (the coordinator reschedules the steps it lost), a restarted ps starts empty (the chief
  restores its variables from the last checkpoint when it restarts).
  """
  cfg = parse_tf_config() if cfg is None else cfg
  task = server_task(cfg)
  if task is None:
    raise ValueError(
      f"run_server needs TF_CONFIG with a 'ps' job and a task of type {' or '.join(SERVER_TASKS)}"
    )
  cluster = tf.train.ClusterSpec(cfg["cluster"])
  config = None
  if task[0] == "worker":
    config = tf.compat.v1.ConfigProto()
    config.inter_op_parallelism_threads = max(2, len(cfg["cluster"].get("worker", [])) + 1)
  server = tf.distribute.Server(
    cluster, job_name=task[0], task_index=task[1], protocol="grpc", config=config, start=True
  )
  server.join()


def free_ports(n: int) -> list:
  """``n`` TCP ports on 127.0.0.1 that were free a moment ago (for local clusters)."""
  import socket

  socks = [socket.socket() for _ in range(n)]
  for s in socks:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in socks]
  for s in socks:
    s.close()
  return ports


def local_cluster(num_workers: int = 2, num_ps: int = 2):
  """A ParameterServerStrategy cluster inside this process (workers and ps as in-process
  `tf.distribute.Server`s on 127.0.0.1); returns its cluster resolver (the caller is the chief).
  For tests and trying the strategy on one machine."""
  ports = free_ports(num_workers + num_ps)
  spec = {
    "worker": [f"localhost:{p}" for p in ports[:num_workers]],
    "ps": [f"localhost:{p}" for p in ports[num_workers:]],
  }
  cluster = tf.train.ClusterSpec(spec)
  # In one process the workers share the executor: one inter-op thread each, plus one, or
  # scheduled functions deadlock.
  config = tf.compat.v1.ConfigProto()
  config.inter_op_parallelism_threads = num_workers + 1
  servers = [
    tf.distribute.Server(
      cluster, job_name="worker", task_index=i, protocol="grpc", config=config, start=True
    )
    for i in range(num_workers)
  ]
  servers += [
    tf.distribute.Server(cluster, job_name="ps", task_index=i, protocol="grpc", start=True)
    for i in range(num_ps)
  ]
  resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(cluster, rpc_layer="grpc")
  resolver.servers = servers  # keep them alive as long as the resolver
  LOCAL_CLUSTERS.append(resolver)
  return resolver


# Every in-process cluster started (`local_cluster`): its servers cannot be stopped in-process,
# and at interpreter exit the eager context logs gRPC errors removing its functions from them;
# a caller that must end quietly (the test suite) ends the process itself when this is non-empty.
LOCAL_CLUSTERS: list = []


def parameter_server_strategy(
  resolver=None, min_shard_bytes: int = PS_MIN_SHARD_BYTES
) -> tf.distribute.ParameterServerStrategy:
  """ParameterServerStrategy over ``resolver``'s cluster (default: TF_CONFIG's), variables of
  ``min_shard_bytes`` or more partitioned over the ps tasks (module docstring)."""
  if resolver is None:
    cfg = parse_tf_config()
    if not cfg or "ps" not in cfg["cluster"] or "worker" not in cfg["cluster"]:
      raise ValueError(
        "--strategy=parameter_server needs TF_CONFIG naming a cluster with "
        "'chief', 'worker' and 'ps' jobs (and this process's task)"
      )
    if cfg["task"].get("type") != "chief":
      raise ValueError(
        f"--strategy=parameter_server: TF_CONFIG task type "
        f"{cfg['task'].get('type')!r}: the coordinator must be the 'chief' "
        "(worker and ps processes run run_server)"
      )
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
  num_ps = len(resolver.cluster_spec().as_dict().get("ps", []))
  partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
    min_shard_bytes=int(min_shard_bytes), max_shards=max(1, num_ps)
  )
  return tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)


# How TensorFlow names a ps task in an error message (e.g. "/job:ps/replica:0/task:1/device:CPU:0").
_PS_TASK = re.compile(r"/job:ps/replica:\d+/task:(\d+)")


def lost_parameter_servers(error: BaseException):
  """The ps tasks that ``error`` reports lost, sorted (``[]``: a ps, which one unknown), or None
  when ``error`` is not the loss of a ps.

  A ps that dies takes its variables with it; the ClusterCoordinator does not recover from that
  (unlike a worker failure) and raises, from ``schedule`` / ``join`` / ``fetch``, an
  ``UnavailableError`` (or ``AbortedError``; ``InvalidArgumentError`` "unknown device" /
  "Unable to find the relevant tensor remote_handle" when the ps restarted between two RPCs)
  naming the ps device, possibly wrapped in the coordinator's ``PSUnavailableError``,
  ``ClosureInputError`` or ``ClosureAbortedError`` (``original_exception``) or chained
  (``__cause__``). Any other error (a worker's, the user function's) gives None.
  """
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    text = str(error)
    unavailable = isinstance(error, (tf.errors.UnavailableError, tf.errors.AbortedError)) or (
      isinstance(error, tf.errors.InvalidArgumentError)
      and ("unknown device" in text.lower() or "relevant tensor remote_handle" in text)
    )
    tasks = sorted({int(t) for t in _PS_TASK.findall(text)})
    if unavailable and tasks:
      return tasks
    if type(error).__name__ == "PSUnavailableError":  # the coordinator's verdict
      return tasks
    error = getattr(error, "original_exception", None) or error.__cause__
  return None


def ps_addresses(strategy) -> list:
  """The "host:port" of each ps task of a ParameterServerStrategy's cluster, by index."""
  # ParameterServerStrategy keeps its resolver in `_cluster_resolver`; in TF 2.20 the public
  # `cluster_resolver` property of the base class returns None for it.
  resolver = getattr(strategy, "_cluster_resolver", None) or strategy.cluster_resolver
  return list(resolver.cluster_spec().as_dict().get("ps", [])) if resolver else []


def is_parameter_server(strategy) -> bool:
  """True for a ParameterServerStrategy (steps scheduled by a ClusterCoordinator)."""
  return isinstance(strategy, tf.distribute.ParameterServerStrategy)


def make_strategy(
  name: str, tpu: str | None = None, ps_min_shard_bytes: int = PS_MIN_SHARD_BYTES
) -> tf.distribute.Strategy:
  """Creates the strategy named ``name`` (one of STRATEGIES)."""
  if name == "default":
    return tf.distribute.get_strategy()
  if name == "mirrored":
    return mirrored_strategy()
  if name == "multi_worker":
    cfg = parse_tf_config()
    if not cfg:
      raise ValueError(
        "--strategy=multi_worker needs the TF_CONFIG environment variable "
        "(cluster.worker list and task.index of this process)"
      )
    return tf.distribute.MultiWorkerMirroredStrategy()
  if name == "tpu":
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
      tpu="" if tpu in (None, "local") else tpu
    )
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
  if name == "parameter_server":
    return parameter_server_strategy(min_shard_bytes=ps_min_shard_bytes)
  raise ValueError(f"unknown strategy {name!r}: expected one of {STRATEGIES}")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
  """True for the process that writes summaries, metrics and exports (worker 0; the
  coordinator under ParameterServerStrategy, the only process that runs the trainer)."""
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
