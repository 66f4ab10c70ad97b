r"""One run's learning curve against a band of runs of another kind, epoch by epoch.

    python -m bench.analysis band \
        --band=RUN[,RUN...] --probe=RUN --names=ours,paper-code [--keys=loss,val_ndcg@10] \
        [--every=5] [--out=docs/results/table1/paper_code/curve_band]

The prediction interval, the runs it reads, flags and outputs: bench/README.md, section
`analysis/` (band).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Dict, List, Optional, Sequence

from bench import paper_loop
from bench.analysis import common
from bench.common.plot import pyplot, save
from eval import paired_stats

DEFAULT_KEYS = ("loss", "val_ndcg@10", "val_recall@20")
_RUN_FILES = ("train_metrics.json", "metrics.json", "model/history.json", "paper_loop.pt")


def _history_of(obj, source: str) -> List[dict]:
  history = obj.get("history") if isinstance(obj, dict) else obj
  if not isinstance(history, list) or not all(
    isinstance(h, dict) and "epoch" in h for h in history
  ):
    raise ValueError(f"{source}: no history (a list of per-epoch records with 'epoch')")
  if not history:
    raise ValueError(f"{source}: empty history")
  return history


def load_history(run: str) -> List[dict]:
  """The per-epoch records of ``run`` (RUN: bench/README.md); ValueError if it has none."""
  path = pathlib.Path(run)
  if path.is_dir():
    found = [path / f for f in _RUN_FILES if (path / f).is_file()]
    if not found:
      raise ValueError(f"{run}: no run here (looked for {', '.join(_RUN_FILES)})")
    path = found[0]
  if not path.is_file():
    raise ValueError(f"{run}: no such file or folder")
  if path.suffix == ".pt":  # a paper_loop checkpoint (torch, imported only then)
    return _history_of(paper_loop.read_checkpoint(path)[1], str(path))
  return _history_of(json.loads(path.read_text()), str(path))


def _by_epoch(history: List[dict], key: str) -> Dict[int, float]:
  return {int(h["epoch"]): float(h[key]) for h in history if key in h}


def band_statistics(
  band: Sequence[List[dict]], probe: List[dict], key: str, confidence: float = 0.95
) -> List[dict]:
  """Per probe epoch with >= 2 band values of ``key``: epoch, n, band mean, std, prediction
  interval, the probe's value, d, r and where it falls ("inside", "above", "below")."""
  curves = [_by_epoch(h, key) for h in band]
  rows = []
  for epoch, a in sorted(_by_epoch(probe, key).items()):
    values = [c[epoch] for c in curves if epoch in c]
    if len(values) < 2:
      continue
    pi = paired_stats.prediction_interval(values, confidence)
    low, high = pi["ci"]
    d = a - pi["mean"]
    rows.append(
      dict(
        epoch=epoch,
        n=len(values),
        band=values,
        mean=pi["mean"],
        std=pi["std"],
        low=low,
        high=high,
        probe=a,
        d=d,
        r=d / abs(pi["mean"]) if pi["mean"] else float("nan"),
        where="inside" if low <= a <= high else ("above" if a > high else "below"),
      )
    )
  return rows


def summarise(rows: List[dict]) -> dict:
  """Epochs compared, counts inside / above / below, mean d and mean |r| over ``rows``."""
  n = len(rows)
  return dict(
    epochs=n,
    first=rows[0]["epoch"] if rows else None,
    last=rows[-1]["epoch"] if rows else None,
    inside=sum(r["where"] == "inside" for r in rows),
    above=sum(r["where"] == "above" for r in rows),
    below=sum(r["where"] == "below" for r in rows),
    mean_d=sum(r["d"] for r in rows) / n if n else float("nan"),
    mean_abs_r=sum(abs(r["r"]) for r in rows) / n if n else float("nan"),
  )


def _plot(results: Dict[str, dict], names: Sequence[str], path: pathlib.Path) -> None:
  keys = list(results)
  fig, axes = pyplot().subplots(1, len(keys), figsize=(5 * len(keys), 3.6), squeeze=False)
  for ax, key in zip(axes[0], keys):
    for i, curve in enumerate(results[key]["band_curves"]):
      epochs = sorted(int(e) for e in curve)
      ax.plot(
        epochs,
        [curve[str(e)] for e in epochs],
        lw=0.6,
        color="0.6",
        label=f"{names[0]} runs" if i == 0 else None,
      )
    rows = results[key]["rows"]
    epochs = [r["epoch"] for r in rows]
    ax.fill_between(
      epochs,
      [r["low"] for r in rows],
      [r["high"] for r in rows],
      color="C0",
      alpha=0.2,
      label=f"{names[0]}: 95 % prediction interval",
    )
    ax.plot(epochs, [r["mean"] for r in rows], color="C0", lw=1.2, label=f"{names[0]}: mean")
    probe = results[key]["probe_curve"]
    pe = sorted(int(e) for e in probe)
    ax.plot(pe, [probe[str(e)] for e in pe], color="C3", lw=1.4, label=names[1])
    ax.set_xlabel("epoch")
    ax.set_ylabel(key)
    ax.legend(fontsize=6)
  save(fig, path, dpi=110)


def _markdown(results: Dict[str, dict], names: Sequence[str], every: int, command: str) -> str:
  band, probe = names
  lines = [
    "# One run's curve against a band of runs",
    "",
    f"Written by `{command}`.",
    "",
    f"Band: {band} ({results[next(iter(results))]['band_runs']} runs); probe: {probe} (one "
    "run). PI: the band's 95 % prediction interval of one more run at that epoch; d = probe − "
    "band mean; r = d / |band mean| (bench/README.md, analysis/ band).",
    "",
    "| key | epochs compared | inside PI | above | below | mean d | mean abs r |",
    "|---|---|---|---|---|---|---|",
  ]
  for key, res in results.items():
    s = res["summary"]
    span = f"{s['epochs']} ({s['first']}–{s['last']})" if s["epochs"] else "0"
    lines.append(
      f"| {key} | {span} | {s['inside']} | {s['above']} | {s['below']} | "
      f"{s['mean_d']:+.4f} | {100 * s['mean_abs_r']:.1f} % |"
    )
  for key, res in results.items():
    rows = res["rows"]
    shown = [r for i, r in enumerate(rows) if r["epoch"] % every == 0 or i in (0, len(rows) - 1)]
    lines += [
      "",
      f"`{key}` by epoch (every {every} epochs, the first and the last):",
      "",
      f"| epoch | n | {band} mean | PI | {probe} | d | r | where |",
      "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
      f"| {r['epoch']} | {r['n']} | {r['mean']:.4f} | [{r['low']:.4f}, {r['high']:.4f}] | "
      f"{r['probe']:.4f} | {r['d']:+.4f} | {100 * r['r']:+.1f} % | {r['where']} |"
      for r in shown
    ]
  return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
  parser = common.argument_parser("band", __doc__)
  parser.add_argument("--band", required=True, help="comma-separated runs (at least 2)")
  parser.add_argument("--probe", required=True, help="the one run placed against the band")
  parser.add_argument("--names", default="band,probe", help="band name, probe name")
  parser.add_argument(
    "--keys", default=",".join(DEFAULT_KEYS), help="history keys compared (those both hold)"
  )
  parser.add_argument("--every", type=int, default=5, help="table rows every this many epochs")
  parser.add_argument("--out", default=None, help="folder for curve_band.md / .json / .png")
  return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = _parser().parse_args(argv)
  band_runs = [r for r in args.band.split(",") if r]
  names = [n.strip() for n in args.names.split(",")]
  if len(band_runs) < 2:
    sys.exit(f"error: --band needs at least 2 runs for an interval, got {len(band_runs)}")
  if len(names) != 2 or not all(names):
    sys.exit(f"error: --names needs two names (band, probe), got {args.names!r}")
  if args.every < 1:
    sys.exit(f"error: --every must be at least 1, got {args.every}")
  try:
    band = [load_history(r) for r in band_runs]
    probe = load_history(args.probe)
  except ValueError as e:
    sys.exit(f"error: {e}")
  results = {}
  for key in (k for k in args.keys.split(",") if k):
    rows = band_statistics(band, probe, key)
    if not rows:
      continue
    results[key] = dict(
      rows=rows,
      summary=summarise(rows),
      band_runs=len(band_runs),
      probe_curve={str(e): v for e, v in _by_epoch(probe, key).items()},
      band_curves=[{str(e): v for e, v in _by_epoch(h, key).items()} for h in band],
    )
  if not results:
    sys.exit(
      f"error: no epoch where the probe and two band runs all hold one of the keys {args.keys}"
    )
  command = common.command_line("band", argv)
  report = _markdown(results, names, args.every, command)
  if args.out:
    record = dict(command=command, names=names, band=band_runs, probe=args.probe, results=results)
    files = {"curve_band.md": report, "curve_band.json": json.dumps(record, indent=1)}
    out = common.write(pathlib.Path(args.out), files)
    _plot(results, names, out / "curve_band.png")
  print(report)
  print(
    "SUMMARY curve_band: "
    + "; ".join(
      f"{k} {r['summary']['inside']}/{r['summary']['epochs']} epochs inside the band's PI, "
      f"mean d {r['summary']['mean_d']:+.4f}"
      for k, r in results.items()
    )
  )
  return 0
