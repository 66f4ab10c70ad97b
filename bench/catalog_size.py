r"""Cost of a two-tower training step against the catalog size |I|: sampled vs full softmax.

    python bench/catalog_size.py            # |I| = 1e4 .. 1e7, ~5-10 min on 2 shared CPU cores
    python bench/catalog_size.py --quick    # 1e4 .. 1e6, fewer steps
    python bench/catalog_size.py --sizes=10000,10000000 --variants=mixed+hash_array,full
    python bench/catalog_size.py --parameter_server --sizes=10000,100000,1000000 \
        --out=docs/results/catalog_size_ps   # one process vs 2 ps shards
                                             # (bench/catalog/parameter_server.py)

Model: `models.TwoTower` with a user-id query tower (U = 10,000 users, no history) and an item
table [|I| + 1, d = 64], built, like the loss, by the training binary's own code
(`train.trainer.build_model`, `build_estimator`, `train.objective.Objective` from a
`train.config.RunConfig`). Batches of B = 256 (user, item) pairs, items drawn from a Zipf(1)-like
popularity (id = floor(exp(u log(|I| + 1))), u ~ U(0, 1), P(i) = log((i + 1) / i) / log(|I| + 1)).
One step = the objective, its gradient and a plain SGD update with
``tf.keras.optimizers.legacy.SGD``, which scatters the sparse gradient into the rows it names.
(Measured here: tf-keras's current optimizers, ``tf.keras.optimizers.SGD`` and ``Adam``, cost
O(|I| d) per step even for a sparse gradient -- about 2 s and 4 s per step at |I| = 1e6, d = 64,
whatever the loss -- and Adam's slots add two tables of memory; the ``@adam`` series shows it.)

Variants:
* ``mixed+exact|hash_array|count_min``: sampled softmax with mixed negatives (128 in-batch,
  deduplicated, + 128 uniform shared by the batch; the library samplers), corrected logQ, Q(d)
  from exact counts (a table of |I| + 1 int64) or a streaming hash array / count-min sketch of a
  FIXED size (``--buckets`` = 2^20; depth 4), updated every step;
* ``full``: the full softmax over all |I| items ([B, |I|] logits). A point whose projected memory,
  4 bytes x (3 B |I| + 4 (|I| + 1) d), exceeds ``--max_gib`` is not run (listed as skipped);
* ``...@adam``: the same with ``tf.keras.optimizers.Adam`` (the training binary's default
  optimizer) instead of the sparse SGD, up to ``--adam_max_items`` items;
* ``...@lazy_adam``: with ``tfrs_logq.tf_keras.lazy_adam.LazyAdam``
(``--table_optimizer=lazy_adam``):
  Adam whose sparse table gradients update only their rows, at every size.

Each point runs in a process of its own (forked after the imports), one after the other:
``--warmup`` untimed steps, then ``--steps`` timed ones; ``--passes`` sweeps over all points,
their timed steps pooled. Reported per point: min / median ms per step, peak resident set during
the timed steps (VmHWM, reset after the warm-up) and the same above the process's size after
importing TensorFlow, the item table's size, the estimator's state (bytes of its variables), the
number of rows of the item table's gradient (sparse IndexedSlices naming the batch's and the
negatives' rows: the update costs O((B + k) d); |I| + 1 rows: O(|I| d)), and the loss. The sampled
step must stay flat in |I| and the streaming estimators' memory constant.
Points run at different moments of a shared machine: compare shapes of curves, not single ms.

Writes ``--out``/catalog_size.png (time and memory against |I|, log-log) and catalog_size.md
(the table and the command). The last line is a one-line summary.

``--parameter_server``: instead, ``mixed+hash_array@lazy_adam`` on one process against the same
point on a local parameter-server cluster (``--ps_shards`` ps processes + 1 worker, the point's
process as chief), the two sides alternating in every pass; step time, the memory of every
process, bytes moved per step (measured on the ps sockets and computed from the step's tensors)
and a 1e8 memory projection; writes catalog_size_ps.md / .json (bench/catalog/parameter_server.py).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from bench.catalog import points  # noqa: E402
from bench.common.report import gib, markdown_header, markdown_row, summary_line  # noqa: E402
from bench.common.timing import min_median  # noqa: E402


def _table(rows) -> list:
  lines = markdown_header(
    [
      "variant",
      "\\|I\\|",
      "min ms",
      "median ms",
      "peak RSS GiB",
      "above import GiB",
      "item table GiB",
      "estimator MiB",
      "table grad rows",
      "loss",
    ]
  )
  for r in rows:
    m = r["result"]
    if "skipped" in m or "error" in m:
      lines.append(
        f"| {r['variant']} | {points.fmt_size(r['num_items'])} | "
        f"{m.get('skipped') or m['error']} ||||||||"
      )
      continue
    t_min, t_med = min_median(np.array(m["times"]) * 1e3)
    peak = m["peak_rss_kib"]
    lines.append(
      markdown_row(
        [
          r["variant"],
          points.fmt_size(r["num_items"]),
          f"{t_min:.1f}",
          f"{t_med:.1f}",
          gib(peak),
          gib(None if peak is None else peak - m["rss_import_kib"]),
          f"{m['table_bytes'] / 2**30:.3f}",
          f"{m['estimator_bytes'] / 2**20:.2f}",
          f"{m['table_grad_rows']}",
          f"{m['loss']:.3f}",
        ]
      )
    )
  return lines


def _plot(rows, path):
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
  for variant in dict.fromkeys(r["variant"] for r in rows):
    pts = [r for r in rows if r["variant"] == variant and "times" in r["result"]]
    if not pts:
      continue
    x = [r["num_items"] for r in pts]
    ax_t.plot(x, [statistics.median(r["result"]["times"]) * 1e3 for r in pts], "o-", label=variant)
    ax_m.plot(
      x,
      [(r["result"]["peak_rss_kib"] or 0) / 2**20 for r in pts],
      "o-",
      label=f"{variant} (peak RSS)",
    )
  sizes = sorted({r["num_items"] for r in rows})
  ax_m.plot(sizes, [(n + 1) * 64 * 4 / 2**30 for n in sizes], "k:", label="item table")
  points.log_log_axes(((ax_t, "median step time", "ms"), (ax_m, "peak memory", "GiB")))
  fig.suptitle(
    "Two-tower step (B = 256, d = 64, sparse SGD unless @adam / @lazy_adam): sampled "
    "(mixed, corrected logQ) vs full softmax",
    fontsize=10,
  )
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def _summary(rows, sizes) -> str:
  by = {}
  for r in rows:
    if "times" in r["result"]:
      by.setdefault(r["variant"], []).append(r)
  if not by:
    return summary_line(["no point ran"])
  parts = []
  for variant, pts in by.items():
    med = [statistics.median(p["result"]["times"]) * 1e3 for p in pts]
    part = (
      f"{variant} {med[0]:.0f} -> {med[-1]:.0f} ms "
      f"({points.fmt_size(pts[0]['num_items'])} -> {points.fmt_size(pts[-1]['num_items'])})"
    )
    if not variant.startswith("full"):
      est = [p["result"]["estimator_bytes"] / 2**20 for p in pts]
      part += f", estimator {est[0]:.1f} -> {est[-1]:.1f} MiB"
    parts.append(part)
  return summary_line(
    parts,
    head=f"median step, |I| {points.fmt_size(sizes[0])} -> {points.fmt_size(sizes[-1])}",
    note="shared machine: compare shapes",
  )


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument(
    "--quick", action="store_true", help="1e4..1e6, 1 pass of 1 warm-up + 3 steps"
  )
  parser.add_argument(
    "--sizes",
    default="10000,100000,1000000,3000000,10000000",
    help="comma-separated catalog sizes |I|",
  )
  parser.add_argument(
    "--variants", default=",".join(points.VARIANTS), help=f"comma-separated, from {points.VARIANTS}"
  )
  parser.add_argument("--batch_size", type=int, default=256)
  parser.add_argument("--dim", type=int, default=64)
  parser.add_argument("--num_users", type=int, default=10_000)
  parser.add_argument("--num_negatives", type=int, default=256, help="128 in-batch + 128 uniform")
  parser.add_argument(
    "--buckets",
    type=int,
    default=2**20,
    help="hash-array size / count-min width (fixed, whatever |I|)",
  )
  parser.add_argument(
    "--passes",
    type=int,
    default=2,
    help="sweeps over all points (their steps are pooled: a point slowed by "
    "a burst of load in one pass is not in the other)",
  )
  parser.add_argument("--steps", type=int, default=4, help="timed steps per point and pass")
  parser.add_argument("--warmup", type=int, default=2, help="untimed steps per point and pass")
  parser.add_argument(
    "--max_gib",
    type=float,
    default=8.0,
    help="skip full-softmax points projected above this memory",
  )
  parser.add_argument(
    "--adam_max_items",
    type=float,
    default=1e6,
    help="skip @adam points above this catalog size (O(|I|) per step)",
  )
  parser.add_argument("--timeout", type=float, default=900, help="seconds per point")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument(
    "--parameter_server",
    action="store_true",
    help="instead: mixed+hash_array@lazy_adam on one process vs a local "
    "parameter-server cluster, interleaved (bench/catalog/parameter_server.py); "
    "writes catalog_size_ps.md",
  )
  parser.add_argument(
    "--ps_shards", type=int, default=2, help="--parameter_server: ps processes (the tables' shards)"
  )
  parser.add_argument(
    "--out",
    default=str(ROOT / "docs" / "results"),
    help="folder for catalog_size.png and catalog_size.md",
  )
  args = parser.parse_args(argv)
  if args.quick:
    args.sizes, args.passes, args.steps, args.warmup = "10000,100000,1000000", 1, 3, 1
  sizes = sorted(int(float(s)) for s in args.sizes.split(",") if s)
  variants = [v for v in args.variants.split(",") if v]
  bases = {v.partition("@")[0] for v in points.VARIANTS}
  bad = [
    v
    for v in variants
    if v.partition("@")[0] not in bases or v.partition("@")[2] not in ("",) + points.OPTIMIZERS
  ]
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
    from bench.catalog import parameter_server as catalog_ps

    print(catalog_ps.main_ps(args, command))
    return
  print(
    f"two-tower, B = {args.batch_size}, d = {args.dim}, {args.num_users} users, sparse SGD "
    "unless @adam / @lazy_adam; "
    f"{args.passes} passes x ({args.warmup} warm-up + {args.steps} timed steps) per point, "
    "each point in a process of its own (shared machine: absolute ms are noisy)",
    flush=True,
  )
  results = {}
  started = time.time()
  for sweep in range(args.passes):
    for v in sizes:
      for variant in variants:
        spec = dict(
          variant=variant,
          num_items=v,
          batch_size=args.batch_size,
          dim=args.dim,
          num_users=args.num_users,
          num_negatives=args.num_negatives,
          buckets=args.buckets,
          steps=args.steps,
          warmup=args.warmup,
          seed=args.seed,
        )
        need = points.full_softmax_bytes(args.batch_size, v, args.dim) / 2**30
        if variant.startswith("full") and need > args.max_gib:
          result = dict(skipped=f"skipped: projected {need:.0f} GiB > --max_gib {args.max_gib:g}")
        elif variant.endswith("@adam") and v > args.adam_max_items:
          result = dict(skipped=f"skipped: > --adam_max_items {args.adam_max_items:g}")
        else:
          result = points.run_point(spec, args.timeout)
        key = (variant, v)
        results[key] = points.merge(results[key], result) if key in results else result
        row = dict(variant=variant, num_items=v, result=result)
        print(f"pass {sweep + 1}: " + _table([row])[-1], flush=True)
  rows = [
    dict(variant=variant, num_items=v, result=results[(variant, v)])
    for variant in variants
    for v in sizes
  ]
  lines = _table(rows)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  _plot(rows, out / "catalog_size.png")
  summary = _summary(rows, sizes)
  md = [
    "# Two-tower step cost against the catalog size",
    "",
    "Produced by (on a 2-core CPU machine shared with other jobs; "
    f"{(time.time() - started) / 60:.0f} min)",
    "",
    "```",
    command.strip(),
    "```",
    "",
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
  print(summary)


if __name__ == "__main__":
  main()
