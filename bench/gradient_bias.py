r"""Relative bias of the sampled-softmax gradient for each logQ correction (Monte Carlo).

    python bench/gradient_bias.py [--quick] [--out bench/out]

Method, flags and measured results: bench/README.md, section `gradient_bias.py`.
"""

import argparse
import os
import pathlib
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import losses

import numpy as np
import tensorflow as tf

from bench.common import plot as plot_lib
from bench.common import zipf
from bench.common.flags import add_flags
from bench.common.report import ruled

VARIANTS = {  # variant: its column in the tables
  "none": "none",
  "standard": "standard",
  "standard_no_positive": "std_no_pos",
  "corrected": "corrected",
  "corrected_proxy": "corr_proxy",
  "corrected_no_w": "corr_no_w",
}
FLAGS = {  # --flag: (default, help), bench.common.flags' table
  "num_items": (2000, None),
  "score_std": (1.75, None),
  "zipf": (1.0, "Zipf exponent of Q"),
  "positive_prob": ([0.05, 0.2], "P(p|u) values of the positive (one panel row each)"),
  "ranks": ([1, 5, 50, 1000], "popularity ranks of the positive under Q (1 = head)"),
  "ns": ([16, 32, 64, 128, 256, 512, 1024], "negatives per row"),
  "draws": (8000, "Monte Carlo rows per (P, rank, n)"),
  "chunk": (1000, "rows per TF call (memory)"),
  "batches": (40, "batch means for the MC error"),
  "embedding_dim": (32, None),
  "seed": (0, None),
}
QUICK = {"draws": 2000, "ns": [16, 64, 256, 1024], "positive_prob": [0.2], "ranks": [1, 50, 1000]}


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  add_flags(p, FLAGS, dashes=True)
  p.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parent / "out"))
  quick = ", ".join(
    f"{k} {','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in QUICK.items()
  )
  p.add_argument("--quick", action="store_true", help=f"short run: {quick}")
  args = p.parse_args(argv)
  if args.quick:
    vars(args).update(QUICK)
  if args.draws % args.batches or args.chunk % (args.draws // args.batches):
    raise SystemExit(
      "--draws must be a multiple of --batches and --chunk a multiple of draws/batches"
    )
  if not all(1 <= r <= args.num_items for r in args.ranks):
    raise SystemExit(f"--ranks must be in [1, {args.num_items}]")
  if not all(0 < x < 1 for x in args.positive_prob):
    raise SystemExit("--positive-prob values must be in (0, 1)")
  return args


def catalog(args, positive, positive_prob):
  """Item embeddings C [D, k] and scores s = C q (query q [k]) with softmax(s)_p = P(p|u)."""
  rng = np.random.default_rng(args.seed)
  emb = rng.normal(size=(args.num_items, args.embedding_dim))
  q = rng.normal(size=args.embedding_dim)
  q *= args.score_std / np.linalg.norm(q)
  s = emb @ q
  odds = positive_prob / (1 - positive_prob)
  target = np.log(odds) + np.log(np.sum(np.exp(np.delete(s, positive))))
  emb[positive] += (target - s[positive]) * q / np.dot(q, q)
  return emb, emb @ q


def full_gradient(s, positive):
  """g_full = softmax(s) - onehot(p)."""
  e = np.exp(s - s.max())
  g = e / e.sum()
  g[positive] -= 1.0
  return g


def row_gradients(s, log_q, positive, ids, variant):
  """Per-row d loss / d s_p [A] and d loss / d s_i [A, n] for one variant (TF, float32)."""
  rows = ids.shape[0]
  correction = "corrected" if variant.startswith("corrected") else variant
  pos = tf.constant(np.full(rows, s[positive]), tf.float32)
  neg = tf.constant(s[ids], tf.float32)
  with tf.GradientTape() as tape:
    tape.watch([pos, neg])
    out = losses.sampled_softmax_loss(
      pos,
      neg,
      tf.constant(log_q[ids], tf.float32),
      correction=correction,
      positive_log_q=tf.constant(np.full(rows, log_q[positive]), tf.float32),
      valid_mask=tf.constant(ids != positive),
      q_prime="proxy" if variant == "corrected_proxy" else "exact",
    )
    total = tf.reduce_sum(out.loss)
  d_pos, d_neg = tape.gradient(total, [pos, neg])
  d_pos, d_neg = d_pos.numpy().astype(np.float64), d_neg.numpy().astype(np.float64)
  if variant == "corrected_no_w":
    w = out.weight.numpy().astype(np.float64)
    safe = np.where(w > 0, w, 1.0)  # w = 0 only for rows with no valid negative (grad 0)
    d_pos, d_neg = d_pos / safe, d_neg / safe[:, None]
  return d_pos, d_neg


def batch_sums(d_pos, d_neg, ids, positive, num_items, batch_size):
  """Per-batch sums of the scattered per-row gradients: [rows / batch_size, D]."""
  nb = ids.shape[0] // batch_size
  batch = np.arange(ids.shape[0]) // batch_size
  sums = np.bincount(
    (batch[:, None] * num_items + ids).ravel(), weights=d_neg.ravel(), minlength=nb * num_items
  ).reshape(nb, num_items)
  sums[:, positive] += np.bincount(batch, weights=d_pos, minlength=nb)
  return sums


def bias_and_se(batch_means, target, project=None):
  """Relative ||mean - target|| and the relative MC standard error of the mean."""
  if project is not None:
    batch_means, target = batch_means @ project, target @ project
  mean = batch_means.mean(axis=0)
  se = np.sqrt(np.sum(batch_means.var(axis=0, ddof=1)) / batch_means.shape[0])
  norm = np.linalg.norm(target)
  return np.linalg.norm(mean - target) / norm, se / norm


def measure(args):
  """results[(P, rank, n, variant)] = (score bias, score se, query-emb bias, query-emb se)."""
  log_q = np.log(zipf.probabilities(args.num_items, args.zipf))
  batch_size = args.draws // args.batches
  results = {}
  for prob in args.positive_prob:
    for rank in args.ranks:
      positive = rank - 1
      emb, s = catalog(args, positive, prob)
      g_full = full_gradient(s, positive)
      for n in args.ns:
        rng = np.random.default_rng([args.seed, rank, n])  # same draws for every variant
        sums = {v: [] for v in VARIANTS}
        for _ in range(args.draws // args.chunk):
          ids = rng.choice(args.num_items, size=(args.chunk, n), p=np.exp(log_q))
          for v in VARIANTS:
            d_pos, d_neg = row_gradients(s, log_q, positive, ids, v)
            sums[v].append(batch_sums(d_pos, d_neg, ids, positive, args.num_items, batch_size))
        for v in VARIANTS:
          means = np.concatenate(sums[v]) / batch_size
          results[(prob, rank, n, v)] = bias_and_se(means, g_full) + bias_and_se(
            means, g_full, project=emb
          )
  return results, log_q


def print_tables(args, results, log_q):
  for title, k in (
    ("relative bias of the score gradient (+- MC standard error)", 0),
    ("relative bias of the query-embedding gradient C^T g (+- MC s.e.)", 2),
  ):
    print(f"\n{title}")
    columns = " ".join(f"{short:>17}" for short in VARIANTS.values())
    print("\n".join(ruled(f"{'P(p)':>5} {'rank':>5} {'Q(p)':>9} {'n':>5} {columns}")))
    for prob in args.positive_prob:
      for rank in args.ranks:
        for n in args.ns:
          cells = " ".join(
            "{:8.4f}+-{:6.4f}".format(*results[(prob, rank, n, v)][k : k + 2]) for v in VARIANTS
          )
          print(f"{prob:5.2f} {rank:5d} {np.exp(log_q[rank - 1]):9.2e} {n:5d} {cells}")


def plot(args, results, path):
  rows, cols = len(args.positive_prob), len(args.ranks)
  fig, axes = plot_lib.pyplot().subplots(
    rows, cols, figsize=(4 * cols, 3.4 * rows), squeeze=False, sharex=True, sharey=True
  )
  for i, prob in enumerate(args.positive_prob):
    for j, rank in enumerate(args.ranks):
      ax = axes[i][j]
      for v in VARIANTS:
        bias, se = zip(*(results[(prob, rank, n, v)][:2] for n in args.ns))
        style = "--" if v in ("corrected_proxy", "corrected_no_w") else "-"
        ax.errorbar(args.ns, bias, yerr=se, marker="o", ms=3, label=v, linestyle=style)
      se = [results[(prob, rank, n, "corrected")][1] for n in args.ns]
      ax.plot(args.ns, se, color="gray", linestyle=":", label="MC s.e. (corrected)")
      ax.set_xscale("log", base=2)
      ax.set_yscale("log")
      ax.set_title(f"P(p|u)={prob:g}, positive rank {rank}", fontsize=9)
      ax.grid(True, which="both", alpha=0.3)
      if i == rows - 1:
        ax.set_xlabel("negatives n")
      if j == 0:
        ax.set_ylabel("||E[g] - g_full|| / ||g_full||")
  handles, labels = axes[0][0].get_legend_handles_labels()
  fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
  fig.suptitle(
    f"Sampled-softmax gradient bias, |D|={args.num_items}, Zipf({args.zipf:g}) "
    f"proposal, {args.draws} draws",
    fontsize=10,
  )
  plot_lib.save(fig, path, rect=(0, 0.06, 1, 1))


def main(argv=None):
  args = parse_args(argv)
  start = time.time()
  results, log_q = measure(args)
  print_tables(args, results, log_q)
  png = pathlib.Path(args.out) / "gradient_bias.png"
  plot(args, results, png)
  print(f"\nplot: {png}  ({time.time() - start:.0f} s)")
  prob = 0.2 if 0.2 in args.positive_prob else args.positive_prob[-1]
  head, n_mid = args.ranks[0], min(args.ns, key=lambda n: abs(n - 256))
  r = {v: results[(prob, head, n_mid, v)][0] for v in VARIANTS}
  lo, hi = args.ns[0], args.ns[-1]
  c_lo, c_hi = (results[(prob, head, n, "corrected")][0] for n in (lo, hi))
  max_se = max(v[1] for v in results.values())
  print(
    f"SUMMARY gradient_bias: P(p)={prob:g}, rank-{head} positive, n={n_mid}: corrected "
    f"{r['corrected']:.4f} vs standard {r['standard']:.4f}, standard_no_positive "
    f"{r['standard_no_positive']:.4f}, none {r['none']:.4f}, corrected w/o w "
    f"{r['corrected_no_w']:.4f}; corrected falls {c_lo:.4f} -> {c_hi:.4f} from n={lo} to "
    f"n={hi} (max MC s.e. {max_se:.4f})"
  )


if __name__ == "__main__":
  main()
