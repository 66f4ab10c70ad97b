r"""Negative sampling cost per batch (uniform, in-batch, mixed, MIDX K, exact softmax); step cost.

    python -m bench.negatives [--quick] [--catalogs 10000,100000,1000000] [--codewords 16,64,128]
                              [--batch 256] [--k-u 256] [--dim 64] [--quantizer pq]
                              [--memory-slots 8192] [--optimizer adam] [--no-softmax]
                              [--out bench/out]

Sides, timing and measured results: bench/README.md, section `negatives.py`.
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
  most --warmup), each result forced to the host."""
  n = {side: (calls or {}).get(side, args.calls) for side in fns}
  for side, fn in fns.items():
    for _ in range(min(args.warmup, n[side])):
      sync(fn())

  def run(side, _):
    for _ in range(n[side]):
      sync(fns[side]())

  times = time_interleaved(run, list(fns), args.repeats)
  return {side: [t / n[side] for t in v] for side, v in times.items()}


def sync(out):
  """Forces a result to the host (so asynchronous devices finish)."""
  for t in tf.nest.flatten(out):
    if isinstance(t, tf.Tensor):
      t.numpy()
  return out


def sampling_fns(size, args, rng):
  """({side: one call of its sampler}, {K: seconds of the MIDX index refresh})."""
  probs = zipf.probabilities(size)
  estimator = ExactCounts(size, counts=np.maximum(np.round(probs * 1e8), 1).astype(np.int64))
  table = tf.Variable(rng.normal(scale=0.1, size=(size, args.dim)).astype(np.float32))
  batches = [tf.constant(rng.choice(size, size=args.batch, p=probs)) for _ in range(8)]
  embed = lambda ids: tf.gather(table, ids)
  in_batch = InBatchNegatives(estimator)
  uniform = UniformNegatives(embed, args.k_u, id_range=(0, size))
  mixed = MixedNegatives(InBatchNegatives(estimator), uniform, convention="mixture")
  queries = tf.constant(rng.normal(size=(args.batch, args.dim)).astype(np.float32))
  batch = itertools.cycle(batches)
  f_in_batch = tf.function(lambda ids: in_batch(ids, embed(ids)))
  f_mixed = tf.function(lambda ids: mixed(ids, embed(ids)))
  fns = {
    "uniform": tf.function(lambda: uniform()),
    "in_batch": lambda: f_in_batch(next(batch)),
    "mixed": lambda: f_mixed(next(batch)),
  }
  refresh = {}
  for k in args.codewords:
    sampler = MIDXSampler(num_codewords=k, quantizer=args.quantizer, seed=1)
    start = time.perf_counter()
    sync(sampler.refresh(table))
    refresh[k] = time.perf_counter() - start
    fns[f"midx_K{k}"] = tf.function(lambda s=sampler: s.negatives(queries, args.k_u, embed))
  if not args.no_softmax:

    @tf.function
    def softmax():
      logits = tf.matmul(queries, table, transpose_b=True)
      ids = tf.random.stateless_categorical(logits, args.k_u, seed=[1, 2])
      log_q = tf.gather(tf.nn.log_softmax(logits), ids, batch_dims=1)
      return ids, embed(ids), log_q

    fns["softmax"] = softmax
  return fns, refresh


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
    batches = itertools.cycle(built.batches)
    fns[side] = lambda f=step, b=batches: f(next(b))
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
  sampling, refresh, steps = {}, {}, {}
  for size in args.catalogs:
    fns, refresh[size] = sampling_fns(size, args, rng)
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
  for size, by_k in refresh.items():
    print(f"{size:>9} " + " ".join(f"K={k}: {t:7.2f}" for k, t in by_k.items()))

  print(f"\n## training step (ms): min / median; mixed vs in_batch (corrected, {args.optimizer})")
  modes = MEMORY_MODES if args.memory_slots else ()
  for size, res in steps.items():
    (b_min, b_med), (m_min, m_med) = res["in_batch"], res["mixed"]
    print(
      f"{size:>9} in_batch {b_min:7.2f}/{b_med:7.2f}  mixed {m_min:7.2f}/{m_med:7.2f}  "
      f"ratio min x{m_min / b_min:.2f} median x{m_med / b_med:.2f}"
    )
    for mode in modes:
      c_min, c_med = res[f"memory_{mode}"]
      print(
        f"{size:>9} mixed + memory of {args.memory_slots} slots ({mode}) {c_min:7.2f}/{c_med:7.2f}"
        f"  vs mixed: min x{c_min / m_min:.2f} median x{c_med / m_med:.2f}"
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
  at_small, at_large = ({side: t[1] for side, t in sampling[n].items()} for n in (small, large))
  step = {side: t[1] for side, t in steps[large].items()}
  k0, k1 = args.codewords[0], args.codewords[-1]
  midx0, midx1 = f"midx_K{k0}", f"midx_K{k1}"
  parts = [
    f"uniform {at_large['uniform']:.2f}, in_batch {at_large['in_batch']:.2f}, mixed "
    f"{at_large['mixed']:.2f}, MIDX K={k0} {at_large[midx0]:.2f} / K={k1} {at_large[midx1]:.2f}",
    f"MIDX K={k1} time x{at_large[midx1] / at_small[midx1]:.2f} from |D|={small} to {large} vs "
    f"x{at_large[midx1] / at_large[midx0]:.2f} from K={k0} to {k1}",
    f"mixed/in_batch train step x{step['mixed'] / step['in_batch']:.2f}",
  ]
  if not args.no_softmax:
    parts.append(
      f"exact softmax {at_small['softmax']:.1f} -> {at_large['softmax']:.1f} ms from "
      f"|D|={small} to {large}"
    )
  parts += [
    f"mixed+memory({args.memory_slots}, {mode})/mixed step x"
    f"{step[f'memory_{mode}'] / step['mixed']:.2f}"
    for mode in modes
  ]
  print(f"SUMMARY ({device}, median ms/batch at |D|={large}): " + "; ".join(parts))


if __name__ == "__main__":
  main()
