r"""Negative sampling cost per batch (uniform, in-batch, mixed, MIDX K, exact softmax); step cost.

    python -m bench.negatives [--quick] [--catalogs 10000,100000,1000000] [--codewords 16,64,128]
                              [--batch 256] [--k-u 256] [--dim 64] [--quantizer pq]
                              [--memory-slots 8192] [--optimizer adam] [--no-softmax]
                              [--out bench/out]

Set-up per catalog size |D|: an item embedding table [|D|, dim] (the candidate tower), an
``ExactCounts`` estimator with Zipf(1) counts, batches of ``--batch`` positives (= A queries)
drawn from the same Zipf(1) popularity. Each sampler runs as one compiled ``tf.function`` that
returns the step's negatives (ids, embeddings, log Q):

* ``uniform``: ``UniformNegatives`` (k_u = --k-u draws, embedding lookup, log Q = -log |D|);
* ``in_batch``: ``InBatchNegatives`` (positive embeddings gathered once, first-occurrence dedup,
  log q_uni from the estimator; all distinct positives kept);
* ``mixed``: ``MixedNegatives`` (both halves, ``mixture`` convention);
* ``midx_K``: ``MIDXSampler(num_codewords=K, quantizer=--quantizer).negatives(query, k_u,
  embed)`` after one ``refresh`` of the index (refresh time reported separately, it runs every N
  steps, not per step). Its sampling cost is O(A K d + A K^2 + A S): it must grow with K, not |D|;
* ``softmax``: exact softmax sampling, what MIDX approximates: scores [A, |D|] = query @ table^T,
  k_u categorical draws per query, log Q from the log-softmax, embedding lookup: O(A |D| d)
  (one call per round, --calls for the others; ``--no-softmax`` drops it).

Second table: the training binary's compiled two-tower step at each catalog size, built by
`bench.catalog.points.build_point` (id towers, ``Objective``: positive scores, negatives,
corrected sampled softmax; gradients, the --optimizer update: tf-keras Adam by default, the
binary's, O(|D| d) per step) with ``num_negatives = 2 k_u``: in-batch (every distinct positive
when 2 k_u >= --batch) vs mixed (k_u in-batch + k_u uniform); ratio mixed / in-batch is the
overhead of the uniform half. With ``--memory-slots S`` > 0 two more sides: mixed + the binary's
``--cross_batch`` memory of S slots (the last S / --batch batches' positives, pushed after each
step) in ``ids`` mode (scored with the current table, gradient into its rows) and in
``embeddings`` mode (stored outputs); their ratio to mixed is the memory's step overhead (the
memory is filled before timing).

Timing: --warmup calls, then --repeats rounds of --calls calls each, sides interleaved round by
round; per side min and median of the per-call mean over rounds, ratios against a baseline of the
same run (``in_batch``). Timings on a shared machine are noisy: compare ratios within one run.
Writes ``negatives_sampling.png`` (ms per batch vs |D|, a line per side) into --out. Last line:
one-line summary.
"""

import argparse
import itertools
import os
import pathlib
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras.frequency import ExactCounts
from tfrs_logq.tf_keras.negatives import InBatchNegatives, MixedNegatives, UniformNegatives
from tfrs_logq.tf_keras.negatives.midx import MIDXSampler

import numpy as np
import tensorflow as tf

from bench.catalog import points
from bench.common import plot, zipf
from bench.common.timing import min_median, time_interleaved

BASELINE = "in_batch"
MEMORY_MODES = ("ids", "embeddings")
STEP_VARIANTS = {"in_batch": "in_batch+exact", "mixed": "mixed+exact"} | {
  f"memory_{mode}": f"mixed+exact+{mode}" for mode in MEMORY_MODES
}


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--quick", action="store_true", help="small run: 10k and 100k, K in 16,64")
  p.add_argument("--catalogs", default="10000,100000,1000000")
  p.add_argument("--codewords", default="16,64,128")
  p.add_argument("--batch", type=int, default=256)
  p.add_argument("--k-u", type=int, default=256)
  p.add_argument("--dim", type=int, default=64)
  p.add_argument("--quantizer", default="pq", choices=["pq", "rq"], help="MIDX codebooks")
  p.add_argument("--no-softmax", action="store_true", help="no exact softmax sampling side")
  p.add_argument("--warmup", type=int, default=3)
  p.add_argument("--repeats", type=int, default=7)
  p.add_argument("--calls", type=int, default=5)
  p.add_argument("--num-users", type=int, default=10000)
  p.add_argument(
    "--memory-slots", type=int, default=0, help="slots of a cross-batch memory (0: no memory)"
  )
  p.add_argument("--optimizer", default="adam", choices=points.OPTIMIZERS, help="of the step")
  p.add_argument("--out", default="bench/out")
  args = p.parse_args(argv)
  if args.quick:
    args.catalogs, args.codewords = "10000,100000", "16,64"
    args.repeats, args.calls, args.warmup = 3, 3, 2
  args.catalogs = [int(v) for v in args.catalogs.split(",")]
  args.codewords = [int(v) for v in args.codewords.split(",")]
  return args


def time_sides(fns, args, calls=None):
  """{side: [per-call seconds per round]}; sides interleaved each round (rotated order). Each
  side makes ``calls.get(side, args.calls)`` calls per round (and as many warm-up calls, at
  most --warmup)."""
  n = {side: (calls or {}).get(side, args.calls) for side in fns}
  for side, fn in fns.items():
    for _ in range(min(args.warmup, n[side])):
      fn()

  def run(side, _):
    for _ in range(n[side]):
      fns[side]()

  times = time_interleaved(run, list(fns), args.repeats)
  return {side: [t / n[side] for t in v] for side, v in times.items()}


def sync(out):
  """Forces a result to the host (so asynchronous devices finish)."""
  for t in tf.nest.flatten(out):
    if isinstance(t, tf.Tensor):
      t.numpy()
  return out


def sampling_fns(size, args, rng, table_rows):
  probs = zipf.probabilities(size)
  estimator = ExactCounts(size, counts=np.maximum(np.round(probs * 1e8), 1).astype(np.int64))
  table = tf.Variable(rng.normal(scale=0.1, size=(size, args.dim)).astype(np.float32))
  batches = [tf.constant(rng.choice(size, size=args.batch, p=probs)) for _ in range(8)]
  embed = lambda ids: tf.gather(table, ids)
  in_batch = InBatchNegatives(estimator)
  uniform = UniformNegatives(embed, args.k_u, id_range=(0, size))
  mixed = MixedNegatives(InBatchNegatives(estimator), uniform, convention="mixture")
  queries = tf.constant(rng.normal(size=(args.batch, args.dim)).astype(np.float32))
  state = {"i": 0}

  def next_batch():
    state["i"] = (state["i"] + 1) % len(batches)
    return batches[state["i"]]

  f_uniform = tf.function(lambda: uniform())
  f_in_batch = tf.function(lambda ids: in_batch(ids, tf.gather(table, ids)))
  f_mixed = tf.function(lambda ids: mixed(ids, tf.gather(table, ids)))
  fns = {
    "uniform": lambda: sync(f_uniform()),
    "in_batch": lambda: sync(f_in_batch(next_batch())),
    "mixed": lambda: sync(f_mixed(next_batch())),
  }
  refresh = {}
  for k in args.codewords:
    sampler = MIDXSampler(num_codewords=k, quantizer=args.quantizer, seed=1)
    start = time.perf_counter()
    sync(sampler.refresh(table))
    refresh[k] = time.perf_counter() - start
    f_midx = tf.function(lambda s=sampler: s.negatives(queries, args.k_u, embed))
    fns[f"midx_K{k}"] = lambda f=f_midx: sync(f())
  table_rows.append((size, refresh))
  if not args.no_softmax:

    @tf.function
    def f_softmax():
      logits = tf.matmul(queries, table, transpose_b=True)
      ids = tf.random.stateless_categorical(logits, args.k_u, seed=[1, 2])
      log_q = tf.gather(tf.nn.log_softmax(logits), ids, batch_dims=1)
      return ids, embed(ids), log_q

    fns["softmax"] = lambda: sync(f_softmax())
  return fns


def step_fns(size, args):
  """{side: one call of its step}: the sides of `STEP_VARIANTS` (the memory ones with
  --memory-slots), each its own model from `bench.catalog.points.build_point`."""
  spec = dict(
    num_items=size,
    batch_size=args.batch,
    dim=args.dim,
    num_users=args.num_users,
    num_negatives=2 * args.k_u,
    buckets=2**20,
    seed=0,
    memory_slots=args.memory_slots,
  )
  fns = {}
  for side, variant in STEP_VARIANTS.items():
    if side.startswith("memory") and not args.memory_slots:
      continue
    built = points.build_point(dict(spec, variant=f"{variant}@{args.optimizer}"))
    step = tf.function(points.step_fn(built, lambda grads: tf.zeros([])))
    calls = itertools.count()
    fns[side] = lambda b=built, f=step, c=calls: sync(f(b.batches[next(c) % len(b.batches)]))
    memory = built.objective.memory
    for _ in range(memory.num_batches if memory is not None else 0):  # full before timing
      fns[side]()
  return fns


def summarize(times):
  return {side: tuple(x * 1e3 for x in min_median(v)) for side, v in times.items()}


def main(argv=None):
  args = parse_args(argv)
  rng = np.random.default_rng(0)
  device = "GPU" if tf.config.list_physical_devices("GPU") else "CPU"
  print(
    f"# negatives bench on {device} ({os.cpu_count()} threads), batch={args.batch}, "
    f"k_u={args.k_u}, dim={args.dim}, MIDX quantizer={args.quantizer}, "
    f"repeats={args.repeats} x {args.calls} calls (timings under load: compare ratios)"
  )
  sampling, refresh_rows, steps = {}, [], {}
  for size in args.catalogs:
    fns = sampling_fns(size, args, rng, refresh_rows)
    sampling[size] = summarize(time_sides(fns, args, calls={"softmax": 1}))
    steps[size] = summarize(time_sides(step_fns(size, args), args))

  sides = list(next(iter(sampling.values())))
  print("\n## sampling time per batch (ms): min / median; ratio of medians vs in_batch")
  print(f"{'|D|':>9} " + " ".join(f"{s:>22}" for s in sides))
  for size, res in sampling.items():
    base = res[BASELINE][1]
    cells = [f"{res[s][0]:7.2f}/{res[s][1]:7.2f} x{res[s][1] / base:5.2f}" for s in sides]
    print(f"{size:>9} " + " ".join(f"{c:>22}" for c in cells))

  print("\n## MIDX index refresh (s, once per N steps; k-means on <= 262144 items + assign all)")
  for size, refresh in refresh_rows:
    print(f"{size:>9} " + " ".join(f"K={k}: {t:7.2f}" for k, t in refresh.items()))

  print(f"\n## training step (ms): min / median; mixed vs in_batch (corrected, {args.optimizer})")
  for size, res in steps.items():
    ratio_min, ratio_med = (
      res["mixed"][0] / res["in_batch"][0],
      res["mixed"][1] / res["in_batch"][1],
    )
    print(
      f"{size:>9} in_batch {res['in_batch'][0]:7.2f}/{res['in_batch'][1]:7.2f}  "
      f"mixed {res['mixed'][0]:7.2f}/{res['mixed'][1]:7.2f}  "
      f"ratio min x{ratio_min:.2f} median x{ratio_med:.2f}"
    )
    for mode in MEMORY_MODES if args.memory_slots else ():
      m = res[f"memory_{mode}"]
      print(
        f"{size:>9} mixed + memory of {args.memory_slots} slots ({mode}) {m[0]:7.2f}/{m[1]:7.2f}"
        f"  vs mixed: min x{m[0] / res['mixed'][0]:.2f} median x{m[1] / res['mixed'][1]:.2f}"
      )

  out = pathlib.Path(args.out)
  fig, ax = plot.pyplot().subplots(figsize=(6, 4))
  sizes = list(sampling)
  for s in sides:
    ax.plot(sizes, [sampling[n][s][1] for n in sizes], marker="o", label=s)
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("catalog size |D|")
  ax.set_ylabel("median ms per batch")
  ax.set_title(f"negative sampling, batch {args.batch}, k_u {args.k_u} ({device})")
  ax.legend(fontsize=7)
  plot.save(fig, out / "negatives_sampling.png")
  print(f"\nplot: {out / 'negatives_sampling.png'}")

  small, large = sizes[0], sizes[-1]
  ks = args.codewords
  midx_cat = sampling[large][f"midx_K{ks[-1]}"][1] / sampling[small][f"midx_K{ks[-1]}"][1]
  midx_k = sampling[large][f"midx_K{ks[-1]}"][1] / sampling[large][f"midx_K{ks[0]}"][1]
  step_ratio = steps[large]["mixed"][1] / steps[large]["in_batch"][1]
  print(
    f"SUMMARY ({device}, median ms/batch at |D|={large}): uniform "
    f"{sampling[large]['uniform'][1]:.2f}, in_batch {sampling[large]['in_batch'][1]:.2f}, "
    f"mixed {sampling[large]['mixed'][1]:.2f}, MIDX K={ks[0]} "
    f"{sampling[large][f'midx_K{ks[0]}'][1]:.2f} / K={ks[-1]} "
    f"{sampling[large][f'midx_K{ks[-1]}'][1]:.2f}; MIDX K={ks[-1]} time x{midx_cat:.2f} "
    f"from |D|={small} to {large} vs x{midx_k:.2f} from K={ks[0]} to {ks[-1]}; "
    f"mixed/in_batch train step x{step_ratio:.2f}"
    + (
      ""
      if args.no_softmax
      else f"; exact softmax {sampling[small]['softmax'][1]:.1f} -> "
      f"{sampling[large]['softmax'][1]:.1f} ms from |D|={small} to {large}"
    )
    + "".join(
      f"; mixed+memory({args.memory_slots}, {mode})/mixed step x"
      f"{steps[large][f'memory_{mode}'][1] / steps[large]['mixed'][1]:.2f}"
      for mode in (MEMORY_MODES if args.memory_slots else ())
    )
  )


if __name__ == "__main__":
  main()
