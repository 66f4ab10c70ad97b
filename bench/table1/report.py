"""The report of a Table 1 reproduction: per-row statistics over seeds, paired differences with
their intervals and verdicts (`eval.paired_stats`), the markdown and the one-line summary."""

from __future__ import annotations

import os
import pathlib
import subprocess
from typing import Dict, List, Optional, Sequence

import numpy as np

from bench.table1.rows import METRIC_NAMES, METRICS, PAPER, ROWS, paired_rows, train_binary
from eval.paired_stats import CONFIDENCE, mean_se, paired_difference

# Practical margin of the paired verdicts, relative to the second row's mean (--equivalence_margin).
EQUIVALENCE_MARGIN = 0.02


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
        label=ROWS[row][0] if row in ROWS else row,
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
    for first, second, label in paired_rows(rows):
      a, b = by_row.get(first, {}), by_row.get(second, {})
      pair = dict(
        first=first,
        second=second,
        label=label,
        unpaired={first: sorted(set(a) - set(b)), second: sorted(set(b) - set(a))},
        metrics={},
      )
      for m in metrics:
        av = {s: r["metrics"][m] for s, r in a.items() if m in r["metrics"]}
        bv = {s: r["metrics"][m] for s, r in b.items() if m in r["metrics"]}
        common = sorted(set(av) & set(bv))
        absolute = (
          margin * abs(float(np.mean([bv[s] for s in common]))) if margin > 0 and common else None
        )
        pair["metrics"][m] = paired_difference(av, bv, margin=absolute)
      pair_stats.append(pair)
    stats[setting] = dict(metrics=metrics, rows=row_stats, pairs=pair_stats)
  return stats


def _fmt(stats: dict) -> str:
  if stats["mean"] is None:
    return "—"
  if stats["se"] is None:
    return f"{stats['mean']:.4f}"
  return f"{stats['mean']:.4f} ± {stats['se']:.4f}"


def _where() -> str:
  """Where this invocation ran: the repository root or its working directory."""
  root = pathlib.Path(__file__).resolve().parents[2]
  cwd = pathlib.Path.cwd().resolve()
  return "the repository root" if cwd == root else f"`{cwd}`"


def _commit() -> Optional[str]:
  """The repository's commit, and whether tracked files differ from it (best effort, read-only:
  GIT_OPTIONAL_LOCKS=0 keeps `git status` from refreshing the index)."""
  root = pathlib.Path(__file__).resolve().parents[2]
  env = dict(os.environ, GIT_OPTIONAL_LOCKS="0")
  try:
    head = subprocess.run(
      ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
      env=env,
      capture_output=True,
      text=True,
      timeout=30,
      check=True,
    ).stdout.strip()
    dirty = subprocess.run(
      ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
      env=env,
      capture_output=True,
      text=True,
      timeout=30,
      check=True,
    ).stdout.strip()
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


def _steps(stats: dict) -> str:
  """Mean ± s.e. of a step count over seeds ("—" when unknown)."""
  if stats["mean"] is None:
    return "—"
  return f"{stats['mean']:.0f}" + ("" if stats["se"] is None else f" ± {stats['se']:.0f}")


def _signed(v: float) -> str:
  return f"{v:+.4f}"


def markdown(
  title: str,
  stats: Dict,
  results: Dict,
  settings: Sequence[str],
  rows: Sequence[str],
  missing: List[dict],
  failures: List[str],
  plots: Dict[str, List[str]],
  margin: float = 0.0,
  command: str = "",
) -> str:
  """The report: title, how to read it, per setting the rows' table and the paired differences,
  the shared training flags and the plots; then the failed and missing runs. ``command``: the
  command line that wrote it."""
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
      cells += [_fmt(r["metrics"][m]) for m in metrics]
      paper = r["paper"]
      cells += [
        f"{paper['recall@20']:.4f}" if paper else "—",
        f"{paper['ndcg@20']:.4f}" if paper else "—",
        "—" if r["train_minutes"] is None else f"{r['train_minutes']:.1f}",
        _steps(r["best_step"]),
        _steps(r["steps"]),
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
            mean = _signed(d["mean"]) + ("" if d["se"] is None else f" ± {d['se']:.4f}")
            ci = "—" if d["ci"] is None else f"[{_signed(d['ci'][0])}, {_signed(d['ci'][1])}]"
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
  if failures:
    lines += ["Failed runs:", ""] + [f"- {f}" for f in failures] + [""]
  if missing:
    lines += ["Missing runs (not in the tables):", ""]
    lines += [f"- {m['setting']}/{m['row']}/seed{m['seed']}: {m['reason']}" for m in missing]
    lines.append("")
  return "\n".join(lines)


def _binaries(by_row: Dict) -> List:
  """(command, " (which rows)") per binary that trained the rows of one setting, tf-keras's
  first; only tf-keras rows: no list of rows."""
  groups = {}
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
        ci = "" if d["ci"] is None else f" [{_signed(d['ci'][0])}, {_signed(d['ci'][1])}]"
        part += f", {pair['label']} R@20 {_signed(d['mean'])}{ci} n={d['n']} {d['verdict']}"
    parts.append(part)
  return "; ".join(parts) or "no finished run"
