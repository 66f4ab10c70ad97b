"""bench/serving_scale.py's report: the markdown tables, the PNG and the one-line summary."""

from __future__ import annotations

import os
import pathlib

import numpy as np

from bench.common import plot as plot_lib
from bench.common import report


def _size(n: int) -> str:
  """1e7 for powers of ten, 25,000 otherwise."""
  e = int(round(np.log10(n)))
  return f"1e{e}" if 10**e == n else f"{n:,}"


def _names(p: dict) -> list:
  """The indexes of a point, in report order."""
  return [n for n in ("scann", "faiss", "brute") if n in p]


def _params(name, p):
  if p[0] is None:
    return "brute force"
  return (
    f"leaves {p[0]}, reorder {p[1]}" if name == "scann" else f"nprobe {p[0]}, k_factor {p[1]:g}"
  )


def _fenced(command: str) -> list:
  return ["```", command, "```", ""]


def write_report(result: dict, out: str) -> str:
  title = (
    "# Serving at scale: ScaNN (eval.index) vs FAISS and brute force, and the serving SavedModel"
  )
  lines = [title, "", *_fenced(result["command"])]
  prev = result.get("previous")
  if prev:
    lines += [
      "with the points marked (a) from an earlier run with the same settings "
      f"(started {prev['started']}, {prev['total_seconds'] / 60:.1f} min):",
      "",
      *_fenced(prev["command"]),
    ]
  lines += [
    f"Machine: {result['machine']}. Run started {result['started']}, "
    f"total {result['total_seconds'] / 60:.1f} min. Dim {result['dim']}, k = "
    f"{result['k']}, target recall@{result['k']} = {result['target_recall']}; "
    f"{result['tune_queries']} tuning and {result['eval_queries']} evaluation queries; "
    f"{result['rounds']} interleaved rounds (batched: all evaluation queries in one call; "
    f"single: {result['single_queries']} one-query calls). Catalog: "
    f"{result.get('catalog', 'anisotropic')} (bench/serving_scale.py docstring).",
    "",
  ]
  cols = "N;index;setting (chosen on tuning queries);recall@k (eval);batched q/s best / median;"
  cols += "single q/s best / median;× brute force (batched median);build s;RSS growth GiB;"
  lines += report.markdown_header((cols + "serialized GiB;process peak GiB").split(";"))
  for p in result["points"]:
    n = p["num_items"]
    label = _size(n) + (" (a)" if p.get("run") == "previous" else "")
    if "error" in p:
      lines.append(report.markdown_row([label, "all", p["error"]] + ["-"] * 8))
      continue
    for name in _names(p):
      s = p[name]
      met = "" if s["chosen"]["meets_target"] else " (target not met)"
      cells = [label, name, _params(name, s["chosen"]["params"]), f"{s['recall']:.4f}{met}"]
      cells += [
        f"{s[f'{q}_best']:.0f} / {s[f'{q}_median']:.0f}" for q in ("batched_qps", "single_qps")
      ]
      cells += [f"{s['speedup_median']:.1f}" if "speedup_median" in s else "-"]
      cells += [f"{s['build_seconds']:.1f}", report.gib(s["rss_growth_kib"])]
      cells += [f"{s['serialized_bytes'] / 2**30:.2f}", report.gib(p["peak_rss_kib"])]
      lines.append(report.markdown_row(cells))
  configs, sweeps = ["", "Index configurations:", ""], []
  for p in result["points"]:
    if "error" in p:
      continue
    c, f = p.get("scann", {}).get("config"), p.get("faiss")
    configs.append(
      f"* N = {_size(p['num_items'])}: "
      + (
        f"ScaNN mode {c['mode']}, leaves {c['num_leaves']}, training sample "
        f"{c['training_sample_size']}, AH {c['dimensions_per_block']} dims/block "
        f"η {c['anisotropic_quantization_threshold']}; "
        if c
        else ""
      )
      + (f"FAISS `{f['factory']}` (train sample {f['train_sample']}); " if f else "")
      + f"catalog generated in {p['generate_seconds']:.0f}s, exact top-k of the "
      f"samples in {p['exact_seconds']:.0f}s."
    )
    for name in _names(p):
      rows = ", ".join(
        f"{_params(name, r['params'])}: {r['recall']:.3f} @ {r['qps']:.0f}"
        for r in p[name]["sweep"]
      )
      sweeps.append(f"* N = {_size(p['num_items'])} {name}: {rows}")
  lines += [*configs, "", "Sweeps on the tuning queries (recall@k, batched q/s of one call):", ""]
  s = result.get("serving")
  lines += [*sweeps, "", "## Serving SavedModel (eval.serving) at the largest size", ""]
  if s is None:
    lines.append("Not run (--no_serving).")
  elif "error" in s.get("build", {}) or "error" in s.get("load", {}):
    lines.append(f"Failed: build {s.get('build')}, load {s.get('load')}.")
  else:
    b, l = s["build"], s["load"]
    lines += [
      f"N = {_size(s['num_items'])}, k = {result['k']}, {s['batch']} histories of length "
      f"{s['history_len']} (history filtered), ScaNN at leaves "
      f"{b['config']['num_leaves_to_search']}, reorder {b['config']['reorder_k']}.",
      "",
      f"* build (ServingModule: index + state variables): {b['build_seconds']:.1f}s; in-process "
      f"first call {b['first_call_seconds']:.2f}s (builds the searcher from the state), second "
      f"{b['second_call_seconds'] * 1e3:.0f} ms; save {b['save_seconds']:.1f}s, "
      f"{b['saved_bytes'] / 2**30:.2f} GiB on disk; process peak RSS "
      f"{report.gib(b['peak_rss_kib'])} GiB",
      f"* fresh process: load_serving_model {l['load_seconds']:.1f}s, first call "
      f"{l['first_call_seconds']:.2f}s, second {l['second_call_seconds'] * 1e3:.0f} ms; peak RSS "
      f"{report.gib(l['peak_rss_kib'])} GiB",
      f"* same top-{result['k']} ids as in process: **{l['same_ids']}** (fraction equal "
      f"{l['ids_equal_fraction']:.4f}); max |score difference| {l['max_score_diff']:.2e}",
    ]
  lines += ["", result["summary"], ""]
  path = os.path.join(out, "serving_scale.md")
  pathlib.Path(path).write_text("\n".join(lines))
  return path


def plot(result: dict, path: str):
  points = [p for p in result["points"] if "error" not in p]
  fig, axes = plot_lib.pyplot().subplots(1, len(points) + 1, figsize=(4.2 * (len(points) + 1), 3.8))
  axes = np.atleast_1d(axes)
  colors = {"scann": "C0", "faiss": "C1", "brute": "C2"}
  for ax, p in zip(axes, points):
    for name in _names(p):
      s, rows = p[name], p[name]["sweep"]
      recall, qps = [r["recall"] for r in rows], [r["qps"] for r in rows]
      ax.scatter(recall, qps, s=12, c=colors[name], alpha=0.6, label=f"{name} sweep")
      chosen = dict(
        marker="*", s=150, c=colors[name], edgecolors="k", label=f"{name} chosen (eval)"
      )
      ax.scatter([s["recall"]], [s["batched_qps_median"]], **chosen)
    ax.axvline(result["target_recall"], color="r", ls=":", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel(f"recall@{result['k']}")
    ax.set_ylabel("batched queries / s")
    ax.set_title(f"N = {_size(p['num_items'])}")
    ax.legend(fontsize=6)
  ax = axes[-1]
  for name in colors:
    pts = [p for p in points if name in p]
    ns = [p["num_items"] for p in pts]
    for key, style, label in (
      ("build_seconds", "o-", "build s"),
      ("single_ms_median", "s--", "single-query ms (median)"),
    ):
      if pts:
        ax.plot(ns, [p[name][key] for p in pts], style, c=colors[name], label=f"{name} {label}")
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("catalog size N")
  ax.set_title("time vs size (at the target)")
  ax.legend(fontsize=6)
  plot_lib.save(fig, path, dpi=110)


def summarize(result: dict) -> str:
  parts = []
  for p in result["points"]:
    if "error" in p:
      parts.append(f"{_size(p['num_items'])}: failed")
      continue
    parts.append(
      f"{_size(p['num_items'])}: "
      + ", ".join(
        f"{n} recall {p[n]['recall']:.3f} {p[n]['batched_qps_median']:.0f} q/s batched "
        + (f"(x{p[n]['speedup_median']:.1f} brute force) " if n != "brute" and "brute" in p else "")
        + f"{p[n]['single_ms_median']:.2f} ms single build {p[n]['build_seconds']:.0f}s"
        for n in _names(p)
      )
    )
  s = result.get("serving")
  if s and "error" not in s.get("load", {"error": 1}):
    parts.append(
      f"serving SavedModel reload {s['load']['load_seconds']:.1f}s, same ids "
      f"{s['load']['same_ids']}"
    )
  elif s:
    parts.append("serving SavedModel: failed")
  return report.summary_line(
    parts, head=f"serving_scale recall@{result['k']} target {result['target_recall']}"
  )
