r"""Training-step time: tfrs_logq.tf_keras.Retrieval(correction=...) vs tfrs.tasks.Retrieval.

    python bench/loss_overhead.py [--quick] [--ablation] [--batch-sizes 1024,4096] [--out bench/out]

Sides, timing, the ablation and measured results: bench/README.md, section `loss_overhead.py`.
"""

import argparse
import functools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tfrs_logq.tf_keras  # legacy Keras before TensorFlow loads

import numpy as np
import tensorflow as tf

tf.get_logger().setLevel("ERROR")  # one tf.function per side: retracing warnings are expected
import tfrs_logq.tf_keras.retrieval  # noqa: E402
from tfrs_logq.tf_keras import log_q as log_q_lib  # noqa: E402
from tfrs_logq.tf_keras import losses as losses_lib  # noqa: E402

import tensorflow_recommenders as tfrs  # noqa: E402

from bench.common import timing, zipf  # noqa: E402
from bench.common.report import ruled, write_json  # noqa: E402

BASELINE = "tfrs_standard"
ABLATIONS = {  # name: (eye mask, assert_all_finite, library masked LSE, [A, C] log Q')
  "lean (prototype)": (False, False, False, False),
  "+ tf.eye mask": (True, False, False, False),
  "+ assert_all_finite": (False, True, False, False),
  "+ masked_logsumexp": (False, False, True, False),
  "+ [A,C] log Q'": (False, False, False, True),
  "all four (~library)": (True, True, True, True),
}


def ablation_loss(scores, log_q, ids, eye, check, library_lse, full_q_prime):
  r"""The corrected in-batch loss (A = C, accidental hits masked, sum reduction). All flags off,
  the prototype, equal to ``Retrieval(correction="corrected")`` in fewer [A, C] passes::

      invalid[a, c] = (id_c == id_a)       # one comparison; covers the diagonal (c == a) too
      x[a, c]  = s[a, c] - log Q(c), or a huge negative constant where invalid (one where)
      LSE'_a   = LSE_c x[a, c] + log(1 - Q(p_a))   # Q' = Q / (1 - Q(p)) is a per-row shift
      n_a      = C - sum_c invalid[a, c]
      w_a      = sg(sigmoid((LSE'_a - log n_a) - s_p)),   L = sum_a -w_a (s_p - LSE'_a)

  Rows with n = 0 give 0 (w = 0). Each flag swaps in one library choice (:data:`ABLATIONS`).
  """
  if eye:  # the task's mask: off the diagonal and not a hit
    valid = tf.logical_and(
      tf.logical_not(tf.cast(tf.eye(tf.shape(scores)[0], tf.shape(scores)[1]), tf.bool)),
      tf.not_equal(ids[:, tf.newaxis], ids[tf.newaxis, :]),
    )
    invalid = tf.logical_not(valid)
  else:
    invalid = tf.equal(ids[:, tf.newaxis], ids[tf.newaxis, :])
    valid = tf.logical_not(invalid) if library_lse else None
  if check:
    scores = tf.debugging.assert_all_finite(scores, "scores")
  positive_scores = tf.linalg.diag_part(scores)
  if full_q_prime:
    logits, shift = scores - log_q_lib.log_q_prime(log_q, log_q), 0.0
  else:
    logits, shift = scores - log_q, log_q_lib.log1mexp(log_q)
  if library_lse:
    lse = losses_lib.masked_logsumexp(logits, valid) + shift
  else:
    masked = tf.where(invalid, tf.constant(-1e26, tf.float32), logits)
    row_max = tf.stop_gradient(tf.reduce_max(masked, axis=1, keepdims=True))
    lse = tf.math.log(tf.reduce_sum(tf.exp(masked - row_max), axis=1)) + row_max[:, 0] + shift
  num_valid = tf.shape(scores)[1] - tf.reduce_sum(tf.cast(invalid, tf.int32), axis=1)
  log_n = tf.math.log(tf.cast(tf.maximum(num_valid, 1), tf.float32))
  weight = tf.stop_gradient(tf.sigmoid((lse - log_n) - positive_scores))
  return tf.reduce_sum(-weight * (positive_scores - lse))


class FastCorrectedRetrieval(tf.keras.layers.Layer):
  """Prototype: `ablation_loss` as a retrieval task (the lean loss, or one of ABLATIONS)."""

  def __init__(self, choices=ABLATIONS["lean (prototype)"]):
    super().__init__()
    self.choices = tuple(choices)

  def call(self, query, candidate, candidate_sampling_probability, candidate_ids, **_):
    scores = tf.linalg.matmul(query, candidate, transpose_b=True)
    log_q = tf.math.log(tf.cast(candidate_sampling_probability, tf.float32))
    return ablation_loss(scores, log_q, tf.convert_to_tensor(candidate_ids), *self.choices)


LOGQ = functools.partial(tfrs_logq.tf_keras.Retrieval, remove_accidental_hits=True)
TASKS = {  # side: its task (every side removes accidental hits)
  "tfrs_standard": functools.partial(tfrs.tasks.Retrieval, remove_accidental_hits=True),
  "logq_standard": functools.partial(LOGQ, correction="standard"),
  "logq_corrected": functools.partial(LOGQ, correction="corrected"),
  "proto_corrected": FastCorrectedRetrieval,
}


def task_loss(task, query, candidate, batch):
  """The task's loss on [B, d] query and candidate embeddings, with the batch's ids and Q."""
  return task(
    query,
    candidate,
    candidate_sampling_probability=batch["probability"],
    candidate_ids=batch["item"],
    compute_metrics=False,
  )


def fixed_embeddings(args, batch_size, offset):
  """(query, candidate) float32 [batch_size, dim] ~ N(0, 0.3^2), drawn from seed + offset."""
  rng = np.random.default_rng(args.seed + offset)
  return [tf.constant(rng.normal(0, 0.3, (batch_size, args.dim)), tf.float32) for _ in "qc"]


def loss_and_gradients(task, embeddings, batch):
  """The task's loss and its gradients w.r.t. the (query, candidate) embeddings."""
  with tf.GradientTape() as tape:
    tape.watch(embeddings)
    loss = task_loss(task, *embeddings, batch)
  return loss, tape.gradient(loss, embeddings)


def check_prototype(args, batch):
  """The prototype's loss and gradients equal the library's corrected task on one batch."""
  embeddings = fixed_embeddings(args, int(batch["item"].shape[0]), 2)
  out = []
  for side in ("logq_corrected", "proto_corrected"):
    loss, grads = loss_and_gradients(TASKS[side](), embeddings, batch)
    out.append([loss.numpy()] + [g.numpy() for g in grads])
  for ref, got in zip(*out):
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
  return float(out[0][0]), float(out[1][0])


class TwoTower(tfrs.Model):
  """User-id and item-id embedding towers; s(u, d) = <user(u), item(d)>."""

  def __init__(self, task, args):
    super().__init__()
    init = lambda s: tf.keras.initializers.RandomNormal(stddev=0.05, seed=s)
    self.user_embedding = tf.keras.layers.Embedding(args.users, args.dim, init(args.seed))
    self.item_embedding = tf.keras.layers.Embedding(args.items, args.dim, init(args.seed + 1))
    self.task = task

  def compute_loss(self, features, training=False):
    query = self.user_embedding(features["user"])
    return task_loss(self.task, query, self.item_embedding(features["item"]), features)


def make_batches(args, batch_size, num):
  """num batches of (user, item ~ Zipf(1), probability = Q(item)): int64 ids, float32 Q."""
  rng = np.random.default_rng(args.seed)
  q = zipf.probabilities(args.items)
  batches = []
  for _ in range(num):
    item = rng.choice(args.items, size=batch_size, p=q)
    user = rng.integers(0, args.users, batch_size)
    ids = {"user": tf.constant(user, tf.int64), "item": tf.constant(item, tf.int64)}
    batches.append(ids | {"probability": tf.constant(q[item], tf.float32)})
  return batches


def make_train_step(side, args):
  model = TwoTower(TASKS[side](), args)
  optimizer = tf.keras.optimizers.Adam(1e-3)

  @tf.function
  def step(batch):
    with tf.GradientTape() as tape:
      loss = model.compute_loss(batch, training=True)
    variables = model.trainable_variables
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss

  return step


def make_task_step(task, args, batch_size):
  """Scores + loss + gradient w.r.t. fixed embeddings only (no lookups, no optimizer)."""
  embeddings = fixed_embeddings(args, batch_size, 1)

  @tf.function
  def step(batch):
    loss, (dq, dc) = loss_and_gradients(task, embeddings, batch)
    return loss + tf.reduce_sum(dq) + tf.reduce_sum(dc)

  return step


def time_interleaved(steps_by_side, batches, args):
  """{side: [per-step seconds of each round]} with rotated side order per round."""
  sides = list(steps_by_side)
  for side in sides:  # trace + warm-up
    for i in range(args.warmup):
      steps_by_side[side](batches[i % len(batches)]).numpy()

  def run(side, r):
    fn = steps_by_side[side]
    for i in range(args.steps):
      loss = fn(batches[(r * args.steps + i) % len(batches)])
    loss.numpy()

  return timing.time_interleaved(run, sides, args.repeats, args.steps)


def report(title, batch_size, times, rows):
  base_min, base_med = timing.min_median(times[BASELINE])
  for side, t in times.items():
    tmin, tmed = timing.min_median(t)
    rows.append((title, batch_size, side, tmin, tmed, tmin / base_min, tmed / base_med))


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--batch-sizes", default="1024,4096")
  p.add_argument("--users", type=int, default=50_000)
  p.add_argument("--items", type=int, default=100_000)
  p.add_argument("--dim", type=int, default=64)
  p.add_argument("--repeats", type=int, default=15, help="interleaved rounds")
  p.add_argument("--steps", type=int, default=5, help="steps per side per round")
  p.add_argument("--warmup", type=int, default=3)
  p.add_argument("--no-task-only", action="store_true", help="skip the task-only table")
  p.add_argument("--ablation", action="store_true", help="the ablation table (largest batch)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--quick", action="store_true", help="5 rounds of 3 steps")
  p.add_argument("--out", default="bench/out", help="for loss_overhead.json, .md ('' for none)")
  args = p.parse_args(argv)
  if args.quick:
    args.repeats, args.steps, args.warmup = 5, 3, 2
  args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
  return args


def main(argv=None):
  args = parse_args(argv)
  print(
    f"TF {tf.__version__}, TFRS {tfrs.__version__}, devices "
    f"{[d.device_type for d in tf.config.list_logical_devices()]}, "
    f"{args.repeats} rounds x {args.steps} steps per side (interleaved)"
  )
  rows = []
  for batch_size in args.batch_sizes:
    batches = make_batches(args, batch_size, 8)
    ref, proto = check_prototype(args, batches[0])
    print(
      f"B={batch_size}: prototype loss {proto:.6g} == library corrected loss {ref:.6g} "
      "(gradients equal too)"
    )
    times = time_interleaved({s: make_train_step(s, args) for s in TASKS}, batches, args)
    report("train step", batch_size, times, rows)
    if not args.no_task_only:
      steps = {s: make_task_step(task(), args, batch_size) for s, task in TASKS.items()}
      report("task only", batch_size, time_interleaved(steps, batches, args), rows)
  if args.ablation:  # task only, largest batch size
    batch_size = max(args.batch_sizes)
    batches = make_batches(args, batch_size, 8)
    steps = {BASELINE: make_task_step(TASKS[BASELINE](), args, batch_size)}
    for name, choices in ABLATIONS.items():
      steps[name] = make_task_step(FastCorrectedRetrieval(choices), args, batch_size)
    values = {name: float(fn(batches[0]).numpy()) for name, fn in steps.items() if name != BASELINE}
    if max(values.values()) - min(values.values()) > 1e-4 * abs(max(values.values())):
      raise AssertionError(f"ablation variants disagree: {values}")
    report("ablation", batch_size, time_interleaved(steps, batches, args), rows)
  header = (
    f"{'measure':<11} {'batch':>5} {'side':<20} {'min ms':>8} {'median ms':>9} "
    f"{'min/base':>8} {'med/base':>8}"
  )
  lines = ruled(header)
  for title, b, side, tmin, tmed, rmin, rmed in rows:
    lines.append(
      f"{title:<11} {b:5d} {side:<20} {tmin * 1e3:8.2f} {tmed * 1e3:9.2f} {rmin:8.3f} {rmed:8.3f}"
    )
  print("\n".join(lines))
  if args.out:
    keys = ("measure", "batch", "side", "min_s", "median_s", "min_ratio", "median_ratio")
    runs = [dict(zip(keys, r)) for r in rows]
    write_json(args.out, "loss_overhead.json", {"args": dict(vars(args)), "rows": runs})
    with open(os.path.join(args.out, "loss_overhead.md"), "w") as f:
      f.write("```\n" + "\n".join(lines) + "\n```\n")
  train = {(b, side): (rmin, rmed) for t, b, side, _, _, rmin, rmed in rows if t == "train step"}
  summary = [
    f"B={b}: corrected/tfrs_standard min {train[b, 'logq_corrected'][0]:.3f} median "
    f"{train[b, 'logq_corrected'][1]:.3f}, corrected/logq_standard min "
    f"{train[b, 'logq_corrected'][0] / train[b, 'logq_standard'][0]:.3f}, "
    f"prototype/tfrs_standard min {train[b, 'proto_corrected'][0]:.3f}"
    for b in args.batch_sizes
  ]
  worst = max(train[b, "logq_corrected"][0] for b in args.batch_sizes)
  verdict = "meets" if worst <= 1.05 else "misses"
  print(
    f"SUMMARY loss_overhead (train step, {verdict} <= 1.05 on min ratio): " + "; ".join(summary)
  )


if __name__ == "__main__":
  main()
