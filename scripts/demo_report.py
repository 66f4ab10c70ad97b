"""Prints the demo's comparison table and writes demo_comparison.png.

Usage: python scripts/demo_report.py RUN_DIR NAME [NAME ...]
Reads RUN_DIR/NAME/eval/eval_results.json (written by eval.evaluate) for each NAME.
"""

import json
import pathlib
import sys


def main(argv):
  if len(argv) < 3:
    raise SystemExit(__doc__)
  run_dir = pathlib.Path(argv[1])
  names = argv[2:]
  results = {}
  for name in names:
    path = run_dir / name / "eval" / "eval_results.json"
    if not path.exists():
      raise SystemExit(f"missing {path}: did eval.evaluate run?")
    results[name] = json.loads(path.read_text())
  ks = results[names[0]]["ks"]
  header = ["logq"] + [f"R@{k}" for k in ks] + [f"NDCG@{k}" for k in ks] + [
      "R@20 head", "R@20 tail", "ScaNN agree@20", "ScaNN/exact qps"]
  rows = []
  for name in names:
    r = results[name]
    m = r["metrics"]["exact"]
    pop = r["popularity"]["recall@20"] if "recall@20" in r["popularity"] else [float("nan")]
    rows.append([name] + [f"{m[f'recall@{k}']:.4f}" for k in ks] +
                [f"{m[f'ndcg@{k}']:.4f}" for k in ks] +
                [f"{pop[0]:.4f}", f"{pop[-1]:.4f}",
                 f"{r['agreement'].get('filtered@20', float('nan')):.4f}",
                 f"{r['throughput']['speedup_median']:.2f}x"])
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(row) + " |" for row in rows]
  table = "\n".join(lines)
  print("\nDemo: SASRec on the synthetic catalog, mixed negatives, evaluated through ScaNN "
        f"({results[names[0]]['num_queries']} test users, "
        f"{results[names[0]]['num_items']} items; head = most popular decile, tail = least)")
  print(table)
  (run_dir / "demo_comparison.md").write_text(table + "\n")
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    return
  fig, ax = plt.subplots(figsize=(7, 4))
  for name in names:
    pop = results[name]["popularity"]["recall@20"]
    ax.plot(range(len(pop)), pop, marker="o", label=name)
  ax.set_xlabel("target item popularity decile (0 = most popular)")
  ax.set_ylabel("Recall@20")
  ax.set_title("Recall@20 by item popularity, per logQ correction")
  ax.legend()
  fig.tight_layout()
  fig.savefig(run_dir / "demo_comparison.png", dpi=110)
  print(f"wrote {run_dir / 'demo_comparison.md'} and {run_dir / 'demo_comparison.png'}")


if __name__ == "__main__":
  main(sys.argv)
