"""What a shorter early-stopping patience selects on runs' own curves
(bench/README.md, section analysis/).

Does a shorter patience select a worse model? The selection rule, flags and outputs:
bench/README.md, section `analysis/` (patience).
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from bench.analysis import common
from bench.common.flags import csv

METRICS = ("recall@10", "recall@20", "ndcg@10", "ndcg@20")
FLAGS = dict(
  runs=(..., "Comma-separated run folders (model/history.json with test_* keys)."),
  patiences=("3,5,10,20", "Patiences (epochs) to check."),
  noise_json=(None, "A table1.json (or reproduce_*.json): its rows' s.e. is the seed noise."),
  window=(0, "Also the curves' mean level by windows of this many epochs (0: none)."),
  out=(None, "Also write patience_check.md in this folder."),
)


def selected_epoch(val: Sequence[float], patience: int) -> tuple:
  """(index of the selected epoch, index of the last epoch trained) under ``patience``: the
  first maximum of ``val`` up to the first epoch that ends ``patience`` epochs without a better
  value (strictly greater, as the trainer)."""
  if not val:
    raise ValueError("empty validation curve")
  best, bad = 0, 0
  for e in range(1, len(val)):
    if val[e] > val[best]:
      best, bad = e, 0
    else:
      bad += 1
      if bad >= patience:
        return best, e
  return best, len(val) - 1


def check_run(
  history: List[dict], patiences: Sequence[int], evaluated: Optional[tuple] = None
) -> List[dict]:
  """Per patience: the selected epoch, its step and test metrics, and whether the run was long
  enough to tell (its curve reached the stopping epoch of that patience).

  ``evaluated``: (epoch, {metric: value}) of the run's own test evaluation, used where the
  history has no test curve; test is None for an epoch without a test value."""
  val = [h["val_ndcg@10"] for h in history]
  rows = []
  for p in patiences:
    best, stop = selected_epoch(val, p)
    stopped = stop < len(val) - 1 or (len(val) - 1 - best) >= p
    epoch, test = history[best]["epoch"], None
    if f"test_{METRICS[0]}" in history[best]:
      test = {m: history[best].get(f"test_{m}") for m in METRICS}
    elif evaluated is not None and evaluated[0] == epoch:
      test = dict(evaluated[1])
    row = dict(patience=p, epoch=epoch, step=history[best]["step"], stopped=stopped)
    rows.append(dict(row, val_ndcg10=val[best], test=test))
  return rows


def window_levels(history: List[dict], window: int) -> List[dict]:
  """Per window of ``window`` epochs (the history's order; the last window may be shorter): its
  first and last epoch and the mean of v and of each test metric over it. Every epoch needs a
  test value (a run trained with --test_curve)."""
  if window < 1:
    raise ValueError(f"window must be at least 1 epoch, got {window}")
  missing = [h["epoch"] for h in history if any(f"test_{m}" not in h for m in METRICS)]
  if missing:
    raise ValueError(
      f"no test value at epochs {missing[:5]}{' ...' if len(missing) > 5 else ''}: "
      "--window needs a test curve at every epoch"
    )
  levels = []
  for a in range(0, len(history), window):
    part = history[a : a + window]
    means = {m: sum(h[f"test_{m}"] for h in part) / len(part) for m in METRICS}
    val = sum(h["val_ndcg@10"] for h in part) / len(part)
    levels.append(
      dict(first=part[0]["epoch"], last=part[-1]["epoch"], **{"val_ndcg@10": val}, **means)
    )
  return levels


def _evaluated(run_dir: pathlib.Path) -> Optional[tuple]:
  """(best epoch, test metrics) from the run's train_metrics.json, or None."""
  path = run_dir / "train_metrics.json"
  if not path.exists():
    return None
  tm = json.loads(path.read_text())
  test = tm.get("test") or {}
  if "best_epoch" not in tm or not all(m in test for m in METRICS):
    return None
  return int(tm["best_epoch"]), {m: float(test[m]) for m in METRICS}


def _row_noise(noise_json: Optional[str], row: str) -> Dict[str, Optional[float]]:
  if not noise_json:
    return {}
  stats = json.loads(pathlib.Path(noise_json).read_text())["statistics"]
  for setting in stats.values():
    if row in setting["rows"]:
      return {m: setting["rows"][row]["metrics"].get(m, {}).get("se") for m in METRICS}
  return {}


def _patience_rows(name: str, rows: List[dict], noise: Dict) -> Tuple[List[list], float]:
  """One run's table rows (Δ: against the longest patience); the largest |Δ| / seed s.e."""
  ref, worst, out = rows[-1]["test"], 0.0, []
  for r in rows:
    cells = ["other epoch: needs --test_curve"] * len(METRICS) if r["test"] is None else []
    for m in METRICS if r["test"] is not None else ():
      d, se = r["test"][m] - ref[m], noise.get(m)
      worst = max(worst, abs(d) / se) if se else worst
      cells.append(f"{r['test'][m]:.4f} ({d:+.4f}" + (f"; {se:.4f})" if se else ")"))
    stopped = "yes" if r["stopped"] else "no: the run ended first"
    out.append([name, r["patience"], f"{r['epoch']} ({r['step']})", stopped, *cells])
  return out, worst


def _window_rows(name: str, levels: List[dict], selected: Dict[int, int]) -> List[list]:
  """One run's window levels; ``selected``: patience -> selected epoch."""
  return [
    [name, f"{lv['first']}–{lv['last']}", f"{lv['val_ndcg@10']:.4f}"]
    + [f"{lv[m]:.4f}" for m in METRICS]
    + [", ".join(f"P={p}: {e}" for p, e in selected.items() if lv["first"] <= e <= lv["last"])]
    for lv in levels
  ]


def main(argv: Optional[Sequence[str]] = None) -> None:
  args = common.parser("patience", __doc__, FLAGS).parse_args(argv)
  runs = csv(args.runs)
  patiences = sorted(int(p) for p in args.patiences.split(","))
  table: List[list] = []
  windows: List[list] = []
  worst = 0.0
  for run_dir in map(pathlib.Path, runs):
    history = json.loads((run_dir / "model" / "history.json").read_text())
    if not history:
      sys.exit(f"error: {run_dir}: empty history")
    rows = check_run(history, patiences, _evaluated(run_dir))
    if rows[-1]["test"] is None:
      sys.exit(
        f"error: {run_dir}: no test value for the longest patience's epoch (train with "
        "--test_curve, or check a finished run with its train_metrics.json)"
      )
    name = f"{run_dir.parent.name}/{run_dir.name}"
    lines, largest = _patience_rows(name, rows, _row_noise(args.noise_json, run_dir.parent.name))
    table += lines
    worst = max(worst, largest)
    if args.window:
      try:
        levels = window_levels(history, args.window)
      except ValueError as e:
        sys.exit(f"error: {run_dir}: {e}")
      windows += _window_rows(name, levels, {r["patience"]: r["epoch"] for r in rows})
  header = ["run", "patience", "selected epoch (step)", "stopped"]
  text = "\n".join(
    common.table(header + [f"test {m} (Δ vs longest; seed s.e.)" for m in METRICS], table)
  )
  if args.window:
    header = ["run", "epochs", "mean val ndcg@10", *(f"mean test {m}" for m in METRICS)]
    text += (
      f"\n\nThe curves' level by windows of {args.window} epochs (means over each window; "
      '"selected here": the epochs the patiences select):\n\n'
      + "\n".join(common.table(header + ["selected here"], windows))
    )
  if args.out:
    flags = [f"--runs={','.join(runs)}", f"--patiences={','.join(map(str, patiences))}"]
    flags += [f"--noise_json={args.noise_json}"] if args.noise_json else []
    flags += [f"--window={args.window}"] if args.window else []
    report = (
      f"# Patience check\n\nWritten by `python -m bench.analysis patience {' '.join(flags)} "
      f"--out={args.out}`.\n\n"
      "Each row: the epoch that early stopping with that patience selects on this run's "
      "validation NDCG@10 curve, and its test metrics; Δ = minus the longest patience's; "
      "seed s.e. = the standard error over seeds of the same row in the main report.\n\n"
    )
    common.write(pathlib.Path(args.out), {"patience_check.md": report + text + "\n"})
  print(text)
  largest = f"; largest |Δ test| / seed s.e. = {worst:.2f}" if worst else ""
  print(f"SUMMARY patience_check: {len(runs)} runs, patiences {patiences}{largest}")
