"""One replica's training step, optionally compiled by XLA into a single static-shape program.

    terms  = objective(batch, step)          loss of the replica (estimator updated inside)
    grads  = d terms["loss"] / d weights     (summed over replicas by the optimizer)
    optimizer.apply_gradients(grads)
    return   loss_sum, weight_sum, count     (summed over replicas by the caller)

loss_sum is NaN when a gradient is not finite (a finite loss can have one), so the trainer's check
of the loss stops training at the step whose gradient broke the weights.

``make_replica_step(objective, model, optimizer, jit_compile=...)`` returns the function to give
``strategy.run(fn, args=(batch, step))``. With ``jit_compile=True`` it is
``tf.function(fn, jit_compile=True)``: the whole replica step (the encoder, the in-batch dedup and
subsample, the uniform draws, scoring, the loss, its gradient, the optimizer update and the
frequency estimator's update) is one XLA computation. Traced under XLA, the objective and the
library take their static-shape paths (`tfrs_logq.tf_keras._static_shapes`): no `tf.unique`, no
one-argument `tf.where`, no `boolean_mask`; padding is masked instead of removed, so every shape is
a function of the batch shape (what TPUs require). The result equals the uncompiled step
(tests/train/test_compiled_step.py).

Where it compiles: the default strategy (one device: the whole step is compiled) and TPUStrategy.
MirroredStrategy compiles a ``jit_compile`` replica function replica by replica only when every
device is a GPU (its merge-call-free path, with NCCL collectives): then the cross-replica pool and
the estimator's ids are gathered by all-reduce (``ReplicaContext.all_gather`` is a merge_call),
and the estimator state is written by each replica (aggregation NONE).

Compiled, the gradients are made dense before the optimizer sees them: tf.keras optimizers
de-duplicate the indices of sparse (IndexedSlices) gradients with `tf.unique`, and an all-gather of
sparse gradients has no XLA kernel. The update is the same (Adam's sparse update decays every row's
moments anyway; duplicate rows add up either way). On CPU devices TensorFlow would instead
compile all replicas as one multi-device cluster, which XLA rejects, so `make_replica_step`
raises a ValueError there; run the same static-shape step uncompiled
(``Objective(..., static_shapes=True)``), which is what the tests compare.
"""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import compiled

import tensorflow as tf

__all__ = ["replica_step", "make_replica_step", "check_jit_supported"]


def replica_step(objective, model, optimizer, batch, step, *, dense_gradients: bool = False):
  """Objective, gradients and optimizer update of one replica; returns (loss_sum, weight_sum,
  count) of the replica's queries; loss_sum is NaN when a gradient is not finite.

  Args:
    objective: a `train.objective.Objective` (updates the frequency estimator itself).
    model: the query model (its trainable variables are updated).
    optimizer: a tf.keras optimizer built for those variables.
    batch: the replica's batch (dict of tensors).
    step: the global step (int64 scalar tensor; seeds negatives and dropout).
    dense_gradients: convert IndexedSlices gradients to dense tensors before applying them.
  """
  with tf.GradientTape() as tape:
    terms = objective(batch, step, training=True)
  variables = model.trainable_variables
  grads = tape.gradient(terms["loss"], variables)
  if dense_gradients:
    grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
  optimizer.apply_gradients([(g, v) for g, v in zip(grads, variables) if g is not None])
  finite = [
    tf.reduce_all(tf.math.is_finite(g.values if isinstance(g, tf.IndexedSlices) else g))
    for g in grads
    if g is not None
  ]
  loss_sum = terms["loss_sum"]
  if finite:
    loss_sum = tf.where(
      tf.reduce_all(tf.stack(finite)), loss_sum, tf.constant(float("nan"), loss_sum.dtype)
    )
  return loss_sum, terms["weight_sum"], terms["count"]


def check_jit_supported(strategy) -> None:
  """Raises ValueError when ``strategy`` cannot run an XLA-compiled replica function.

  Multi-replica MirroredStrategy needs every device to be a GPU (module docstring).
  """
  if strategy is None or strategy.num_replicas_in_sync == 1:
    return
  if isinstance(
    strategy, (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
  ):
    devices = strategy.extended.worker_devices
    if not all("GPU" in tf.DeviceSpec.from_string(d).device_type.upper() for d in devices):
      raise ValueError(
        f"an XLA-compiled replica step under {type(strategy).__name__} needs GPU devices "
        f"(got {list(devices)}): TensorFlow compiles it per replica only on GPUs. Run the "
        "step uncompiled (its static-shape path is Objective(..., static_shapes=True)) or on "
        "one device."
      )


def make_replica_step(objective, model, optimizer, *, jit_compile: bool = False, strategy=None):
  """The replica function for ``strategy.run(fn, args=(batch, step))``.

  Args:
    objective, model, optimizer: as in `replica_step`.
    jit_compile: compile the replica step with XLA (static shapes; module docstring).
    strategy: the strategy it will run under (checked with `check_jit_supported`). Default:
      the current strategy.

  Raises:
    ValueError: ``jit_compile`` under a multi-replica strategy that cannot compile it.
  """
  strategy = strategy or tf.distribute.get_strategy()
  if jit_compile:
    check_jit_supported(strategy)
  dense = bool(jit_compile)

  def step_fn(batch, step):
    return replica_step(objective, model, optimizer, batch, step, dense_gradients=dense)

  return compiled.compile_function(step_fn, jit_compile=True) if jit_compile else step_fn
