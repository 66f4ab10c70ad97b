"""The demo's report: the printed table, summary.md and the verdicts, from the summary dict of
`eval.demo.run` (`eval.demo.stats.summarise`)."""

import json
from typing import List

import numpy as np

__all__ = ["verdicts", "format_table", "format_markdown"]


def _pm(stat, key, fmt="{:.3f}", index=None):
  mean, se = stat[key]["mean"], stat[key]["se"]
  if index is not None:
    mean, se = mean[index], se[index]
  text = fmt.format(mean)
  if se is None or not np.isfinite(se):
    return text
  return f"{text} ± {fmt.replace('+', '').format(se)}"


def _ci(entry, key, index=None, fmt="{:+.3f}"):
  mean, half = entry[key]["mean"], entry[key]["ci95"]
  if index is not None:
    mean, half = mean[index], half[index]
  if half is None or not np.isfinite(half):
    return fmt.format(mean)
  return f"{fmt.format(mean)} [{fmt.format(mean - half)}, {fmt.format(mean + half)}]"


def _table_rows(summary):
  k = summary["k"]
  header = [
    "row",
    "KL(P‖P̂) ↓",
    f"R@{k} vs oracle ↑",
    f"HR@{k} ↑",
    f"HR@{k} decile 1",
    f"HR@{k} deciles 2–10",
    "log P̂/P top 1%",
  ]
  lines = []
  for stat in list(summary["rows"].values()) + list(summary["references"].values()):
    lines.append(
      [
        stat["label"],
        _pm(stat, "kl"),
        _pm(stat, "recall_vs_oracle"),
        _pm(stat, "hit_rate"),
        _pm(stat, "hit_rate_by_bin", index=0),
        _pm(stat, "hit_rate_tail"),
        _pm(stat, "calibration_head", "{:+.2f}"),
      ]
    )
  return header, lines


def _ranges(values: List[int]) -> str:
  """[2, 3, 4, 7] -> '2–4, 7'."""
  out, i = [], 0
  while i < len(values):
    j = i
    while j + 1 < len(values) and values[j + 1] == values[j] + 1:
      j += 1
    out.append(str(values[i]) if i == j else f"{values[i]}–{values[j]}")
    i = j + 1
  return ", ".join(out) or "none"


def _where(d) -> str:
  """Deciles where a's HR@k is above / below b's (95% interval excluding 0)."""
  mean = np.asarray(d["hit_rate_by_bin"]["mean"], np.float64)
  half = np.asarray(d["hit_rate_by_bin"]["ci95"], np.float64)
  ok = np.isfinite(half) & np.isfinite(mean)
  higher = [i + 1 for i in range(mean.size) if ok[i] and mean[i] - half[i] > 0]
  lower = [i + 1 for i in range(mean.size) if ok[i] and mean[i] + half[i] < 0]
  return f"higher {_ranges(higher)}; lower {_ranges(lower)}"


def _difference_rows(summary):
  k = summary["k"]
  header = [
    "paired difference (95% interval)",
    "ΔKL",
    f"ΔR@{k} vs oracle",
    f"ΔHR@{k}",
    f"HR@{k} by decile",
  ]
  lines = [
    [d["label"], _ci(d, "kl"), _ci(d, "recall_vs_oracle"), _ci(d, "hit_rate"), _where(d)]
    for d in summary["paired_differences"]
  ]
  return header, lines


def verdicts(summary) -> List[str]:
  """One plain sentence per corrected − standard pair: who is closer to the truth, and where."""
  k = summary["k"]
  out = []
  for d in summary["paired_differences"]:
    if d["kind"] != "correction" or d["b"].split(":")[1] != "standard":
      continue
    mean, half = d["kl"]["mean"], d["kl"]["ci95"]
    if not np.isfinite(half):
      head = f"{d['context']}: one seed, no interval: corrected − standard KL {mean:+.3f}"
    elif mean + half < 0:
      head = f"{d['context']}: corrected is ahead of standard (KL {_ci(d, 'kl')})"
    elif mean - half > 0:
      head = (
        f"{d['context']}: corrected is NOT ahead — standard is closer to the truth "
        f"(KL {_ci(d, 'kl')})"
      )
    else:
      head = (
        f"{d['context']}: corrected and standard do not differ beyond seed noise "
        f"(KL {_ci(d, 'kl')})"
      )
    out.append(f"{head}; corrected's HR@{k} by popularity decile: {_where(d)}.")
  return out


def _text_table(header, lines) -> List[str]:
  widths = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(header)]
  fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
  return [fmt(header), "  ".join("-" * w for w in widths)] + [fmt(l) for l in lines]


def _md_table(header, lines) -> List[str]:
  return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
    "| " + " | ".join(l) + " |" for l in lines
  ]


def format_table(summary) -> str:
  n = len(summary["seeds"])
  text = _text_table(*_table_rows(summary))
  text.append(
    f"(mean ± s.e. over {n} paired seed{'s' if n > 1 else ''}, "
    f"{summary['evaluated_on']}; "
    f"HR@k: probability that a held-out draw is retrieved, the oracle's is the "
    f"maximum; log P̂/P top 1%: calibration on the most popular 1% of items)"
  )
  if summary["paired_differences"]:
    text += [""] + _text_table(*_difference_rows(summary))
  text += [""] + ["verdict: " + v for v in verdicts(summary)]
  return "\n".join(text)


def format_markdown(summary) -> str:
  header, lines = _table_rows(summary)
  k, bins = summary["k"], len(summary["references"]["oracle"]["hit_rate_by_bin"]["mean"])
  md = [
    "# Demo: corrected vs standard logQ in a world that knows P(d|u)",
    "",
    f"World: {summary['world']['stats']}.",
    "",
  ] + _md_table(header, lines)
  md += [
    "",
    f"Mean ± standard error over seeds {summary['seeds']} (paired: same seed, same "
    f"initialisation and data for every row), on {summary['evaluated_on']}. HR@k: the "
    "probability that a held-out draw is in the top k (the oracle's is the maximum); "
    "log P̂/P top 1%: calibration on the most popular 1% of items.",
    "",
    "## Paired differences (95% interval over seeds)",
    "",
  ]
  md += _md_table(*_difference_rows(summary))
  md += [""] + ["- " + v for v in verdicts(summary)]
  md += [
    "",
    f"## HR@{k} by popularity decile of the held-out draw (1 = most popular)",
    "",
    "| row | " + " | ".join(str(i + 1) for i in range(bins)) + " |",
    "|" + "---|" * (bins + 1),
  ]
  for stat in list(summary["rows"].values()) + list(summary["references"].values()):
    md.append(
      f"| {stat['label']} | "
      + " | ".join(f"{v:.3f}" for v in stat["hit_rate_by_bin"]["mean"])
      + " |"
    )
  md += [
    "",
    "## Calibration: E[log P̂(d|u) − log P(d|u)] over held-out draws, by decile",
    "",
    "| row | " + " | ".join(str(i + 1) for i in range(bins)) + " |",
    "|" + "---|" * (bins + 1),
  ]
  for stat in summary["rows"].values():
    md.append(
      f"| {stat['label']} | "
      + " | ".join(f"{v:+.2f}" for v in stat["calibration_by_bin"]["mean"])
      + " |"
    )
  labels = summary["world"]["rank_bins"]
  md += [
    "",
    "The same by popularity rank of the item (finer at the head, where "
    "standard logQ's bias ≈ P(p|u) / (1 − P(p|u)) is predicted):",
    "",
    "| row | " + " | ".join(labels) + " |",
    "|" + "---|" * (len(labels) + 1),
  ]
  for stat in summary["rows"].values():
    md.append(
      f"| {stat['label']} | "
      + " | ".join(f"{v:+.2f}" for v in stat["calibration_by_rank"]["mean"])
      + " |"
    )
  md += [
    "",
    f"Training {summary['seconds']['train']:.0f} s, total "
    f"{summary['seconds']['total']:.0f} s. Configuration: `{json.dumps(summary['config'])}`",
  ]
  return "\n".join(md) + "\n"
