r"""The training step of two source trees, timed interleaved in one run: did a change slow it?

    git worktree add /tmp/before <commit>
    python bench/step_ab.py --before=/tmp/before --after=. --rounds=10 --steps=3
    # one tree, two settings (e.g. bfloat16 against float32), either binary:
    python bench/step_ab.py --before=. --after=. --binary=keras3_jax \
        --settings_after='{"mixed_precision": "bfloat16"}'

Each tree gets a persistent worker process (its own imports: PYTHONPATH and the working folder are
the tree) that builds `train.trainer.Trainer` with the training binary's defaults on the given data
(SASRec, mixed negatives, corrected logQ; `--jit_compile` as the binary's speed setting; plus
--settings_before / --settings_after, JSON objects of RunConfig settings), or with
--binary=keras3_jax `train.keras3.trainer.Trainer` on jax (its default device), and traces and
compiles the step on a few batches, then times ``--steps`` steps per request. Rounds alternate which
tree goes first. Reported: min and median over rounds of each tree's per-round minimum, and the
ratios before / after (> 1: the after tree is faster), with the paired median of the per-round
ratios. Both trees must have the `Trainer(cfg, strategy=...)` / `distributed_epoch` / `train_step`
interface (every commit since the binaries' first wave).
Absolute seconds depend on the machine and its load; the ratio is the result. Last line: summary.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

from bench.common.report import summary_line

ROOT = pathlib.Path(__file__).resolve().parents[1]

# The worker, run with the tree's own code (not this file's imports).
WORKER = r"""
import os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
import tensorflow as tf
from train.config import RunConfig
from train.trainer import Trainer
import json
cfg = RunConfig.create(dataset=sys.argv[1], data_path=sys.argv[2] or None,
                       jit_compile=sys.argv[3] == "1", progress=False,
                       model_dir=f"/tmp/step_ab_{os.getpid()}", **json.loads(sys.argv[4]))
trainer = Trainer(cfg, strategy=tf.distribute.get_strategy())
batches = list(trainer.distributed_epoch(0))[:8]
"""

# Both workers: warm-up steps, then ``n`` timed steps per request line, their minimum printed.
TIMED_STEPS = r"""
for b in batches[:3]:
  float(trainer.train_step(b)[0])
print("ready", flush=True)
k = 0
for line in sys.stdin:
  out = []
  for _ in range(int(line)):
    t = time.perf_counter()
    float(trainer.train_step(batches[k % len(batches)])[0])
    out.append(time.perf_counter() - t)
    k += 1
  print(min(out), flush=True)
"""

# The Keras 3 binary's trainer on jax (its step: `train.keras3.trainer.Trainer.train_step`).
KERAS3_WORKER = r"""
import os, sys, time, json
from train.keras3 import settings
settings.select_backend()
from train.config import RunConfig
from train.keras3.trainer import Trainer
cfg = RunConfig.create(dataset=sys.argv[1], data_path=sys.argv[2] or None, progress=False,
                       model_dir=f"/tmp/step_ab_{os.getpid()}", **json.loads(sys.argv[4]))
trainer = Trainer(cfg, data=cfg.data.load(), report=lambda line: None, shuffle_rng="numpy")
batches = list(trainer.epoch_batches(0))[:8]
"""


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(description="Training step of two source trees, interleaved.")
  parser.add_argument("--before", required=True, help="the baseline tree (e.g. a worktree)")
  parser.add_argument("--after", default=".", help="the changed tree")
  parser.add_argument("--rounds", type=int, default=10)
  parser.add_argument("--steps", type=int, default=3, help="timed steps per tree and round")
  parser.add_argument("--dataset", default="ml1m")
  parser.add_argument("--data_path", default="")
  parser.add_argument(
    "--no_jit_compile", action="store_true", help="leave the SASRec encoder uncompiled"
  )
  parser.add_argument(
    "--binary",
    default="tf_keras",
    choices=("tf_keras", "keras3_jax"),
    help="whose step: python -m train's, or python -m train.keras3's on jax",
  )
  parser.add_argument(
    "--settings_before", default="{}", help="JSON object of RunConfig settings for the before side"
  )
  parser.add_argument(
    "--settings_after", default="{}", help="JSON object of RunConfig settings for the after side"
  )
  parser.add_argument("--out", default=None, help="also write step_ab.md in this folder")
  return parser


def main(argv=None):
  args = _parser().parse_args(argv)
  trees = {
    "before": pathlib.Path(args.before).resolve(),
    "after": pathlib.Path(args.after).resolve(),
  }
  # Both trees read the same data: this repository's data root (a worktree elsewhere would look
  # for ../shared/data beside itself).
  data_root = os.environ.get("TFRS_LOGQ_DATA", str(ROOT.parent / "shared" / "data"))
  procs = {}
  worker = (WORKER if args.binary == "tf_keras" else KERAS3_WORKER) + TIMED_STEPS
  env = dict(os.environ, TFRS_LOGQ_DATA=data_root)
  if args.binary == "keras3_jax":
    env = {k: v for k, v in env.items() if k != "TF_USE_LEGACY_KERAS"}
    env.update(KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3")
  settings = {"before": args.settings_before, "after": args.settings_after}
  for name, tree in trees.items():
    try:  # a malformed object fails here, not in the worker
      if not isinstance(json.loads(settings[name]), dict):
        raise ValueError("not an object")
    except ValueError as e:
      for other in procs.values():
        other.kill()
      sys.exit(f"error: --settings_{name} must be a JSON object of settings: {e}")
    procs[name] = subprocess.Popen(
      [
        sys.executable,
        "-c",
        worker,
        args.dataset,
        args.data_path,
        "0" if args.no_jit_compile else "1",
        settings[name],
      ],
      cwd=tree,
      env=dict(env, PYTHONPATH=str(tree)),
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      text=True,
    )
  for name, proc in procs.items():
    if proc.stdout.readline().strip() != "ready":
      for other in procs.values():
        other.kill()
      sys.exit(f"error: the {name} worker ({trees[name]}) did not start")
  times = {name: [] for name in trees}
  for r in range(args.rounds):
    for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
      procs[name].stdin.write(f"{args.steps}\n")
      procs[name].stdin.flush()
      times[name].append(float(procs[name].stdout.readline()))
  for proc in procs.values():
    proc.stdin.close()
    proc.wait()
  b, a = times["before"], times["after"]
  ratios = dict(
    min=min(b) / min(a),
    median=statistics.median(b) / statistics.median(a),
    paired_median=statistics.median([x / y for x, y in zip(b, a)]),
  )
  line = (
    f"{args.dataset} {args.binary} training step (before {args.settings_before}, after "
    f"{args.settings_after}), {args.rounds} rounds x {args.steps} steps: before "
    f"min {min(b):.3f} s median {statistics.median(b):.3f} s; after min {min(a):.3f} s "
    f"median {statistics.median(a):.3f} s; speed before/after: min {ratios['min']:.3f}, "
    f"median {ratios['median']:.3f}, paired median {ratios['paired_median']:.3f}"
  )
  print(line)
  if args.out:
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "step_ab.md").write_text(
      f"# Training step A/B\n\n`python bench/step_ab.py {' '.join(argv or sys.argv[1:])}`\n\n"
      f"before = {trees['before']}, after = {trees['after']}\n\n{line}\n"
    )
  print(
    summary_line(
      [f"speed before/after {ratios['median']:.3f} by median", f"{ratios['min']:.3f} by min"],
      head="step_ab",
    )
  )


if __name__ == "__main__":
  main()
