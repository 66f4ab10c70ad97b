r"""Time to a converged model: the wall-clock of whole runs, split by phase, side by side.

    python bench/time_to_converge.py --setting=ml1m_loo --row=mixed_corrected --patience=20
    python bench/time_to_converge.py --setting=amazon_sports_loo --max_epochs=3     # capped runs
    python bench/time_to_converge.py --sides=tf_keras,keras3_jax --baseline_dir=../old_checkout

Each side is one command, run as its own process from start to final metrics (one after the
other, in an order rotated per --repeats round, never two at once):
* ``tf_keras``: ``python -m train`` (the tf-keras binary), the row's settings;
* ``keras3_jax`` / ``keras3_tf`` / ``keras3_torch``: ``python -m train.keras3 --backend=...``;
* ``paper``: ``python -m bench.paper_loop`` (the paper script's epoch loop, its data loader,
  steps and validation, around `bench/paper_code_torch.py`'s step: PyTorch, eager);
* with --baseline_dir, the tf-keras and Keras 3 sides again from that checkout (label
  ``<side>@baseline``): the same binaries at another commit, timed in the same invocation.
Every run has the same data, split, row (--row: a `bench.table1.rows` row), seed and patience
(early stopping on validation NDCG@10; --max_epochs caps the epochs: a capped run gives the
split of the time, not a converged model).

The split of a run of wall-clock W (seconds, this machine; ``phases`` of the metrics JSON, which
`train.epochs` writes; from the epoch history for a checkout that predates it):

    first step   the first training step: tracing and compilation
    steps        the other training steps (the loop around them and the data included)
    validation   validation after every epoch and of the best model at the end
    checkpoints  best weights and the full checkpoint of every epoch
    test         the best model's test metrics      export   the serving export
    start-up     W - the sum of the above: imports, data loading, model building
    to best      start-up + the wall of the epochs up to the best one (their steps, the first
                 one included, and their validation)
    val+ckpt     (validation + checkpoints) / W
    val / epoch  the validation after an epoch, mean over epochs (epoch wall - its steps, from
                 the history: the same measure in a checkout without ``phases``, whose final
                 validation, test and export fall into start-up)

Writes <out>/time_to_converge.json, .md (the table, with the commands) and .png (a stacked bar
per run: where the time goes). Only ratios between sides of one invocation mean anything:
absolute times move 2-3x between machines and with the load of a shared one.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Dict, List

ROOT = pathlib.Path(__file__).resolve().parents[1]
SIDES = ("tf_keras", "keras3_jax", "keras3_tf", "keras3_torch", "paper")
PHASES = ("start-up", "first step", "steps", "validation", "checkpoints", "test", "export")
SETTINGS = ("ml1m_loo", "amazon_sports_loo", "synthetic")
# --setting=synthetic: a small generated catalog (no download; the binaries' sides only), for
# the test and a quick look.
SYNTHETIC = dict(
  dataset="synthetic",
  synthetic_users=300,
  synthetic_items=120,
  synthetic_min_len=5,
  synthetic_max_len=25,
  max_len=20,
  steps_per_epoch=5,
  embedding_dim=16,
  num_blocks=1,
  batch_size=32,
  num_negatives=16,
)


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(
    description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
  )
  p.add_argument("--setting", default="ml1m_loo", choices=SETTINGS)
  p.add_argument("--row", default="mixed_corrected", help="a bench.table1.rows row")
  p.add_argument(
    "--sides", default="tf_keras,keras3_jax", help=f"comma-separated, of {', '.join(SIDES)}"
  )
  p.add_argument(
    "--baseline_dir",
    default=None,
    help="another checkout: its tf-keras / Keras 3 sides are run too (@baseline)",
  )
  p.add_argument("--patience", type=int, default=20)
  p.add_argument("--max_epochs", type=int, default=100_000)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--repeats", type=int, default=1, help="rounds (side order rotated)")
  p.add_argument(
    "--val_users",
    type=int,
    default=3000,
    help="validation users of amazon_sports_loo (ML-1M has its own 512)",
  )
  p.add_argument("--data_root", default=None, help="default: the project's shared data folder")
  p.add_argument(
    "--extra_flags", default="", help="extra flags for the binaries' sides (space-separated)"
  )
  p.add_argument(
    "--paper_flags",
    default="",
    help="extra flags for the paper side (space-separated), e.g. --max_seconds=240: a capped "
    "run whose epoch wall and curve bound its time to converge",
  )
  p.add_argument("--out", default="bench/out/time_to_converge")
  p.add_argument("--no_plot", action="store_true")
  p.add_argument(
    "--report_only",
    action="store_true",
    help="run nothing: rewrite the report from <out>/time_to_converge.json and the "
    "runs' metrics JSON",
  )
  args = p.parse_args(argv)
  bad = [s for s in args.sides.split(",") if s not in SIDES]
  if bad:
    p.error(f"unknown side(s) {bad}; choose from {SIDES}")
  if args.setting == "synthetic" and "paper" in args.sides.split(","):
    p.error("--setting=synthetic runs the binaries' sides only (the paper loop reads files)")
  if args.patience < 1 or args.max_epochs < 1 or args.repeats < 1:
    p.error("--patience, --max_epochs and --repeats must be >= 1")
  return args


def _data_root(args) -> pathlib.Path:
  if args.data_root:
    return pathlib.Path(args.data_root)
  from train import data as data_lib

  return pathlib.Path(data_lib.default_data_root())


def data_settings(args) -> Dict[str, object]:
  """The DataConfig settings of --setting."""
  if args.setting == "synthetic":
    return dict(SYNTHETIC)
  root = _data_root(args)
  if args.setting == "ml1m_loo":
    return dict(dataset="ml1m", data_path=str(root / "ml1m"), split="leave_one_out")
  return dict(
    dataset="sequences",
    data_path=str(root / "amazon-sports" / "sequences.txt"),
    split="leave_one_out",
    val_users=args.val_users,
  )


def binary_flags(args, run_dir: pathlib.Path) -> List[str]:
  """The flags of the run (`train.config.RunConfig`): the row, the data, patience, seed."""
  from bench.table1 import rows as rows_lib
  from train.config import RunConfig

  if args.row not in rows_lib.ROWS:
    raise ValueError(f"unknown row {args.row!r}")
  settings = dict(rows_lib.SETTING_DEFAULTS.get(args.setting, {}))
  settings.update(
    rows_lib.ROWS[args.row][1],
    **data_settings(args),
    model="sasrec",
    seed=args.seed,
    epochs=args.max_epochs,
    early_stopping_patience=args.patience,
    progress=False,
    model_dir=str(run_dir / "model"),
    export_dir=str(run_dir / "export"),
    metrics_json=str(run_dir / "metrics.json"),
  )
  if "steps_per_epoch" not in settings:
    settings["steps_per_epoch"] = 48  # the paper code's ML-1M epoch
  cfg = RunConfig().replace(**settings)
  # Only the settings that differ from the defaults: a baseline checkout need not know newer ones.
  return cfg.to_flags(only_changed=True) + [f for f in args.extra_flags.split() if f]


def paper_flags(args, run_dir: pathlib.Path) -> List[str]:
  data = data_settings(args)
  flags = [
    f"--dataset={data['dataset']}",
    f"--data_path={data['data_path']}",
    f"--patience={args.patience}",
    f"--max_epochs={args.max_epochs}",
    f"--seed={args.seed}",
    f"--metrics_json={run_dir / 'metrics.json'}",
  ]
  if args.setting == "amazon_sports_loo":
    flags += [f"--val_users={args.val_users}", "--max_len=50"]
  return flags + [f for f in args.paper_flags.split() if f]


def command(args, side: str, code_dir: pathlib.Path, run_dir: pathlib.Path) -> List[str]:
  py = sys.executable
  if side == "paper":
    return [py, "-m", "bench.paper_loop", *paper_flags(args, run_dir)]
  flags = binary_flags(args, run_dir)
  if side == "tf_keras":
    return [py, "-m", "train", *flags]
  return [py, "-m", "train.keras3", f"--backend={side.split('_', 1)[1]}", *flags]


def split(metrics: dict, wall: float) -> Dict[str, float]:
  """Seconds by phase (module docstring), from the run's ``phases`` or its epoch history."""
  history = metrics.get("history", [])
  phases = metrics.get("phases")
  if phases:
    out = {
      "first step": phases.get("first_step", 0.0),
      "steps": phases.get("steps", 0.0),
      "validation": phases.get("validation", 0.0),
      "checkpoints": phases.get("checkpoints", 0.0),
      "test": phases.get("test", 0.0),
      "export": phases.get("export", 0.0),
    }
  else:  # a checkout before train.epochs: the history's training and validation seconds
    out = {
      "first step": 0.0,
      "steps": sum(h["seconds"] for h in history),
      "validation": sum(h["wall_seconds"] - h["seconds"] for h in history),
      "checkpoints": 0.0,
      "test": 0.0,
      "export": 0.0,
    }
  out["start-up"] = max(0.0, wall - sum(out.values()))
  return out


def summarise(side: str, metrics: dict, wall: float) -> dict:
  parts = split(metrics, wall)
  history = metrics.get("history", [])
  best = metrics.get("best_epoch", 0)
  to_best = parts["start-up"] + sum(
    h.get("wall_seconds", h.get("seconds", 0.0)) for h in history if h["epoch"] <= best
  )
  steps = metrics.get("global_step", 0)
  test = metrics.get("test", {})
  # Per epoch, from the history (the same measure in any checkout): the validation after it.
  per_epoch_val = (
    sum(h["wall_seconds"] - h["seconds"] for h in history) / len(history) if history else None
  )
  return dict(
    side=side,
    wall=wall,
    parts=parts,
    to_best=to_best,
    epochs=metrics.get("epochs_done"),
    best_epoch=best,
    best_step=metrics.get("best_step"),
    steps=steps,
    stopped_early=metrics.get("stopped_early"),
    ms_per_step=1e3 * (parts["steps"] + parts["first step"]) / max(steps, 1),
    val_ckpt_share=(parts["validation"] + parts["checkpoints"]) / max(wall, 1e-9),
    val_per_epoch=per_epoch_val,
    test_recall20=test.get("recall@20"),
    test_ndcg20=test.get("ndcg@20"),
  )


def run_side(args, side: str, code_dir: pathlib.Path, run_dir: pathlib.Path) -> dict:
  if run_dir.exists():
    import shutil

    shutil.rmtree(run_dir)
  run_dir.mkdir(parents=True)
  cmd = command(args, side.split("@")[0], code_dir, run_dir)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code_dir), os.environ.get("PYTHONPATH")]))
  start = time.perf_counter()
  with open(run_dir / "run.log", "w") as log:
    proc = subprocess.run(cmd, cwd=code_dir, env=env, stdout=log, stderr=subprocess.STDOUT)
  wall = time.perf_counter() - start
  if proc.returncode != 0:
    raise RuntimeError(f"{side} failed (exit {proc.returncode}); see {run_dir / 'run.log'}")
  metrics = json.loads((run_dir / "metrics.json").read_text())
  out = summarise(side, metrics, wall)
  out["command"] = " ".join(cmd)
  return out


def markdown(args, runs: List[dict]) -> str:
  lines = [
    f"# Time to a converged model: {args.setting}, {args.row}, patience {args.patience}"
    + (f", at most {args.max_epochs} epochs" if args.max_epochs < 100_000 else ""),
    "",
    f"Command: `python bench/time_to_converge.py {' '.join(sys.argv[1:])}`",
    "",
    "| run | wall s | start-up | first step | steps | validation | checkpoints | test "
    "| export | val+ckpt | val s / epoch | epochs (best) | to best s | ms/step | test R@20 "
    "| NDCG@20 |",
    "|---" * 16 + "|",
  ]
  for r in runs:
    p = r["parts"]
    lines.append(
      f"| {r['side']} | {r['wall']:.1f} | "
      + " | ".join(f"{p[k]:.1f}" for k in PHASES)
      + f" | {100 * r['val_ckpt_share']:.1f} % | "
      + ("-" if r.get("val_per_epoch") is None else f"{r['val_per_epoch']:.1f}")
      + f" | {r['epochs']} ({r['best_epoch']}) | "
      f"{r['to_best']:.1f} | {r['ms_per_step']:.0f} | "
      + " | ".join("-" if r[k] is None else f"{r[k]:.4f}" for k in ("test_recall20", "test_ndcg20"))
      + " |"
    )
  lines += ["", "Ratios (same invocation; > 1: the first side is slower):", ""]
  by_side: Dict[str, List[dict]] = {}
  for r in runs:
    by_side.setdefault(r["side"], []).append(r)
  names = list(by_side)
  for a in names:
    for b in names:
      if a < b:
        wa = min(r["wall"] for r in by_side[a])
        wb = min(r["wall"] for r in by_side[b])
        lines.append(f"- {a} / {b}: wall {wa / wb:.2f}")
  lines += ["", "Commands:", ""] + [f"- {r['side']}: `{r['command']}`" for r in runs]
  return "\n".join(lines) + "\n"


def plot(runs: List[dict], path: pathlib.Path, title: str) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(9, 0.6 * len(runs) + 2.0))
  labels = [f"{r['side']} #{i}" for i, r in enumerate(runs)]
  left = [0.0] * len(runs)
  for phase in PHASES:
    widths = [r["parts"][phase] for r in runs]
    ax.barh(labels, widths, left=left, label=phase)
    left = [a + b for a, b in zip(left, widths)]
  ax.set_xlabel("seconds (this machine)")
  ax.set_title(title)
  ax.legend(fontsize=7, ncol=7, loc="upper center", bbox_to_anchor=(0.5, -0.18))
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(argv=None) -> int:
  args = parse_args(argv)
  out = pathlib.Path(args.out).resolve()  # the sides run in their own checkout's folder
  out.mkdir(parents=True, exist_ok=True)
  sides = [(s, ROOT) for s in args.sides.split(",")]
  if args.baseline_dir:
    base = pathlib.Path(args.baseline_dir).resolve()
    sides += [(f"{s}@baseline", base) for s, _ in sides if s != "paper"]
  runs = []
  if args.report_only:
    previous = json.loads((out / "time_to_converge.json").read_text())["runs"]
    counts: Dict[str, int] = {}
    for r in previous:
      k = counts.setdefault(r["side"], 0)
      counts[r["side"]] += 1
      metrics = json.loads((out / "runs" / f"{r['side']}_r{k}" / "metrics.json").read_text())
      runs.append(dict(summarise(r["side"], metrics, r["wall"]), command=r["command"]))
  for rnd in range(0 if args.report_only else args.repeats):
    order = sides[rnd % len(sides) :] + sides[: rnd % len(sides)]
    for side, code_dir in order:
      r = run_side(args, side, code_dir, out / "runs" / f"{side}_r{rnd}")
      runs.append(r)
      print(
        f"{side}: wall {r['wall']:.1f}s, val+ckpt {100 * r['val_ckpt_share']:.1f} %, "
        f"epochs {r['epochs']} (best {r['best_epoch']})",
        flush=True,
      )
  (out / "time_to_converge.json").write_text(json.dumps(dict(args=vars(args), runs=runs), indent=2))
  (out / "time_to_converge.md").write_text(markdown(args, runs))
  if not args.no_plot:
    plot(runs, out / "time_to_converge.png", f"{args.setting}, {args.row}")
  print(f"SUMMARY time_to_converge: {len(runs)} runs -> {out / 'time_to_converge.md'}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
