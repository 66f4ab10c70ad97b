r"""N runs of one binary at once on one machine: do they all finish, and how long do they take?

    python bench/concurrent_runs.py --runs=8 --setting=amazon_sports_loo --patience=20
    python bench/concurrent_runs.py --runs=2 --setting=synthetic --max_epochs=2     # a look

The sweep a retrieval engineer runs on one accelerator: the same row (--row, a
`bench.table1.rows` row) with seeds 0..N-1, each its own process of ``python -m train.keras3
--backend=--backend`` (the settings of `bench/time_to_converge.py`: data, split, patience),
all started together and sharing the device. On JAX each process may take 1 / N of the
accelerator's memory (``XLA_PYTHON_CLIENT_MEM_FRACTION`` = 0.9 / N; JAX takes 75 % by default,
which leaves no room for a second process). --budget_minutes passes the binary's own
``--time_budget_minutes``: a run that would end past it pauses after its last full epoch, writes
its checkpoint and exits with status 3 (rerun the same command to continue). Reported per run:
the wall from the common start to its exit, its epochs, its best epoch, its test metrics (runs
that finished); for the sweep: how many finished and the wall of the last one. Writes
<out>/concurrent_runs.json and .md. Absolute times are this machine's, under this load.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import time
from typing import List

from bench import time_to_converge as ttc

ROOT = pathlib.Path(__file__).resolve().parents[1]

BACKENDS = ("jax", "tensorflow", "torch")
EPOCH_LINE = re.compile(r"^epoch (\d+) step (\d+) ")


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(
    description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
  )
  p.add_argument("--runs", type=int, default=8, help="N: seeds 0..N-1, all at once")
  p.add_argument("--setting", default="amazon_sports_loo", choices=ttc.SETTINGS)
  p.add_argument("--row", default="mixed_corrected", help="a bench.table1.rows row")
  p.add_argument("--backend", default="jax", choices=BACKENDS)
  p.add_argument("--patience", type=int, default=20)
  p.add_argument("--max_epochs", type=int, default=100_000)
  p.add_argument("--val_users", type=int, default=3000, help="amazon_sports_loo's validation users")
  p.add_argument(
    "--budget_minutes", type=float, default=0.0, help="each run's time budget; 0: none"
  )
  p.add_argument("--data_root", default=None, help="default: the project's shared data folder")
  p.add_argument("--extra_flags", default="", help="extra flags for every run (space-separated)")
  p.add_argument("--out", default="bench/out/concurrent_runs")
  args = p.parse_args(argv)
  if args.runs < 1 or args.patience < 1 or args.max_epochs < 1 or args.budget_minutes < 0:
    p.error("--runs, --patience and --max_epochs must be >= 1, --budget_minutes >= 0")
  return args


def run_command(args, seed: int, run_dir: pathlib.Path) -> List[str]:
  """`python -m train.keras3` with time_to_converge's flags for this seed."""
  ns = argparse.Namespace(**vars(args))
  ns.seed = seed
  ns.extra_flags = " ".join(
    [args.extra_flags]
    + ([f"--time_budget_minutes={args.budget_minutes}"] if args.budget_minutes else [])
  )
  return [sys.executable, "-m", "train.keras3", f"--backend={args.backend}"] + ttc.binary_flags(
    ns, run_dir
  )


def run_env(args) -> dict:
  env = dict(os.environ, KERAS_BACKEND=args.backend, PYTHONUNBUFFERED="1")
  env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
  if args.backend == "jax":
    env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", f"{0.9 / args.runs:.3f}")
  return env


def summarise_run(seed: int, status: int, wall: float, log: str, run_dir: pathlib.Path) -> dict:
  """One run's record: exit status, wall, epochs (from its epoch lines), metrics if written."""
  epochs = [m for m in (EPOCH_LINE.match(line) for line in log.splitlines()) if m]
  out = dict(
    seed=seed,
    status=status,
    finished=status == 0,
    paused=status == 3,
    wall=wall,
    epochs=int(epochs[-1].group(1)) if epochs else 0,
    steps=int(epochs[-1].group(2)) if epochs else 0,
  )
  metrics_path = run_dir / "metrics.json"
  if status == 0 and metrics_path.is_file():
    metrics = json.loads(metrics_path.read_text())
    out.update(
      epochs=metrics.get("epochs_done", out["epochs"]),
      best_epoch=metrics.get("best_epoch"),
      test=metrics.get("test", {}),
      phases=metrics.get("phases", {}),
    )
  return out


def report(result: dict) -> str:
  runs = result["runs"]
  done = [r for r in runs if r["finished"]]
  lines = [
    f"# {len(runs)} concurrent runs: {result['setting']}, {result['row']}, "
    f"patience {result['patience']}, backend {result['backend']}",
    "",
    f"Command: `{result['command']}`",
    "",
    f"{len(done)} of {len(runs)} finished; the last exit {result['wall']:.1f} s after the "
    "common start (this machine; the runs share it).",
    "",
    "| seed | status | wall s | epochs | best epoch | test R@20 | test N@20 |",
    "|---|---|---|---|---|---|---|",
  ]
  for r in runs:
    test = r.get("test", {})
    state = "finished" if r["finished"] else ("paused (budget)" if r["paused"] else r["status"])
    lines.append(
      f"| {r['seed']} | {state} | {r['wall']:.1f} | {r['epochs']} | {r.get('best_epoch', '')} "
      f"| {test.get('recall@20', float('nan')):.4f} | {test.get('ndcg@20', float('nan')):.4f} |"
    )
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  args = parse_args(argv)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  env = run_env(args)
  procs = []
  start = time.perf_counter()
  for seed in range(args.runs):
    run_dir = out / f"seed{seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    log = open(run_dir / "log.txt", "w")
    cmd = run_command(args, seed, run_dir)
    procs.append(
      (
        seed,
        run_dir,
        log,
        subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT),
      )
    )
  ends = {}
  while len(ends) < len(procs):
    for seed, _, _, proc in procs:
      if seed not in ends and proc.poll() is not None:
        ends[seed] = time.perf_counter() - start
    time.sleep(0.2)
  runs = []
  for seed, run_dir, log, proc in procs:
    log.close()
    text = (run_dir / "log.txt").read_text(errors="replace")
    runs.append(summarise_run(seed, proc.returncode, ends[seed], text, run_dir))
    print(
      f"seed {seed}: status {proc.returncode}, {ends[seed]:.1f} s, {runs[-1]['epochs']} epochs",
      flush=True,
    )
  result = dict(
    setting=args.setting,
    row=args.row,
    backend=args.backend,
    patience=args.patience,
    budget_minutes=args.budget_minutes,
    command=" ".join(run_command(args, 0, out / "seed0")),
    mem_fraction=env.get("XLA_PYTHON_CLIENT_MEM_FRACTION"),
    wall=max(ends.values()),
    finished=sum(r["finished"] for r in runs),
    runs=runs,
  )
  (out / "concurrent_runs.json").write_text(json.dumps(result, indent=2, default=float))
  text = report(result)
  (out / "concurrent_runs.md").write_text(text)
  print(text, flush=True)
  return 0 if all(r["finished"] or r["paused"] for r in runs) else 1


if __name__ == "__main__":
  sys.exit(main())
