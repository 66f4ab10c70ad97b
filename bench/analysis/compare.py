r"""Two arms compared on paired seeds, row by row: the same runs made twice with one setting changed
(one factor of Table 1, e.g. --uniform_negatives=query against =sequence; bfloat16 against float32).

    python -m bench.analysis compare --a=runs/query --b=runs/sequence \
        --names=per-position,per-sequence --setting=ml1m_loo --budget= \
        --out=docs/results/table1/negatives_factor
    python -m bench.analysis compare --a=runs/bf16 --b=runs/float32 --names=bfloat16,float32

Arms, statistics, flags and outputs: bench/README.md, section `analysis/` (compare).
"""

from __future__ import annotations

import argparse
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
from bench.common.plot import pyplot, save
from bench.launch.rows import PAPER, ROWS, label
from eval import paired_stats

METRICS = ("recall@20", "ndcg@20", "recall@10", "ndcg@10")
SEEDS_ROW = "seeds"  # the one row of an arm that is a folder of seed<s>/metrics.json
CURVE = "val_ndcg@10"


def _rows_found(arm: pathlib.Path, budget: str, setting: str) -> List[str]:
  if is_paper_loop_tree(arm):
    return sorted(collect_paper_loop(arm))
  return [row for row in subfolders(arm / budget / setting) if row in ROWS]


def load(
  arms: Sequence[pathlib.Path], budget: str, setting: str, rows: Optional[Sequence[str]] = None
) -> Dict:
  """{row: ({seed: record} of arm A, {seed: record} of arm B)} for the rows asked for (default:
  the rows either arm holds), finished runs only; ValueError for an unknown row or no run."""
  for arm in arms:
    if not arm.is_dir():
      raise ValueError(f"{arm}: no such folder")
  seeds = [collect_seed_runs(a, SEEDS_ROW) for a in arms]
  if any(seeds):
    if not all(len(s) for s in seeds):
      raise ValueError(
        f"{[str(a) for a in arms]}: one arm is a folder of seed<s>/metrics.json, the other not"
      )
    return {SEEDS_ROW: tuple(seeds)}
  if rows is None:
    rows = sorted(set().union(*(_rows_found(a, budget, setting) for a in arms)))
  unknown = [r for r in rows if r not in ROWS]
  if unknown:
    raise ValueError(f"unknown rows {unknown}; rows are those of bench/launch/rows.py")
  if not rows:
    raise ValueError(f"no row folder under {[str(a / budget / setting) for a in arms]}")
  paper_trees = [is_paper_loop_tree(a) for a in arms]
  found = [
    collect_paper_loop(a, rows)
    if paper
    else collect(a, budget, [setting], rows)[0].get(setting, {})
    for a, paper in zip(arms, paper_trees)
  ]
  out = {row: tuple(runs.get(row, {}) for runs in found) for row in rows}
  if not any(runs for pair in out.values() for runs in pair):
    raise ValueError(f"no finished run (eval/eval_results.json) under {[str(a) for a in arms]}")
  return out


def _independent(va: Dict, vb: Dict, margin: float) -> dict:
  """Welch's A − B (the seeds do not pair), shaped as a paired difference's record; with one run
  of A, where it falls against B's 95 % prediction interval of one more run."""
  diff = paired_stats.independent_difference(
    va, vb, margin=paired_stats.relative_margin(margin, list(vb.values()))
  )
  out = {k: diff[k] for k in ("mean", "se", "df", "ci", "verdict")}
  out.update(n=diff["n_first"] + diff["n_second"], seeds=None, positive=None)
  out["n_a"], out["n_b"] = diff["n_first"], diff["n_second"]
  if diff["n_first"] == 1:
    pred = paired_stats.prediction_interval(list(vb.values()))["ci"]
    out["b_prediction_interval"] = pred
    if pred is not None:
      (value,) = va.values()
      out["verdict"] = (
        "inside B's prediction interval"
        if pred[0] <= value <= pred[1]
        else "outside B's prediction interval"
      )
  return out


def _metrics(a: Dict, b: Dict) -> List[str]:
  """The metrics that both arms' runs hold (in METRICS' order)."""
  held = [set().union(*(r["metrics"] for r in runs.values())) for runs in (a, b)]
  return [m for m in METRICS if m in held[0] and m in held[1]]


def statistics(data: Dict, setting: str, margin: float, unpaired: bool = False) -> Dict:
  """Per row and over all rows: each arm's mean ± s.e. and the paired difference A − B; with
  ``unpaired``, Welch's difference per row (`_independent`) and no pooled row."""
  paper = PAPER.get(setting, {})
  rows = {}
  pooled: Dict[str, tuple] = {m: ({}, {}) for m in METRICS}
  for row, (a, b) in data.items():
    per_metric = {}
    for m in _metrics(a, b):
      va, vb = common.values(a, m), common.values(b, m)
      if unpaired:
        difference = _independent(va, vb, margin)
      else:
        diff = common.paired(va, vb, margin)
        difference = {k: diff[k] for k in ("n", "seeds", "mean", "se", "ci", "positive", "verdict")}
        for s in diff["seeds"]:
          pooled[m][0][(row, s)] = va[s]
          pooled[m][1][(row, s)] = vb[s]
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
  over_rows: Dict[str, dict] = {}
  for m in [m for m in METRICS if pooled[m][0]]:  # none when unpaired
    diff = common.paired(*pooled[m], margin)
    over_rows[m] = {k: diff[k] for k in ("n", "mean", "se", "ci", "positive", "verdict")}
  return dict(
    setting=setting, margin=margin, unpaired=bool(unpaired), rows=rows, all_rows=over_rows
  )


def _interval(d: dict) -> str:
  if d["ci"] is None and d.get("n_a") is not None:
    pred = d.get("b_prediction_interval")
    return f"{common.signed(d['mean'])} (no interval: {d['n_a']} + {d['n_b']} runs)" + (
      f"; B's prediction interval [{common.plain(pred[0])}, {common.plain(pred[1])}]"
      if pred
      else ""
    )
  if d["ci"] is None:
    return f"{common.signed(d['mean'])} (no interval: {d['n']} pair{'s' if d['n'] != 1 else ''})"
  return f"{common.signed(d['mean'])} {common.interval(d['ci'])}"


def report(data: Dict, stats: Dict, names: Sequence[str], budget: str) -> List[str]:
  """The Markdown lines of the report (bench/README.md)."""
  a_name, b_name = names
  how = (
    "independent runs (the seeds do not pair); 95 % intervals of Welch's difference "
    "(Student's t, Welch–Satterthwaite degrees of freedom); one run of A: against B's 95 % "
    "prediction interval of one more run"
    if stats.get("unpaired")
    else "paired by seed; 95 % intervals (Student's t, n − 1 degrees of freedom)"
  )
  lines = [
    f"{a_name} (A) against {b_name} (B), setting {stats['setting']}, exact test metrics of the "
    f"best checkpoint; {how}; verdict margin ± {stats['margin']:.0%} of B's mean.",
    "",
    f"| row | metric | paper | {a_name}: mean ± s.e. (n) | {b_name}: mean ± s.e. (n) | "
    "A − B, 95 % interval | A ahead in | verdict |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for r in stats["rows"].values():
    for m, s in r["metrics"].items():
      cells = [
        "—" if s[arm]["mean"] is None else f"{common.mean_se(s[arm])} ({s[arm]['n']})"
        for arm in ("a", "b")
      ]
      d = s["difference"]
      paper = common.plain(r["paper"][m]) if r["paper"] and m in r["paper"] else "—"
      ahead = "—" if d["positive"] is None else f"{d['positive']}/{d['n']}"
      lines.append(
        f"| {r['label']} | {m} | {paper} | {cells[0]} | {cells[1]} | {_interval(d)} | "
        f"{ahead} | {d['verdict']} |"
      )
  lines += (
    []
    if stats.get("unpaired")
    else [
      "",
      "All rows together (every (row, seed) pair; assumes one effect of the factor on every row):",
      "",
      "| metric | pairs | A − B, 95 % interval | A ahead in | verdict |",
      "|---|---|---|---|---|",
    ]
  )
  for m in stats["all_rows"]:
    d = stats["all_rows"][m]
    lines.append(f"| {m} | {d['n']} | {_interval(d)} | {d['positive']}/{d['n']} | {d['verdict']} |")
  lines += [
    "",
    "Per run: best epoch / epoch stopped at, steps to the best epoch, exact test R@20 and "
    "NDCG@20, training wall-clock (s: `timing.json`, else the binary's train_wall_seconds, "
    "summed over resumed chunks).",
    "",
    f"| row | seed | {a_name} | {b_name} |",
    "|---|---|---|---|",
  ]
  for row, (a, b) in data.items():
    for seed in sorted(set(a) | set(b)):
      cells = []
      for runs in (a, b):
        r = runs.get(seed)
        if r is None:
          cells.append("not finished")
          continue
        wall = r.get("train_seconds", r.get("train_wall_seconds"))
        cells.append(
          f"{r.get('best_epoch', '—')} / {r.get('epochs_done', '—')}, {r.get('best_step', '—')}, "
          f"{r['metrics']['recall@20']:.4f}, {r['metrics']['ndcg@20']:.4f}, "
          + ("—" if wall is None else f"{wall:.0f}")
        )
      lines.append(f"| {label(row)} | {seed} | {cells[0]} | {cells[1]} |")
  lines += [
    "",
    f"Budget level read: {budget!r}. Curves: `curves.png` (validation NDCG@10 by epoch).",
  ]
  return lines


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
    for arm_i, (runs, name, style) in enumerate(zip(pair, names, ("-", "--"))):
      for seed, r in sorted(runs.items()):
        curve = [c for c in r.get("curve") or [] if CURVE in c]
        if not curve:
          continue
        epochs = list(range(1, len(curve) + 1))
        line = ax.plot(
          epochs,
          [c[CURVE] for c in curve],
          style,
          lw=0.9,
          color=f"C{seed}",
          label=f"{name}, seed {seed}",
        )[0]
        best = r.get("best_epoch")
        if best and best <= len(curve):
          ax.plot(
            [best],
            [curve[best - 1][CURVE]],
            "o" if arm_i == 0 else "s",
            ms=4,
            color=line.get_color(),
          )
    ax.set_title(label(row), fontsize=9)
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation NDCG@10")
    ax.legend(fontsize=6)
  save(fig, path, dpi=110)
  return True


def add_parser(parser: argparse.ArgumentParser) -> None:
  """The command's arguments (bench/README.md)."""
  parser.add_argument(
    "--a", required=True, help="arm A: a launcher or reproduce tree, paper_loop tree or seeds"
  )
  parser.add_argument("--b", required=True, help="arm B (the reference of the margin)")
  parser.add_argument("--names", default="A,B", help="the arms' names, comma-separated")
  parser.add_argument(
    "--margin", type=float, default=0.02, help="relative equivalence margin (0.02 = ± 2 %% of B's)"
  )
  parser.add_argument("--setting", default="ml1m_loo", help="the setting compared")
  parser.add_argument(
    "--budget", default="full", help="budget level of the tree (cpu, full; empty for none)"
  )
  parser.add_argument("--rows", default="", help="rows, comma-separated (default: all found)")
  parser.add_argument("--out", default=None, help="folder for factor.md, factor.json, curves.png")
  parser.add_argument(
    "--unpaired",
    action="store_true",
    help="the arms' seeds do not pair (e.g. the paper's own scripts against ours): Welch's "
    "difference per row, no pooled row",
  )


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = common.argument_parser("compare", __doc__)
  add_parser(parser)
  args = parser.parse_args(argv)
  names = args.names.split(",")
  if len(names) != 2 or not all(names):
    parser.error(f"--names needs two names, got {args.names!r}")
  if not args.margin > 0:
    parser.error(f"--margin must be > 0, got {args.margin}")
  rows = [r for r in args.rows.split(",") if r] or None
  try:
    data = load([pathlib.Path(args.a), pathlib.Path(args.b)], args.budget, args.setting, rows)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  stats = statistics(data, args.setting, args.margin, args.unpaired)
  lines = report(data, stats, names, args.budget)
  command = common.command_line("compare", argv)
  lines = [f"Written by `{command}` (from the repository root).", ""] + lines
  text = "\n".join(lines) + "\n"
  print(text, end="")
  if args.out:
    files = {
      "factor.md": text,
      "factor.json": json.dumps(dict(names=names, **stats), indent=2) + "\n",
    }
    out = common.write(pathlib.Path(args.out), files)
    plot_curves(data, names, out / "curves.png")
  if args.unpaired:
    for row, r in stats["rows"].items():
      if "recall@20" not in r["metrics"]:  # e.g. a row one arm has no run of
        print(f"summary: {names[0]} − {names[1]}, {row} R@20: not held by both arms")
        continue
      d = r["metrics"]["recall@20"]["difference"]
      print(f"summary: {names[0]} − {names[1]}, {row} R@20: {_interval(d)}, {d['verdict']}")
    return 0
  over = stats["all_rows"].get("recall@20")
  if over is None:
    print(f"summary: {names[0]} − {names[1]}: no row where both arms hold R@20")
    return 0
  print(
    f"summary: {names[0]} − {names[1]}, R@20 over {over['n']} pairs of "
    f"{len(data)} rows: {_interval(over)}, {over['verdict']}"
  )
  return 0
