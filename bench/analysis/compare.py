"""Two arms compared on paired seeds, row by row: the same runs made twice with one setting changed
(one factor of Table 1, e.g. --uniform_negatives=query against =sequence; bfloat16 against float32).

Arms, statistics, flags and outputs: bench/README.md, section `analysis/` (compare).
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Dict, List, Optional, Sequence

from bench.analysis import common
from bench.analysis.runs import (
  collect,
  collect_paper_loop,
  collect_seed_runs,
  is_paper_loop_tree,
  subfolders,
)
from bench.common.flags import csv
from bench.common.plot import pyplot, save
from bench.launch.rows import PAPER, ROWS, label
from eval import paired_stats

FLAGS = dict(
  a=(..., "arm A: a launcher or reproduce tree, paper_loop tree or seeds"),
  b=(..., "arm B (the reference of the margin)"),
  names=("A,B", "the arms' names, comma-separated"),
  margin=(0.02, "relative equivalence margin (0.02 = ± 2 %% of B's)"),
  setting=("ml1m_loo", "the setting compared"),
  budget=("full", "budget level of the tree (cpu, full; empty for none)"),
  rows=("", "rows, comma-separated (default: all found)"),
  out=(None, "folder for factor.md, factor.json, curves.png"),
  unpaired=(False, "the arms' seeds do not pair: Welch's difference per row, no pooled row"),
)
METRICS = ("recall@20", "ndcg@20", "recall@10", "ndcg@10")
SEEDS_ROW = "seeds"  # the one row of an arm that is a folder of seed<s>/metrics.json
CURVE = "val_ndcg@10"
PAIRED_KEYS = ("n", "seeds", "mean", "se", "ci", "positive", "verdict")


def load(
  arms: Sequence[pathlib.Path], budget: str, setting: str, rows: Optional[Sequence[str]] = None
) -> Dict:
  """{row: ({seed: record} of arm A, {seed: record} of arm B)} for the rows asked for (default:
  the rows either arm holds), finished runs only; ValueError for an unknown row or no run."""
  names = [str(a) for a in arms]
  for arm in arms:
    if not arm.is_dir():
      raise ValueError(f"{arm}: no such folder")
  seeds = [collect_seed_runs(a, SEEDS_ROW) for a in arms]
  if any(seeds):
    if not all(seeds):
      raise ValueError(f"{names}: one arm is a folder of seed<s>/metrics.json, the other not")
    return {SEEDS_ROW: tuple(seeds)}
  paper_loop = [is_paper_loop_tree(a) for a in arms]
  if rows is None:
    held = [
      collect_paper_loop(a) if paper else subfolders(a / budget / setting)
      for a, paper in zip(arms, paper_loop)
    ]
    rows = sorted({row for arm in held for row in arm if row in ROWS})
  unknown = [r for r in rows if r not in ROWS]
  if unknown:
    raise ValueError(f"unknown rows {unknown}; rows are those of bench/launch/rows.py")
  if not rows:
    raise ValueError(f"no row folder under {[str(a / budget / setting) for a in arms]}")
  found = [
    collect_paper_loop(a, rows)
    if paper
    else collect(a, budget, [setting], rows)[0].get(setting, {})
    for a, paper in zip(arms, paper_loop)
  ]
  out = {row: tuple(runs.get(row, {}) for runs in found) for row in rows}
  if not any(runs for pair in out.values() for runs in pair):
    raise ValueError(f"no finished run (eval/eval_results.json) under {names}")
  return out


def _independent(va: Dict, vb: Dict, margin: float) -> dict:
  """Welch's A − B (the seeds do not pair), shaped as a paired difference's record; with one run
  of A, where it falls against B's 95 % prediction interval of one more run."""
  diff = paired_stats.independent_difference(
    va, vb, margin=paired_stats.relative_margin(margin, list(vb.values()))
  )
  out = {k: diff[k] for k in ("mean", "se", "df", "ci", "verdict")}
  out.update(n=diff["n_first"] + diff["n_second"], seeds=None, positive=None)
  out.update(n_a=diff["n_first"], n_b=diff["n_second"])
  if diff["n_first"] == 1:
    pred = out["b_prediction_interval"] = paired_stats.prediction_interval(list(vb.values()))["ci"]
    if pred is not None:
      inside = pred[0] <= next(iter(va.values())) <= pred[1]
      out["verdict"] = f"{'inside' if inside else 'outside'} B's prediction interval"
  return out


def statistics(data: Dict, setting: str, margin: float, unpaired: bool = False) -> Dict:
  """Per row and over all rows: each arm's mean ± s.e. and the paired difference A − B; with
  ``unpaired``, Welch's difference per row (`_independent`) and no pooled row."""
  paper = PAPER.get(setting, {})
  rows = {}
  pooled: Dict[str, tuple] = {m: ({}, {}) for m in METRICS}
  for row, (a, b) in data.items():
    held = [set().union(*(r["metrics"] for r in runs.values())) for runs in (a, b)]
    per_metric = {}
    for m in [m for m in METRICS if m in held[0] and m in held[1]]:
      va, vb = common.values(a, m), common.values(b, m)
      if unpaired:
        difference = _independent(va, vb, margin)
      else:
        diff = common.paired(va, vb, margin)
        difference = {k: diff[k] for k in PAIRED_KEYS}
        for s in diff["seeds"]:
          pooled[m][0][(row, s)], pooled[m][1][(row, s)] = va[s], vb[s]
      per_metric[m] = dict(
        a=paired_stats.mean_se(list(va.values())),
        b=paired_stats.mean_se(list(vb.values())),
        difference=difference,
      )
    rows[row] = dict(
      label=label(row),
      seeds_a=sorted(a),
      seeds_b=sorted(b),
      paper=dict(zip(METRICS, paper[row])) if row in paper else None,
      metrics=per_metric,
    )
  over_rows = {}
  for m in [m for m in METRICS if pooled[m][0]]:  # none when unpaired
    diff = common.paired(*pooled[m], margin)
    over_rows[m] = {k: diff[k] for k in PAIRED_KEYS if k != "seeds"}
  return dict(
    setting=setting, margin=margin, unpaired=bool(unpaired), rows=rows, all_rows=over_rows
  )


def _interval(d: dict) -> str:
  text = common.signed(d["mean"])
  if d["ci"] is not None:
    return f"{text} {common.interval(d['ci'])}"
  if d.get("n_a") is None:
    return f"{text} (no interval: {d['n']} pair{'s' if d['n'] != 1 else ''})"
  pred = d.get("b_prediction_interval")
  text += f" (no interval: {d['n_a']} + {d['n_b']} runs)"
  return text + (
    f"; B's prediction interval [{common.plain(pred[0])}, {common.plain(pred[1])}]" if pred else ""
  )


def _difference(d: dict) -> list:
  """A − B's cells: its interval, the seeds where A is ahead, the verdict."""
  return [_interval(d), "—" if d["positive"] is None else f"{d['positive']}/{d['n']}", d["verdict"]]


def _run_cell(r: Optional[dict]) -> str:
  """A run's best epoch / epochs, steps to the best, test R@20 and NDCG@20, training wall."""
  if r is None:
    return "not finished"
  wall = r.get("train_seconds", r.get("train_wall_seconds"))
  return (
    f"{r.get('best_epoch', '—')} / {r.get('epochs_done', '—')}, {r.get('best_step', '—')}, "
    f"{r['metrics']['recall@20']:.4f}, {r['metrics']['ndcg@20']:.4f}, "
    + ("—" if wall is None else f"{wall:.0f}")
  )


def report(data: Dict, stats: Dict, names: Sequence[str], budget: str) -> List[str]:
  """The Markdown lines of the report (bench/README.md)."""
  a_name, b_name = names
  how = (
    "independent runs (the seeds do not pair); 95 % intervals of Welch's difference "
    "(Student's t, Welch–Satterthwaite degrees of freedom); one run of A: against B's 95 % "
    "prediction interval of one more run"
    if stats["unpaired"]
    else "paired by seed; 95 % intervals (Student's t, n − 1 degrees of freedom)"
  )
  lines = [
    f"{a_name} (A) against {b_name} (B), setting {stats['setting']}, exact test metrics of the "
    f"best checkpoint; {how}; verdict margin ± {stats['margin']:.0%} of B's mean.",
    "",
  ]
  header = ["row", "metric", "paper", f"{a_name}: mean ± s.e. (n)", f"{b_name}: mean ± s.e. (n)"]
  lines += common.table(
    header + ["A − B, 95 % interval", "A ahead in", "verdict"],
    [
      [r["label"], m, common.plain((r["paper"] or {}).get(m))]
      + [
        "—" if s[arm]["mean"] is None else f"{common.mean_se(s[arm])} ({s[arm]['n']})"
        for arm in "ab"
      ]
      + _difference(s["difference"])
      for r in stats["rows"].values()
      for m, s in r["metrics"].items()
    ],
  )
  if not stats["unpaired"]:
    lines += [
      "",
      "All rows together (every (row, seed) pair; assumes one effect of the factor on every row):",
      "",
    ]
    lines += common.table(
      ["metric", "pairs", "A − B, 95 % interval", "A ahead in", "verdict"],
      [[m, d["n"], *_difference(d)] for m, d in stats["all_rows"].items()],
    )
  lines += [
    "",
    "Per run: best epoch / epoch stopped at, steps to the best epoch, exact test R@20 and "
    "NDCG@20, training wall-clock (s: `timing.json`, else the binary's train_wall_seconds, "
    "summed over resumed chunks).",
    "",
  ]
  lines += common.table(
    ["row", "seed", a_name, b_name],
    [
      [label(row), seed, _run_cell(a.get(seed)), _run_cell(b.get(seed))]
      for row, (a, b) in data.items()
      for seed in sorted(set(a) | set(b))
    ],
  )
  curves = "Curves: `curves.png` (validation NDCG@10 by epoch)."
  return lines + ["", f"Budget level read: {budget!r}. {curves}"]


def plot_curves(data: Dict, names: Sequence[str], path: pathlib.Path) -> bool:
  """Validation NDCG@10 by epoch, one panel per row, a thin line per seed (solid A, dashed B),
  the best epoch marked; False when no run has a curve."""
  panels = [
    (row, pair)
    for row, pair in data.items()
    if any(r.get("curve") for runs in pair for r in runs.values())
  ]
  if not panels:
    return False
  fig, axes = pyplot().subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
  for ax, (row, pair) in zip(axes[0], panels):
    for runs, name, style, marker in zip(pair, names, ("-", "--"), ("o", "s")):
      for seed, r in sorted(runs.items()):
        curve = [c[CURVE] for c in r.get("curve") or [] if CURVE in c]
        if not curve:
          continue
        color = f"C{seed}"
        ax.plot(
          range(1, len(curve) + 1), curve, style, lw=0.9, color=color, label=f"{name}, seed {seed}"
        )
        best = r.get("best_epoch")
        if best and best <= len(curve):
          ax.plot([best], [curve[best - 1]], marker, ms=4, color=color)
    ax.set_title(label(row), fontsize=9)
    ax.set(xlabel="epoch", ylabel="validation NDCG@10")
    ax.legend(fontsize=6)
  save(fig, path, dpi=110)
  return True


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = common.parser("compare", __doc__, FLAGS)
  args = parser.parse_args(argv)
  names = args.names.split(",")
  if len(names) != 2 or not all(names):
    parser.error(f"--names needs two names, got {args.names!r}")
  if not args.margin > 0:
    parser.error(f"--margin must be > 0, got {args.margin}")
  try:
    arms = [pathlib.Path(args.a), pathlib.Path(args.b)]
    data = load(arms, args.budget, args.setting, csv(args.rows) or None)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  stats = statistics(data, args.setting, args.margin, args.unpaired)
  command = common.command_line("compare", argv)
  lines = [f"Written by `{command}` (from the repository root).", ""]
  text = "\n".join(lines + report(data, stats, names, args.budget)) + "\n"
  print(text, end="")
  if args.out:
    record = json.dumps(dict(names=names, **stats), indent=2) + "\n"
    out = common.write(pathlib.Path(args.out), {"factor.md": text, "factor.json": record})
    plot_curves(data, names, out / "curves.png")
  head = f"summary: {names[0]} − {names[1]}"
  if args.unpaired:
    for row, r in stats["rows"].items():
      d = r["metrics"].get("recall@20", {}).get("difference")
      if d is None:  # e.g. a row one arm has no run of
        print(f"{head}, {row} R@20: not held by both arms")
      else:
        print(f"{head}, {row} R@20: {_interval(d)}, {d['verdict']}")
    return 0
  over = stats["all_rows"].get("recall@20")
  if over is None:
    print(f"{head}: no row where both arms hold R@20")
  else:
    pairs = f"R@20 over {over['n']} pairs of {len(data)} rows"
    print(f"{head}, {pairs}: {_interval(over)}, {over['verdict']}")
  return 0
