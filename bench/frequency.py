"""Benchmark of the Q(d) frequency estimators: speed and memory, accuracy, adaptation to a shift.

    python bench/frequency.py [--quick] [--out bench/out] [--skip speed,accuracy,shift]

Method, flags and measured results: bench/README.md, section `frequency.py`.
"""

import argparse
import functools
import os
import pathlib
import time

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras.frequency import CountMinSketch, ExactCounts, HashArrayEstimator

import numpy as np
import tensorflow as tf

from bench.common import memory, plot, zipf
from bench.common.timing import time_calls

VOCAB = 1_000_000
EXPONENT = 1.05


def zipf_stream(rng, steps, batch, cdf):
  """[steps, batch] ids, id k has popularity rank k. Sorted within a step (order in a step is
  irrelevant to every estimator), which makes the inverse-CDF search fast."""
  u = np.sort(rng.random((steps, batch)), axis=1)
  return np.minimum(np.searchsorted(cdf, u), len(cdf) - 1).astype(np.int64)


class MutableHashTableCounts(tf.Module):
  """Baseline: exact counts in a tf.lookup.experimental.MutableHashTable (CPU-only kernels)."""

  def __init__(self):
    super().__init__()
    self.table = tf.lookup.experimental.MutableHashTable(tf.int64, tf.int64, default_value=0)
    self.total = tf.Variable(0, dtype=tf.int64, trainable=False)

  def update(self, ids):
    distinct, _, counts = tf.unique_with_counts(ids)
    self.table.insert(distinct, self.table.lookup(distinct) + tf.cast(counts, tf.int64))
    self.total.assign_add(tf.size(ids, out_type=tf.int64))

  def log_q(self, ids):
    c = tf.maximum(tf.cast(self.table.lookup(ids), tf.float32), 1.0)
    return tf.math.log(c) - tf.math.log(tf.maximum(tf.cast(self.total, tf.float32), 1.0))


def time_steps(fn, data, repeats):
  """Seconds per step: fn runs a tf.range loop over data's steps; min and median of repeats."""
  t_min, t_med = time_calls(lambda: fn(data).numpy(), repeats)  # the first call traces
  return t_min / int(data.shape[0]), t_med / int(data.shape[0])


def estimator_loop(est):
  @tf.function
  def run(data):
    acc = tf.constant(0.0)
    for i in tf.range(tf.shape(data)[0]):
      est.update(data[i])
      acc += tf.reduce_sum(est.log_q(data[i]))
    return acc

  return run


def stand_in_train_step(vocab=VOCAB, dim=128, hidden=256):
  table = tf.Variable(tf.random.normal([vocab, dim], stddev=0.01))
  w = tf.Variable(tf.random.normal([dim, hidden], stddev=0.05))

  @tf.function
  def run(data):
    acc = tf.constant(0.0)
    for i in tf.range(tf.shape(data)[0]):
      with tf.GradientTape() as tape:
        x = tf.gather(table, data[i])
        loss = tf.reduce_mean(tf.square(tf.nn.relu(tf.matmul(x, w))))
      g_table, g_w = tape.gradient(loss, [table, w])
      table.scatter_sub(tf.IndexedSlices(0.1 * g_table.values, g_table.indices))
      w.assign_sub(0.1 * g_w)
      acc += loss
    return acc

  return run


def bench_speed(args, rng, cdf):
  steps = 5 if args.quick else 20
  repeats = 3 if args.quick else 5
  data = tf.constant(zipf_stream(rng, steps, 25_600, cdf))
  base_min, base_med = time_steps(stand_in_train_step(), data, repeats)
  candidates = {
    "exact counts (table 1M)": lambda: ExactCounts(VOCAB),
    "MutableHashTable exact": MutableHashTableCounts,
  }
  for log_h in (20, 22):
    h = 2**log_h
    candidates |= {
      f"hash arrays m=2 H=2^{log_h}": lambda h=h: HashArrayEstimator(h, 2, alpha=0.001),
      f"count-min 4×2^{log_h}": lambda h=h: CountMinSketch(width=h, depth=4),
      f"count-min 4×2^{log_h} cons+decay": lambda h=h: CountMinSketch(
        width=h, depth=4, conservative=True, half_life=1000
      ),
    }
  rows = {}
  for name, make in candidates.items():
    est = make()
    t_min, t_med = time_steps(estimator_loop(est), data, repeats)
    if isinstance(est, MutableHashTableCounts):
      mem = int(est.table.size().numpy()) * 16  # keys + values only: a lower bound
    else:
      mem = memory.weights_bytes(est)
    rows[name] = (t_min, t_med, mem)
  print(
    f"\n== speed: update + log_q of 25,600 ids per step ({steps} steps × {repeats} repeats, "
    "2 shared CPU cores under load) =="
  )
  print(f"stand-in training step: min {base_min * 1e3:.1f} ms, median {base_med * 1e3:.1f} ms")
  print(
    f"{'estimator':34s} {'min ms':>8s} {'med ms':>8s} {'Mids/s':>8s} {'MiB':>8s} "
    f"{'% step':>7s} {'vs MHT':>7s}"
  )
  mht = rows["MutableHashTable exact"][0]
  for name, (t_min, t_med, mem) in rows.items():
    print(
      f"{name:34s} {t_min * 1e3:8.2f} {t_med * 1e3:8.2f} {25_600 / t_min / 1e6:8.2f} "
      f"{mem / 2**20:8.1f} {100 * t_min / base_min:6.1f}% {t_min / mht:6.2f}x"
    )
  return {name: 100 * t[0] / base_min for name, t in rows.items()}


def stream_runner(estimators):
  """A function feeding a [steps, batch] numpy stream to all estimators (traced once)."""

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64)])
  def run(x):
    for i in tf.range(tf.shape(x)[0]):
      for est in estimators:
        est.update(x[i])

  def feed(stream):
    for chunk in np.array_split(stream, max(1, len(stream) // 500)):
      run(tf.constant(chunk))

  return feed


def bench_accuracy(args, rng, p, cdf):
  steps = 800 if args.quick else 4000
  stream = zipf_stream(rng, steps, 4096, cdf)
  top = tf.range(1000, dtype=tf.int64)
  count_min = functools.partial(CountMinSketch, epsilon=1e-4, delta=0.01)
  ests = {
    "hash arrays H=2^22 m=2 α=0.001": HashArrayEstimator(2**22, 2, alpha=0.001),
    "count-min ε=1e-4 δ=0.01": count_min(),
    "count-min ε=1e-4 δ=0.01 conservative": count_min(conservative=True),
    "exact counts": ExactCounts(VOCAB),
  }
  t0 = time.perf_counter()
  stream_runner(list(ests.values()))(stream)
  elapsed = time.perf_counter() - t0
  counts = np.bincount(stream.ravel(), minlength=VOCAB)[:1000].astype(np.float64)
  n = stream.size
  print(
    f"\n== accuracy: Zipf({EXPONENT}) over 1M items, {steps} steps × 4096 ids "
    f"({elapsed:.0f} s for all four) — top-1000 items =="
  )
  print(
    f"{'estimator':40s} {'reference':>10s} {'max rel':>8s} {'mean rel':>8s} {'max |ΔQ|/ε':>10s}"
  )
  results = {}
  for name, est in ests.items():
    q = np.exp(est.log_q(top).numpy().astype(np.float64))
    ref_name, ref = ("true p", p[:1000]) if "hash" in name else ("#d/N", counts / n)
    rel = np.abs(q / ref - 1)
    bound = (
      f"{np.max(np.abs(q - counts / n)) / est.epsilon:10.3f}"
      if isinstance(est, CountMinSketch)
      else f"{'':10s}"
    )
    print(f"{name:40s} {ref_name:>10s} {rel.max():8.4f} {rel.mean():8.4f} {bound}")
    results[name] = rel.max()
  return results


def bench_shift(args, rng, p, cdf):
  alpha = 0.01
  before, after = (200, 400) if args.quick else (400, 800)
  every = 10
  hash_est = HashArrayEstimator(2**22, 2, alpha=alpha)
  cms = CountMinSketch(width=2**20, depth=4, half_life=np.log(2) / alpha)
  new_top = tf.constant(VOCAB - 1 - np.arange(1000), tf.int64)  # the new head after reversal
  old_top = tf.range(1000, dtype=tf.int64)
  feed = stream_runner([hash_est, cms])
  head, tail = p[:1000], p[::-1][:1000]  # Q of the 1000 most / least popular ranks
  curve = []
  for t0 in range(0, before + after, every):
    chunk = zipf_stream(rng, every, 4096, cdf)
    if t0 >= before:
      chunk = VOCAB - 1 - chunk
    feed(chunk)
    t = t0 + every
    true_new, true_old = (head, tail) if t > before else (tail, head)
    row = [t]
    for est in (hash_est, cms):
      q_new = np.exp(est.log_q(new_top).numpy().astype(np.float64))
      q_old = np.exp(est.log_q(old_top).numpy().astype(np.float64))
      row += [np.median(np.abs(q_new / true_new - 1)), np.median(q_old / true_old)]
    curve.append(row)
  curve = np.array(curve)
  since = (curve[:, 0] - before) * alpha
  print(
    f"\n== distribution shift: popularity reversed at step {before}, α = {alpha} "
    f"(1/α = {1 / alpha:.0f} steps); new head = the 1000 items most popular after it =="
  )
  print(
    f"{'steps after /(1/α)':>18s} {'hash med rel err new head':>26s} "
    f"{'hash med Q̂/Q old head':>22s} {'cms-decay med rel err new':>26s}"
  )
  for i in range(len(curve)):
    if since[i] in (-1, 0.1, 0.5, 1, 2, 3, 4, 6, 8) or i == len(curve) - 1:
      print(f"{since[i]:18.1f} {curve[i, 1]:26.4f} {curve[i, 2]:22.3g} {curve[i, 3]:26.4f}")
  adapted = since[(since > 0) & (curve[:, 1] <= 0.1)]
  steps_to_10 = adapted[0] if adapted.size else float("nan")
  print(f"hash arrays: new head within 10% median relative error after {steps_to_10:.1f}/α steps")

  fig, axes = plot.pyplot().subplots(1, 2, figsize=(11, 4))
  panels = (  # (y label, the curves of hash arrays and count-min: columns 1, 3 then 2, 4)
    ("median |Q̂/Q − 1|, new top-1000", "hash arrays (α=0.01)", "count-min, half-life ln2/α"),
    ("median Q̂/Q, old top-1000 (→ tail)", "hash arrays", "count-min decay"),
  )
  for i, (ax, (ylabel, *labels)) in enumerate(zip(axes, panels)):
    for j, label in enumerate(labels):
      ax.plot(since, curve[:, 1 + i + 2 * j], label=label)
    ax.axvline(0, color="k", lw=0.5)
    ax.set_yscale("log")
    ax.set_xlabel("steps since reversal × α")
    ax.set_ylabel(ylabel)
    ax.legend()
  fig.suptitle("Zipf(1.05), 1M items, batch 4096: popularity order reversed")
  out = pathlib.Path(args.out)
  plot.save(fig, out / "frequency_shift.png")
  print(f"plot: {out / 'frequency_shift.png'}")
  return steps_to_10


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true", help="fewer steps and repeats")
  parser.add_argument("--out", default=str(pathlib.Path(__file__).parent / "out"))
  parser.add_argument(
    "--skip", default="", help="comma list of parts to skip: speed,accuracy,shift"
  )
  args = parser.parse_args(argv)
  skip = set(filter(None, args.skip.split(",")))
  rng = np.random.default_rng(0)
  p = zipf.probabilities(VOCAB, EXPONENT)
  cdf = np.cumsum(p)
  summary = []
  if "speed" not in skip:
    pct = bench_speed(args, rng, cdf)
    summary.append(
      f"step cost hash2^22 {pct['hash arrays m=2 H=2^22']:.1f}% "
      f"cms2^22 {pct['count-min 4×2^22']:.1f}% "
      f"MHT {pct['MutableHashTable exact']:.1f}%"
    )
  if "accuracy" not in skip:
    acc = bench_accuracy(args, rng, p, cdf)
    summary.append(
      f"top-1000 max rel err hash {acc['hash arrays H=2^22 m=2 α=0.001']:.3f} "
      f"cms {acc['count-min ε=1e-4 δ=0.01']:.3f} exact {acc['exact counts']:.1e}"
    )
  if "shift" not in skip:
    summary.append(f"shift adapted (≤10%) after {bench_shift(args, rng, p, cdf):.1f}/α steps")
  print("SUMMARY frequency: " + "; ".join(summary))


if __name__ == "__main__":
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  main()
