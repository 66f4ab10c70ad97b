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
FLAGS = dict(
  runs=(..., "a python -m bench.launch --out folder"),
  out=(None, "the report's folder (default: --runs)"),
  no_plot=(False, None),
)


def _validation(history: List[dict]) -> float:
  """The seconds of the epochs of ``history`` outside their training steps."""
  return sum(h["wall_seconds"] - h["seconds"] for h in history)


def split(metrics: dict, wall: float) -> Dict[str, float]:
  """Seconds by phase (bench/README.md), from the run's ``phases`` or its epoch history."""
  history = metrics.get("history", [])
  phases = metrics.get("phases")
  if phases:
    out = {p: phases.get(p.replace(" ", "_"), 0.0) for p in PHASES[1:]}
  else:  # a checkout before train.epochs: the history's training and validation seconds
    out = dict.fromkeys(PHASES[1:], 0.0)
    out.update(steps=sum(h["seconds"] for h in history), validation=_validation(history))
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
    # per epoch, from the history (the same measure in any checkout): the validation after it
    val_per_epoch=_validation(history) / len(history) if history else None,
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
  ax.set(xlabel="seconds (this machine)", title=title)
  ax.legend(fontsize=7, ncol=7, loc="upper center", bbox_to_anchor=(0.5, -0.18))
  save(fig, path)


def _cells(r: dict) -> List[str]:
  per_epoch = r.get("val_per_epoch")
  return [
    r["run"],
    f"{r['wall']:.1f}",
    *(f"{r['parts'][k]:.1f}" for k in PHASES),
    f"{100 * r['val_ckpt_share']:.1f} %",
    "-" if per_epoch is None else f"{per_epoch:.1f}",
    f"{r['epochs']} ({r['best_epoch']})",
    f"{r['to_best']:.1f}",
    f"{r['ms_per_step']:.0f}",
    *("-" if r[k] is None else f"{r[k]:.4f}" for k in ("test_recall20", "test_ndcg20")),
  ]


def markdown(title: str, command: str, launch: str, runs: List[dict]) -> str:
  """The table of every run's phases, the ratios of the arms' shortest walls, the commands."""
  lines = [
    f"# Time to a converged model: {title}",
    "",
    f"Written by `{command}`" + (f" from the runs of `{launch}`." if launch else "."),
    "",
  ]
  header = ["run", "wall s", *PHASES, "val+ckpt", "val s / epoch", "epochs (best)", "to best s"]
  lines += common.table(header + ["ms/step", "test R@20", "NDCG@20"], map(_cells, runs))
  lines += ["", "Ratios of the shortest walls (one launch; > 1: the first arm is slower):", ""]
  walls: Dict[str, float] = {}
  for r in runs:
    walls[r["side"]] = min(walls.get(r["side"], r["wall"]), r["wall"])
  names = list(walls)
  for i, a in enumerate(names):
    lines += [f"- {a} / {b}: wall {walls[a] / walls[b]:.2f}" for b in names[i + 1 :]]
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
  parser = common.parser("phases", __doc__, FLAGS, epilog=True)
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
