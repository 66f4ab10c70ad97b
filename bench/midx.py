r"""MIDX sampling cost across catalog sizes and codebook sizes (claim: it grows with K, not N).

For each catalog size N and number of codewords K, builds the index (``refresh``, timed once) on
random clustered item embeddings and times ``MIDXSampler.sample(queries [A, d], S)`` inside a
tf.function. Baselines measured in the same run on the same queries: exact softmax sampling
(scores [A, N] = z @ items^T / T, then a categorical draw: O(A N d)) and uniform sampling (O(A S)).
Timings: min and median of ``--repeats`` calls after one warm-up call.

    python -m bench.midx                     # N in 10k,100k,1M; K in 16,32,64,128
    python -m bench.midx --quick             # N in 10k,100k; K in 16,64; fewer repeats
    python -m bench.midx --out bench/out     # also writes bench/out/midx_sampling_time.png

The last line printed is a one-line summary.
"""

import argparse
import os
import time

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras.negatives.midx import MIDXSampler

import numpy as np
import tensorflow as tf

from bench.common.report import ruled
from bench.common.timing import time_calls


def clustered_items(n, d, clusters, rng):
  centers = rng.normal(size=(clusters, d)).astype(np.float32)
  centers /= np.linalg.norm(centers, axis=1, keepdims=True)
  labels = rng.integers(0, clusters, size=n)
  noise = rng.normal(size=(n, d)).astype(np.float32) * (0.5 / np.sqrt(d))
  return centers[labels] + noise


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--catalogs", default="10000,100000,1000000")
  parser.add_argument("--codewords", default="16,32,64,128")
  parser.add_argument("--queries", type=int, default=256, help="A (queries per batch)")
  parser.add_argument("--samples", type=int, default=128, help="S (negatives per query)")
  parser.add_argument("--dim", type=int, default=64)
  parser.add_argument("--quantizer", default="pq", choices=["pq", "rq"])
  parser.add_argument("--kmeans-iterations", type=int, default=5)
  parser.add_argument("--repeats", type=int, default=10)
  parser.add_argument("--quick", action="store_true", help="N in 10k,100k; K in 16,64; 5 repeats")
  parser.add_argument("--out", default="bench/out", help="folder for the PNG ('' for none)")
  args = parser.parse_args(argv)
  if args.quick:
    args.catalogs, args.codewords, args.repeats = "10000,100000", "16,64", 5
  catalogs = [int(v) for v in args.catalogs.split(",")]
  codewords = [int(v) for v in args.codewords.split(",")]
  rng = np.random.default_rng(0)
  a, s, d, temperature = args.queries, args.samples, args.dim, 0.1
  queries = tf.constant(clustered_items(a, d, 32, rng))
  print(
    f"MIDX sampling time per batch: A={a} queries, S={s} samples, d={d}, quantizer="
    f"{args.quantizer}, CPU threads={os.cpu_count()} (machine shared: timings under load), "
    f"min / median of {args.repeats} calls"
  )
  header = (
    f"{'N':>9} {'K':>5} {'refresh s':>10} {'midx min ms':>12} {'midx med ms':>12} "
    f"{'softmax min ms':>15} {'uniform min ms':>15} {'softmax/midx':>13}"
  )
  print("\n".join(ruled(header)))
  rows = []
  for n in catalogs:
    items = tf.constant(clustered_items(n, d, 64, rng))

    @tf.function
    def exact_softmax(z, items=items):
      logits = tf.matmul(z, items, transpose_b=True) / temperature
      return tf.random.stateless_categorical(logits, s, seed=[1, 2])

    @tf.function
    def uniform(z, n=n):
      return tf.random.stateless_uniform([tf.shape(z)[0], s], [3, 4], 0, n, dtype=tf.int64)

    softmax_min, softmax_med = time_calls(lambda: exact_softmax(queries).numpy(), args.repeats)
    uniform_min, _ = time_calls(lambda: uniform(queries).numpy(), args.repeats)
    for k in codewords:
      sampler = MIDXSampler(
        num_codewords=k,
        quantizer=args.quantizer,
        temperature=temperature,
        seed=0,
        kmeans_iterations=args.kmeans_iterations,
        kmeans_max_points=65536,
      )
      start = time.perf_counter()
      sampler.refresh(items)
      refresh_s = time.perf_counter() - start
      draw = tf.function(lambda z, sampler=sampler, s=s: sampler.sample(z, s))
      midx_min, midx_med = time_calls(lambda draw=draw: draw(queries)[0].numpy(), args.repeats)
      rows.append(
        dict(
          n=n,
          k=k,
          refresh=refresh_s,
          midx_min=midx_min,
          midx_med=midx_med,
          softmax_min=softmax_min,
          softmax_med=softmax_med,
          uniform_min=uniform_min,
        )
      )
      print(
        f"{n:>9} {k:>5} {refresh_s:>10.2f} {1e3 * midx_min:>12.2f} {1e3 * midx_med:>12.2f} "
        f"{1e3 * softmax_min:>15.2f} {1e3 * uniform_min:>15.3f} "
        f"{softmax_min / midx_min:>13.1f}",
        flush=True,
      )
    del items

  if args.out:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(args.out, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for n in catalogs:
      sel = [r for r in rows if r["n"] == n]
      ax.plot(
        [r["k"] for r in sel],
        [1e3 * r["midx_min"] for r in sel],
        marker="o",
        label=f"MIDX, N={n:,}",
      )
      ax.axhline(
        1e3 * sel[0]["softmax_min"],
        linestyle="--",
        color=ax.lines[-1].get_color(),
        label=f"exact softmax, N={n:,}",
      )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("codewords per codebook K")
    ax.set_ylabel("ms per batch (min)")
    ax.set_title(f"sampling A={a}, S={s}, d={d} (CPU, shared)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(args.out, "midx_sampling_time.png")
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")

  k_ref = codewords[len(codewords) // 2]
  at_k = {r["n"]: r for r in rows if r["k"] == k_ref}
  lo, hi = min(at_k), max(at_k)
  k_lo, k_hi = min(codewords), max(codewords)
  by_k = {r["k"]: r for r in rows if r["n"] == hi}
  print(
    f"summary: MIDX K={k_ref} sample {1e3 * at_k[lo]['midx_min']:.1f} ms at N={lo:,} vs "
    f"{1e3 * at_k[hi]['midx_min']:.1f} ms at N={hi:,} "
    f"(x{at_k[hi]['midx_min'] / at_k[lo]['midx_min']:.2f}"
    f" for x{hi // lo} items); at N={hi:,} K={k_lo}->{k_hi}: "
    f"{1e3 * by_k[k_lo]['midx_min']:.1f}->{1e3 * by_k[k_hi]['midx_min']:.1f} ms; exact softmax "
    f"{1e3 * at_k[lo]['softmax_min']:.1f}->{1e3 * at_k[hi]['softmax_min']:.1f} ms"
  )


if __name__ == "__main__":
  main()
