"""train/step.py: one XLA-compiled replica step (objective + gradient + optimizer update +
frequency estimator update, static shapes) equals the uncompiled dynamic-shape step: the same
loss terms, the same gradients (SGD: w_t - w_{t+1} = lr * grad) and the same estimator state, for
ExactCounts / HashArrayEstimator / CountMinSketch and mixed negatives with shared or per-query
uniform blocks; its compiled program has no dynamic-shape op; under MirroredStrategy the
static-shape step equals the compiled single-device step and the dynamic one."""

import re
import types

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import frequency

import numpy as np
import pytest
import tensorflow as tf

from models.sasrec import SASRec
from train import objective as objective_lib
from train import step as step_lib

N_ITEMS, L, B, K = 30, 8, 4, 16
LR = 0.5

# "streaming_exact": any frequency value but "exact" makes the objective update the estimator
# every step; ExactCounts without a table accumulates the stream's counts.
ESTIMATORS = {
  "streaming_exact": lambda: frequency.ExactCounts(N_ITEMS + 1),
  "hash_array": lambda: frequency.HashArrayEstimator(
    num_buckets=16, num_hashes=2, alpha=0.2, num_items=N_ITEMS + 1
  ),
  "count_min": lambda: frequency.CountMinSketch(
    width=16, depth=2, conservative=True, half_life=20.0, num_items=N_ITEMS + 1
  ),
}

# Ops whose output shape depends on values (what XLA on TPU cannot compile statically).
DYNAMIC_OPS = re.compile(
  r"^(Unique\w*|Where|ListDiff|DynamicPartition|DynamicStitch|"
  r"SparseToDense|DenseToSparse\w*|Ragged\w*)$"
)


def _config(**kw):
  fields = dict(
    loss="sampled_softmax",
    negatives="mixed",
    num_negatives=K,
    uniform_negatives="query",
    logq="corrected",
    q_prime="exact",
    log_q_convention="unigram",
    ratio_floor=0.0,
    temperature=1.0,
    gbce_t=0.75,
    seed=3,
    jit_compile=False,
    frequency="count_min",
  )
  fields.update(kw)
  return types.SimpleNamespace(**fields)


def _batches(steps=3, seed=0):
  """Left-padded SASRec batches with duplicates (25 targets over 30 items per batch)."""
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(steps):
    inputs = rng.integers(1, N_ITEMS + 1, size=(B, L))
    for row, pad in enumerate([0, 3, 5, 2]):
      inputs[row, :pad] = 0
    targets = np.roll(inputs, -1, axis=1)
    targets[:, -1] = rng.integers(1, N_ITEMS + 1, size=B)
    out.append({"inputs": tf.constant(inputs, tf.int64), "targets": tf.constant(targets, tf.int64)})
  return out


def _build(config, estimator, *, dropout=0.3, optimizer="sgd", static_shapes=None):
  # The packed encoder (the default) draws dropout per non-padding token, its static form per
  # position: dropout masks are compared on the padded encoder, the packed one runs without.
  model = SASRec(
    N_ITEMS,
    max_len=L,
    embedding_dim=8,
    num_blocks=1,
    dropout=dropout,
    seed=1,
    pack_tokens=dropout == 0.0,
  ).build_all()
  opt = tf.keras.optimizers.SGD(LR) if optimizer == "sgd" else tf.keras.optimizers.Adam(0.01)
  opt.build(model.trainable_variables)
  est = ESTIMATORS[estimator]()
  obj = objective_lib.Objective(config, model, N_ITEMS, est, static_shapes=static_shapes)
  return model, opt, est, obj


def _run(fn, model, est, batches):
  """Per step: the returned (loss_sum, weight_sum, count), the applied update w_t - w_{t+1},
  and the estimator state after the step."""
  out = []
  for i, batch in enumerate(batches):
    before = [v.numpy() for v in model.trainable_variables]
    terms = [float(t) for t in fn(batch, tf.constant(i, tf.int64))]
    update = [b - v.numpy() for b, v in zip(before, model.trainable_variables)]
    out.append((terms, update, [v.numpy() for v in est.weights]))
  return out


def _assert_same_steps(got, want, update_rtol=1e-4, update_atol=1e-6):
  for (terms_g, update_g, est_g), (terms_w, update_w, est_w) in zip(got, want):
    np.testing.assert_allclose(terms_g, terms_w, rtol=1e-5)
    for a, b in zip(update_g, update_w):  # SGD: the update is LR x the gradient
      np.testing.assert_allclose(a, b, rtol=update_rtol, atol=update_atol)
    for a, b in zip(est_g, est_w):
      np.testing.assert_allclose(a, b, rtol=1e-6)
  assert any(np.abs(u).max() > 1e-3 for u in want[0][1])  # the step does train


def _op_types(concrete):
  graph_def = concrete.graph.as_graph_def()
  types_ = {n.op for n in graph_def.node}
  for f in graph_def.library.function:
    types_.update(n.op for n in f.node_def)
  return types_


_COMPILED = {}


def _compiled_run(estimator, per, dropout):
  """Per-step results of the compiled single-device step (each configuration compiled once)."""
  key = (estimator, per, dropout)
  if key not in _COMPILED:
    model, opt, est, obj = _build(
      _config(uniform_negatives=per, frequency=estimator), estimator, dropout=dropout
    )
    _COMPILED[key] = _run(
      step_lib.make_replica_step(obj, model, opt, jit_compile=True), model, est, _batches()
    )
  return _COMPILED[key]


@pytest.mark.parametrize(
  "estimator, per, dropout",
  [
    ("streaming_exact", "query", 0.3),
    ("hash_array", "batch", 0.0),
    ("count_min", "query", 0.3),
    ("count_min", "batch", 0.0),
  ],
)
def test_compiled_step_equals_uncompiled_dynamic_step(estimator, per, dropout):
  """tf.function(replica step, jit_compile=True) (static shapes: padded positions masked, sort-
  based dedup, top_k subsample, static estimator update) == the default dynamic-shape step
  (eager), dropout masks included."""
  model, opt, est, obj = _build(
    _config(uniform_negatives=per, frequency=estimator), estimator, dropout=dropout
  )
  eager = _run(step_lib.make_replica_step(obj, model, opt), model, est, _batches())
  _assert_same_steps(_compiled_run(estimator, per, dropout), eager)
  assert eager[0][0][2] == 25.0  # count = the non-padding positions


def test_compiled_adam_step_equals_uncompiled_and_has_no_dynamic_shape_op():
  """The trainer's optimizer (Adam: its sparse-gradient update equals the compiled step's dense
  one), per-sequence uniform negatives, expected_count log Q; the compiled step has no Unique /
  Where / boolean_mask op and no bounded-dynamic dimension in its HLO, while the dynamic path's
  graph has them (the check can fail)."""
  config = _config(uniform_negatives="sequence", log_q_convention="expected_count")
  batches = _batches(2, seed=1)
  results = {}
  for jit in (False, True):
    model, opt, est, obj = _build(config, "count_min", optimizer="adam")
    fn = step_lib.make_replica_step(obj, model, opt, jit_compile=jit)
    terms = [[float(t) for t in fn(b, tf.constant(i, tf.int64))] for i, b in enumerate(batches)]
    results[jit] = (terms, [v.numpy() for v in model.weights + est.weights])
  np.testing.assert_allclose(results[True][0], results[False][0], rtol=1e-5)
  for a, b in zip(results[True][1], results[False][1]):
    # Adam divides by sqrt(v): parameters with ~0 gradient move by float noise x lr.
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5)

  step = tf.constant(0, tf.int64)
  found = {t for t in _op_types(fn.get_concrete_function(batches[0], step)) if DYNAMIC_OPS.match(t)}
  assert not found, f"dynamic-shape ops in the compiled step: {sorted(found)}"
  hlo = fn.experimental_get_compiler_ir(batches[0], step)(stage="hlo")
  assert "ENTRY" in hlo and not re.search(r"\[[^\]]*<=", hlo), "bounded-dynamic shapes in HLO"
  dynamic = tf.function(
    step_lib.make_replica_step(
      objective_lib.Objective(
        config, model, N_ITEMS, ESTIMATORS["count_min"](), static_shapes=False
      ),
      model,
      opt,
    )
  )
  assert {"Unique", "Where"} <= {
    t for t in _op_types(dynamic.get_concrete_function(batches[0], step))
  }


def _mirrored_run(strategy, config, estimator, batches, static_shapes):
  """The replica step under `strategy.run` (uncompiled), the global batch split in 2 x 2 rows."""
  with strategy.scope():
    model, opt, est, obj = _build(config, estimator, dropout=0.0, static_shapes=static_shapes)
  fn = step_lib.make_replica_step(obj, model, opt, strategy=strategy)

  def run(per_replica, step):  # eager: no tracing of the two replicas (fast)
    out = strategy.run(fn, args=(per_replica, step))
    return [strategy.reduce(tf.distribute.ReduceOp.SUM, x, axis=None) for x in out]

  def distributed(batch):
    return strategy.experimental_distribute_values_from_function(
      lambda ctx: {
        k: v[2 * ctx.replica_id_in_sync_group : 2 * ctx.replica_id_in_sync_group + 2]
        for k, v in batch.items()
      }
    )

  out = _run(lambda b, s: run(distributed(b), s), model, est, batches)
  for v in est.weights:  # every replica holds the same estimator state
    copies = strategy.experimental_local_results(v)
    np.testing.assert_array_equal(copies[0].numpy(), copies[1].numpy())
  return out


@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_mirrored_static_step_equals_compiled_single_device_step(estimator, mirrored_strategy):
  """2 replicas, static shapes (cross-replica pool with padding masks, estimator on the gathered
  ids and masks) == one device running the compiled step on the global batch."""
  config = _config(uniform_negatives="batch", frequency=estimator)
  mirrored = _mirrored_run(mirrored_strategy, config, estimator, _batches(), static_shapes=True)
  _assert_same_steps(mirrored, _compiled_run(estimator, "batch", 0.0))


def test_mirrored_static_per_query_draws_equal_dynamic(mirrored_strategy):
  """Per-query uniform draws are numbered by the rank of the valid query on its replica: the
  padded static step draws what the dynamic step draws for its non-padding queries."""
  config = _config(uniform_negatives="query", frequency="count_min")
  batches = _batches(2, seed=3)
  static = _mirrored_run(mirrored_strategy, config, "count_min", batches, static_shapes=True)
  dynamic = _mirrored_run(mirrored_strategy, config, "count_min", batches, static_shapes=False)
  _assert_same_steps(static, dynamic)


def test_jit_under_mirrored_cpu_strategy_raises(mirrored_strategy):
  with pytest.raises(ValueError, match="GPU"):
    step_lib.make_replica_step(None, None, None, jit_compile=True, strategy=mirrored_strategy)
  step_lib.check_jit_supported(tf.distribute.get_strategy())  # one device: supported
