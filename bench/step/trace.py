"""``--trace`` of the step benchmark: where the CPU time of a tf-keras step goes (XLA matmuls,
other XLA work, TensorFlow kernels, intra-op workers), from a TensorFlow profiler trace taken in
the side's worker with XLA's per-instruction trace events on (`XLA_FLAGS`); ``--scoring_paths``:
the two exact per-query scoring paths of `tfrs_logq.tf_keras.negatives.per_query_scores` alone."""

from __future__ import annotations

import collections
import glob
import os
import pathlib
import re
import resource
import tempfile
import time
from typing import Callable

from bench.common.timing import min_median, time_interleaved

__all__ = ["XLA_FLAGS", "summarize_xspace", "trace_steps", "report", "time_scoring_paths"]

XLA_FLAGS = "--xla_cpu_enable_xprof_traceme=true"
_MATMUL_OPS = ("MatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum")
_XLA_INSTRUCTION = re.compile(r"[a-z][a-z0-9_-]*(\.\d+)*(\.clone)?")
_TF_KERNEL = re.compile(r"[^:\s]+:[A-Za-z0-9]+")


def summarize_xspace(xspace, num_steps: int) -> dict:
  """Thread seconds per step of XLA dots, other XLA instructions, TensorFlow kernels, and the
  intra-op workers (``ParallelFor`` shares of either, run on the pool's other threads).

  ``xspace``: a parsed ``tensorflow.tsl.profiler.protobuf.xplane_pb2.XSpace``. XLA instruction
  events are named like ``dot.12``, ``add_gather_fusion.3.clone``, ``reduce-window``; the
  enclosing ``call.N`` / ``ThunkExecutor::Execute`` events contain the others and are skipped.
  TensorFlow kernels are the ``name:OpType`` events of the TensorFlow compute threads.
  """
  sums = dict.fromkeys(("xla_dot", "xla_other", "tf_ops", "tf_matmul", "workers"), 0.0)
  tf_ops: collections.Counter = collections.Counter()
  for plane in xspace.planes:
    names = {k: v.name for k, v in plane.event_metadata.items()}
    for line in plane.lines:
      for event in line.events:
        name = names.get(event.metadata_id, "")
        seconds = event.duration_ps * 1e-12 / num_steps
        if name.startswith("ParallelFor") and not line.name.startswith("tf_Compute"):
          sums["workers"] += seconds
        elif line.name.startswith("tf_Compute") and _TF_KERNEL.fullmatch(name):
          tf_ops[name] += seconds
        elif (
          _XLA_INSTRUCTION.fullmatch(name)
          and not name.startswith("call")
          and "." in name
          or name in ("reduce-window", "sort", "scatter")
        ):
          sums["xla_dot" if name.startswith("dot") else "xla_other"] += seconds
  sums["tf_ops"] = sum(tf_ops.values())
  sums["tf_matmul"] = sum(v for k, v in tf_ops.items() if k.split(":")[1] in _MATMUL_OPS)
  return dict(sums, tf_top=[(k, v) for k, v in tf_ops.most_common(8)])


def trace_steps(steps: Callable[[int], object], n: int) -> dict:
  """In a worker: wall and CPU seconds (``getrusage``) per step over ``n`` steps, then the
  `summarize_xspace` of a trace of ``n`` more."""
  import tensorflow as tf
  from tensorflow.tsl.profiler.protobuf import xplane_pb2

  r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
  steps(n)
  r1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - w0
  logdir = tempfile.mkdtemp(prefix="step_trace_")
  tf.profiler.experimental.start(logdir)
  steps(n)
  tf.profiler.experimental.stop()
  path = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]
  xspace = xplane_pb2.XSpace()
  xspace.ParseFromString(pathlib.Path(path).read_bytes())
  return dict(
    summarize_xspace(xspace, n),
    wall=wall / n,
    user=(r1.ru_utime - r0.ru_utime) / n,
    system=(r1.ru_stime - r0.ru_stime) / n,
    cores=os.cpu_count(),
  )


def report(r: dict) -> str:
  """The lines of one configuration's breakdown (``other CPU`` = CPU seconds minus the four
  attributed parts; ``matmul floor`` = matmul thread time / cores)."""
  cpu = r["user"] + r["system"]
  other = max(cpu - r["xla_dot"] - r["xla_other"] - r["tf_ops"] - r["workers"], 0.0)
  floor = (r["xla_dot"] + r["tf_matmul"]) / r["cores"]

  def pct(x: float) -> str:
    return f"{x:6.3f} s ({100 * x / cpu:4.1f} % of CPU)"

  lines = [
    f"{r['config']}: {r['wall']:.3f} s/step wall, CPU {cpu:.3f} s (user {r['user']:.3f}, "
    f"system {r['system']:.3f}), busy cores {cpu / r['wall']:.2f} of {r['cores']}",
    f"  XLA matmuls (dot)        {pct(r['xla_dot'])}",
    f"  XLA other instructions   {pct(r['xla_other'])}",
    f"  TensorFlow kernels       {pct(r['tf_ops'])}   (matmuls {r['tf_matmul']:.3f} s)",
    f"  intra-op pool workers    {pct(r['workers'])}   (shares of kernels / dots above)",
    f"  other CPU                {pct(other)}",
    f"  matmul floor {floor:.3f} s/step = {100 * floor / r['wall']:.0f} % of the step",
  ]
  lines += [f"    {v:7.4f} s  {k}" for k, v in r["tf_top"]]
  return "\n".join(lines)


def time_scoring_paths(
  repeats: int, a: int = 13968, k: int = 128, v: int = 3417, d: int = 128
) -> dict:
  """{path: (min, median) seconds} of forward + backward of each per-query scoring path, XLA,
  the ML-1M shapes (A queries, k uniform ids each, V rows, d), interleaved."""
  import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
  from tfrs_logq.tf_keras.negatives import scoring

  import numpy as np
  import tensorflow as tf

  rng = np.random.default_rng(0)
  q = tf.Variable(rng.normal(size=(a, d)).astype(np.float32))
  table = tf.Variable(rng.normal(size=(v, d)).astype(np.float32))
  ids = tf.constant(rng.integers(1, v, size=(a, k)), tf.int32)
  up = tf.constant(rng.normal(size=(a, k)).astype(np.float32))

  def compiled(path):
    @tf.function(jit_compile=True)
    def fwd_bwd():
      with tf.GradientTape() as tape:
        loss = tf.reduce_sum(path(q, table, ids) * up)
      return tape.gradient(loss, [q, table])

    return fwd_bwd

  paths = {
    "[A, V] matmul + gather": compiled(scoring._matmul_then_gather),
    "[A, k, d] gather + contraction": compiled(scoring._gather_then_dot),
  }

  def run(name, _):
    for g in paths[name]():
      tf.convert_to_tensor(g).numpy()

  for name in paths:
    run(name, 0)
  times = time_interleaved(run, list(paths), repeats)
  return {name: min_median(t) for name, t in times.items()}
