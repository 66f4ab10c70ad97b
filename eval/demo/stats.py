"""The demo's statistics over paired seeds: mean ± s.e., paired differences (both by
`eval.paired_stats`) and the summary dict that `eval.demo.run` writes to summary.json."""

from typing import Dict, List, Sequence

import numpy as np

from eval import paired_stats
from eval.demo.config import LABELS, RowSpec

__all__ = ["mean_and_se", "paired_difference", "summarise"]


def _nan_if_none(value, like):
  """summary.json's mark of a spread one seed cannot give: nan, in the shape of the mean."""
  return np.full(np.shape(like), np.nan) if value is None else value


def mean_and_se(values) -> tuple:
  """(mean, standard error sd / sqrt(S)) along axis 0 (``paired_stats.mean_se``); the s.e. is
  nan for one seed."""
  stats = paired_stats.mean_se(values)
  return stats["mean"], _nan_if_none(stats["se"], stats["mean"])


def paired_difference(a, b) -> tuple:
  """(mean of a - b, 95% half-width t_{0.975, S-1} sd / sqrt(S)) over the seeds, paired by
  position, along axis 0 (``paired_stats.paired_difference``); the half-width is nan for one
  seed."""
  stats = paired_stats.paired_difference(a, b)
  return stats["mean"], _nan_if_none(stats["half_width"], stats["mean"])


_SCALARS = ("kl", "recall_vs_oracle", "hit_rate", "hit_rate_tail", "calibration_head")
_VECTORS = ("hit_rate_by_bin", "calibration_by_bin", "calibration_by_rank")


def _aggregate(results: List[Dict]) -> Dict:
  agg = {}
  for key in _SCALARS + _VECTORS:
    mean, se = mean_and_se([r[key] for r in results])
    agg[key] = {"mean": np.asarray(mean).tolist(), "se": np.asarray(se).tolist()}
  return agg


def _pairs(rows: Sequence[RowSpec]):
  """(corrected, standard) and (corrected, none) pairs of the same negatives / convention."""
  names = {r.name for r in rows}
  pairs = []
  for r in rows:
    if r.source == "full" or r.correction != "corrected":
      continue
    standard = r._replace(correction="standard")
    none = RowSpec(r.source, "none")
    if standard.name in names:
      pairs.append((r, standard))
    if none.name in names and r.convention == "unigram":
      pairs.append((r, none))
  for r in rows:  # a convention against the paper's, same correction
    if r.source != "full" and r.convention != "unigram":
      paper = r._replace(convention="unigram")
      if paper.name in names:
        pairs.append((r, paper))
  return pairs


def summarise(cfg, per_seed, references, curve, curve_steps) -> Dict:
  rows = {
    r.name: {"label": r.label, "per_seed": per_seed[r.name], **_aggregate(per_seed[r.name])}
    for r in cfg.rows
  }
  refs = {name: {"label": name, **_aggregate(res)} for name, res in references.items()}
  diffs = []
  for a, b in _pairs(cfg.rows):
    neg = LABELS[a.source]
    if a.correction != b.correction:
      kind, context = "correction", f"{neg}, {a.convention} log Q"
      label = f"{a.correction} − {b.correction} ({context})"
    else:
      kind, context = "convention", f"{neg}, {a.correction}"
      label = f"{a.convention} − {b.convention} log Q ({context})"
    entry = {"a": a.name, "b": b.name, "kind": kind, "context": context, "label": label}
    for key in _SCALARS + _VECTORS:
      mean, half = paired_difference(
        [x[key] for x in per_seed[a.name]], [x[key] for x in per_seed[b.name]]
      )
      entry[key] = {"mean": np.asarray(mean).tolist(), "ci95": np.asarray(half).tolist()}
    if curve_steps:  # the KL difference along training (learning-curve users)
      mean, half = paired_difference(curve[a.name], curve[b.name])
      entry["kl_curve"] = {"mean": np.asarray(mean).tolist(), "ci95": np.asarray(half).tolist()}
    diffs.append(entry)
  return {
    "rows": rows,
    "references": refs,
    "paired_differences": diffs,
    "learning_curve": {"steps": curve_steps, "kl": curve},
    "seeds": list(cfg.seeds),
    "k": cfg.k,
    "evaluated_on": (
      "held-out users" if cfg.user_tower == "features" else "the training users (held-out draws)"
    ),
  }
