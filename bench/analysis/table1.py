r"""The Table 1 report of finished runs: every row's metrics over its seeds and the paired
differences between rows, with their intervals and verdicts, plus the curves and popularity plots.

    python -m bench.analysis table1 --runs=bench/out/table1_cpu
    python -m bench.analysis table1 --runs=bench/out/xbatch_ml1m_cpu --docs_dir=docs/results/x
    python -m bench.analysis table1 --runs=bench/out/reproduce/full   # an older tree's level

The statistics, flags and outputs: bench/README.md, section `The paper's Table 1`.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench.analysis import common
from bench.analysis.runs import CURVES, collect, subfolders
from bench.common.plot import pyplot, save
from bench.launch.rows import KERAS3_ROWS, PAPER, label, train_binary
from eval.paired_stats import CONFIDENCE, mean_se

__all__ = ["arms_as_rows", "main", "paired_rows", "report"]

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Practical margin of the paired verdicts, relative to the second row's mean (--equivalence_margin).
EQUIVALENCE_MARGIN = 0.02
# The metrics reported (those a run's eval_results.json holds), in table order, and their names.
METRIC_NAMES = {
  "recall@10": "R@10",
  "recall@20": "R@20",
  "ndcg@10": "NDCG@10",
  "ndcg@20": "NDCG@20",
  "recall@100": "R@100",
}
METRICS = tuple(METRIC_NAMES)
# The paired differences: (family_first − family_second) for every family, where both rows exist.
PAIR_FAMILIES = ("mixed", "inbatch", "mixed_expected_count")
PAIR_CONTRASTS = (("corrected", "standard"), ("corrected", "none"), ("standard", "none"))
# The log Q convention of the deduplicated in-batch half, at equal correction.
CONVENTION_PAIRS = tuple(
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


def paired_rows(rows: Sequence[str]) -> List[tuple]:
  """(first row, second row, label) of every pair of PAIR_FAMILIES x PAIR_CONTRASTS and of
  CONVENTION_PAIRS whose two rows are both in `rows`, within the rows of one binary (suffix
  "" or "_keras3_B"), then the OTHER_PAIRS there."""
  pairs = []
  for suffix in BINARY_SUFFIXES:
    tag = f" (Keras 3 {suffix.rsplit('_', 1)[1].upper()})" if suffix else ""
    for family in PAIR_FAMILIES:
      for first, second in PAIR_CONTRASTS:
        a, b = f"{family}_{first}{suffix}", f"{family}_{second}{suffix}"
        if a in rows and b in rows:
          pairs.append((a, b, f"{family}: {first} − {second}{tag}"))
    for a, b, text in CONVENTION_PAIRS:
      if a + suffix in rows and b + suffix in rows:
        pairs.append((a + suffix, b + suffix, text + tag))
  pairs += [(a, b, text) for a, b, text in OTHER_PAIRS if a in rows and b in rows]
  return pairs


def statistics(
  results: Dict, settings: Sequence[str], rows: Sequence[str], margin: float = EQUIVALENCE_MARGIN
) -> Dict:
  """Per setting: every row's mean ± s.e. of each metric, and the paired differences."""
  stats = {}
  for setting in settings:
    by_row = results.get(setting, {})
    metrics = [
      m
      for m in METRICS
      if any(m in r["metrics"] for runs in by_row.values() for r in runs.values())
    ]
    paper = PAPER.get(setting, {})
    row_stats = {}
    for row in rows:
      runs = by_row.get(row, {})
      row_stats[row] = dict(
        label=label(row),
        seeds=sorted(runs),
        metrics={
          m: mean_se([r["metrics"][m] for r in runs.values() if m in r["metrics"]]) for m in metrics
        },
        train_minutes=mean_se(
          [r["train_seconds"] / 60 for r in runs.values() if r.get("train_seconds")]
        )["mean"],
        best_step=mean_se(
          [r["best_step"] for r in runs.values() if r.get("best_step") is not None]
        ),
        steps=mean_se(
          [r["global_step"] for r in runs.values() if r.get("global_step") is not None]
        ),
        paper=(dict(zip(("recall@20", "ndcg@20"), paper[row])) if row in paper else None),
      )
    pair_stats = []
    for first, second, name in paired_rows(rows):
      a, b = by_row.get(first, {}), by_row.get(second, {})
      pair: Dict[str, Any] = dict(
        first=first,
        second=second,
        label=name,
        unpaired={first: sorted(set(a) - set(b)), second: sorted(set(b) - set(a))},
        metrics={},
      )
      for m in metrics:
        pair["metrics"][m] = common.paired(common.values(a, m), common.values(b, m), margin)
      pair_stats.append(pair)
    stats[setting] = dict(metrics=metrics, rows=row_stats, pairs=pair_stats)
  return stats


def _where() -> str:
  """Where this invocation ran: the repository root or its working directory."""
  cwd = pathlib.Path.cwd().resolve()
  return "the repository root" if cwd == ROOT else f"`{cwd}`"


def _commit() -> Optional[str]:
  """The repository's commit, and whether tracked files differ from it (best effort, read-only:
  GIT_OPTIONAL_LOCKS=0 keeps `git status` from refreshing the index)."""
  env = dict(os.environ, GIT_OPTIONAL_LOCKS="0")

  def git(*args: str) -> str:
    command = ["git", "-C", str(ROOT), *args]
    return subprocess.run(
      command, env=env, capture_output=True, text=True, timeout=30, check=True
    ).stdout.strip()

  try:
    head = git("rev-parse", "--short", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
  except (OSError, subprocess.SubprocessError):
    return None
  return head + (" (with uncommitted changes)" if dirty else "")


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


def markdown(
  title: str,
  stats: Dict,
  results: Dict,
  settings: Sequence[str],
  rows: Sequence[str],
  missing: List[dict],
  plots: Dict[str, List[str]],
  margin: float = 0.0,
  command: str = "",
) -> str:
  """The report: title, how to read it, per setting the rows' table and the paired differences,
  the shared training flags and the plots; then the missing runs. ``command``: the command line
  that wrote it."""
  commit = _commit()
  lines = [
    f"# Table 1 report: {title}",
    "",
    f"Written by {command} (run from {_where()})"
    + (f" at commit {commit}" if commit else "")
    + ".",
    "",
    HOW_TO_READ.format(margin=f"{margin:.0%}" if margin > 0 else "0 (off)"),
    "",
  ]
  for setting in settings:
    s = stats[setting]
    metrics = s["metrics"]
    lines += [f"## {setting}", ""]
    if not metrics:
      lines += ["No finished run.", ""]
      continue
    names = [METRIC_NAMES[m] for m in metrics]
    lines += [
      "| row | seeds | " + " | ".join(names) + " | paper R@20 | paper NDCG@20 | "
      "train min/run | steps to best | steps run |",
      "|---|---|" + "---|" * (len(names) + 5),
    ]
    for row in rows:
      r = s["rows"][row]
      seeds = ",".join(str(x) for x in r["seeds"])
      cells = [f"{len(r['seeds'])} ({seeds})" if seeds else "0"]
      cells += [common.mean_se(r["metrics"][m]) for m in metrics]
      paper = r["paper"]
      cells += [
        f"{paper['recall@20']:.4f}" if paper else "—",
        f"{paper['ndcg@20']:.4f}" if paper else "—",
        "—" if r["train_minutes"] is None else f"{r['train_minutes']:.1f}",
        common.mean_se(r["best_step"], digits=0),
        common.mean_se(r["steps"], digits=0),
      ]
      lines.append(f"| {r['label']} | " + " | ".join(cells) + " |")
    lines.append("")
    if s["pairs"]:
      lines += [
        f"Paired differences (same seed), {CONFIDENCE:.0%} interval:",
        "",
        "| difference | metric | seeds | mean ± s.e. | 95% CI | positive | verdict |",
        "|---|---|---|---|---|---|---|",
      ]
      notes = []
      for pair in s["pairs"]:
        for m in metrics:
          d = pair["metrics"][m]
          if d["n"] == 0:
            mean, ci = "—", "—"
          else:
            mean = common.signed(d["mean"]) + ("" if d["se"] is None else f" ± {d['se']:.4f}")
            ci = "—" if d["ci"] is None else common.interval(d["ci"])
          lines.append(
            f"| {pair['label']} | {METRIC_NAMES[m]} | {d['n']} | {mean} | {ci} | "
            f"{d['positive']}/{d['n']} | {d['verdict']} |"
          )
        for row, alone in pair["unpaired"].items():
          if alone:
            other = pair["second"] if row == pair["first"] else pair["first"]
            notes.append(
              f"- {pair['label']}: seed(s) {', '.join(map(str, alone))} of {row} "
              f"have no run of {other}: left out of the pair."
            )
      lines.append("")
      if notes:
        lines += notes + [""]
    flag_lists = [
      r.get("train_flags") for runs in results.get(setting, {}).values() for r in runs.values()
    ]
    if flag_lists and all(flag_lists):
      shared = " ".join(f for f in flag_lists[0] if all(f in other for other in flag_lists[1:]))
      binaries = _binaries(results.get(setting, {}))
      lines += [
        "Training flags shared by every run above (from each run's train_metrics.json; "
        "the row's loss, negatives, logq, seed and folders complete each command): "
        + "; ".join(f"`{binary} {shared}`{who}" for binary, who in binaries),
        "",
      ]
    for name in plots.get(setting, []):
      lines += [f"![{name}]({name})", ""]
  if missing:
    lines += ["Missing runs (not in the tables):", ""]
    lines += [f"- {m['setting']}/{m['row']}/seed{m['seed']}: {m['reason']}" for m in missing]
    lines.append("")
  return "\n".join(lines)


def _binaries(by_row: Dict) -> List:
  """(command, " (which rows)") per binary that trained the rows of one setting, tf-keras's
  first; only tf-keras rows: no list of rows."""
  groups: Dict[str, List[str]] = {}
  for row in by_row:
    groups.setdefault(" ".join(["python", *train_binary(row)]), []).append(row)
  if list(groups) == ["python -m train"]:
    return [("python -m train", "")]
  return [
    (command, f" ({', '.join(rows)})")
    for command, rows in sorted(groups.items(), key=lambda g: g[0] != "python -m train")
  ]


def summary(stats: Dict, results: Dict) -> str:
  parts = []
  for setting, s in stats.items():
    by_row = results.get(setting, {})
    if not by_row:
      continue
    best = max(
      by_row,
      key=lambda row: s["rows"][row]["metrics"].get("ndcg@20", {"mean": None})["mean"] or -1.0,
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
    curves = [
      r["popularity"]["recall@20"]
      for r in results.get(setting, {}).get(row, {}).values()
      if (r.get("popularity") or {}).get("recall@20")
    ]
    if curves:
      series.append((row, curves))
  if not series:
    return False
  fig, ax = pyplot().subplots(figsize=(8, 4))
  width = 0.6 / max(len(series), 1)
  for i, (row, curves) in enumerate(series):
    bins = min(len(c) for c in curves)
    stats = [mean_se([c[b] for c in curves]) for b in range(bins)]
    x = [b + (i - (len(series) - 1) / 2) * width for b in range(bins)]
    ax.errorbar(
      x,
      [st["mean"] for st in stats],
      yerr=[st["se"] or 0.0 for st in stats],
      fmt="o-",
      ms=3,
      capsize=2,
      label=f"{label(row)} (n={len(curves)})",
    )
  ax.set_xlabel("target popularity decile (0 = most popular items)")
  ax.set_ylabel("Recall@20 (exact), mean ± s.e.")
  ax.set_title(f"{setting}: recall by popularity decile")
  ax.legend(fontsize=7)
  save(fig, path, dpi=110)
  return True


def plot_curves(results: Dict, setting: str, rows: Sequence[str], path: pathlib.Path) -> bool:
  """Validation Recall@20 and NDCG@10 against training step: at each step, mean ± s.e. over the
  seeds that reached it (a band), one line per row."""
  drawn = []
  for row in rows:
    runs = results.get(setting, {}).get(row, {})
    by_key = {}
    for key in CURVES:
      by_step: Dict[int, List[float]] = {}
      for r in runs.values():
        for h in r.get("curve", []):
          if key in h:
            by_step.setdefault(h["step"], []).append(h[key])
      if by_step:
        by_key[key] = sorted((step, mean_se(v)) for step, v in by_step.items())
    if by_key:
      drawn.append((row, len(runs), by_key))
  if not drawn:
    return False
  fig, axes = pyplot().subplots(1, len(CURVES), figsize=(12, 4))
  for ax, key in zip(axes, CURVES):
    for row, n, by_key in drawn:
      points = by_key.get(key)
      if not points:
        continue
      steps = [p[0] for p in points]
      mean = [p[1]["mean"] for p in points]
      se = [p[1]["se"] or 0.0 for p in points]
      (line,) = ax.plot(steps, mean, "-", label=f"{label(row)} (n={n})")
      ax.fill_between(
        steps,
        [m - e for m, e in zip(mean, se)],
        [m + e for m, e in zip(mean, se)],
        color=line.get_color(),
        alpha=0.2,
      )
    ax.set_xlabel("training step")
    ax.set_ylabel(f"validation {key[len('val_') :]}, mean ± s.e.")
    ax.set_title(f"{setting}: {key[len('val_') :]}")
    ax.legend(fontsize=7)
  save(fig, path, dpi=110)
  return True


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
  settings = list(settings) or [s for s in subfolders(runs) if _holds_runs(runs / s)]
  results, missing, order = _collect(runs, settings, rows, seeds)
  stats = statistics(results, settings, order, margin=margin)
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
    plots,
    margin=margin,
    command=command,
  )
  records = [r for s in settings for row in order for r in results.get(s, {}).get(row, {}).values()]
  summary_json = dict(
    runs=str(runs),
    command=command,
    settings=settings,
    rows=order,
    statistics=stats,
    records=records,
    missing=missing,
  )
  common.write(out, {"table1.md": md, "table1.json": json.dumps(summary_json, indent=2)})
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
  parser = common.argument_parser("table1", __doc__, epilog=True)
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
  command = f"`{common.command_line('table1', argv)}`"
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
