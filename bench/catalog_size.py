r"""Cost of a two-tower training step against the catalog size |I|: sampled vs full softmax.

    python bench/catalog_size.py            # |I| = 1e4 .. 1e7, ~5-10 min on 2 shared CPU cores
    python bench/catalog_size.py --quick    # 1e4 .. 1e6, fewer steps
    python bench/catalog_size.py --sizes=10000,10000000 --variants=mixed+hash_array,full

Model: `models.TwoTower` with a user-id query tower (U = 10,000 users, no history) and an item
table [|I| + 1, d = 64], built, like the loss, by the training binary's own code
(`train.trainer.build_model`, `build_estimator`, `train.objective.Objective` from a
`train.config.RunConfig`). Batches of B = 256 (user, item) pairs, items drawn from a Zipf(1)-like
popularity (id = floor(exp(u log(|I| + 1))), u ~ U(0, 1), P(i) = log((i + 1) / i) / log(|I| + 1)).
One step = the objective, its gradient and a plain SGD update (SGD touches only the rows the
gradient names; Adam's dense slots would add two more tables and O(|I|) work per step whatever
the loss).

Variants:
* ``mixed+exact|hash_array|count_min``: sampled softmax with mixed negatives (128 in-batch,
  deduplicated, + 128 uniform shared by the batch; the library samplers), corrected logQ, Q(d)
  from exact counts (a table of |I| + 1 int64) or a streaming hash array / count-min sketch of a
  FIXED size (``--buckets`` = 2^20; depth 4), updated every step;
* ``full``: the full softmax over all |I| items ([B, |I|] logits). A point whose projected memory,
  4 bytes x (3 B |I| + 4 (|I| + 1) d), exceeds ``--max_gib`` is not run (listed as skipped).

Each point runs in its own subprocess, one after the other: ``--warmup`` untimed steps, then
``--steps`` timed ones. Reported per point: min / median ms per step, peak resident set during the
timed steps (VmHWM, reset after the warm-up) and the same above the process's size after importing
TensorFlow, the item table's size, the estimator's state (bytes of its variables), the number of rows of the
item table's gradient (sparse IndexedSlices naming the batch's and the negatives' rows: the update
costs O((B + k) d); |I| + 1 rows: O(|I| d)), and the loss. The sampled step must stay flat in |I| and the streaming estimators' memory constant.
Points run at different moments of a shared machine: compare shapes of curves, not single ms.

Writes ``--out``/catalog_size.png (time and memory against |I|, log-log) and catalog_size.md
(the table and the command). The last line is a one-line summary.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
import types

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

VARIANTS = ("mixed+exact", "mixed+hash_array", "mixed+count_min", "full")
_REPLY = "@@"


def full_softmax_bytes(batch: int, num_items: int, dim: int) -> int:
  """Projected memory of a full-softmax step: logits, their softmax and gradient [B, |I|],
  plus the table, its gathered copy, its dense gradient and one spare [|I| + 1, d]."""
  return 4 * (3 * batch * num_items + 4 * (num_items + 1) * dim)


def zipf_probabilities(num_items: int) -> np.ndarray:
  """P(i) = log((i + 1) / i) / log(|I| + 1) for i = 1..|I| (index 0 = 0): the law of
  floor(exp(u log(|I| + 1))) with u ~ U(0, 1)."""
  i = np.arange(1, num_items + 1, dtype=np.float64)
  return np.concatenate([[0.0], np.log1p(1.0 / i) / np.log(num_items + 1.0)])


def zipf_ids(rng: np.random.Generator, num_items: int, size: int) -> np.ndarray:
  ids = np.floor(np.exp(rng.random(size) * np.log(num_items + 1.0))).astype(np.int64)
  return np.clip(ids, 1, num_items)


def _status_kib(field: str) -> int:
  m = re.search(rf"^{field}:\s+(\d+) kB", pathlib.Path("/proc/self/status").read_text(), re.M)
  return int(m.group(1)) if m else 0


def _point(spec: dict) -> dict:
  """One (variant, |I|) point, in this (sub)process; returns the measurements."""
  import tfrs_logq  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from train.config import RunConfig  # pylint: disable=g-import-not-at-top
  from train import trainer as trainer_lib  # pylint: disable=g-import-not-at-top
  from train.objective import Objective  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel("ERROR")
  rss_import = _status_kib("VmRSS")
  v, b, d, users = spec["num_items"], spec["batch_size"], spec["dim"], spec["num_users"]
  variant = spec["variant"]
  loss, _, frequency = variant.partition("+")
  settings = dict(model="two_tower", use_user_id=True, use_history=False, embedding_dim=d,
                  batch_size=b, seed=spec["seed"], progress=False,
                  loss="full_softmax" if loss == "full" else "sampled_softmax")
  if loss != "full":
    settings.update(negatives="mixed", num_negatives=spec["num_negatives"],
                    uniform_negatives="batch", logq="corrected", frequency=frequency,
                    frequency_buckets=spec["buckets"])
  cfg = RunConfig.create(**settings)
  p = zipf_probabilities(v)
  data = types.SimpleNamespace(num_items=v, num_users=users,
                               item_counts=np.round(p * 1e9).astype(np.int64))
  model = trainer_lib.build_model(cfg, data).build_all()
  estimator = trainer_lib.build_estimator(cfg, data) if loss != "full" else None
  del data, p
  objective = Objective(cfg, model, v, estimator)
  optimizer = tf.keras.optimizers.SGD(0.05)
  variables = model.trainable_variables
  optimizer.build(variables)
  step = tf.Variable(0, dtype=tf.int64)
  table = model.candidate_tower.item_embedding.embeddings
  rng = np.random.default_rng(spec["seed"])
  batches = [dict(user_id=tf.constant(rng.integers(1, users + 1, b)),
                  item_id=tf.constant(zipf_ids(rng, v, b))) for _ in range(4)]

  @tf.function
  def train_step(batch):
    with tf.GradientTape() as tape:
      terms = objective(batch, step, training=True)
    grads = tape.gradient(terms["loss"], variables)
    rows = tf.constant(-1, tf.int64)
    for var, g in zip(variables, grads):
      if var is table and g is not None:
        rows = (tf.size(g.indices, out_type=tf.int64) if isinstance(g, tf.IndexedSlices)
                else tf.shape(g, out_type=tf.int64)[0])
    optimizer.apply_gradients([(g, var) for g, var in zip(grads, variables) if g is not None])
    step.assign_add(1)
    return terms["loss"], rows

  rss_setup = _status_kib("VmRSS")
  for i in range(spec["warmup"]):
    train_step(batches[i % 4])[0].numpy()
  reset = True
  try:
    pathlib.Path("/proc/self/clear_refs").write_text("5")
  except OSError:
    reset = False
  times, value, rows = [], float("nan"), -1
  for i in range(spec["steps"]):
    start = time.perf_counter()
    value, rows = (float(t) for t in train_step(batches[i % 4]))
    times.append(time.perf_counter() - start)
  state = (sum(int(np.prod(w.shape)) * w.dtype.size for w in estimator.weights)
           if estimator is not None else 0)
  return dict(times=times, loss=value, peak_rss_kib=_status_kib("VmHWM") if reset else None,
              rss_import_kib=rss_import, rss_setup_kib=rss_setup,
              table_bytes=int(np.prod(table.shape)) * 4, estimator_bytes=state,
              table_grad_rows=int(rows))


def _run_point(spec: dict, timeout: float) -> dict:
  """`_point` in a fresh subprocess (each point's memory on its own)."""
  with tempfile.TemporaryFile("w+") as log:
    proc = subprocess.run([sys.executable, __file__, "--_point", json.dumps(spec)],
                          stdout=subprocess.PIPE, stderr=log, text=True, timeout=timeout,
                          cwd=str(ROOT), check=False)
    for line in proc.stdout.splitlines():
      if line.startswith(_REPLY + " "):
        return json.loads(line[len(_REPLY) + 1:])
    log.seek(0)
    tail = log.read()[-2000:]
  return dict(error=f"exit {proc.returncode}: {tail.strip().splitlines()[-1] if tail else ''}")


def _fmt_size(n: int) -> str:
  e = int(round(np.log10(n)))
  return f"1e{e}" if 10 ** e == n else f"{n:.0e}".replace("+0", "").replace("+", "")


def _table(rows, args) -> list:
  lines = ["| variant | \\|I\\| | min ms | median ms | peak RSS GiB | above import GiB | "
           "item table GiB | estimator MiB | table grad rows | loss |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    m = r["result"]
    if "skipped" in m or "error" in m:
      lines.append(f"| {r['variant']} | {_fmt_size(r['num_items'])} | "
                   f"{m.get('skipped') or m['error']} ||||||||")
      continue
    t = np.array(m["times"]) * 1e3
    peak = m["peak_rss_kib"]
    gib = lambda kib: "-" if kib is None else f"{kib / 2 ** 20:.2f}"
    lines.append(
        f"| {r['variant']} | {_fmt_size(r['num_items'])} | {t.min():.1f} | "
        f"{statistics.median(t):.1f} | {gib(peak)} | "
        f"{gib(None if peak is None else peak - m['rss_import_kib'])} | "
        f"{m['table_bytes'] / 2 ** 30:.3f} | {m['estimator_bytes'] / 2 ** 20:.2f} | "
        f"{m['table_grad_rows']} | {m['loss']:.3f} |")
  return lines


def _plot(rows, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
  for variant in dict.fromkeys(r["variant"] for r in rows):
    pts = [r for r in rows if r["variant"] == variant and "times" in r["result"]]
    if not pts:
      continue
    x = [r["num_items"] for r in pts]
    ax_t.plot(x, [statistics.median(r["result"]["times"]) * 1e3 for r in pts], "o-",
              label=variant)
    ax_m.plot(x, [(r["result"]["peak_rss_kib"] or 0) / 2 ** 20 for r in pts], "o-",
              label=f"{variant} (peak RSS)")
  sizes = sorted({r["num_items"] for r in rows})
  ax_m.plot(sizes, [(n + 1) * 64 * 4 / 2 ** 30 for n in sizes], "k:", label="item table")
  for ax, title, unit in ((ax_t, "median step time", "ms"), (ax_m, "peak memory", "GiB")):
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("catalog size |I|")
    ax.set_ylabel(unit)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
  fig.suptitle("Two-tower step (B = 256, d = 64, SGD): sampled (mixed, corrected logQ) vs full "
               "softmax", fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true", help="1e4..1e6, 1 warm-up + 3 steps")
  parser.add_argument("--sizes", default="10000,100000,1000000,3000000,10000000",
                      help="comma-separated catalog sizes |I|")
  parser.add_argument("--variants", default=",".join(VARIANTS),
                      help=f"comma-separated, from {VARIANTS}")
  parser.add_argument("--batch_size", type=int, default=256)
  parser.add_argument("--dim", type=int, default=64)
  parser.add_argument("--num_users", type=int, default=10_000)
  parser.add_argument("--num_negatives", type=int, default=256, help="128 in-batch + 128 uniform")
  parser.add_argument("--buckets", type=int, default=2 ** 20,
                      help="hash-array size / count-min width (fixed, whatever |I|)")
  parser.add_argument("--steps", type=int, default=6, help="timed steps per point")
  parser.add_argument("--warmup", type=int, default=2, help="untimed steps per point")
  parser.add_argument("--max_gib", type=float, default=8.0,
                      help="skip full-softmax points projected above this memory")
  parser.add_argument("--timeout", type=float, default=900, help="seconds per point")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", default=str(ROOT / "docs" / "results"),
                      help="folder for catalog_size.png and catalog_size.md")
  parser.add_argument("--_point", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args._point:  # pylint: disable=protected-access
    result = _point(json.loads(args._point))  # pylint: disable=protected-access
    print(f"{_REPLY} {json.dumps(result)}", flush=True)
    return
  if args.quick:
    args.sizes, args.steps, args.warmup = "10000,100000,1000000", 3, 1
  sizes = [int(float(s)) for s in args.sizes.split(",") if s]
  variants = [v for v in args.variants.split(",") if v]
  bad = [v for v in variants if v not in VARIANTS]
  if bad or not sizes or min(sizes) < 1:
    raise ValueError(f"--variants must be from {VARIANTS} (got {bad}) and --sizes positive")
  command = "python bench/catalog_size.py " + " ".join(argv if argv is not None else sys.argv[1:])
  print(f"two-tower, B = {args.batch_size}, d = {args.dim}, {args.num_users} users, SGD; "
        f"{args.warmup} warm-up + {args.steps} timed steps per point, each point in its own "
        f"process (shared machine: absolute ms are noisy)", flush=True)
  rows = []
  for v in sizes:
    for variant in variants:
      spec = dict(variant=variant, num_items=v, batch_size=args.batch_size, dim=args.dim,
                  num_users=args.num_users, num_negatives=args.num_negatives,
                  buckets=args.buckets, steps=args.steps, warmup=args.warmup, seed=args.seed)
      need = full_softmax_bytes(args.batch_size, v, args.dim) / 2 ** 30
      if variant == "full" and need > args.max_gib:
        result = dict(skipped=f"skipped: projected {need:.0f} GiB > --max_gib {args.max_gib:g}")
      else:
        start = time.time()
        try:
          result = _run_point(spec, args.timeout)
        except subprocess.TimeoutExpired:
          result = dict(error=f"timeout after {args.timeout:g} s")
        result["wall_s"] = time.time() - start
      rows.append(dict(variant=variant, num_items=v, result=result))
      print(_table([rows[-1]], args)[-1], flush=True)
  lines = _table(rows, args)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  _plot(rows, out / "catalog_size.png")
  sampled = [r for r in rows if r["variant"].startswith("mixed") and "times" in r["result"]]
  summary = "summary: no sampled point ran"
  if sampled:
    by = {}
    for r in sampled:
      by.setdefault(r["variant"], []).append(r)
    parts = []
    for variant, pts in by.items():
      med = [statistics.median(p["result"]["times"]) * 1e3 for p in pts]
      est = [p["result"]["estimator_bytes"] / 2 ** 20 for p in pts]
      parts.append(f"{variant} {med[0]:.0f} -> {med[-1]:.0f} ms, estimator {est[0]:.1f} -> "
                   f"{est[-1]:.1f} MiB")
    full = [r for r in rows if r["variant"] == "full" and "times" in r["result"]]
    tail = ""
    if full:
      tail = (f"; full softmax {statistics.median(full[0]['result']['times']) * 1e3:.0f} -> "
              f"{statistics.median(full[-1]['result']['times']) * 1e3:.0f} ms "
              f"({_fmt_size(full[0]['num_items'])} -> {_fmt_size(full[-1]['num_items'])})")
    summary = (f"summary: |I| {_fmt_size(sizes[0])} -> {_fmt_size(sizes[-1])}: "
               + "; ".join(parts) + tail)
  md = ["# Two-tower step cost against the catalog size", "",
        "Produced by", "", "```", command.strip(), "```", "",
        f"B = {args.batch_size}, d = {args.dim}, {args.num_users} users (id tower), SGD, "
        f"{args.warmup} warm-up + {args.steps} timed steps per point, each point in its own "
        f"process on a shared 2-core CPU machine (absolute times are noisy; compare the shape of "
        f"the curves). Streaming estimators: {args.buckets} buckets (count-min depth 4). "
        "Peak RSS = VmHWM during the timed steps; \"above import\" subtracts the process's size "
        "after importing TensorFlow. See bench/catalog_size.py for the definitions.", "",
        *lines, "", summary, "", "![catalog size](catalog_size.png)", ""]
  (out / "catalog_size.md").write_text("\n".join(md))
  print("\n".join(lines))
  print(f"wrote {out / 'catalog_size.png'} and {out / 'catalog_size.md'}")
  print(summary)


if __name__ == "__main__":
  main()
