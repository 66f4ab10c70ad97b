r"""The Table 1 report of finished runs: every row's metrics over its seeds and the paired
differences between rows, with their intervals and verdicts, plus the curves and popularity plots.

    python -m bench.analysis table1 --runs=bench/out/table1_cpu
    python -m bench.analysis table1 --runs=bench/out/xbatch_ml1m_cpu --docs_dir=docs/results/x
    python -m bench.analysis table1 --runs=bench/out/reproduce/full   # an older tree's level

The statistics, flags and outputs: bench/README.md, section `The paper's Table 1`.
"""

from __future__ import annotations

import json
import pathlib
import shutil
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench.analysis import common
from bench.analysis.runs import CURVES, collect, seed_folders, subfolders
from bench.common.plot import pyplot, save
from bench.common.report import commit
from bench.launch.rows import KERAS3_ROWS, PAPER, label, train_binary
from eval.paired_stats import CONFIDENCE, mean_se

__all__ = ["arms_as_rows", "main", "paired_rows", "report"]

ROOT = pathlib.Path(__file__).resolve().parents[2]
FLAGS = dict(
  runs=(..., "a folder of <setting>/<row>/seed<s> runs"),
  settings=([], "default: every one found"),
  rows=([], "default: every one found"),
  seeds=([], "default: every one found"),
  equivalence_margin=(0.02, "relative margin of 'equivalent' (of the second row's mean; 0: off)"),
  title=("", "the report's title (default: the folder)"),
  out=(None, "the report's folder (default: --runs)"),
  docs_dir=(None, "also copy table1.md and the plots here"),
)
# The metrics reported (those a run's eval_results.json holds), in table order.
METRICS = ("recall@10", "recall@20", "ndcg@10", "ndcg@20", "recall@100")
# The pairs within one binary's rows: X_corrected − X_standard, X_corrected − X_none and
# X_standard − X_none per family X, then the log Q convention of the deduplicated in-batch half
# at equal correction.
WITHIN_PAIRS = tuple(
  (f"{family}_{a}", f"{family}_{b}", f"{family}: {a} − {b}")
  for family in ("mixed", "inbatch", "mixed_expected_count")
  for a, b in (("corrected", "standard"), ("corrected", "none"), ("standard", "none"))
) + tuple(
  (f"mixed_expected_count_{c}", f"mixed_{c}", f"{c}: expected-count − unigram log Q")
  for c in ("corrected", "standard")
)
# Then the table optimizer at equal loss and negatives; the negatives source at equal loss and
# convention (a memory joined to mixed − mixed); the binary at equal settings (Keras 3 on a
# backend − tf-keras).
OTHER_PAIRS = (
  ("mixed_corrected_lazy_adam", "mixed_corrected", "corrected: LazyAdam − Adam tables"),
  ("xbatch16_corrected", "mixed_corrected", "corrected: mixed + memory of 16 batches − mixed"),
  (
    "xbatch16_expected_count_corrected",
    "mixed_expected_count_corrected",
    "corrected, expected-count log Q: mixed + memory of 16 batches − mixed",
  ),
  (
    "xbatch16_expected_count_corrected",
    "xbatch16_corrected",
    "corrected, memory of 16 batches: expected-count − unigram log Q",
  ),
) + tuple(
  (k3, row, f"{row.replace('mixed_', '', 1)}: Keras 3 {backend.upper()} − tf-keras")
  for k3, (row, backend) in KERAS3_ROWS.items()
)
# The suffixes of a binary's rows: "" (python -m train) and each Keras 3 backend's.
BINARY_SUFFIXES = ("",) + tuple(sorted({f"_keras3_{b}" for _, b in KERAS3_ROWS.values()}))
TRAIN = "python -m train"


def paired_rows(rows: Sequence[str]) -> List[tuple]:
  """(first row, second row, label) of every pair of WITHIN_PAIRS whose two rows are both in
  ``rows``, within the rows of one binary (suffix "" or "_keras3_B"), then the OTHER_PAIRS there."""
  pairs = []
  for suffix in BINARY_SUFFIXES:
    tag = f" (Keras 3 {suffix.rsplit('_', 1)[1].upper()})" if suffix else ""
    pairs += [
      (a + suffix, b + suffix, text + tag)
      for a, b, text in WITHIN_PAIRS
      if a + suffix in rows and b + suffix in rows
    ]
  return pairs + [(a, b, text) for a, b, text in OTHER_PAIRS if a in rows and b in rows]


def _name(metric: str) -> str:
  """A metric's name in the tables: R@K, NDCG@K."""
  return metric.replace("recall", "R").replace("ndcg", "NDCG")


def _spread(runs: Dict, key: str) -> dict:
  return mean_se([r[key] for r in runs.values() if r.get(key) is not None])


def statistics(results: Dict, settings: Sequence[str], rows: Sequence[str], margin: float) -> Dict:
  """Per setting: every row's mean ± s.e. of each metric, and the paired differences."""
  stats = {}
  for setting in settings:
    by_row = results.get(setting, {})
    held = {m for runs in by_row.values() for r in runs.values() for m in r["metrics"]}
    metrics = [m for m in METRICS if m in held]
    paper = PAPER.get(setting, {})
    row_stats = {}
    for row in rows:
      runs = by_row.get(row, {})
      minutes = [r["train_seconds"] / 60 for r in runs.values() if r.get("train_seconds")]
      row_stats[row] = dict(
        label=label(row),
        seeds=sorted(runs),
        metrics={m: mean_se(list(common.values(runs, m).values())) for m in metrics},
        train_minutes=mean_se(minutes)["mean"],
        best_step=_spread(runs, "best_step"),
        steps=_spread(runs, "global_step"),
        paper=(dict(zip(("recall@20", "ndcg@20"), paper[row])) if row in paper else None),
      )
    pairs = []
    for first, second, name in paired_rows(rows):
      a, b = by_row.get(first, {}), by_row.get(second, {})
      pairs.append(
        dict(
          first=first,
          second=second,
          label=name,
          unpaired={first: sorted(set(a) - set(b)), second: sorted(set(b) - set(a))},
          metrics={
            m: common.paired(common.values(a, m), common.values(b, m), margin) for m in metrics
          },
        )
      )
    stats[setting] = dict(metrics=metrics, rows=row_stats, pairs=pairs)
  return stats


def _provenance() -> str:
  """Where this invocation ran (the repository root or its working directory) and at which
  commit, marked when tracked files differ from it."""
  cwd = pathlib.Path.cwd().resolve()
  text = " (run from " + ("the repository root" if cwd == ROOT else f"`{cwd}`") + ")"
  head = commit(dirty=" (with uncommitted changes)")
  return text if head is None else f"{text} at commit {head}"


HOW_TO_READ = """\
How to read: exact search over all items, rated items filtered. Each row shows the mean ± standard
error over its seeds (s.e. = sample standard deviation / √n; one seed: the value alone). A seed
fixes the initialisation and the order of the training data in every row, so rows are compared
seed by seed: for a pair A − B, d = metric(A) − metric(B) on each seed present in both rows (a
seed missing from either is left out of that pair), reported as mean ± s.e. of d with the 95%
confidence interval mean ± t(0.975, n − 1) · s.e. (Student t). "positive": seeds where A is
higher. Verdict: "ahead" when the interval lies above 0, "behind" when below, "equivalent" when
it contains 0 and lies inside ± {margin} of B's mean on the paired seeds (the data exclude a
difference that large either way), "within noise" when it contains 0 and reaches past that
margin. With few seeds the interval is wide (t(0.975, 2) = 4.30 for 3 seeds): "within
noise" means this experiment cannot tell, not that the rows are equal. Paper columns: Table 1 of
the paper (5 runs, early stopping); a fixed cpu budget is not comparable with them."""


def _row_cells(r: dict, metrics: Sequence[str]) -> list:
  seeds = ",".join(str(x) for x in r["seeds"])
  paper = r["paper"] or {}
  return [
    r["label"],
    f"{len(r['seeds'])} ({seeds})" if seeds else "0",
    *(common.mean_se(r["metrics"][m]) for m in metrics),
    *(common.plain(paper.get(m)) for m in ("recall@20", "ndcg@20")),
    "—" if r["train_minutes"] is None else f"{r['train_minutes']:.1f}",
    common.mean_se(r["best_step"], digits=0),
    common.mean_se(r["steps"], digits=0),
  ]


def _pair_cells(pair: dict, m: str) -> list:
  d = pair["metrics"][m]
  n = d["n"]
  mean = common.signed(d["mean"]) + ("" if d["se"] is None else f" ± {d['se']:.4f}")
  ci = "—" if n == 0 or d["ci"] is None else common.interval(d["ci"])
  return [pair["label"], _name(m), n, mean if n else "—", ci, f"{d['positive']}/{n}", d["verdict"]]


def _commands(by_row: Dict, shared: str) -> str:
  """The command per binary that trained the rows of one setting (tf-keras's first), with its
  rows unless all are tf-keras rows."""
  groups: Dict[str, List[str]] = {}
  for row in by_row:
    groups.setdefault(" ".join(["python", *train_binary(row)]), []).append(row)
  ordered = sorted(groups.items(), key=lambda g: g[0] != TRAIN)
  alone = list(groups) == [TRAIN]
  return "; ".join(f"`{c} {shared}`" + ("" if alone else f" ({', '.join(r)})") for c, r in ordered)


def _setting_lines(s: dict, by_row: Dict, rows: Sequence[str], plots: List[str]) -> List[str]:
  """One setting's section below its title: the rows' table, the paired differences, the shared
  training flags and the plots."""
  metrics = s["metrics"]
  if not metrics:
    return ["No finished run.", ""]
  header = ["row", "seeds", *map(_name, metrics), "paper R@20", "paper NDCG@20"]
  header += ["train min/run", "steps to best", "steps run"]
  lines = common.table(header, [_row_cells(s["rows"][row], metrics) for row in rows]) + [""]
  if s["pairs"]:
    lines += [f"Paired differences (same seed), {CONFIDENCE:.0%} interval:", ""]
    header = ["difference", "metric", "seeds", "mean ± s.e.", "95% CI", "positive", "verdict"]
    lines += common.table(header, [_pair_cells(p, m) for p in s["pairs"] for m in metrics]) + [""]
    notes = [
      f"- {p['label']}: seed(s) {', '.join(map(str, alone))} of {row} "
      f"have no run of {p['second'] if row == p['first'] else p['first']}: left out of the pair."
      for p in s["pairs"]
      for row, alone in p["unpaired"].items()
      if alone
    ]
    lines += (notes + [""]) if notes else []
  flag_lists = [r.get("train_flags") for runs in by_row.values() for r in runs.values()]
  if flag_lists and all(flag_lists):
    shared = " ".join(f for f in flag_lists[0] if all(f in other for other in flag_lists[1:]))
    lines += [
      "Training flags shared by every run above (from each run's train_metrics.json; "
      "the row's loss, negatives, logq, seed and folders complete each command): "
      + _commands(by_row, shared),
      "",
    ]
  return lines + [line for name in plots for line in (f"![{name}]({name})", "")]


def markdown(
  record: dict, results: Dict, plots: Dict[str, List[str]], title: str, margin: float
) -> str:
  """The report of ``record`` (table1.json's): title, how to read it, per setting its section;
  then the missing runs."""
  lines = [f"# Table 1 report: {title}", "", f"Written by {record['command']}{_provenance()}.", ""]
  lines += [HOW_TO_READ.format(margin=f"{margin:.0%}" if margin > 0 else "0 (off)"), ""]
  for setting, s in record["statistics"].items():
    lines += [f"## {setting}", ""]
    lines += _setting_lines(s, results.get(setting, {}), record["rows"], plots.get(setting, []))
  if record["missing"]:
    lines += ["Missing runs (not in the tables):", ""]
    lines += [
      f"- {m['setting']}/{m['row']}/seed{m['seed']}: {m['reason']}" for m in record["missing"]
    ]
    lines.append("")
  return "\n".join(lines)


def summary(stats: Dict, results: Dict) -> str:
  parts = []
  for setting, s in stats.items():
    by_row = results.get(setting, {})
    if not by_row:
      continue
    best = max(
      by_row, key=lambda row: s["rows"][row]["metrics"].get("ndcg@20", {}).get("mean") or -1.0
    )
    part = f"{setting}: best NDCG@20 {best}"
    for pair in s["pairs"]:
      d = pair["metrics"].get("recall@20")
      if d and d["n"]:
        ci = "" if d["ci"] is None else f" {common.interval(d['ci'])}"
        part += f", {pair['label']} R@20 {common.signed(d['mean'])}{ci} n={d['n']} {d['verdict']}"
    parts.append(part)
  return "; ".join(parts) or "no finished run"


def plot_popularity(results: Dict, setting: str, rows: Sequence[str], path: pathlib.Path) -> bool:
  """Recall@20 by the target's popularity decile: mean ± s.e. over seeds, one line per row."""
  series = []
  for row in rows:
    runs = results.get(setting, {}).get(row, {}).values()
    curves = [
      r["popularity"]["recall@20"] for r in runs if (r.get("popularity") or {}).get("recall@20")
    ]
    if curves:
      series.append((row, curves))
  if not series:
    return False
  fig, ax = pyplot().subplots(figsize=(8, 4))
  width = 0.6 / len(series)
  for i, (row, curves) in enumerate(series):
    stats = [mean_se([c[b] for c in curves]) for b in range(min(len(c) for c in curves))]
    ax.errorbar(
      [b + (i - (len(series) - 1) / 2) * width for b in range(len(stats))],
      [st["mean"] for st in stats],
      yerr=[st["se"] or 0.0 for st in stats],
      fmt="o-",
      ms=3,
      capsize=2,
      label=f"{label(row)} (n={len(curves)})",
    )
  ax.set(
    xlabel="target popularity decile (0 = most popular items)",
    ylabel="Recall@20 (exact), mean ± s.e.",
    title=f"{setting}: recall by popularity decile",
  )
  ax.legend(fontsize=7)
  save(fig, path, dpi=110)
  return True


def plot_curves(results: Dict, setting: str, rows: Sequence[str], path: pathlib.Path) -> bool:
  """Validation Recall@20 and NDCG@10 against training step: at each step, mean ± s.e. over the
  seeds that reached it (a band), one line per row."""
  drawn: Dict[str, list] = {key: [] for key in CURVES}  # (label, steps, mean, s.e.) per row
  for row in rows:
    runs = results.get(setting, {}).get(row, {})
    for key in CURVES:
      by_step: Dict[int, List[float]] = {}
      for h in (h for r in runs.values() for h in r.get("curve", []) if key in h):
        by_step.setdefault(h["step"], []).append(h[key])
      stats = [mean_se(by_step[step]) for step in sorted(by_step)]
      if stats:
        mean, se = [st["mean"] for st in stats], [st["se"] or 0.0 for st in stats]
        drawn[key].append((f"{label(row)} (n={len(runs)})", sorted(by_step), mean, se))
  if not any(drawn.values()):
    return False
  fig, axes = pyplot().subplots(1, len(CURVES), figsize=(12, 4))
  for ax, (key, lines) in zip(axes, drawn.items()):
    for name, steps, mean, se in lines:
      (line,) = ax.plot(steps, mean, "-", label=name)
      low, high = [m - e for m, e in zip(mean, se)], [m + e for m, e in zip(mean, se)]
      ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
    name = key[len("val_") :]
    ax.set(
      xlabel="training step", ylabel=f"validation {name}, mean ± s.e.", title=f"{setting}: {name}"
    )
    ax.legend(fontsize=7)
  save(fig, path, dpi=110)
  return True


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
    arms = subfolders(runs / setting)
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
  runs: str,
  out: Optional[str],
  settings: Sequence[str],
  rows: Sequence[str],
  seeds: Optional[List[int]],
  equivalence_margin: float,
  title: str,
  docs_dir: Optional[str],
  command: str,
) -> Tuple[str, str]:
  """Writes the report of the runs under ``runs`` to ``out`` (default: ``runs``), the flags of the
  same names (bench/README.md); (the markdown, the summary line)."""
  folder = pathlib.Path(runs)
  to = pathlib.Path(out) if out else folder
  # a setting's folder holds arms with seed<s> folders (a pinned checkout, src_<commit>, and the
  # arrangements' trees do not)
  settings = list(settings) or [s for s in subfolders(folder) if seed_folders(folder / s, "*/")]
  results, missing, order = _collect(folder, settings, rows, seeds)
  stats = statistics(results, settings, order, equivalence_margin)
  plots: Dict[str, List[str]] = {}
  for setting in settings:
    for kind, plot in (("learning_curves", plot_curves), ("recall_by_popularity", plot_popularity)):
      if plot(results, setting, order, to / f"{kind}_{setting}.png"):
        plots.setdefault(setting, []).append(f"{kind}_{setting}.png")
  records = [r for s in settings for row in order for r in results.get(s, {}).get(row, {}).values()]
  record: Dict[str, Any] = dict(runs=str(folder), command=command, settings=settings, rows=order)
  record.update(statistics=stats, records=records, missing=missing)
  md = markdown(record, results, plots, title or folder.name, equivalence_margin)
  common.write(to, {"table1.md": md, "table1.json": json.dumps(record, indent=2)})
  if docs_dir:
    pathlib.Path(docs_dir).mkdir(parents=True, exist_ok=True)
    for name in ["table1.md"] + [n for names in plots.values() for n in names]:
      shutil.copy(to / name, pathlib.Path(docs_dir) / name)
  summary_line = f"{len(records)} finished runs, {len(missing)} missing; {summary(stats, results)}"
  return md, f"{summary_line}; table in {to / 'table1.md'}"


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = common.parser("table1", __doc__, FLAGS, epilog=True)
  args = parser.parse_args(argv)
  if not pathlib.Path(args.runs).is_dir():
    parser.error(f"--runs: no folder {pathlib.Path(args.runs)}")
  try:
    args.seeds = [int(s) for s in args.seeds] or None
  except ValueError:
    parser.error(f"--seeds must be integers, got {args.seeds}")
  md, line = report(**vars(args), command=f"`{common.command_line('table1', argv)}`")
  print(md)
  print(f"SUMMARY table1: {line}")
  return 0
