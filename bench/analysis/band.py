"""One run's learning curve against a band of runs of another kind, epoch by epoch.

The prediction interval, the runs it reads, flags and outputs: bench/README.md, section
`analysis/` (band).
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Dict, List, Optional, Sequence

from bench import paper_loop
from bench.analysis import common
from bench.common.flags import csv
from bench.common.plot import pyplot, save
from eval import paired_stats

DEFAULT_KEYS = ("loss", "val_ndcg@10", "val_recall@20")
FLAGS = dict(
  band=(..., "comma-separated runs (at least 2)"),
  probe=(..., "the one run placed against the band"),
  names=("band,probe", "band name, probe name"),
  keys=(",".join(DEFAULT_KEYS), "history keys compared (those both hold)"),
  every=(5, "table rows every this many epochs"),
  out=(None, "folder for curve_band.md / .json / .png"),
)
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
    (low, high), mean = pi["ci"], pi["mean"]
    rows.append(
      dict(
        epoch=epoch,
        n=len(values),
        band=values,
        mean=mean,
        std=pi["std"],
        low=low,
        high=high,
        probe=a,
        d=a - mean,
        r=(a - mean) / abs(mean) if mean else float("nan"),
        where="inside" if low <= a <= high else ("above" if a > high else "below"),
      )
    )
  return rows


def summarise(rows: List[dict]) -> dict:
  """Epochs compared, counts inside / above / below, mean d and mean |r| over ``rows``."""
  n = len(rows)
  counts = {where: sum(r["where"] == where for r in rows) for where in ("inside", "above", "below")}
  return dict(
    epochs=n,
    first=rows[0]["epoch"] if rows else None,
    last=rows[-1]["epoch"] if rows else None,
    **counts,
    mean_d=sum(r["d"] for r in rows) / n if n else float("nan"),
    mean_abs_r=sum(abs(r["r"]) for r in rows) / n if n else float("nan"),
  )


def _plot(results: Dict[str, dict], names: Sequence[str], path: pathlib.Path) -> None:
  band, probe = names
  fig, axes = pyplot().subplots(1, len(results), figsize=(5 * len(results), 3.6), squeeze=False)
  for ax, (key, res) in zip(axes[0], results.items()):
    for i, curve in enumerate(res["band_curves"]):
      ax.plot(
        *zip(*sorted(curve.items())), lw=0.6, color="0.6", label=f"{band} runs" if i == 0 else None
      )
    epochs = [r["epoch"] for r in res["rows"]]
    low, high = [r["low"] for r in res["rows"]], [r["high"] for r in res["rows"]]
    ax.fill_between(
      epochs, low, high, color="C0", alpha=0.2, label=f"{band}: 95 % prediction interval"
    )
    ax.plot(epochs, [r["mean"] for r in res["rows"]], color="C0", lw=1.2, label=f"{band}: mean")
    ax.plot(*zip(*sorted(res["probe_curve"].items())), color="C3", lw=1.4, label=probe)
    ax.set(xlabel="epoch", ylabel=key)
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
  ]
  summary = []
  for key, res in results.items():
    s = res["summary"]
    span = f"{s['epochs']} ({s['first']}–{s['last']})" if s["epochs"] else "0"
    counts = [s["inside"], s["above"], s["below"]]
    summary.append([key, span, *counts, f"{s['mean_d']:+.4f}", f"{100 * s['mean_abs_r']:.1f} %"])
  header = ["key", "epochs compared", "inside PI", "above", "below", "mean d", "mean abs r"]
  lines += common.table(header, summary)
  for key, res in results.items():
    rows = res["rows"]
    shown = [r for i, r in enumerate(rows) if r["epoch"] % every == 0 or i in (0, len(rows) - 1)]
    lines += ["", f"`{key}` by epoch (every {every} epochs, the first and the last):", ""]
    lines += common.table(
      ["epoch", "n", f"{band} mean", "PI", probe, "d", "r", "where"],
      [
        [r["epoch"], r["n"], f"{r['mean']:.4f}", f"[{r['low']:.4f}, {r['high']:.4f}]"]
        + [f"{r['probe']:.4f}", f"{r['d']:+.4f}", f"{100 * r['r']:+.1f} %", r["where"]]
        for r in shown
      ],
    )
  return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = common.parser("band", __doc__, FLAGS).parse_args(argv)
  band_runs = csv(args.band)
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
  for key in csv(args.keys):
    rows = band_statistics(band, probe, key)
    if rows:
      results[key] = dict(
        rows=rows,
        summary=summarise(rows),
        band_runs=len(band_runs),
        probe_curve=_by_epoch(probe, key),  # {epoch: value}
        band_curves=[_by_epoch(h, key) for h in band],
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
    _plot(results, names, common.write(pathlib.Path(args.out), files) / "curve_band.png")
  print(report)
  parts = [
    f"{k} {r['summary']['inside']}/{r['summary']['epochs']} epochs inside the band's PI, "
    f"mean d {r['summary']['mean_d']:+.4f}"
    for k, r in results.items()
  ]
  print("SUMMARY curve_band: " + "; ".join(parts))
  return 0
