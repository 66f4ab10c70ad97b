r"""Two arms of paired seeds compared on their test metrics: mean ± s.e. per arm and the paired
difference A − B with its 95% interval and verdict (`eval.paired_stats`).

    python -m bench.seed_runs_compare --a=runs/bf16 --b=runs/float32 --names=bfloat16,float32 \
        --margin=0.02 --out=docs/results/time_to_converge/bf16_convergence_cpu/README.md

Each arm is a folder of `<arm>/seed<s>/metrics.json` (what `python -m train.keras3 --seeds=...`
writes, and what separate runs with --model_dir=<arm>/seed<s> write); seeds are paired by name.
The margin m is relative: for each metric the equivalence band is ± m · mean(B) (m = 0.02: the
"equivalent within ± 2 %" check), so

    d_s = A_s − B_s,  interval = mean d ± t_{0.975, n-1} · s.e.(d),
    verdict "equivalent" iff 0 ∈ interval ⊂ (−m · mean B, +m · mean B).

Also tabled: best epoch and steps to the best epoch, epochs run, and the training wall-clock per
run (`train_wall_seconds`; runs of one stacked program share theirs).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

from bench.common import arms
from eval import paired_stats

METRICS = ("recall@20", "ndcg@20", "recall@10", "ndcg@10")
_SEED = re.compile(r"^seed(\d+)$")


def load_arm(folder: str) -> Dict[int, dict]:
  """{seed: metrics.json} of every <folder>/seed<s>/metrics.json; ValueError if there is none."""
  out = {}
  for path in sorted(pathlib.Path(folder).iterdir()) if pathlib.Path(folder).is_dir() else []:
    m = _SEED.match(path.name)
    if m and (path / "metrics.json").is_file():
      out[int(m.group(1))] = json.loads((path / "metrics.json").read_text())
  if not out:
    raise ValueError(f"{folder}: no seed<s>/metrics.json (is it a --seeds run's --model_dir?)")
  return out


def _fmt(x: Optional[float], digits: int = 4) -> str:
  return "—" if x is None else f"{x:+.{digits}f}"


def compare(
  a: Dict[int, dict], b: Dict[int, dict], names: Sequence[str], margin: float
) -> List[str]:
  """The report's Markdown lines (module docstring)."""
  seeds = sorted(set(a) & set(b))
  if len(seeds) < 2:
    raise ValueError(f"need at least 2 seeds in both arms, common seeds: {seeds}")
  lines = [
    f"Seeds {', '.join(map(str, seeds))}; {names[0]} (A) against {names[1]} (B), test "
    f"split; margin ± {margin:.0%} of B's mean.",
    "",
    "| metric | "
    + " | ".join(f"{n}: mean ± s.e." for n in names)
    + " | A − B, 95% interval | A ahead in | verdict |",
    "|---|---|---|---|---|---|",
  ]
  for metric in METRICS:
    va = {s: float(a[s]["test"][metric]) for s in seeds}
    vb = {s: float(b[s]["test"][metric]) for s in seeds}
    ma, mb = paired_stats.mean_se(list(va.values())), paired_stats.mean_se(list(vb.values()))
    d = paired_stats.paired_difference(va, vb, margin=margin * abs(mb["mean"]))
    low, high = d["ci"]
    lines.append(
      f"| {metric} | {ma['mean']:.4f} ± {ma['se']:.4f} | {mb['mean']:.4f} ± "
      f"{mb['se']:.4f} | {_fmt(d['mean'])} [{_fmt(low)}, {_fmt(high)}] | "
      f"{d['positive']}/{d['n']} | {d['verdict']} |"
    )
  lines += [
    "",
    "| seed | "
    + " | ".join(f"{n}: best epoch / epochs, steps to best, test R@20" for n in names)
    + " |",
    "|---|---|---|",
  ]
  for s in seeds:
    cells = [
      f"{r[s]['best_epoch']} / {r[s]['epochs_done']}, {r[s].get('best_step')}, "
      f"{r[s]['test']['recall@20']:.4f}"
      for r in (a, b)
    ]
    lines.append(f"| {s} | " + " | ".join(cells) + " |")
  walls = [np.mean([r[s].get("train_wall_seconds", np.nan) for s in seeds]) for r in (a, b)]
  lines += [
    "",
    "Training wall-clock per run (mean over seeds): "
    + ", ".join(f"{n} {w:.0f} s" for n, w in zip(names, walls))
    + ".",
  ]
  return lines


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  arms.add_arguments(parser, "a folder of seed<s>/metrics.json")
  parser.add_argument("--out", default=None, help="also write the Markdown here")
  args = parser.parse_args(argv)
  names = arms.checked_names(parser, args)
  try:
    lines = compare(load_arm(args.a), load_arm(args.b), names, args.margin)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  text = "\n".join(lines) + "\n"
  print(text, end="")
  if args.out:
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(text)
  return 0


if __name__ == "__main__":
  sys.exit(main())
