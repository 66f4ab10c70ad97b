"""The plots of a Table 1 reproduction: validation curves and recall by popularity decile,
mean ± s.e. over seeds, one line per row."""

from __future__ import annotations

import pathlib
from typing import Dict, List, Sequence

from bench.table1.rows import CURVES, ROWS
from eval.paired_stats import mean_se


def _pyplot():
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  return plt


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
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(8, 4))
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
      label=f"{ROWS[row][0]} (n={len(curves)})",
    )
  ax.set_xlabel("target popularity decile (0 = most popular items)")
  ax.set_ylabel("Recall@20 (exact), mean ± s.e.")
  ax.set_title(f"{setting}: recall by popularity decile")
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
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
  plt = _pyplot()
  fig, axes = plt.subplots(1, len(CURVES), figsize=(12, 4))
  for ax, key in zip(axes, CURVES):
    for row, n, by_key in drawn:
      points = by_key.get(key)
      if not points:
        continue
      steps = [p[0] for p in points]
      mean = [p[1]["mean"] for p in points]
      se = [p[1]["se"] or 0.0 for p in points]
      (line,) = ax.plot(steps, mean, "-", label=f"{ROWS[row][0]} (n={n})")
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
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return True
