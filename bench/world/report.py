r"""The report of bench/world_scale.py: rows over seeds, paired differences, the gap to full
softmax, the step cost against mixed, the recall@k plot; across the settings folders of one
--out, corrected − standard per setting and log-Q convention (table and plot; the statistics and
the pairs reported: bench/README.md, section `world_scale.py`).
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from bench.common.report import markdown_header, markdown_row
from bench.world.rows import CORRECTIONS, parse_row
from eval import paired_stats

__all__ = [
  "load_runs",
  "load_timing",
  "metric_values",
  "compare",
  "default_pairs",
  "gap_to_full",
  "summarise",
  "format_markdown",
  "plot_recall",
  "sweep",
  "correction_verdict",
  "format_sweep",
  "plot_sweep",
]


def load_runs(folder) -> Dict[str, Dict[int, Dict]]:
  """{row name: {seed: run JSON}} of FOLDER/runs/*.json."""
  runs: Dict[str, Dict[int, Dict]] = {}
  for path in sorted(pathlib.Path(folder, "runs").glob("*.json")):
    run = json.loads(path.read_text())
    runs.setdefault(run["row"], {})[int(run["seed"])] = run
  return runs


def load_timing(folder) -> Dict[str, Dict]:
  """{row: the latest invocation's timing of it, with its ratio to the reference}."""
  out: Dict[str, Dict] = {}
  for path in sorted(pathlib.Path(folder, "timing").glob("*.json")):
    inv = json.loads(path.read_text())
    ref = inv["rows"].get(inv.get("reference") or "", {})
    for name, t in inv["rows"].items():
      entry = dict(t, machine=inv["machine"], when=inv["when"], reference=inv.get("reference"))
      if ref.get("median_ms") and t.get("median_ms"):
        entry["ratio_median"] = t["median_ms"] / ref["median_ms"]
        entry["ratio_min"] = t["min_ms"] / ref["min_ms"]
      out[name] = entry
  return out


def metric_values(run: Dict, ks: Sequence[str]) -> Dict[str, float]:
  """The scalar metrics of a run: kl, recall@k, hr@k."""
  m = run["metrics"]
  values = {"kl": m["kl"]}
  values.update({f"recall@{k}": m["recall"][k] for k in ks})
  values.update({f"hr@{k}": m["hit_rate"][k] for k in ks})
  return values


def _ks(runs) -> List[str]:
  for seeds in runs.values():
    for run in seeds.values():
      return list(run["metrics"]["recall"])
  return []


def _fmt(x, digits=4, sign=False) -> str:
  if x is None or (isinstance(x, float) and not math.isfinite(x)):
    return "-"
  return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def compare(runs, a: str, b: str) -> Dict:
  """Paired A − B of every metric over the common seeds (bench/README.md), and the growth of
  the recall difference from k_min to k_max."""
  if a not in runs or b not in runs:
    missing = [r for r in (a, b) if r not in runs]
    raise ValueError(f"--compare: no finished runs of {missing}")
  ks = _ks(runs)
  per_seed = {row: {s: metric_values(run, ks) for s, run in runs[row].items()} for row in (a, b)}
  out = {"a": a, "b": b, "metrics": {}}
  names = list(next(iter(per_seed[a].values())))
  for name in names:
    d = paired_stats.paired_difference(
      {s: v[name] for s, v in per_seed[a].items()}, {s: v[name] for s, v in per_seed[b].items()}
    )
    out["metrics"][name] = _clean(d)
  if len(ks) > 1:
    hi, lo = f"recall@{ks[-1]}", f"recall@{ks[0]}"
    grow = lambda v: {s: x[hi] - x[lo] for s, x in v.items()}
    d = paired_stats.paired_difference(grow(per_seed[a]), grow(per_seed[b]))
    out["growth"] = dict(_clean(d), of=f"(A - B)@{ks[-1]} - (A - B)@{ks[0]} of recall")
  return out


def _clean(d: Dict) -> Dict:
  keep = ("n", "seeds", "differences", "mean", "se", "half_width", "ci", "verdict")
  return {k: d.get(k) for k in keep}


_BASELINES = {"corrected": ("standard", "none"), "standard": ("none",)}  # A's correction -> B's


def default_pairs(rows: Sequence[str]) -> List[Tuple[str, str, str]]:
  """(kind, A, B) of bench/README.md's default pairs among the given rows."""
  present = set(rows)
  pairs = []
  for name in rows:
    if name == "full":
      continue
    spec = parse_row(name)
    for other in _BASELINES.get(spec.correction, ()):
      pairs.append(("correction", name, spec._replace(correction=other).name))
    if spec.convention == "expected_count":
      pairs.append(("convention", name, spec._replace(convention="unigram").name))
  return [p for p in pairs if p[1] in present and p[2] in present]


def gap_to_full(runs, name: str) -> Optional[Dict]:
  """The share of in_batch's recall gap to full that ``name`` closes, per k (bench/README.md)."""
  if "full" not in runs or name == "full" or name.startswith("in_batch"):
    return None
  base = parse_row(name)._replace(source="in_batch", memory=0).name
  if base not in runs:
    return None
  out = {"row": name, "in_batch": base, "k": {}}
  for k in _ks(runs):
    seeds = sorted(set(runs[name]) & set(runs[base]) & set(runs["full"]))
    fractions = []
    for s in seeds:
      r = lambda row, s=s, k=k: runs[row][s]["metrics"]["recall"][k]
      gap = r("full") - r(base)
      fractions.append((r(name) - r(base)) / gap if gap != 0 else float("nan"))
    stats = paired_stats.mean_se(fractions) if fractions else {"n": 0, "mean": None, "se": None}
    half = None
    if stats["n"] and stats["n"] > 1 and stats["se"] is not None:
      half = paired_stats.t_critical(0.95, stats["n"] - 1) * stats["se"]
    out["k"][k] = dict(n=stats["n"], fractions=fractions, mean=stats["mean"], half_width=half)
  return out


def summarise(folder, compares: Sequence[Tuple[str, str]] = ()) -> Dict:
  """Everything of one settings folder: rows, pairs, gaps, timing, references."""
  folder = pathlib.Path(folder)
  runs = load_runs(folder)
  timing = load_timing(folder)
  ks = _ks(runs)
  rows = {}
  for name, seeds in runs.items():
    values = [metric_values(run, ks) for _, run in sorted(seeds.items())]
    entry = {"seeds": sorted(seeds)}
    for metric in values[0] if values else []:
      entry[metric] = paired_stats.mean_se([v[metric] for v in values])
    for name_, key in (("calibration_by_decile", None), ("mass_by_decile", "model")):
      per_seed = [run["metrics"][name_] for _, run in sorted(seeds.items())]
      arrays = [np.asarray(v[key] if key else v, np.float64) for v in per_seed]
      entry[name_] = np.mean(arrays, axis=0).tolist()
    entry["mass_truth_by_decile"] = next(iter(seeds.values()))["metrics"]["mass_by_decile"]["truth"]
    steps = [run["train"]["step_ms_median"] for run in seeds.values()]
    entry["train_step_ms_median"] = float(np.median(steps))
    entry["machine"] = next(iter(seeds.values()))["machine"]
    entry["timing"] = timing.get(name)
    rows[name] = entry
  order = sorted(rows, key=_row_order)
  pairs = [dict(compare(runs, a, b), kind=kind) for kind, a, b in default_pairs(order)]
  pairs += [dict(compare(runs, a, b), kind="asked") for a, b in compares]
  gaps = [g for g in (gap_to_full(runs, n) for n in order) if g is not None]
  refs_path = folder / "references.json"
  refs = json.loads(refs_path.read_text()) if refs_path.exists() else {}
  settings = next(iter(next(iter(runs.values())).values()))["settings"] if runs else {}
  return dict(
    folder=str(folder),
    settings=settings,
    ks=ks,
    order=order,
    rows=rows,
    pairs=pairs,
    gaps=gaps,
    references=refs,
  )


def _row_order(name: str):
  r = parse_row(name)
  source = ("full", "in_batch", "mixed", "xbatch", "midx").index(r.source)
  convention = "" if r.convention == "unigram" else r.convention
  return (source, r.memory, convention, CORRECTIONS.index(r.correction))


def _cell(stats: Dict, digits=4) -> str:
  if not stats or stats.get("mean") is None:
    return "-"
  se = stats.get("se")
  return _fmt(stats["mean"], digits) + ("" if se is None else f" ± {se:.{digits}f}")


def format_markdown(summary: Dict) -> str:
  s, ks = summary["settings"], summary["ks"]
  lines = [
    f"World: {s.get('num_items')} items, batch {s.get('batch_size')}, {s.get('steps')} steps, "
    f"k = {s.get('num_negatives') or s.get('batch_size')} negatives, Zipf {s.get('zipf')}, "
    f"tau {s.get('tau')}; {s.get('eval_users')} held-out users. Mean ± s.e. over seeds; "
    "recall@k against the oracle's top k, HR@k of a held-out draw, KL(P‖P̂) (lower is better).",
    "",
  ]
  cols = ["row", "seeds", "KL"] + [f"R@{k}" for k in ks] + [f"HR@{k}" for k in ks]
  cols += ["step ms (train)", "× mixed (median / min)"]
  lines += markdown_header(cols)
  machines = set()
  for name in summary["order"]:
    r = summary["rows"][name]
    machines.add(r["machine"])
    t = r.get("timing") or {}
    ratio = f"{t['ratio_median']:.2f} / {t['ratio_min']:.2f}" if t.get("ratio_median") else "-"
    lines.append(
      markdown_row(
        [name, str(len(r["seeds"])), _cell(r["kl"], 3)]
        + [_cell(r[f"recall@{k}"]) for k in ks]
        + [_cell(r[f"hr@{k}"]) for k in ks]
        + [_fmt(r["train_step_ms_median"], 1), ratio]
      )
    )
  for name, ref in summary.get("references", {}).items():
    lines.append(
      markdown_row(
        [f"*{name}*", "-", _fmt(ref["kl"], 3)]
        + [_fmt(ref["recall"][k]) for k in ks]
        + [_fmt(ref["hit_rate"][k]) for k in ks]
        + ["-", "-"]
      )
    )
  lines += ["", f"Step times measured on: {'; '.join(sorted(machines))}.", ""]
  lines += _decile_tables(summary)
  if summary["pairs"]:
    lines += [
      "Paired differences A − B (mean ± 95 % half-width over the common seeds; verdict).",
      "",
    ]
    cols = ["kind", "A − B", "n", "ΔKL"] + [f"ΔR@{k}" for k in ks] + ["growth ΔR"]
    lines += markdown_header(cols)
    for p in summary["pairs"]:
      m = p["metrics"]
      cells = [p["kind"], f"{p['a']} − {p['b']}", str(m["kl"]["n"]), _diff(m["kl"], 3)]
      cells += [_diff(m[f"recall@{k}"]) for k in ks]
      cells.append(_diff(p["growth"]) if "growth" in p else "-")
      lines.append(markdown_row(cells))
    lines.append("")
  if summary["gaps"]:
    lines += [
      "Share of in_batch's recall gap to full softmax closed: (X − in_batch) / (full − "
      "in_batch), mean ± 95 % half-width over seeds.",
      "",
    ]
    lines += markdown_header(["row", "vs"] + [f"R@{k}" for k in ks])
    for g in summary["gaps"]:
      cells = [g["row"], g["in_batch"]]
      for k in ks:
        e = g["k"][k]
        half = "" if e["half_width"] is None else f" ± {e['half_width']:.2f}"
        cells.append("-" if e["mean"] is None else f"{e['mean']:.2f}{half}")
      lines.append(markdown_row(cells))
    lines.append("")
  return "\n".join(lines) + "\n"


def _decile_tables(summary: Dict) -> List[str]:
  """Calibration (the demo's) and log(mass P̂ / mass P) by popularity decile, mean over seeds."""
  order = summary["order"]
  if not order:
    return []
  bins = len(summary["rows"][order[0]]["calibration_by_decile"])
  cols = ["row"] + [f"d{j + 1}" for j in range(bins)]
  lines = [
    "Calibration by popularity decile (d1 = the most popular tenth of Q(d)): the P-weighted "
    "mean of log P̂ − log P over the decile's items (> 0: over-predicted), mean over seeds.",
    "",
    *markdown_header(cols),
  ]
  for name in order:
    values = summary["rows"][name]["calibration_by_decile"]
    lines.append(markdown_row([name] + [_fmt(v, 2, sign=True) for v in values]))
  lines += [
    "",
    "Mass by popularity decile: log(E_u P̂(decile) / E_u P(decile)), mean over seeds; the "
    "truth's mass per decile in the last line.",
    "",
    *markdown_header(cols),
  ]
  for name in order:
    r = summary["rows"][name]
    cells = [
      _fmt(math.log(m / t), 2, sign=True) if m > 0 and t > 0 else "-"
      for m, t in zip(r["mass_by_decile"], r["mass_truth_by_decile"])
    ]
    lines.append(markdown_row([name] + cells))
  truth = summary["rows"][order[0]]["mass_truth_by_decile"]
  lines.append(markdown_row(["*truth's mass*"] + [f"{t:.3g}" for t in truth]))
  return lines + [""]


def _diff(d: Dict, digits: int = 4, marks: bool = True) -> str:
  if d.get("mean") is None:
    return "-"
  half = d.get("half_width")
  tail = "" if half is None else f" ± {half:.{digits}f}"
  mark = {"ahead": " ↑", "behind": " ↓"}.get(d.get("verdict"), "") if marks else ""
  return f"{d['mean']:+.{digits}f}{tail}{mark}"


def plot_recall(summary: Dict, path) -> None:
  """recall@k and HR@k against k per row (mean ± s.e. over seeds), log k."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  ks = [int(k) for k in summary["ks"]]
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
  styles = {"none": ":", "standard": "--", "standard_no_positive": "-.", "corrected": "-"}
  sources = sorted({n.split(":")[0] for n in summary["order"]})
  colours = {s: plt.cm.tab10(i % 10) for i, s in enumerate(sources)}
  for ax, metric, label in ((axes[0], "recall", "recall@k vs the oracle"), (axes[1], "hr", "HR@k")):
    for name in summary["order"]:
      r = summary["rows"][name]
      means = [r[f"{metric}@{k}"]["mean"] for k in ks]
      ses = [r[f"{metric}@{k}"]["se"] or 0.0 for k in ks]
      parts = name.split(":")
      ax.errorbar(
        ks,
        means,
        yerr=ses,
        marker="o",
        ms=3,
        capsize=2,
        lw=1.2,
        ls=styles.get(parts[1], "-") if len(parts) > 1 else "-",
        color="black" if name == "full" else colours[parts[0]],
        label=name,
      )
    ax.set_xscale("log")
    ax.set_xlabel("k")
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
  axes[1].legend(fontsize=6, ncol=2)
  s = summary["settings"]
  fig.suptitle(
    f"{s.get('num_items')} items, batch {s.get('batch_size')}, {s.get('steps')} steps "
    "(line: correction; colour: negatives source)",
    fontsize=9,
  )
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


SWEPT = ("num_items", "batch_size", "steps", "tau", "zipf")  # the settings a sweep moves


def sweep(summaries: Sequence[Dict]) -> Dict:
  """Every default pair X:corrected − X:standard (same source, log Q) of the folders'
  summaries, with the settings that differ between the folders (``varying``)."""
  varying = [f for f in SWEPT if len({json.dumps(s["settings"].get(f)) for s in summaries}) > 1]
  points = []
  for s in sorted(summaries, key=lambda s: [s["settings"][f] for f in varying]):
    k = s["ks"][0]
    for p in s["pairs"]:
      a, b = parse_row(p["a"]), parse_row(p["b"])
      if p["kind"] != "correction" or (a.correction, b.correction) != ("corrected", "standard"):
        continue
      kl = {n: s["rows"][n]["kl"]["mean"] for n in (p["b"], p["a"])}
      points.append(
        dict(
          folder=pathlib.Path(s["folder"]).name,
          values={f: s["settings"][f] for f in varying},
          pair=f"{p['a']} − {p['b']}",
          convention=a.convention,
          kl=p["metrics"]["kl"],
          hr=dict(p["metrics"][f"hr@{k}"], k=k),
          kl_standard_corrected=list(kl.values()),
        )
      )
  return dict(varying=varying, points=points)


def correction_verdict(d: Dict, higher_is_better: bool) -> str:
  """'corrected ahead' / 'standard ahead' where the 95 % interval of corrected − standard
  excludes 0, else 'within noise' (no interval included)."""
  side = {"ahead": 1, "behind": -1}.get(d.get("verdict") or "", 0)
  if not side:
    return "within noise"
  return "corrected ahead" if (side > 0) == higher_is_better else "standard ahead"


def format_sweep(result: Dict) -> str:
  fields = result["varying"]
  lines = [
    "corrected − standard per settings folder and log-Q convention: paired over the common "
    "seeds, mean ± 95 % half-width (Student t); ΔKL < 0 and ΔHR > 0 favour corrected.",
    "",
    *markdown_header(fields + ["A − B", "ΔKL(P‖P̂)", "ΔHR@k", "KL standard / corrected"]),
  ]
  for p in result["points"]:
    kl, hr = p["kl"], p["hr"]
    cells = [str(p["values"][f]) for f in fields] + [p["pair"]]
    cells.append(f"{_diff(kl, 3, marks=False)} ({correction_verdict(kl, False)})")
    cells.append(f"@{hr['k']} {_diff(hr, marks=False)} ({correction_verdict(hr, True)})")
    cells.append(" / ".join(f"{x:.3f}" for x in p["kl_standard_corrected"]))
    lines.append(markdown_row(cells))
  return "\n".join(lines) + "\n"


def plot_sweep(result: Dict, path) -> None:
  """ΔKL (± 95 %) against each varying setting, the others at their most common values."""
  import collections

  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fields, points = result["varying"], result["points"]
  centre = {
    f: collections.Counter(json.dumps(p["values"][f]) for p in points).most_common(1)[0][0]
    for f in fields
  }
  fig, axes = plt.subplots(1, len(fields), figsize=(4 * len(fields), 3.4), squeeze=False)
  for ax, f in zip(axes[0], fields):
    on_axis = [
      p for p in points if all(json.dumps(p["values"][g]) == centre[g] for g in fields if g != f)
    ]
    for pair in dict.fromkeys(p["pair"] for p in on_axis):
      pts = sorted(
        ((p["values"][f], p["kl"]) for p in on_axis if p["pair"] == pair), key=lambda t: t[0]
      )
      ys = [d["mean"] for _, d in pts]
      es = [d["half_width"] or 0.0 for _, d in pts]
      label = pair.split(" − ")[0] + " − standard"
      ax.errorbar([x for x, _ in pts], ys, yerr=es, marker="o", capsize=3, label=label)
    ax.axhline(0.0, color="grey", lw=0.8)
    if f in ("num_items", "batch_size", "steps"):
      ax.set_xscale("log")
    xs = sorted({p["values"][f] for p in on_axis})
    ax.minorticks_off()
    ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.set_xlabel(f)
    ax.set_ylabel("ΔKL, corrected − standard")
  axes[0][0].legend(fontsize=6)
  fig.suptitle("KL(P‖P̂) corrected − standard (< 0: corrected closer to the truth), 95 % CI")
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
