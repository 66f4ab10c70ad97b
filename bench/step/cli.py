r"""The SASRec training step, timed: ours against the paper's PyTorch code, our configurations and
Keras 3 sides against each other, the pieces of a step, where its CPU time goes, and two source
trees (or two settings) against each other; always interleaved in one run.

    python -m bench.step [--quick] [--configs=paper,fastest] [--no_yardstick]
    python -m bench.step --profile | --trace [--configs=...]
    python -m bench.step --before=/tmp/before --after=. --rounds=10 --steps=3

Method, configuration tokens, flags and measured results: bench/README.md, section `step/`.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import pathlib
import statistics
import sys
import tempfile
from typing import Dict

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from bench.common.report import summary_line, write_json
from bench.common.timing import rotated
from bench.step import report, trace, trees
from bench.step.configs import YARDSTICK, parse_config, step_flops
from bench.step.ours import load_batches
from bench.step.worker import Side

__all__ = ["main", "parser"]

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Per mode: the flags' values where not given (--warmup: else --num_batches).
_DEFAULTS = {
  "time": dict(configs="paper,fastest", rounds=5, steps=2),
  "profile": dict(configs="paper,fastest", rounds=5, steps=2),
  "trace": dict(configs="sequence+reference+xla", rounds=1, steps=4, warmup=8),
  "ab": dict(configs="", rounds=10, steps=3),
}


def parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
    prog="python -m bench.step",
    description=__doc__.split("\n\n")[0],
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  mode = p.add_argument_group("mode (default: time the --configs sides)")
  mode.add_argument("--profile", action="store_true", help="time the pieces of our step instead")
  mode.add_argument("--trace", action="store_true", help="break each side's CPU time down")
  mode.add_argument("--before", default=None, help="A/B of trees: the baseline tree")
  p.add_argument("--quick", action="store_true", help="1 warm-up step, 2 rounds of 2 steps")
  p.add_argument("--configs", default=None, help="comma-separated configurations (bench/README.md)")
  p.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
  p.add_argument("--steps", type=int, default=None, help="timed steps per side and round")
  p.add_argument(
    "--warmup",
    type=int,
    default=None,
    help="untimed steps (tracing, XLA; default --num_batches: every batch once, "
    "so each token-capacity shape of the packed XLA encoder is compiled)",
  )
  p.add_argument("--no_yardstick", action="store_true", help="no paper-code (PyTorch) side")
  p.add_argument("--data_path", default=None, help="the dataset's folder (default: data root)")
  p.add_argument("--batch_size", type=int, default=128)
  p.add_argument("--max_len", type=int, default=200)
  p.add_argument("--num_batches", type=int, default=4, help="distinct batches, cycled")
  p.add_argument("--dropout", type=float, default=0.5, help="dropout (paper: 0.5)")
  p.add_argument(
    "--logq",
    default="corrected",
    help="our logQ correction (tfrs_logq.tf_keras.losses.CORRECTIONS); the paper "
    "code side is always corrected",
  )
  p.add_argument(
    "--buckets", type=int, default=2**22, help="hash-array / count-min width (+hash_array etc.)"
  )
  p.add_argument("--threads", type=int, default=os.cpu_count(), help="intra-op threads per side")
  p.add_argument("--matmul_n", type=int, default=2048, help="size of the peak matmul")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument(
    "--yardstick_allocator",
    default="default",
    choices=("default", "retain"),
    help="the paper code's malloc: default (as it runs) or retain (ours; train/host_memory.py)",
  )
  p.add_argument(
    "--check_keras3_step",
    action="store_true",
    help="jax sides: also run Keras's train_on_batch once from the same state "
    "and print both losses (the jitted stateless step must give the same)",
  )
  p.add_argument("--scoring_paths", action="store_true", help="--trace: time the scoring paths")
  p.add_argument("--repeats", type=int, default=8, help="repeats of --scoring_paths")
  ab = p.add_argument_group("A/B of trees (--before)")
  ab.add_argument("--after", default=".", help="the changed tree")
  ab.add_argument("--dataset", default="ml1m")
  ab.add_argument("--binary", default="tf_keras", choices=trees.BINARIES, help="whose step")
  ab.add_argument("--binary_after", default=None, choices=trees.BINARIES, help="after's, if other")
  ab.add_argument("--no_jit_compile", action="store_true", help="the encoder uncompiled")
  ab.add_argument("--settings_before", default="{}", help="JSON object of RunConfig settings")
  ab.add_argument("--settings_after", default="{}", help="JSON object of RunConfig settings")
  p.add_argument("--out", default="bench/out", help="folder of the run's JSON / markdown")
  return p


def main(argv=None) -> None:
  args = parser().parse_args(argv)
  modes = [m for m in ("profile", "trace") if getattr(args, m)] + (["ab"] if args.before else [])
  if len(modes) > 1:
    raise ValueError(f"one mode at a time, got {modes}")
  mode = modes[0] if modes else "time"
  for key, value in {"warmup": args.num_batches, **_DEFAULTS[mode]}.items():
    if getattr(args, key) is None:
      setattr(args, key, value)
  if args.quick:
    args.rounds, args.steps, args.warmup, args.matmul_n = 2, 2, 1, 1024
  if mode == "ab":
    return _ab(args, argv)
  configs = [parse_config(c) for c in args.configs.split(",") if c]
  if not configs:
    raise ValueError("--configs is empty")
  if mode == "profile" and any(c.framework == "keras3_tensorflow" for c in configs):
    raise ValueError(
      "--profile times the pieces of the tf-keras and Keras 3 JAX steps: drop the keras3_tf "
      "configurations"
    )
  if mode == "trace" and any(c.keras3 for c in configs):
    raise ValueError("--trace breaks down the tf-keras step: drop the Keras 3 configurations")
  if mode == "trace" and args.scoring_paths:
    for name, (lo, med) in trace.time_scoring_paths(args.repeats).items():
      print(
        f"per-query scoring, forward + backward, XLA: {name}: min {lo:.3f} s, median {med:.3f} s"
      )
  inputs, targets, windows, data = load_batches(args)
  num_queries = float(np.mean([(t != 0).sum() for t in targets]))
  tmp = tempfile.mkdtemp(prefix="bench_step_")
  batches = os.path.join(tmp, "batches.npz")
  counts = np.asarray(data.item_counts, np.float32)
  np.savez(batches, inputs=inputs, targets=targets, windows=windows, item_counts=counts)
  base = dict(vars(args), batches=batches, num_items=data.num_items)
  yardstick = mode == "time" and not args.no_yardstick
  if yardstick and importlib.util.find_spec("torch") is None:
    yardstick = False
    print(
      "PyTorch is not installed: no paper-code side (e.g. `.venv/bin/pip install torch==2.13.0`)"
    )
  shape = dict(batch=args.batch_size, length=args.max_len, dim=128, num_blocks=2)
  flops_of = lambda block, negatives=256: step_flops(
    num_queries, **shape, block=block, num_negatives=negatives
  )
  flops = {c.name: flops_of(c.block, 0 if c.no_loss else 256) for c in configs}
  flops[YARDSTICK] = flops_of("reference")
  print(
    f"SASRec ML-1M: batch {args.batch_size} x {args.max_len}, A = {num_queries:.0f} queries "
    f"per batch (mean of {args.num_batches} batches), d 128, 2 blocks, 1 head, dropout "
    f"{args.dropout}, 128 in-batch + 128 uniform negatives, {args.logq} logQ (ours); "
    f"{args.threads} threads per side, {os.cpu_count()} CPUs; {args.warmup} warm-up steps, "
    f"{args.rounds} interleaved rounds x {args.steps} steps. Shared machine: only same-run "
    "ratios count.",
    flush=True,
  )
  xla_flags = os.environ.get("XLA_FLAGS", "") + " " + trace.XLA_FLAGS
  env = dict(os.environ, XLA_FLAGS=xla_flags) if mode == "trace" else None
  sides: Dict[str, Side] = {}
  try:
    if yardstick:
      sides[YARDSTICK] = Side(YARDSTICK, dict(base, side="torch"), tmp)
    for c in configs:
      spec = dict(base, side="ours", config=dataclasses.asdict(c))
      sides[c.name] = Side(c.name, spec, tmp, env=env)
    for side in sides.values():
      check = side.receive().get("check")
      if check:
        print(f"{side.name}: one step from the same state: {check}", flush=True)
    if mode == "profile":
      return _profile(sides, configs, args)
    if mode == "trace":
      return _trace(sides, args)
    _time(sides, configs, flops, flops_of("pre_ln"), yardstick, args)
  finally:
    _close(sides)


def _close(sides: Dict[str, Side]) -> None:
  for side in sides.values():
    if side.proc.poll() is None:
      side.close()


def _rounds(sides: Dict[str, Side], args) -> None:
  """--rounds rounds of --steps steps per side, in a rotated order."""
  for r in range(args.rounds):
    for name in rotated(list(sides), r):
      sides[name].steps(args.steps)
    medians = ", ".join(f"{n} {statistics.median(s.times):.2f} s" for n, s in sides.items())
    print(f"round {r + 1}/{args.rounds}: {medians}", flush=True)


def _time(sides, configs, flops, pre_ln_flops, yardstick, args) -> None:
  # the matmul peak of each framework, measured in one side that runs it, at the start and end
  peak_sides = {"torch": YARDSTICK} if yardstick else {}
  for c in configs:
    peak_sides.setdefault(c.peak_framework, c.name)
  peaks: Dict[str, list] = {"tensorflow": [], "jax": [], "torch": []}

  def measure_peaks() -> None:
    for framework, name in peak_sides.items():
      peaks[framework].append(sides[name].ask(cmd="peak", n=args.matmul_n)["gflops"])

  measure_peaks()
  _rounds(sides, args)
  measure_peaks()
  _close(sides)
  peak = {k: max(v) if v else None for k, v in peaks.items()}
  report.print_report(sides, configs, flops, peak, pre_ln_flops, args)


def _profile(sides, configs, args) -> None:
  """Interleaved timing of the pieces of each config's step (bench/README.md)."""
  times: Dict[str, Dict[str, list]] = {c.name: {} for c in configs}
  for r in range(args.rounds):
    for c in configs:
      out = sides[c.name].ask(cmd="profile", n=args.steps)
      check = out.pop("check", None)
      if check and r == 0:
        print(f"{c.name}: the loss piece's fixed queries, one loss two ways: {check}", flush=True)
      for piece, t in out.items():
        times[c.name].setdefault(piece, []).extend(t)
    print(f"profile round {r + 1}/{args.rounds}", flush=True)
  report.print_profile(times, configs)


def _trace(sides, args) -> None:
  results = []
  for name, side in sides.items():
    results.append(dict(side.ask(cmd="trace", n=args.steps), config=name))
    print(trace.report(results[-1]), flush=True)
  write_json(args.out, "step_trace.json", results, indent=1)
  share = lambda r: 100 * r["xla_dot"] / (r["user"] + r["system"])
  parts = [
    f"{r['config']} {r['wall']:.3f} s/step, XLA dots {share(r):.0f} % of CPU" for r in results
  ]
  print(summary_line(parts))


def _ab(args, argv) -> None:
  specs = {side: trees.tree_spec(args, side) for side in ("before", "after")}
  paths = {side: pathlib.Path(getattr(args, side)).resolve() for side in specs}
  tmp = tempfile.mkdtemp(prefix="bench_step_ab_")
  sides: Dict[str, Side] = {}
  try:
    for name, tree in paths.items():
      command = [sys.executable, "-c", trees.TREE_WORKER]
      env = trees.tree_env(tree, specs[name]["binary"], ROOT)
      sides[name] = Side(name, specs[name], tmp, command=command, cwd=str(tree), env=env)
    for name, side in sides.items():
      try:
        side.receive()
      except RuntimeError as e:
        sys.exit(f"error: the {name} worker ({paths[name]}) did not start: {e}")
    _rounds(sides, args)
  finally:
    _close(sides)
  lines = trees.ab_lines(args, specs, {n: s.rounds for n, s in sides.items()})
  print("\n".join(lines))
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / "step_ab.md").write_text(
    f"# Training step A/B\n\n`python -m bench.step {' '.join(argv or sys.argv[1:])}`\n\n"
    f"before = {paths['before']}, after = {paths['after']}\n\n{lines[0]}\n"
  )
