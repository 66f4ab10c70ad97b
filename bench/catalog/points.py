"""The points of bench/catalog_size.py (bench/README.md), one (variant, |I|) two-tower step
each, for its one-process and its parameter-server side; the pieces of their reports."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
import types

import numpy as np

from bench.common import memory, plot
from bench.common.timing import min_median

VARIANTS = (
  "mixed+exact",
  "mixed+hash_array",
  "mixed+count_min",
  "full",
  "mixed+hash_array@adam",
  "mixed+hash_array@lazy_adam",
)
OPTIMIZERS = ("sgd", "adam", "lazy_adam")


def full_softmax_bytes(batch: int, num_items: int, dim: int) -> int:
  """Projected memory of a full-softmax step: logits, their softmax and gradient [B, |I|],
  plus the table, its gathered copy, its dense gradient and one spare [|I| + 1, d]."""
  return 4 * (3 * batch * num_items + 4 * (num_items + 1) * dim)


def zipf_probabilities(num_items: int) -> np.ndarray:
  """P(i) = log((i + 1) / i) / log(|I| + 1) for i = 1..|I| (index 0 = 0): the law of
  `zipf_ids`, floor(exp(u log(|I| + 1))) with u ~ U(0, 1)."""
  i = np.arange(1, num_items + 1, dtype=np.float64)
  return np.concatenate([[0.0], np.log1p(1.0 / i) / np.log(num_items + 1.0)])


def zipf_ids(rng: np.random.Generator, num_items: int, size: int) -> np.ndarray:
  ids = np.floor(np.exp(rng.random(size) * np.log(num_items + 1.0))).astype(np.int64)
  return np.clip(ids, 1, num_items)


def build_point(spec: dict):
  """The model, estimator, objective, optimizer, step counter, item table and 4 batches of one
  point (a SimpleNamespace), built by the training binary's code under the current tf.distribute
  scope. ``spec["variant"]``: ``full`` or ``NEGATIVES+FREQUENCY[+MEMORY]`` (NEGATIVES: ``mixed``
  or ``in_batch``; MEMORY: ``ids`` or ``embeddings``, a cross-batch memory of
  ``spec["memory_slots"]`` slots), then optionally ``@OPTIMIZER`` (`OPTIMIZERS`; default sgd)."""
  import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

  import tensorflow as tf

  from train import trainer as trainer_lib
  from train.config import RunConfig
  from train.objective import Objective

  v, b, d, users = spec["num_items"], spec["batch_size"], spec["dim"], spec["num_users"]
  variant, _, optimizer_name = spec["variant"].partition("@")
  loss, _, frequency = variant.partition("+")
  frequency, _, memory_mode = frequency.partition("+")
  settings = dict(
    model="two_tower",
    use_user_id=True,
    use_history=False,
    embedding_dim=d,
    batch_size=b,
    seed=spec["seed"],
    progress=False,
    loss="full_softmax" if loss == "full" else "sampled_softmax",
  )
  if loss != "full":
    settings.update(
      negatives=loss,
      num_negatives=spec["num_negatives"],
      uniform_negatives="batch",
      logq="corrected",
      frequency=frequency,
      frequency_buckets=spec["buckets"],
    )
  if memory_mode:
    num_batches = max(spec["memory_slots"] // b, 1)
    settings.update(cross_batch=num_batches, cross_batch_slots=b, cross_batch_mode=memory_mode)
  cfg = RunConfig.create(**settings)
  p = zipf_probabilities(v)
  data = types.SimpleNamespace(
    num_items=v, num_users=users, item_counts=np.round(p * 1e9).astype(np.int64)
  )
  model = trainer_lib.build_model(cfg, data).build_all()
  estimator = trainer_lib.build_estimator(cfg, data) if loss != "full" else None
  del data, p
  objective = Objective(cfg, model, v, estimator)
  variables = model.trainable_variables
  if optimizer_name in ("adam", "lazy_adam"):
    from tfrs_logq.tf_keras.lazy_adam import LazyAdam

    # what train/trainer.py builds for --table_optimizer=adam / lazy_adam
    optimizer = LazyAdam(1e-3) if optimizer_name == "lazy_adam" else tf.keras.optimizers.Adam(1e-3)
    optimizer.build(variables)
  else:
    optimizer = tf.keras.optimizers.legacy.SGD(0.05)  # sparse rows: scatter into the table
  step = tf.Variable(0, dtype=tf.int64)
  rng = np.random.default_rng(spec["seed"])
  batches = [
    dict(
      user_id=tf.constant(rng.integers(1, users + 1, b)), item_id=tf.constant(zipf_ids(rng, v, b))
    )
    for _ in range(4)
  ]
  return types.SimpleNamespace(
    model=model,
    estimator=estimator,
    objective=objective,
    variables=variables,
    optimizer=optimizer,
    step=step,
    table=model.candidate_tower.item_embedding.embeddings,
    batches=batches,
  )


def step_fn(built, measure):
  """The training step of ``built`` on one batch (objective, gradients, optimizer update, step
  + 1); returns (loss, ``measure(gradients in the order of built.variables)``)."""
  import tensorflow as tf

  def train_step(batch):
    with tf.GradientTape() as tape:
      terms = built.objective(batch, built.step, training=True)
    grads = tape.gradient(terms["loss"], built.variables)
    out = measure(grads)
    pairs = [(g, v) for g, v in zip(grads, built.variables) if g is not None]
    built.optimizer.apply_gradients(pairs)
    built.step.assign_add(1)
    return terms["loss"], out

  return train_step


def timed_steps(run, spec: dict, before=lambda: None):
  """``spec["warmup"]`` untimed steps ``run(i)``, ``before()``, ``spec["steps"]`` timed ones:
  (what ``before`` returned, [seconds per timed step], the last one's values as floats)."""
  for i in range(spec["warmup"]):
    run(i)
  ready, times, last = before(), [], (float("nan"), -1.0)
  for i in range(spec["steps"]):
    start = time.perf_counter()
    last = tuple(float(t) for t in run(i))
    times.append(time.perf_counter() - start)
  return ready, times, last


def measure_point(spec: dict) -> dict:
  """One (variant, |I|) point, in this process; returns the measurements."""
  import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

  import tensorflow as tf

  tf.get_logger().setLevel("ERROR")
  rss_import = memory.status_kib("VmRSS")
  built = build_point(spec)

  def table_rows(grads):
    rows = tf.constant(-1, tf.int64)
    for var, g in zip(built.variables, grads):
      if var is built.table and g is not None:
        rows = (
          tf.size(g.indices, out_type=tf.int64)
          if isinstance(g, tf.IndexedSlices)
          else tf.shape(g, out_type=tf.int64)[0]
        )
    return rows

  train_step = tf.function(step_fn(built, table_rows))
  rss_setup = memory.status_kib("VmRSS")
  reset, times, (value, rows) = timed_steps(
    lambda i: train_step(built.batches[i % 4]), spec, memory.reset_peak_rss
  )
  return dict(
    times=times,
    loss=value,
    peak_rss_kib=memory.peak_rss_kib(reset),
    rss_import_kib=rss_import,
    rss_setup_kib=rss_setup,
    table_bytes=int(np.prod(built.table.shape)) * 4,
    estimator_bytes=memory.weights_bytes(built.estimator),
    table_grad_rows=int(rows),
  )


def run_point(spec: dict, timeout: float, point=None) -> dict:
  """``point`` (default `measure_point`) in a child forked from this process, which has imported
  TensorFlow and the application but never run an op (no runtime threads yet: forking is safe)."""
  read_fd, write_fd = os.pipe()
  pid = os.fork()
  if pid == 0:  # the child
    os.close(read_fd)
    try:
      out = (point or measure_point)(spec)
    except BaseException as e:
      lines = [l.strip() for l in str(e).splitlines() if l.strip()]
      out = dict(error=f"{type(e).__name__}: {lines[-1] if lines else ''}"[:300])
    with os.fdopen(write_fd, "w") as f:
      f.write(json.dumps(out))
    os._exit(0)
  os.close(write_fd)
  chunks, deadline = [], time.time() + timeout
  with os.fdopen(read_fd, "r") as f:
    while True:
      ready, _, _ = select.select([f], [], [], max(0.0, deadline - time.time()))
      if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return dict(error=f"timeout after {timeout:g} s")
      chunk = f.read()
      if not chunk:
        break
      chunks.append(chunk)
  _, status = os.waitpid(pid, 0)
  if not chunks:
    return dict(error=f"the point's process died (status {status}; out of memory?)")
  return json.loads("".join(chunks))


def fenced(command: str) -> list:
  """A markdown code block of ``command``, and a blank line."""
  return ["```", command, "```", ""]


def fmt_size(n: int) -> str:
  """1e4, 3e6: the catalog size to one significant digit."""
  return f"{n:.0e}".replace("+0", "").replace("+", "")


def median_ms(result: dict) -> float:
  return float(np.median(result["times"])) * 1e3


def time_cells(result: dict) -> list:
  """The min and median ms per step of a point's pooled steps, as table cells."""
  return [f"{t:.1f}" for t in min_median(np.array(result["times"]) * 1e3)]


@contextlib.contextmanager
def log_log_figure(path, title: str, panels):
  """Yields the axes of two log-log panels against |I|, then titles them (``panels``: (title,
  unit) each), adds grids and legends and saves the figure to ``path``."""
  fig, axes = plot.pyplot().subplots(1, 2, figsize=(11, 4.2))
  yield axes
  for ax, (name, unit) in zip(axes, panels):
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("catalog size |I|")
    ax.set_ylabel(unit)
    ax.set_title(name)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
  fig.suptitle(title, fontsize=10)
  plot.save(fig, path)


def merge(old: dict, new: dict) -> dict:
  """Two passes over a point: the timed steps pooled, the larger memory figures."""
  if "times" not in old:
    return new
  if "times" not in new:
    return old
  out = dict(old, times=old["times"] + new["times"])
  if old.get("peak_rss_kib") and (new.get("peak_rss_kib") or 0) > old["peak_rss_kib"]:
    out.update(peak_rss_kib=new["peak_rss_kib"], rss_import_kib=new["rss_import_kib"])
  if "servers" in new:
    out["servers"] = {
      name: {k: max(old["servers"][name][k], mem[k]) for k in mem}
      for name, mem in new["servers"].items()
    }
  return out
