r"""Time to a converged model: the wall-clock of a launcher's whole runs, split by phase, side by
side (`python -m bench.launch time_to_converge`, then this).

    python -m bench.analysis phases --runs=bench/out/time_to_converge [--out DIR] [--no_plot]

The phases, flags and outputs: bench/README.md, section `Time to a converged model`.
"""

from __future__ import annotations

import json
import pathlib
from typing import Dict, List, Optional, Sequence

from bench.analysis import common
from bench.analysis.runs import read_json
from bench.common.plot import pyplot, save

__all__ = ["PHASES", "main", "split", "summarise"]

PHASES = ("start-up", "first step", "steps", "validation", "checkpoints", "test", "export")


def split(metrics: dict, wall: float) -> Dict[str, float]:
  """Seconds by phase (bench/README.md), from the run's ``phases`` or its epoch history."""
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
  """One run's row of the table: its phases, time to the best epoch, step cost, test metrics."""
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


def plot(runs: List[dict], path: pathlib.Path, title: str) -> None:
  """A stacked bar per run: its seconds by phase."""
  fig, ax = pyplot().subplots(figsize=(9, 0.6 * len(runs) + 2.0))
  labels = [f"{r['side']} #{i}" for i, r in enumerate(runs)]
  left = [0.0] * len(runs)
  for phase in PHASES:
    widths = [r["parts"][phase] for r in runs]
    ax.barh(labels, widths, left=left, label=phase)
    left = [a + b for a, b in zip(left, widths)]
  ax.set_xlabel("seconds (this machine)")
  ax.set_title(title)
  ax.legend(fontsize=7, ncol=7, loc="upper center", bbox_to_anchor=(0.5, -0.18))
  save(fig, path)


def markdown(title: str, command: str, launch: str, runs: List[dict]) -> str:
  """The table of every run's phases, the ratios of the arms' shortest walls, the commands."""
  lines = [
    f"# Time to a converged model: {title}",
    "",
    f"Written by `{command}`" + (f" from the runs of `{launch}`." if launch else "."),
    "",
    "| run | wall s | start-up | first step | steps | validation | checkpoints | test "
    "| export | val+ckpt | val s / epoch | epochs (best) | to best s | ms/step | test R@20 "
    "| NDCG@20 |",
    "|---" * 16 + "|",
  ]
  for r in runs:
    p = r["parts"]
    lines.append(
      f"| {r['run']} | {r['wall']:.1f} | "
      + " | ".join(f"{p[k]:.1f}" for k in PHASES)
      + f" | {100 * r['val_ckpt_share']:.1f} % | "
      + ("-" if r.get("val_per_epoch") is None else f"{r['val_per_epoch']:.1f}")
      + f" | {r['epochs']} ({r['best_epoch']}) | "
      f"{r['to_best']:.1f} | {r['ms_per_step']:.0f} | "
      + " | ".join("-" if r[k] is None else f"{r[k]:.4f}" for k in ("test_recall20", "test_ndcg20"))
      + " |"
    )
  lines += ["", "Ratios of the shortest walls (one launch; > 1: the first arm is slower):", ""]
  by_side: Dict[str, List[dict]] = {}
  for r in runs:
    by_side.setdefault(r["side"], []).append(r)
  names = list(by_side)
  for i, a in enumerate(names):
    for b in names[i + 1 :]:
      wa = min(r["wall"] for r in by_side[a])
      wb = min(r["wall"] for r in by_side[b])
      lines.append(f"- {a} / {b}: wall {wa / wb:.2f}")
  return "\n".join(lines) + "\n"


def collect(runs_dir: pathlib.Path) -> tuple:
  """(the launch command, the summaries of the runs under ``runs_dir`` that have a wall and a
  metrics JSON: every <setting>/<arm>/seed<s> folder with a run.json, in path order)."""
  launch = read_json(runs_dir / "launch.json")
  runs = []
  for path in sorted(runs_dir.rglob("run.json")):
    folder = path.parent
    if any(p.startswith("src_") for p in folder.relative_to(runs_dir).parts):
      continue  # a pinned checkout's own files
    record = read_json(path) or {}
    metrics = read_json(folder / "train_metrics.json")
    wall = record.get("train_seconds")
    if not isinstance(metrics, dict) or not wall:
      continue  # not run, or a --seeds program's run (its wall is the program's)
    row = summarise(folder.parent.name, metrics, float(wall))
    row.update(run=str(folder.relative_to(runs_dir)), command=(record.get("commands") or [""])[0])
    runs.append(row)
  return (launch or {}).get("command", "") if isinstance(launch, dict) else "", runs


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = common.argument_parser("phases", __doc__, epilog=True)
  parser.add_argument("--runs", required=True, help="a python -m bench.launch --out folder")
  parser.add_argument("--out", default=None, help="the report's folder (default: --runs)")
  parser.add_argument("--no_plot", action="store_true")
  args = parser.parse_args(argv)
  runs_dir = pathlib.Path(args.runs)
  launch, runs = collect(runs_dir)
  if not runs:
    parser.error(f"{runs_dir}: no run with a wall-clock and a metrics JSON yet")
  command = common.command_line("phases", argv)
  files = {
    "phases.json": json.dumps(dict(launch=launch, runs=runs), indent=2),
    "phases.md": markdown(runs_dir.name, command, launch, runs),
  }
  out = common.write(pathlib.Path(args.out) if args.out else runs_dir, files)
  if not args.no_plot:
    plot(runs, out / "phases.png", runs_dir.name)
  print(f"SUMMARY phases: {len(runs)} runs -> {out / 'phases.md'}")
  return 0
