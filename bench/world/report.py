r"""The report of bench/world_scale.py: rows over seeds, paired differences, the gap to full
softmax, the step cost against mixed, the recall@k plot; across the settings folders of one
--out, corrected − standard per setting and log-Q convention (table and plot; the statistics and
the pairs reported: bench/README.md, section `world_scale.py`).
"""

from __future__ import annotations

import collections
import json
import math
import pathlib
from operator import itemgetter
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from bench.common import plot
from bench.common.report import markdown_header, markdown_row
from bench.world.rows import parse_row
from eval import paired_stats
from eval.demo.config import CORRECTIONS


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
  recall, hit = m["recall"], m["hit_rate"]
  return {"kl": m["kl"]} | {f"recall@{k}": recall[k] for k in ks} | {f"hr@{k}": hit[k] for k in ks}


def _ks(runs) -> List[str]:
  return next((list(r["metrics"]["recall"]) for s in runs.values() for r in s.values()), [])


def _fmt(x, digits=4, sign=False) -> str:
  if x is None or (isinstance(x, float) and not math.isfinite(x)):
    return "-"
  return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def _paired(a: Dict, b: Dict) -> Dict:
  keep = ("n", "seeds", "differences", "mean", "se", "half_width", "ci", "verdict")
  d = paired_stats.paired_difference(a, b)
  return {k: d.get(k) for k in keep}


def compare(runs, a: str, b: str) -> Dict:
  """Paired A − B of every metric over the common seeds (bench/README.md), and the growth of
  the recall difference from k_min to k_max."""
  missing = [r for r in (a, b) if r not in runs]
  if missing:
    raise ValueError(f"--compare: no finished runs of {missing}")
  ks = _ks(runs)
  per_seed = {row: {s: metric_values(run, ks) for s, run in runs[row].items()} for row in (a, b)}
  pick = lambda row, f: {s: f(v) for s, v in per_seed[row].items()}
  out = {"a": a, "b": b, "metrics": {}}
  for name in next(iter(per_seed[a].values())):
    out["metrics"][name] = _paired(pick(a, itemgetter(name)), pick(b, itemgetter(name)))
  if len(ks) > 1:
    grow = lambda v: v[f"recall@{ks[-1]}"] - v[f"recall@{ks[0]}"]
    d = _paired(pick(a, grow), pick(b, grow))
    out["growth"] = dict(d, of=f"(A - B)@{ks[-1]} - (A - B)@{ks[0]} of recall")
  return out


_BASELINES = {"corrected": ("standard", "none"), "standard": ("none",)}  # A's correction -> B's


def default_pairs(rows: Sequence[str]) -> List[Tuple[str, str, str]]:
  """(kind, A, B) of bench/README.md's default pairs among the given rows."""
  pairs = []
  for name in rows:
    if name == "full":
      continue
    spec = parse_row(name)
    for other in _BASELINES.get(spec.correction, ()):
      pairs.append(("correction", name, spec._replace(correction=other).name))
    if spec.convention == "expected_count":
      pairs.append(("convention", name, spec._replace(convention="unigram").name))
  return [p for p in pairs if p[1] in rows and p[2] in rows]


def gap_to_full(runs, name: str) -> Optional[Dict]:
  """The share of in_batch's recall gap to full that ``name`` closes, per k (bench/README.md)."""
  if "full" not in runs or name == "full" or name.startswith("in_batch"):
    return None
  base = parse_row(name)._replace(source="in_batch", memory=0).name
  if base not in runs:
    return None
  out: Dict = {"row": name, "in_batch": base, "k": {}}
  seeds = sorted(set(runs[name]) & set(runs[base]) & set(runs["full"]))
  for k in _ks(runs):
    fractions = []
    for s in seeds:
      r = {row: runs[row][s]["metrics"]["recall"][k] for row in (name, base, "full")}
      gap = r["full"] - r[base]
      fractions.append((r[name] - r[base]) / gap if gap != 0 else float("nan"))
    # mean ± t s.e. of the fractions: their paired difference to 0
    d = paired_stats.paired_difference(fractions, [0.0] * len(fractions))
    out["k"][k] = dict(n=d["n"], fractions=fractions, mean=d["mean"], half_width=d["half_width"])
  return out


def summarise(folder, compares: Sequence[Tuple[str, str]] = ()) -> Dict:
  """Everything of one settings folder: rows, pairs, gaps, timing, references."""
  folder = pathlib.Path(folder)
  runs, timing = load_runs(folder), load_timing(folder)
  ks = _ks(runs)
  rows = {}
  for name, seeds in runs.items():
    per_seed = [run["metrics"] for _, run in sorted(seeds.items())]
    values = [metric_values(run, ks) for _, run in sorted(seeds.items())]
    entry: Dict = {"seeds": sorted(seeds)}
    entry.update({m: paired_stats.mean_se([v[m] for v in values]) for m in values[0]})
    entry["calibration_by_decile"] = _mean([m["calibration_by_decile"] for m in per_seed])
    entry["mass_by_decile"] = _mean([m["mass_by_decile"]["model"] for m in per_seed])
    first = next(iter(seeds.values()))
    entry["mass_truth_by_decile"] = first["metrics"]["mass_by_decile"]["truth"]
    steps = [run["train"]["step_ms_median"] for run in seeds.values()]
    entry["train_step_ms_median"] = float(np.median(steps))
    entry["machine"], entry["timing"] = first["machine"], timing.get(name)
    rows[name] = entry
  order = sorted(rows, key=_row_order)
  pairs = [dict(compare(runs, a, b), kind=kind) for kind, a, b in default_pairs(order)]
  pairs += [dict(compare(runs, a, b), kind="asked") for a, b in compares]
  refs_path = folder / "references.json"
  return dict(
    folder=str(folder),
    settings=next(iter(next(iter(runs.values())).values()))["settings"] if runs else {},
    ks=ks,
    order=order,
    rows=rows,
    pairs=pairs,
    gaps=[g for g in (gap_to_full(runs, n) for n in order) if g is not None],
    references=json.loads(refs_path.read_text()) if refs_path.exists() else {},
  )


def _mean(per_seed: List) -> List[float]:
  return np.mean(np.asarray(per_seed, np.float64), axis=0).tolist()


def _row_order(name: str):
  r = parse_row(name)
  source = ("full", "in_batch", "mixed", "xbatch", "midx").index(r.source)
  convention = "" if r.convention == "unigram" else r.convention
  return (source, r.memory, convention, CORRECTIONS.index(r.correction))


def _cell(stats: Dict, digits=4) -> str:
  """mean ± s.e."""
  if not stats or stats.get("mean") is None:
    return "-"
  se = stats.get("se")
  return _fmt(stats["mean"], digits) + ("" if se is None else f" ± {se:.{digits}f}")


def _diff(d: Dict, digits: int = 4, marks: bool = True, sign: str = "+") -> str:
  """mean ± half-width (of a paired difference: ↑ / ↓ where its interval excludes 0)."""
  if d.get("mean") is None:
    return "-"
  half = d.get("half_width")
  tail = "" if half is None else f" ± {half:.{digits}f}"
  mark = {"ahead": " ↑", "behind": " ↓"}.get(d.get("verdict"), "") if marks else ""
  return f"{d['mean']:{sign}.{digits}f}{tail}{mark}"


def _table(intro: str, cols: List[str], rows: List[List[str]]) -> List[str]:
  return [intro, "", *markdown_header(cols), *map(markdown_row, rows), ""]


def format_markdown(summary: Dict) -> str:
  s, ks, order = summary["settings"], summary["ks"], summary["order"]
  rows = [summary["rows"][name] for name in order]
  named = list(zip(order, rows))
  lines = [
    f"World: {s.get('num_items')} items, batch {s.get('batch_size')}, {s.get('steps')} steps, "
    f"k = {s.get('num_negatives') or s.get('batch_size')} negatives, Zipf {s.get('zipf')}, "
    f"tau {s.get('tau')}; {s.get('eval_users')} held-out users. Mean ± s.e. over seeds; "
    "recall@k against the oracle's top k, HR@k of a held-out draw, KL(P‖P̂) (lower is better).",
    "",
  ]
  cols = ["row", "seeds", "KL"] + [f"R@{k}" for k in ks] + [f"HR@{k}" for k in ks]
  lines += markdown_header(cols + ["step ms (train)", "× mixed (median / min)"])
  for name, r in named:
    t = r.get("timing") or {}
    ratio = f"{t['ratio_median']:.2f} / {t['ratio_min']:.2f}" if t.get("ratio_median") else "-"
    cells = [name, str(len(r["seeds"])), _cell(r["kl"], 3)]
    cells += [_cell(r[f"{m}@{k}"]) for m in ("recall", "hr") for k in ks]
    lines.append(markdown_row(cells + [_fmt(r["train_step_ms_median"], 1), ratio]))
  for name, ref in summary.get("references", {}).items():
    cells = [f"*{name}*", "-", _fmt(ref["kl"], 3)]
    cells += [_fmt(ref[m][k]) for m in ("recall", "hit_rate") for k in ks]
    lines.append(markdown_row(cells + ["-", "-"]))
  machines = "; ".join(sorted({r["machine"] for r in rows}))
  lines += ["", f"Step times measured on: {machines}.", ""]
  if order:
    deciles = ["row"] + [f"d{j + 1}" for j in range(len(rows[0]["calibration_by_decile"]))]
    lines += _table(
      "Calibration by popularity decile (d1 = the most popular tenth of Q(d)): the P-weighted "
      "mean of log P̂ − log P over the decile's items (> 0: over-predicted), mean over seeds.",
      deciles,
      [[n] + [_fmt(v, 2, sign=True) for v in r["calibration_by_decile"]] for n, r in named],
    )
    log_mass = lambda m, t: _fmt(math.log(m / t), 2, sign=True) if m > 0 and t > 0 else "-"
    mass = [
      [n] + [log_mass(m, t) for m, t in zip(r["mass_by_decile"], r["mass_truth_by_decile"])]
      for n, r in named
    ]
    truth = ["*truth's mass*"] + [f"{t:.3g}" for t in rows[0]["mass_truth_by_decile"]]
    lines += _table(
      "Mass by popularity decile: log(E_u P̂(decile) / E_u P(decile)), mean over seeds; the "
      "truth's mass per decile in the last line.",
      deciles,
      mass + [truth],
    )
  if summary["pairs"]:
    pairs = []
    for p in summary["pairs"]:
      m = p["metrics"]
      cells = [p["kind"], f"{p['a']} − {p['b']}", str(m["kl"]["n"]), _diff(m["kl"], 3)]
      cells += [_diff(m[f"recall@{k}"]) for k in ks]
      pairs.append(cells + [_diff(p["growth"]) if "growth" in p else "-"])
    lines += _table(
      "Paired differences A − B (mean ± 95 % half-width over the common seeds; verdict).",
      ["kind", "A − B", "n", "ΔKL"] + [f"ΔR@{k}" for k in ks] + ["growth ΔR"],
      pairs,
    )
  if summary["gaps"]:
    lines += _table(
      "Share of in_batch's recall gap to full softmax closed: (X − in_batch) / (full − "
      "in_batch), mean ± 95 % half-width over seeds.",
      ["row", "vs"] + [f"R@{k}" for k in ks],
      [
        [g["row"], g["in_batch"]] + [_diff(g["k"][k], 2, sign="") for k in ks]
        for g in summary["gaps"]
      ],
    )
  return "\n".join(lines) + "\n"


_MARKERS = dict(marker="o", ms=3, capsize=2, lw=1.2)


def plot_recall(summary: Dict, path) -> None:
  """recall@k and HR@k against k per row (mean ± s.e. over seeds), log k."""
  plt = plot.pyplot()
  ks = [int(k) for k in summary["ks"]]
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
  styles = {"none": ":", "standard": "--", "standard_no_positive": "-.", "corrected": "-"}
  sources = sorted({n.split(":")[0] for n in summary["order"]})
  colours = {s: plt.cm.tab10(i % 10) for i, s in enumerate(sources)}
  for ax, metric, label in ((axes[0], "recall", "recall@k vs the oracle"), (axes[1], "hr", "HR@k")):
    for name in summary["order"]:
      stats = [summary["rows"][name][f"{metric}@{k}"] for k in ks]
      parts = name.split(":")
      ls = styles.get(parts[1], "-") if len(parts) > 1 else "-"
      color = "black" if name == "full" else colours[parts[0]]
      means, ses = [d["mean"] for d in stats], [d["se"] or 0.0 for d in stats]
      ax.errorbar(ks, means, yerr=ses, ls=ls, color=color, label=name, **_MARKERS)
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
  plot.save(fig, path, dpi=110)


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
      points.append(
        dict(
          folder=pathlib.Path(s["folder"]).name,
          values={f: s["settings"][f] for f in varying},
          pair=f"{p['a']} − {p['b']}",
          convention=a.convention,
          kl=p["metrics"]["kl"],
          hr=dict(p["metrics"][f"hr@{k}"], k=k),
          kl_standard_corrected=[s["rows"][n]["kl"]["mean"] for n in (p["b"], p["a"])],
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
  fields, points = result["varying"], result["points"]
  rows = [
    [str(p["values"][f]) for f in fields]
    + [
      p["pair"],
      f"{_diff(p['kl'], 3, marks=False)} ({correction_verdict(p['kl'], False)})",
      f"@{p['hr']['k']} {_diff(p['hr'], marks=False)} ({correction_verdict(p['hr'], True)})",
      " / ".join(f"{x:.3f}" for x in p["kl_standard_corrected"]),
    ]
    for p in points
  ]
  lines = _table(
    "corrected − standard per settings folder and log-Q convention: paired over the common "
    "seeds, mean ± 95 % half-width (Student t); ΔKL < 0 and ΔHR > 0 favour corrected.",
    fields + ["A − B", "ΔKL(P‖P̂)", "ΔHR@k", "KL standard / corrected"],
    rows,
  )
  return "\n".join(lines[:-1]) + "\n"  # no blank line at the end


def plot_sweep(result: Dict, path) -> None:
  """ΔKL (± 95 %) against each varying setting, the others at their most common values."""
  plt = plot.pyplot()
  fields, points = result["varying"], result["points"]
  key = lambda p, f: json.dumps(p["values"][f])
  centre = {f: collections.Counter(key(p, f) for p in points).most_common(1)[0][0] for f in fields}
  fig, axes = plt.subplots(1, len(fields), figsize=(4 * len(fields), 3.4), squeeze=False)
  for ax, f in zip(axes[0], fields):
    on_axis = [p for p in points if all(key(p, g) == centre[g] for g in fields if g != f)]
    for pair in dict.fromkeys(p["pair"] for p in on_axis):
      pts = sorted(
        ((p["values"][f], p["kl"]) for p in on_axis if p["pair"] == pair), key=lambda t: t[0]
      )
      x, kl = zip(*pts)
      means, halves = [d["mean"] for d in kl], [d["half_width"] or 0.0 for d in kl]
      label = pair.split(" − ")[0] + " − standard"
      ax.errorbar(list(x), means, yerr=halves, marker="o", capsize=3, label=label)
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
  plot.save(fig, path, dpi=110)
