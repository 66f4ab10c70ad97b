r"""Cost of a two-tower training step against the catalog size |I|: sampled vs full softmax.

    python bench/catalog_size.py [--quick] [--sizes=10000,10000000] [--variants=...] [--out DIR]
    python bench/catalog_size.py --parameter_server --sizes=10000,100000,1000000 \
        --out=docs/results/catalog_size_ps   # one process vs 2 ps shards

Method, flags and measured results: bench/README.md, section `catalog_size.py`.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench.catalog import points  # noqa: E402
from bench.catalog.points import fmt_size  # noqa: E402
from bench.common.report import gib, markdown_header, markdown_row, summary_line  # noqa: E402


def _table(rows) -> list:
  """The markdown table of [dict(variant, num_items, result)]."""
  lines = markdown_header(
    "variant;\\|I\\|;min ms;median ms;peak RSS GiB;above import GiB;item table GiB;"
    "estimator MiB;table grad rows;loss".split(";")
  )
  for r in rows:
    m, size = r["result"], fmt_size(r["num_items"])
    if "skipped" in m or "error" in m:
      lines.append(f"| {r['variant']} | {size} | {m.get('skipped') or m['error']} ||||||||")
      continue
    peak = m["peak_rss_kib"]
    cells = [r["variant"], size, *points.time_cells(m), gib(peak)]
    cells += [gib(None if peak is None else peak - m["rss_import_kib"])]
    cells += [f"{m['table_bytes'] / 2**30:.3f}", f"{m['estimator_bytes'] / 2**20:.2f}"]
    lines.append(markdown_row([*cells, f"{m['table_grad_rows']}", f"{m['loss']:.3f}"]))
  return lines


def _plot(rows, path, batch: int, dim: int):
  title = (
    f"Two-tower step (B = {batch}, d = {dim}, sparse SGD unless @adam / @lazy_adam): sampled "
    "(mixed, corrected logQ) vs full softmax"
  )
  panels = (("median step time", "ms"), ("peak memory", "GiB"))
  with points.log_log_figure(path, title, panels) as (ax_t, ax_m):
    for variant in dict.fromkeys(r["variant"] for r in rows):
      pts = [r for r in rows if r["variant"] == variant and "times" in r["result"]]
      if not pts:
        continue
      x = [r["num_items"] for r in pts]
      ax_t.plot(x, [points.median_ms(r["result"]) for r in pts], "o-", label=variant)
      peaks = [(r["result"]["peak_rss_kib"] or 0) / 2**20 for r in pts]
      ax_m.plot(x, peaks, "o-", label=f"{variant} (peak RSS)")
    sizes = sorted({r["num_items"] for r in rows})
    ax_m.plot(sizes, [(n + 1) * dim * 4 / 2**30 for n in sizes], "k:", label="item table")


def _summary(rows, sizes) -> str:
  by: dict = {}
  for r in rows:
    if "times" in r["result"]:
      by.setdefault(r["variant"], []).append(r)
  if not by:
    return summary_line(["no point ran"])
  parts = []
  for variant, pts in by.items():
    med = [points.median_ms(p["result"]) for p in pts]
    part = (
      f"{variant} {med[0]:.0f} -> {med[-1]:.0f} ms "
      f"({fmt_size(pts[0]['num_items'])} -> {fmt_size(pts[-1]['num_items'])})"
    )
    if not variant.startswith("full"):
      est = [p["result"]["estimator_bytes"] / 2**20 for p in pts]
      part += f", estimator {est[0]:.1f} -> {est[-1]:.1f} MiB"
    parts.append(part)
  return summary_line(
    parts,
    head=f"median step, |I| {fmt_size(sizes[0])} -> {fmt_size(sizes[-1])}",
    note="shared machine: compare shapes",
  )


class OneProcess:
  """The default run: every variant at every size. The interface `main` drives (the other run:
  `bench.catalog.parameter_server.ParameterServer`): ``intro`` (the first line), ``sides(pass)``,
  ``measure(side, |I|)`` (one point), ``line(side, |I|, result)`` (its progress line) and
  ``write(results, ...)`` (the report; returns the summary line)."""

  def __init__(self, args, sizes, variants):
    self.args, self.sizes, self.variants = args, sizes, variants
    self.intro = (
      f"two-tower, B = {args.batch_size}, d = {args.dim}, {args.num_users} users, sparse SGD "
      "unless @adam / @lazy_adam; "
      f"{args.passes} passes x ({args.warmup} warm-up + {args.steps} timed steps) per point, "
      "each point in a process of its own (shared machine: absolute ms are noisy)"
    )

  def sides(self, sweep: int):
    return self.variants

  def measure(self, variant: str, v: int) -> dict:
    args = self.args
    need = points.full_softmax_bytes(args.batch_size, v, args.dim) / 2**30
    if variant.startswith("full") and need > args.max_gib:
      return dict(skipped=f"skipped: projected {need:.0f} GiB > --max_gib {args.max_gib:g}")
    if variant.endswith("@adam") and v > args.adam_max_items:
      return dict(skipped=f"skipped: > --adam_max_items {args.adam_max_items:g}")
    return points.run_point(dict(vars(args), variant=variant, num_items=v), args.timeout)

  def line(self, variant: str, v: int, result: dict) -> str:
    return _table([dict(variant=variant, num_items=v, result=result)])[-1]

  def write(self, results: dict, out, command: str, minutes: float) -> str:
    args, sizes = self.args, self.sizes
    rows = [
      dict(variant=variant, num_items=v, result=results[(variant, v)])
      for variant in self.variants
      for v in sizes
    ]
    lines = _table(rows)
    _plot(rows, out / "catalog_size.png", args.batch_size, args.dim)
    summary = _summary(rows, sizes)
    md = [
      "# Two-tower step cost against the catalog size",
      "",
      f"Produced by (on a 2-core CPU machine shared with other jobs; {minutes:.0f} min)",
      "",
      *points.fenced(command),
      f"B = {args.batch_size}, d = {args.dim}, {args.num_users} users (id tower), sparse SGD "
      "(tf.keras.optimizers.legacy.SGD) unless @adam (tf.keras.optimizers.Adam) or "
      "@lazy_adam (tfrs_logq.tf_keras.lazy_adam.LazyAdam); "
      f"{args.passes} passes over the points, each point {args.warmup} warm-up + "
      f"{args.steps} timed steps in a process of its own; min and median over the pooled "
      "steps. Absolute times are noisy (the machine is shared): compare the shapes of the "
      f"curves. Streaming estimators: {args.buckets} buckets (count-min depth 4). "
      'Peak RSS = VmHWM during the timed steps; "above import" subtracts the process\'s '
      'size after importing TensorFlow and the application; "table grad rows" = rows of '
      "the item table's gradient (|I| + 1 = a dense update). Definitions: "
      "bench/catalog_size.py.",
      "",
      *lines,
      "",
      summary,
      "",
      "![catalog size](catalog_size.png)",
      "",
    ]
    (out / "catalog_size.md").write_text("\n".join(md))
    print("\n".join(lines))
    print(f"wrote {out / 'catalog_size.png'} and {out / 'catalog_size.md'}")
    return summary


def _known(variant: str) -> bool:
  base, _, optimizer = variant.partition("@")
  bases = {v.partition("@")[0] for v in points.VARIANTS}
  return base in bases and optimizer in ("", *points.OPTIMIZERS)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  add = parser.add_argument
  add("--quick", action="store_true", help="1e4..1e6, 1 pass of 1 warm-up + 3 steps")
  add("--sizes", default="10000,100000,1000000,3000000,10000000", help="catalog sizes |I|")
  add("--variants", default=",".join(points.VARIANTS), help=f"of {points.VARIANTS}")
  for name, default in dict(batch_size=256, dim=64, num_users=10_000, seed=0).items():
    add(f"--{name}", type=int, default=default)
  add("--num_negatives", type=int, default=256, help="128 in-batch + 128 uniform")
  add("--buckets", type=int, default=2**20, help="hash-array size / count-min width")
  add("--passes", type=int, default=2, help="sweeps over all points, their steps pooled")
  add("--steps", type=int, default=4, help="timed steps per point and pass")
  add("--warmup", type=int, default=2, help="untimed steps per point and pass")
  add("--max_gib", type=float, default=8.0, help="skip full-softmax points projected above")
  add("--adam_max_items", type=float, default=1e6, help="skip @adam points above this |I|")
  add("--timeout", type=float, default=900, help="seconds per point")
  add("--parameter_server", action="store_true", help="one process vs ps (catalog_size_ps.md)")
  add("--ps_shards", type=int, default=2, help="--parameter_server: ps processes")
  add("--out", default=str(ROOT / "docs" / "results"), help="folder of the files written")
  args = parser.parse_args(argv)
  if args.quick:
    args.sizes, args.passes, args.steps, args.warmup = "10000,100000,1000000", 1, 3, 1
  sizes = sorted(int(float(s)) for s in args.sizes.split(",") if s)
  variants = [v for v in args.variants.split(",") if v]
  bad = [v for v in variants if not _known(v)]
  if bad or not sizes or sizes[0] < 1 or args.passes < 1 or args.steps < 1:
    raise ValueError(
      f"--variants must be from {points.VARIANTS}, optionally @{'|'.join(points.OPTIMIZERS)} "
      f"(got {bad}); --sizes, --passes and --steps positive"
    )
  # Imported once here, before any op runs; every point is a fork of this process.
  import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

  import tensorflow  # noqa: F401

  import train.config
  import train.objective
  import train.trainer  # noqa: F401

  command = "python bench/catalog_size.py " + " ".join(argv if argv is not None else sys.argv[1:])
  if args.parameter_server:
    from bench.catalog.parameter_server import ParameterServer

    bench = ParameterServer(args, sizes)
  else:
    bench = OneProcess(args, sizes, variants)
  print(bench.intro, flush=True)
  results: dict = {}
  started = time.time()
  for sweep in range(args.passes):
    for v in sizes:
      for side in bench.sides(sweep):
        result = bench.measure(side, v)
        results[(side, v)] = points.merge(results.get((side, v), {}), result)
        print(f"pass {sweep + 1}: " + bench.line(side, v, result), flush=True)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  print(bench.write(results, out, command.strip(), (time.time() - started) / 60))


if __name__ == "__main__":
  main()
