r"""The Table 1 report of finished runs: every row's metrics over its seeds and the paired
differences between rows, with their intervals and verdicts, plus the curves and popularity plots.

    python -m bench.analysis table1 --runs=bench/out/table1_cpu
    python -m bench.analysis table1 --runs=bench/out/xbatch_ml1m_cpu --docs_dir=docs/results/x
    python -m bench.analysis table1 --runs=bench/out/reproduce/full   # an older tree's level

--runs is a folder of ``<setting>/<row>/seed<s>`` runs, as `python -m bench.launch` writes them
(`bench.launch.plan.folder_of`); a run is finished when its eval/eval_results.json exists. An arm
launched at a pinned code (``<row>@<code>``) is reported as its row when every arm of the setting
has that code (one code version: a paired comparison never mixes two), else under its own name.

Per row, over its n seeds: mean ± s.e., s.e. = s / sqrt(n) (s: sample std, ddof 1). Per pair
(A, B) of rows (`bench.table1.rows.paired_rows`: X_corrected − X_standard, X_corrected − X_none,
X_standard − X_none for X in mixed / inbatch, the convention, optimizer, negatives source and
binary pairs), over the seeds present in both, d_s = metric_A(s) − metric_B(s):

    mean d ± s.e.(d),  95 % CI = mean d ± t_{0.975, n−1} · s_d / sqrt(n)   (Student t, n >= 2)
    verdict: ahead (CI > 0), behind (CI < 0), equivalent (0 ∈ CI ⊂ ±m, m = margin · mean_B),
    within noise (0 ∈ CI, CI reaches past ±m); one common seed: no interval.

The statistics are `eval.paired_stats`'s. Writes <out>/table1.md (tables, how to read them, the
command and commit) and table1.json (every run's record and the statistics),
learning_curves_<setting>.png and recall_by_popularity_<setting>.png; --docs_dir copies the
markdown and the plots there. The last printed line is a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import shutil
import sys
from typing import Dict, List, Optional, Sequence, Tuple

from bench.table1.plots import plot_curves, plot_popularity
from bench.table1.report import EQUIVALENCE_MARGIN, markdown, statistics, summary
from bench.table1.results import collect

__all__ = ["arms_as_rows", "main", "report"]

PROG = "python -m bench.analysis table1"


def _folders(path: pathlib.Path) -> List[str]:
  return sorted(p.name for p in path.iterdir() if p.is_dir()) if path.is_dir() else []


def _holds_runs(setting: pathlib.Path) -> bool:
  """Whether a folder is a setting's: an arm folder in it holds seed<s> folders (not a pinned
  checkout, src_<commit>, nor the arrangements' trees)."""
  return any(
    p.name.startswith("seed") and p.name[4:].isdigit() for p in setting.glob("*/*") if p.is_dir()
  )


def arms_as_rows(arms: Sequence[str]) -> Dict[str, str]:
  """{arm folder: the row it is reported as}: ``<row>@<code>`` becomes ``<row>`` when every arm
  shares the code (and no two arms then share a row), else the arm keeps its name."""
  codes = {arm.partition("@")[2] for arm in arms}
  rows = [arm.partition("@")[0] for arm in arms]
  if len(codes) == 1 and len(set(rows)) == len(rows):
    return dict(zip(arms, rows))
  return {arm: arm for arm in arms}


def _collect(
  runs: pathlib.Path, settings: Sequence[str], rows: Sequence[str], seeds: Optional[List[int]]
) -> Tuple[Dict, List[dict], List[str]]:
  """The finished runs {setting: {row: {seed: record}}}, the missing runs and the rows, with the
  arms' folders renamed to their rows (`arms_as_rows`)."""
  results: Dict = {}
  missing: List[dict] = []
  order: List[str] = []
  for setting in settings:
    arms = _folders(runs / setting)
    names = arms_as_rows(arms)
    wanted = [a for a in arms if not rows or names[a] in rows]
    found, lost = collect(runs, "", [setting], wanted, seeds=seeds)
    for arm, by_seed in found.get(setting, {}).items():
      for record in by_seed.values():
        record["row"] = names[arm]
      results.setdefault(setting, {})[names[arm]] = by_seed
    missing += [dict(m, row=names[m["row"]]) for m in lost]
    order += [names[a] for a in wanted if names[a] not in order]
  if rows:
    order = [r for r in rows if r in order] + [r for r in order if r not in rows]
  return results, missing, order


def report(
  runs: pathlib.Path,
  out: pathlib.Path,
  settings: Sequence[str] = (),
  rows: Sequence[str] = (),
  seeds: Optional[List[int]] = None,
  margin: float = EQUIVALENCE_MARGIN,
  title: str = "",
  command: str = "",
  docs_dir: Optional[pathlib.Path] = None,
) -> Tuple[str, str]:
  """Writes the report of the runs under ``runs`` to ``out``; (the markdown, the summary)."""
  settings = list(settings) or [s for s in _folders(runs) if _holds_runs(runs / s)]
  results, missing, order = _collect(runs, settings, rows, seeds)
  stats = statistics(results, settings, order, margin=margin)
  out.mkdir(parents=True, exist_ok=True)
  plots: Dict[str, List[str]] = {}
  for setting in settings:
    for name, plot in (
      (f"learning_curves_{setting}.png", plot_curves),
      (f"recall_by_popularity_{setting}.png", plot_popularity),
    ):
      if plot(results, setting, order, out / name):
        plots.setdefault(setting, []).append(name)
  md = markdown(
    title or runs.name,
    stats,
    results,
    settings,
    order,
    missing,
    [],
    plots,
    margin=margin,
    command=command,
  )
  (out / "table1.md").write_text(md)
  records = [r for s in settings for row in order for r in results.get(s, {}).get(row, {}).values()]
  (out / "table1.json").write_text(
    json.dumps(
      dict(
        runs=str(runs),
        command=command,
        settings=settings,
        rows=order,
        statistics=stats,
        records=records,
        missing=missing,
      ),
      indent=2,
    )
  )
  if docs_dir is not None:
    docs_dir.mkdir(parents=True, exist_ok=True)
    for name in ["table1.md"] + [n for names in plots.values() for n in names]:
      shutil.copy(out / name, docs_dir / name)
  line = (
    f"{len(records)} finished runs, {len(missing)} missing; {summary(stats, results)}; "
    f"table in {out / 'table1.md'}"
  )
  return md, line


def _csv(text: str) -> List[str]:
  return [t for t in text.split(",") if t]


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(
    prog=PROG,
    description=__doc__.split("\n\n")[0],
    formatter_class=argparse.RawDescriptionHelpFormatter,
    epilog=__doc__.split("\n\n", 1)[1],
  )
  parser.add_argument("--runs", required=True, help="a folder of <setting>/<row>/seed<s> runs")
  parser.add_argument("--settings", type=_csv, default=[], help="default: every one found")
  parser.add_argument("--rows", type=_csv, default=[], help="default: every one found")
  parser.add_argument("--seeds", type=_csv, default=[], help="default: every one found")
  parser.add_argument(
    "--equivalence_margin",
    type=float,
    default=EQUIVALENCE_MARGIN,
    help="relative margin of the 'equivalent' verdict (of the second row's mean; 0 = off)",
  )
  parser.add_argument("--title", default="", help="the report's title (default: the folder)")
  parser.add_argument("--out", default=None, help="the report's folder (default: --runs)")
  parser.add_argument("--docs_dir", default=None, help="also copy table1.md and the plots here")
  args = parser.parse_args(argv)
  runs = pathlib.Path(args.runs)
  if not runs.is_dir():
    parser.error(f"--runs: no folder {runs}")
  try:
    seeds = [int(s) for s in args.seeds] or None
  except ValueError:
    parser.error(f"--seeds must be integers, got {args.seeds}")
  command = f"`{PROG} {shlex.join(sys.argv[1:] if argv is None else list(argv))}`"
  md, line = report(
    runs,
    pathlib.Path(args.out) if args.out else runs,
    args.settings,
    args.rows,
    seeds,
    margin=args.equivalence_margin,
    title=args.title,
    command=command,
    docs_dir=pathlib.Path(args.docs_dir) if args.docs_dir else None,
  )
  print(md)
  print(f"SUMMARY table1: {line}")
  return 0
