r"""Does a shorter early-stopping patience select a worse model? Checked on runs' own curves.

    python -m bench.analysis patience --runs=DIR[,DIR...] --patiences=3,5,10,20 [--window=20] \
        [--noise_json=docs/results/converged/ml100k_temporal/reproduce_full.json] \
        [--out=docs/results/converged/ml100k_temporal]      # writes patience_check.md

The selection rule, flags and outputs: bench/README.md, section `analysis/` (patience).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Dict, List, Optional, Sequence

from bench.analysis import common

METRICS = ("recall@10", "recall@20", "ndcg@10", "ndcg@20")


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
    epoch = history[best]["epoch"]
    if f"test_{METRICS[0]}" in history[best]:
      test = {m: history[best].get(f"test_{m}") for m in METRICS}
    elif evaluated is not None and evaluated[0] == epoch:
      test = dict(evaluated[1])
    else:
      test = None
    rows.append(
      dict(
        patience=p,
        epoch=epoch,
        step=history[best]["step"],
        stopped=stopped,
        val_ndcg10=val[best],
        test=test,
      )
    )
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
    row = dict(first=part[0]["epoch"], last=part[-1]["epoch"])
    row["val_ndcg@10"] = sum(h["val_ndcg@10"] for h in part) / len(part)
    for m in METRICS:
      row[m] = sum(h[f"test_{m}"] for h in part) / len(part)
    levels.append(row)
  return levels


def _window_table(name: str, levels: List[dict], selected: Dict[int, int]) -> List[str]:
  """Markdown rows of one run's window levels; ``selected``: patience -> selected epoch."""
  lines = []
  for lv in levels:
    picks = [f"P={p}: {e}" for p, e in selected.items() if lv["first"] <= e <= lv["last"]]
    lines.append(
      f"| {name} | {lv['first']}–{lv['last']} | {lv['val_ndcg@10']:.4f} | "
      + " | ".join(f"{lv[m]:.4f}" for m in METRICS)
      + f" | {', '.join(picks)} |"
    )
  return lines


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


def _parser() -> argparse.ArgumentParser:
  parser = common.argument_parser(
    "patience",
    "What a shorter early-stopping patience selects on runs' own curves "
    "(bench/README.md, section analysis/).",
  )
  parser.add_argument(
    "--runs",
    required=True,
    help="Comma-separated run folders (model/history.json with test_* keys).",
  )
  parser.add_argument("--patiences", default="3,5,10,20", help="Patiences (epochs) to check.")
  parser.add_argument(
    "--noise_json",
    default=None,
    help="A table1.json (bench.analysis table1; or an older reproduce_*.json) whose row "
    "statistics give the seed noise (s.e.) of each metric.",
  )
  parser.add_argument(
    "--window",
    type=int,
    default=0,
    help="Also print the curves' mean level over windows of this many epochs (runs with a "
    "test value at every epoch); 0: no window table.",
  )
  parser.add_argument("--out", default=None, help="Also write patience_check.md in this folder.")
  return parser


def main(argv=None):
  args = _parser().parse_args(argv)
  runs = [r for r in args.runs.split(",") if r]
  patiences = sorted(int(p) for p in args.patiences.split(","))
  lines = [
    "| run | patience | selected epoch (step) | stopped | "
    + " | ".join(f"test {m} (Δ vs longest; seed s.e.)" for m in METRICS)
    + " |",
    "|---|---|---|---|" + "---|" * len(METRICS),
  ]
  worst = 0.0
  windows = [
    "| run | epochs | mean val ndcg@10 | "
    + " | ".join(f"mean test {m}" for m in METRICS)
    + " | selected here |",
    "|---|---|---|" + "---|" * (len(METRICS) + 1),
  ]
  for run in runs:
    run_dir = pathlib.Path(run)
    history = json.loads((run_dir / "model" / "history.json").read_text())
    if not history:
      sys.exit(f"error: {run_dir}: empty history")
    rows = check_run(history, patiences, _evaluated(run_dir))
    ref = rows[-1]["test"]
    if ref is None:
      sys.exit(
        f"error: {run_dir}: no test value for the longest patience's epoch (train with "
        "--test_curve, or check a finished run with its train_metrics.json)"
      )
    noise = _row_noise(args.noise_json, run_dir.parent.name)
    name = f"{run_dir.parent.name}/{run_dir.name}"
    for r in rows:
      cells = []
      if r["test"] is None:
        cells = ["other epoch: needs --test_curve"] * len(METRICS)
      for m in METRICS if r["test"] is not None else ():
        d = r["test"][m] - ref[m]
        se = noise.get(m)
        if se:
          worst = max(worst, abs(d) / se)
        cells.append(
          f"{r['test'][m]:.4f} ({d:+.4f}; {se:.4f})" if se else f"{r['test'][m]:.4f} ({d:+.4f})"
        )
      lines.append(
        f"| {name} | {r['patience']} | {r['epoch']} ({r['step']}) | "
        f"{'yes' if r['stopped'] else 'no: the run ended first'} | " + " | ".join(cells) + " |"
      )
    if args.window:
      try:
        levels = window_levels(history, args.window)
      except ValueError as e:
        sys.exit(f"error: {run_dir}: {e}")
      windows += _window_table(name, levels, {r["patience"]: r["epoch"] for r in rows})
  table = "\n".join(lines)
  if args.window:
    table += (
      f"\n\nThe curves' level by windows of {args.window} epochs (means over each window; "
      '"selected here": the epochs the patiences select):\n\n' + "\n".join(windows)
    )
  if args.out:
    text = (
      "# Patience check\n\nWritten by `python -m bench.analysis patience "
      f"--runs={','.join(runs)} --patiences={','.join(map(str, patiences))}"
      + (f" --noise_json={args.noise_json}" if args.noise_json else "")
      + (f" --window={args.window}" if args.window else "")
      + f" --out={args.out}`.\n\n"
      "Each row: the epoch that early stopping with that patience selects on this run's "
      "validation NDCG@10 curve, and its test metrics; Δ = minus the longest patience's; "
      "seed s.e. = the standard error over seeds of the same row in the main report.\n\n"
      + table
      + "\n"
    )
    common.write(pathlib.Path(args.out), {"patience_check.md": text})
  print(table)
  print(
    f"SUMMARY patience_check: {len(runs)} runs, patiences {patiences}; largest "
    f"|Δ test| / seed s.e. = {worst:.2f}"
    if worst
    else f"SUMMARY patience_check: {len(runs)} runs, patiences {patiences}"
  )
