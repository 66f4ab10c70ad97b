"""The Keras 3 sides of the SASRec step benchmark (tokens ``jax`` / ``keras3_tf``; bench/README.md,
section `step/`): `train.keras3.trainer.Trainer` on the ML-1M batches, in a worker whose
``KERAS_BACKEND`` was set before keras was imported (`select_backend`)."""

from __future__ import annotations

import os

import numpy as np

from bench.step import peaks
from bench.step.configs import SideConfig
from bench.step.ours import run_config
from bench.step.profiler import time_pieces

__all__ = ["BACKEND_OF", "JaxProfiler", "JaxTrainStep", "check_jax_step", "select_backend", "setup"]

BACKEND_OF = {"keras3_jax": "jax", "keras3_tensorflow": "tensorflow"}


def select_backend(cfg: SideConfig, threads: int) -> str:
  """Sets KERAS_BACKEND (before keras is imported); for JAX with ``threads`` < the CPUs, pins
  the process to ``threads`` CPUs (XLA's CPU thread pool follows the affinity mask)."""
  backend = BACKEND_OF[cfg.framework]
  os.environ["KERAS_BACKEND"] = backend
  if backend == "jax" and threads < len(os.sched_getaffinity(0)):
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
  return backend


class JaxTrainStep:
  """``step(batch) -> loss``: the jitted stateless train step of a Keras 3 model on JAX
  (bench/README.md); the state stays in ``state``, not in the model's variables."""

  def __init__(self, model):
    import jax

    self.optimizer = model.optimizer
    copy = lambda variables: [jax.numpy.array(v.value, copy=True) for v in variables]
    # copies: the step donates (frees) its input state; the variables keep their own values
    self.state = (
      copy(model.trainable_variables),
      copy(model.non_trainable_variables),
      copy(self.optimizer.variables),
    )

    def loss_and_updates(trainable, non_trainable, batch):
      y_pred, non_trainable = model.stateless_call(trainable, non_trainable, batch, training=True)
      return model.compute_loss(x=batch, y_pred=y_pred, training=True), non_trainable

    self.loss_only = lambda t, n, b: loss_and_updates(t, n, b)[0]

    grad_fn = jax.value_and_grad(loss_and_updates, has_aux=True)

    def step(state, batch):
      trainable, non_trainable, optimizer_values = state
      (loss, non_trainable), grads = grad_fn(trainable, non_trainable, batch)
      trainable, optimizer_values = self.optimizer.stateless_apply(
        optimizer_values, grads, trainable
      )
      return loss, (trainable, non_trainable, optimizer_values)

    self._step = jax.jit(step, donate_argnums=0)

  def __call__(self, batch) -> float:
    loss, self.state = self._step(self.state, batch)
    return float(loss)


class JaxProfiler:
  """``--profile`` on the JAX side: the pieces of `JaxTrainStep` (`bench.step.profiler.Profiler`'s,
  bench/README.md), each its own ``jax.jit`` program on the model's current state (the fixed
  queries: an input; the optimizer: ``stateless_apply``; no estimator update: exact counts)."""

  def __init__(self, model, step: JaxTrainStep, batches):
    import jax
    import keras

    self.batches, self.cursor, self._jax = batches, 0, jax
    encoder, trainable = model.encoder, model.trainable_variables
    variables = list(trainable) + list(model.non_trainable_variables)
    values = [v.value for v in variables]
    n_train = len(trainable)

    def scope(vals):
      return keras.StatelessScope(state_mapping=list(zip(variables, vals)))

    def queries(vals, batch):
      with scope(vals):
        return encoder.training_queries(batch, training=True)

    fixed = [queries(values, b) for b in batches]  # eager: the model's own queries
    noise = jax.random.normal(jax.random.key(5), fixed[0].queries.shape)

    def encoder_fwd(vals, batch):
      return queries(vals, batch).queries.sum()

    def encoder_loss(train_vals, rest, batch):
      return (queries(list(train_vals) + list(rest), batch).queries * noise).sum()

    def loss_with_queries(q, train_vals, rest, batch, tq):
      with scope(list(train_vals) + list(rest)):
        object.__setattr__(
          encoder, "training_queries", lambda b, training=True: tq._replace(queries=q)
        )
        try:
          y_pred = model(batch, training=True)
        finally:
          object.__delattr__(encoder, "training_queries")
        return model.compute_loss(x=batch, y_pred=y_pred, training=True)

    enc_fwd = jax.jit(encoder_fwd)
    enc_bwd = jax.jit(jax.grad(encoder_loss))
    loss_bwd = jax.jit(jax.grad(loss_with_queries, argnums=(0, 1)))
    train, rest = values[:n_train], values[n_train:]
    optimizer = model.optimizer
    opt_values = [v.value for v in optimizer.variables]
    grads = [jax.grad(lambda t, b: step.loss_only(t, rest, b))(train, b) for b in batches]
    apply = jax.jit(lambda o, g, t: optimizer.stateless_apply(o, g, t))
    self.fns = dict(
      step=lambda i: step(batches[i]),
      encoder_fwd=lambda i: enc_fwd(values, batches[i]),
      encoder_fwd_bwd=lambda i: enc_bwd(train, rest, batches[i]),
      loss_fwd_bwd=lambda i: loss_bwd(fixed[i].queries, train, rest, batches[i], fixed[i]),
      estimator=None,
      optimizer=lambda i: apply(opt_values, grads[i], train),
    )
    # the substitution is exact: the objective on the model's own (fixed) queries = its loss
    self.check = dict(
      objective=float(step.loss_only(train, rest, batches[0])),
      fixed_queries=float(
        jax.jit(loss_with_queries)(fixed[0].queries, train, rest, batches[0], fixed[0])
      ),
    )
    self.round(len(batches))  # compiles every program

  def round(self, n: int) -> dict:
    return time_pieces(self, n, self._jax.block_until_ready)


def check_jax_step(trainer, batch) -> dict:
  """The loss of one step from the trainer's current state by Keras's own train step
  (``train_on_batch``, after the estimator's update as in ``Trainer.train_step``) and by
  `JaxTrainStep`; the state is put back first, so both start from the same weights, optimizer
  moments and seed states."""
  variables = list(trainer.model.variables) + list(trainer.model.optimizer.variables)
  saved = [np.array(v.value) for v in variables]
  trainer.estimator_update(batch)  # what the trainer's step does first
  trainer.model.reset_metrics()
  keras_loss = float(trainer.model.train_on_batch(batch, return_dict=True)["loss"])
  for v, value in zip(variables, saved):
    v.assign(value)
  return dict(keras_train_on_batch=keras_loss, stateless_jit=JaxTrainStep(trainer.model)(batch))


def setup(spec: dict, cfg: SideConfig, arrays):
  """(run(i) -> (loss, mean weight; nan on jax), peak(n) -> GFLOP/s, info, profiler() ->
  `JaxProfiler`, None on TF) of a Keras 3 side with our side's run settings (`ours.run_config`);
  keras must not have been imported before `select_backend`."""
  # The application's data and config (tf-keras stack) before keras, as the binary imports them.
  from train import data as data_lib
  from train.keras3 import settings
  from train.keras3.trainer import Trainer

  config = run_config(spec, cfg)
  settings.check_supported(config)
  trainer = Trainer(config, data=data_lib.load("ml1m", spec["data_path"]))
  import keras

  backend = keras.backend.backend()
  if backend != BACKEND_OF[cfg.framework]:
    raise RuntimeError(
      f"keras runs on {backend}, the side needs {BACKEND_OF[cfg.framework]} "
      "(KERAS_BACKEND set after keras was imported?)"
    )
  pairs = zip(arrays["inputs"], arrays["targets"])
  numpy_batches = [dict(inputs=x.astype(np.int32), targets=y.astype(np.int32)) for x, y in pairs]
  if cfg.pack:  # the binary's batches (--sasrec_pack_tokens): with their token index
    from models.keras3 import sasrec_ops

    numpy_batches = [sasrec_ops.with_token_index(b) for b in numpy_batches]
  check = None
  if backend == "jax":
    import jax

    batches = [jax.device_put(b) for b in numpy_batches]
    if spec["check_keras3_step"]:
      check = check_jax_step(trainer, batches[0])
    step = JaxTrainStep(trainer.model)
    profiler = lambda: JaxProfiler(trainer.model, step, batches)
    run = lambda i: (step(batches[i]), float("nan"))
    peak = peaks.matmul_peak_jax
    framework = f"keras {keras.__version__} / jax {jax.__version__}"
  else:
    import tensorflow as tf

    batches = [{k: tf.constant(v) for k, v in b.items()} for b in numpy_batches]
    run = lambda i: trainer.train_step(batches[i])[:2]  # (loss, mean weight)
    peak = peaks.matmul_peak_tf
    profiler = None
    framework = f"keras {keras.__version__} / tensorflow {tf.__version__}"
  return run, peak, dict(framework=framework, check=check), profiler
