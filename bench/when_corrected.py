r"""When does corrected logQ beat standard? A paired sweep of the demo's synthetic world.

    python bench/when_corrected.py [--quick] [--out bench/out/when_corrected]
    python bench/when_corrected.py --factors=batch_size,steps --seeds=0,1,2

Method, flags and measured results: bench/README.md, section `when_corrected.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time

import numpy as np

from bench.common.report import markdown_header, markdown_row

FACTORS = {  # the demo's default first
  "batch_size": (256, 64, 1024),
  "steps": (2000, 500, 8000),
  "tau": (4.0, 2.0, 8.0),
  "zipf": (1.1, 0.8, 1.4),
}
QUICK = {"batch_size": (64, 32), "steps": (200, 100), "tau": (4.0, 2.0), "zipf": (1.1, 0.8)}
CONVENTIONS = ("unigram", "expected_count")
METRICS = (("kl", "ΔKL(P‖P̂)", -1), ("hit_rate", "ΔHR@10", +1))  # sign: +1 = higher is better


def points(factors, quick: bool = False):
  """[(factor, value)] with the demo's defaults once, as ("default", None), first."""
  grid = QUICK if quick else FACTORS
  out = [("default", None)]
  for f in factors:
    if f not in grid:
      raise ValueError(f"--factors: unknown factor {f!r}; choose from {sorted(grid)}")
    out += [(f, v) for v in grid[f][1:]]
  return out


def verdict(mean: float, half: float, sign: int) -> str:
  """'corrected ahead' / 'standard ahead' when the 95% interval excludes 0 ('within noise'
  otherwise, or when it is undefined); ``sign`` +1 when higher is better for the metric."""
  if not np.isfinite(half) or abs(mean) <= half:
    return "within noise"
  return "corrected ahead" if mean * sign > 0 else "standard ahead"


def run_point(factor, value, seeds, quick, out_dir, log):
  """Trains the four rows at one point of the sweep; returns its paired differences."""
  from eval import demo

  base = dict(seeds=tuple(seeds), curve_points=0)
  if quick:
    base.update(
      steps=QUICK["steps"][0],
      batch_size=QUICK["batch_size"][0],
      num_items=300,
      train_users=512,
      eval_users=200,
      num_negatives=64,
    )
  settings = dict(base)
  if factor != "default":
    settings[factor] = value
  settings.setdefault("num_negatives", demo.DemoConfig().num_negatives)
  settings["num_negatives"] = max(
    settings["num_negatives"], settings.get("batch_size", demo.DemoConfig().batch_size)
  )  # keep every distinct in-batch id
  rows = tuple(
    demo.RowSpec("in_batch", c, conv) for conv in CONVENTIONS for c in ("standard", "corrected")
  )
  cfg = demo.DemoConfig(rows=rows, **settings)
  name = "default" if factor == "default" else f"{factor}={value}"
  summary = demo.run(
    cfg, os.path.join(out_dir, name.replace("=", "_")), plot=False, log=lambda *a: None
  )
  result = {
    "point": name,
    "factor": factor,
    "value": value,
    "world": summary["world"]["stats"],
    "seconds": summary["seconds"]["total"],
    "config": {f: summary["config"][f] for f in FACTORS},
    "rows": {r: {m: summary["rows"][r][m]["mean"] for m, _, _ in METRICS} for r in summary["rows"]},
    "differences": {},
  }
  for entry in summary["paired_differences"]:
    if entry["kind"] != "correction":
      continue
    conv = "expected_count" if "expected_count" in entry["context"] else "unigram"
    result["differences"][conv] = {
      m: {
        "mean": entry[m]["mean"],
        "ci95": entry[m]["ci95"],
        "verdict": verdict(entry[m]["mean"], entry[m]["ci95"], sign),
      }
      for m, _, sign in METRICS
    }
  log(
    f"{name}: "
    + "; ".join(
      f"{conv} ΔKL {d['kl']['mean']:+.3f} ± {d['kl']['ci95']:.3f} ({d['kl']['verdict']})"
      for conv, d in result["differences"].items()
    )
    + f"  [{result['seconds']:.0f} s]"
  )
  return result


def format_markdown(results, seeds) -> str:
  lines = [
    f"Paired corrected − standard, in-batch negatives (dedup), exact-count log Q; "
    f"seeds {list(seeds)}; 95% Student-t intervals. ΔKL < 0 and ΔHR@10 > 0 favour "
    "corrected.",
    "",
    *markdown_header(["point", "log Q", "ΔKL(P‖P̂)", "ΔHR@10", "KL standard / corrected", "world"]),
  ]
  for r in results:
    for conv in CONVENTIONS:
      d = r["differences"].get(conv)
      if d is None:
        continue
      suffix = "" if conv == "unigram" else ":expected_count"
      ks, kc = (r["rows"][f"in_batch:{c}{suffix}"]["kl"] for c in ("standard", "corrected"))
      lines.append(
        markdown_row(
          [
            r["point"],
            conv,
            f"{d['kl']['mean']:+.3f} ± {d['kl']['ci95']:.3f} ({d['kl']['verdict']})",
            f"{d['hit_rate']['mean']:+.4f} ± {d['hit_rate']['ci95']:.4f} "
            f"({d['hit_rate']['verdict']})",
            f"{ks:.3f} / {kc:.3f}",
            r["world"] if conv == "unigram" else "",
          ]
        )
      )
  return "\n".join(lines) + "\n"


def plot(results, path) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  default = next(r for r in results if r["factor"] == "default")
  factors = [f for f in dict.fromkeys(r["factor"] for r in results) if f != "default"]
  fig, axes = plt.subplots(
    1, max(1, len(factors)), figsize=(4 * max(1, len(factors)), 3.4), squeeze=False
  )
  for ax, f in zip(axes[0], factors):
    pts = [(default["config"][f], default)] + [
      (r["config"][f], r) for r in results if r["factor"] == f
    ]
    pts.sort(key=lambda t: t[0])
    for conv, colour in zip(CONVENTIONS, ("tab:blue", "tab:orange")):
      xs = [x for x, r in pts if conv in r["differences"]]
      ys = [r["differences"][conv]["kl"]["mean"] for _, r in pts if conv in r["differences"]]
      es = [r["differences"][conv]["kl"]["ci95"] for _, r in pts if conv in r["differences"]]
      ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, color=colour, label=f"{conv} log Q")
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xscale("log" if f in ("batch_size", "steps") else "linear")
    ax.minorticks_off()
    ax.set_xticks([x for x, _ in pts])
    ax.set_xticklabels([f"{x:g}" for x, _ in pts])
    ax.set_xlabel(f)
    ax.set_ylabel("ΔKL, corrected − standard")
  axes[0][0].legend(fontsize=8)
  fig.suptitle(
    "KL(P‖P̂) corrected − standard (< 0: corrected closer to the truth), paired seeds, 95% CI",
    fontsize=9,
  )
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    "--factors",
    default=",".join(FACTORS),
    help=f"comma-separated factors to move, from {list(FACTORS)}",
  )
  parser.add_argument("--seeds", default="0,1,2", help="paired seeds (>= 2 for an interval)")
  parser.add_argument(
    "--quick",
    action="store_true",
    help="a tiny world and budget (a smoke test of the pipeline, not evidence)",
  )
  parser.add_argument("--out", default="bench/out/when_corrected", help="output folder")
  parser.add_argument(
    "--report_only",
    action="store_true",
    help="rewrite the table and the plot from OUT/when_corrected.json",
  )
  args = parser.parse_args(argv)
  seeds = [int(s) for s in args.seeds.split(",") if s]
  if len(seeds) < 2:
    raise ValueError("--seeds: at least 2 paired seeds are needed for an interval")
  factors = [f for f in args.factors.split(",") if f]
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  start = time.time()
  results = []
  if args.report_only:
    results = json.loads((out / "when_corrected.json").read_text())
  for factor, value in [] if args.report_only else points(factors, args.quick):
    results.append(run_point(factor, value, seeds, args.quick, str(out), print))
    (out / "when_corrected.json").write_text(json.dumps(results, indent=1, default=float))
  text = format_markdown(results, seeds)
  (out / "when_corrected.md").write_text(text)
  plot(results, out / "when_corrected.png")
  print(text)
  print(f"outputs: {out}/when_corrected.md, .json, .png ({time.time() - start:.0f} s)")


if __name__ == "__main__":
  main()
