r"""Where the CPU time of our SASRec train step goes: matmuls, other XLA work, TensorFlow kernels.

    python -m bench.step_trace                                   # the default configuration
    python -m bench.step_trace --configs=paper,sequence+reference+xla --steps=4

Each configuration (the tokens of bench/train_speed.py: ``paper``, ``sequence+reference+xla``,
``...+malloc_default``, ``...+step``) runs in its own process on the ML-1M batch of
bench/train_speed.py (B = 128 windows of L = 200, d = 128, 2 blocks, 128 + 128 mixed negatives,
corrected logQ). After ``--warmup`` steps it measures, over ``--steps`` steps:

* wall seconds per step and the CPU seconds of the process (``getrusage``: user + system), so
  ``busy cores = CPU / wall`` (2 = both cores of a 2-core machine never idle) and the system
  share (page faults, thread wake-ups: what `train/host_memory.py` removes);
* a TensorFlow profiler trace with XLA's per-instruction trace events on
  (``XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true``), summed per step into thread time of
  XLA matmuls (``dot`` instructions), other XLA instructions (fusions of element-wise work,
  softmax and layer-norm reductions, gathers, scatters, copies), TensorFlow kernels run
  outside XLA (by op, the largest listed), and intra-op pool workers (the share of a kernel or
  dot that ran on another thread of the pool: not attributed). "Other CPU" = CPU seconds − those
  four: the executors, tf.function dispatch, thread-pool spinning, allocation, page faults.

``matmul floor`` = XLA + TensorFlow matmul thread time / cores: the step if every other piece
took no time and the matmuls ran at the rates they reach in this step, spread over every core
(a lower bound only up to the unattributed worker share).
The rate of a matmul depends on its shape (on the project's 2-core machine, in XLA: 2048^2
~130 GFLOP/s, [13968, 128] x [128, 128] ~130, the [128, 100, 100]-per-sequence attention blocks
~60, [13968, 128] x [128, 3417] ~80), so the floor of this op decomposition is above the
2048^2-peak bound of bench/train_speed.py's "% peak".

Executables launched asynchronously from the TensorFlow graph (the per-query scoring's nested
[A, V] jit function of ``paper``) are not broken down by the trace: their time lands in "other
CPU". ``--scoring_paths`` therefore also times the two exact per-query scoring paths of
`tfrs_logq.tf_keras.negatives.per_query_scores` alone (forward + backward, XLA, the ML-1M shapes:
A = 13,968 queries, k = 128 uniform ids each, V = 3,417 rows, d = 128), interleaved, min and
median of ``--repeats``: the [A, V] matmul + gather the library picks for this V, and the
[A, k, d] gather + contraction.

Absolute times are this machine's; the fractions are what carry over.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import pathlib
import re
import resource
import subprocess
import tempfile
import time

from bench.common import workers
from bench.common.report import summary_line, write_json
from bench.common.timing import min_median, time_interleaved

ROOT = pathlib.Path(__file__).resolve().parents[1]
_XLA_TRACE = "--xla_cpu_enable_xprof_traceme=true"
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
  xla_dot = xla_other = workers = 0.0
  tf_ops = collections.Counter()
  for plane in xspace.planes:
    names = {k: v.name for k, v in plane.event_metadata.items()}
    for line in plane.lines:
      for event in line.events:
        name = names.get(event.metadata_id, "")
        seconds = event.duration_ps * 1e-12 / num_steps
        if name.startswith("ParallelFor") and not line.name.startswith("tf_Compute"):
          workers += seconds
        elif line.name.startswith("tf_Compute") and _TF_KERNEL.fullmatch(name):
          tf_ops[name] += seconds
        elif (
          _XLA_INSTRUCTION.fullmatch(name)
          and not name.startswith("call")
          and "." in name
          or name in ("reduce-window", "sort", "scatter")
        ):
          if name.startswith("dot"):
            xla_dot += seconds
          else:
            xla_other += seconds
  tf_matmul = sum(v for k, v in tf_ops.items() if k.split(":")[1] in _MATMUL_OPS)
  return dict(
    xla_dot=xla_dot,
    xla_other=xla_other,
    tf_ops=sum(tf_ops.values()),
    tf_matmul=tf_matmul,
    workers=workers,
    tf_top=[(k, v) for k, v in tf_ops.most_common(8)],
  )


def _worker(spec: dict) -> None:
  """Subprocess: one configuration; prints one JSON reply."""
  from bench.sasrec_step import configs, ours
  from train import host_memory

  cfg = configs.parse_config(spec["config"])
  host_memory.configure(cfg.allocator)
  import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
  import tensorflow as tf
  from tensorflow.tsl.profiler.protobuf import xplane_pb2

  tf.get_logger().setLevel("ERROR")
  args = argparse.Namespace(
    data_path=spec["data_path"], batch_size=128, max_len=200, num_batches=4, seed=0
  )
  inputs, targets, _, _ = ours.load_batches(args)
  trainer, _ = ours.our_trainer(
    dict(
      data_path=spec["data_path"],
      logq="corrected",
      buckets=2**22,
      batch_size=128,
      max_len=200,
      dropout=0.5,
      seed=0,
    ),
    cfg,
  )
  if not cfg.pack or cfg.attention_blocks:
    trainer.model.set_execution(pack_tokens=cfg.pack, attention_blocks=cfg.attention_blocks or None)
  batches = [
    dict(inputs=tf.constant(inputs[i]), targets=tf.constant(targets[i])) for i in range(len(inputs))
  ]

  def run(n):
    out = None
    for i in range(n):
      out = trainer.train_step(batches[i % len(batches)])
    float(out[0])

  run(spec["warmup"])
  n = spec["steps"]
  r0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
  run(n)
  r1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - w0
  logdir = tempfile.mkdtemp(prefix="step_trace_")
  tf.profiler.experimental.start(logdir)
  run(n)
  tf.profiler.experimental.stop()
  path = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]
  xspace = xplane_pb2.XSpace()
  xspace.ParseFromString(pathlib.Path(path).read_bytes())
  out = summarize_xspace(xspace, n)
  out.update(
    config=spec["config"],
    wall=wall / n,
    user=(r1.ru_utime - r0.ru_utime) / n,
    system=(r1.ru_stime - r0.ru_stime) / n,
    cores=os.cpu_count(),
  )
  print(workers.reply_line(out), flush=True)


def time_scoring_paths(
  repeats: int, a: int = 13968, k: int = 128, v: int = 3417, d: int = 128
) -> dict:
  """Seconds (min, median) of forward + backward of each per-query scoring path (docstring)."""
  import numpy as np
  import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
  import tensorflow as tf
  from tfrs_logq.tf_keras.negatives import scoring

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


def _run_side(config: str, args) -> dict:
  env = dict(
    os.environ,
    XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + _XLA_TRACE).strip(),
    TF_CPP_MIN_LOG_LEVEL="2",
  )
  spec = dict(config=config, data_path=args.data_path, warmup=args.warmup, steps=args.steps)
  proc = subprocess.run(
    workers.worker_command("bench.step_trace", spec),
    cwd=str(ROOT),
    env=env,
    capture_output=True,
    text=True,
    check=False,
  )
  for line in proc.stdout.splitlines():
    out = workers.parse_reply(line)
    if out is not None:
      return out
  raise RuntimeError(f"{config}: worker failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def report(r: dict) -> str:
  """The lines of one configuration's breakdown."""
  cpu = r["user"] + r["system"]
  other = max(cpu - r["xla_dot"] - r["xla_other"] - r["tf_ops"] - r["workers"], 0.0)
  floor = (r["xla_dot"] + r["tf_matmul"]) / r["cores"]
  pct = lambda x: f"{x:6.3f} s ({100 * x / cpu:4.1f} % of CPU)"  # noqa: E731
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


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(
    description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
  )
  parser.add_argument(
    "--configs",
    default="sequence+reference+xla",
    help="comma-separated bench/train_speed.py configurations",
  )
  parser.add_argument("--warmup", type=int, default=8, help="untimed steps first")
  parser.add_argument("--steps", type=int, default=4, help="measured and traced steps")
  parser.add_argument("--data_path", default=None, help="ml1m folder (default: the data root)")
  parser.add_argument("--out", default="bench/out", help="step_trace.json goes here")
  parser.add_argument(
    "--scoring_paths",
    action="store_true",
    help="also time the two per-query scoring paths alone (docstring)",
  )
  parser.add_argument("--repeats", type=int, default=8, help="repeats of --scoring_paths")
  parser.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args._worker:
    _worker(json.loads(args._worker))
    return
  if args.scoring_paths:
    for name, (lo, med) in time_scoring_paths(args.repeats).items():
      print(
        f"per-query scoring, forward + backward, XLA: {name}: min {lo:.3f} s, median {med:.3f} s",
        flush=True,
      )
  results = []
  for config in [c for c in args.configs.split(",") if c]:
    results.append(_run_side(config, args))
    print(report(results[-1]), flush=True)
  write_json(args.out, "step_trace.json", results, indent=1)
  print(
    summary_line(
      [
        f"{r['config']} {r['wall']:.3f} s/step, XLA dots "
        f"{100 * r['xla_dot'] / (r['user'] + r['system']):.0f} % of CPU"
        for r in results
      ]
    )
  )


if __name__ == "__main__":
  main()
