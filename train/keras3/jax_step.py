"""The train step of `python -m train.keras3` on JAX without a host synchronisation per step.

``model.train_on_batch`` returns numpy (a host synchronisation every step) and writes the state
back into the Keras variables every step. This step runs the same program, the model's
``train_step(state, data)`` (gradients, the optimizer's update, the metrics), compiled once with
``jax.jit``, and keeps the state as device arrays between steps:

    state_t     = (trainable, non-trainable, optimizer, metrics) values; metrics start at zero
                  every step (what ``reset_metrics`` + ``train_on_batch`` gives)
    logs_t      = {"loss", "mean_weight", "finite"}: device scalars, read by the epoch loop every
                  k steps (`train.epochs.EpochLoop`); finite = the optimizer's count of
                  non-finite steps (`train.keras3.finite`) did not grow at this step
    sync()      writes the state into the Keras variables (before validation, checkpoints, the
                  MIDX refresh: once per epoch)

Programs: one per input shape (with --sasrec_pack_tokens, one per token capacity).
``precompile(batches)`` traces the step for each example batch at once and compiles the
programs with XLA in a background thread, so a run compiles its known set of shapes at its start
while the first steps train; a shape not precompiled is compiled when it first comes
(``late`` counts them).

The streaming frequency estimator is updated outside the step, on the variables (its update
has a data-dependent size); its variables are therefore read from the variables at every step
and never carried (nor donated). The trainable, optimizer and carried non-trainable arrays are
donated to the next step (updated in place on the device). Used on --backend=jax without
--strategy=mirrored; the other backends and the data-parallel path keep ``train_on_batch``.
"""

from __future__ import annotations

import concurrent.futures
from typing import Dict, Sequence, Tuple

import jax
import jax.numpy as jnp

__all__ = ["JaxStep", "on_accelerator", "shape_key"]


class JaxStep:
  """``step(batch) -> logs`` (device scalars) on the state of ``model`` (module docstring).

  Args:
    model: a compiled, built `keras.Model` on the jax backend (its optimizer built).
    outside: variables updated outside the step (the estimator's): read at every step.
    counter: the optimizer's int32 count of non-finite steps (``optimizer.nonfinite_steps``).
  """

  def __init__(self, model, outside: Sequence = (), counter=None):
    self.model = model
    ids = {id(v) for v in outside}
    self._non_trainable = list(model.non_trainable_variables)
    self._outside = [i for i, v in enumerate(self._non_trainable) if id(v) in ids]
    self._counter = None
    if counter is not None:
      for i, v in enumerate(model.optimizer.variables):
        if v is counter:
          self._counter = i
    self._metrics_zero = [jnp.zeros(v.shape, v.dtype) for v in model.metrics_variables]
    self._state = None
    self._compiled = jax.jit(self._step, donate_argnums=(0, 1, 2))
    self._programs: Dict[Tuple, concurrent.futures.Future] = {}
    self._pool = None
    self.late = 0  # programs compiled when their shape first came (not precompiled)

  # ------------------------------------------------------------------------------- state
  def load(self) -> None:
    """Takes the state from the Keras variables (after a restore or a sync)."""
    m = self.model
    outside = set(self._outside)
    copy = lambda v: jnp.copy(v.value)  # the step donates its inputs; the variables keep theirs
    self._state = (
      [copy(v) for v in m.trainable_variables],
      [copy(v) for i, v in enumerate(self._non_trainable) if i not in outside],
      [copy(v) for v in m.optimizer.variables],
    )

  def sync(self) -> None:
    """Writes the carried state into the Keras variables and drops it: the next step (or
    `load`) copies it back from the variables."""
    if self._state is None:
      return
    m = self.model
    trainable, non_trainable, optimizer = self._state
    for v, value in zip(m.trainable_variables, trainable):
      v.assign(value)
    outside = set(self._outside)
    for v, value in zip(
      [v for i, v in enumerate(self._non_trainable) if i not in outside], non_trainable
    ):
      v.assign(value)
    for v, value in zip(m.optimizer.variables, optimizer):
      v.assign(value)
    # the variables now own these arrays: the next step must not donate them
    self._state = None

  # ------------------------------------------- the pieces a stack of runs uses (seeds.py)
  @property
  def step_function(self):
    """The pure step (trainable, carried, optimizer, outside, metrics, batch) -> (logs,
    (trainable, carried, optimizer)), uncompiled (to be vmapped over runs)."""
    return self._step

  def carried_state(self) -> tuple:
    """(trainable, carried non-trainable, optimizer) values; loads them if needed."""
    if self._state is None:
      self.load()
    return self._state

  def set_carried_state(self, state) -> None:
    """Replaces the carried state (same structure as `carried_state`)."""
    self._state = tuple(list(x) for x in state)

  def outside_values(self) -> list:
    """The current values of the variables updated outside the step."""
    return [self._non_trainable[i].value for i in self._outside]

  def metrics_zero(self) -> list:
    """The metrics' values at the start of a step (zeros)."""
    return list(self._metrics_zero)

  # -------------------------------------------------------------------------------- step
  def _merge(self, carried, outside):
    """The full non-trainable list from the carried values and the outside ones."""
    carried, outside, merged = list(carried), list(outside), []
    places = set(self._outside)
    for i in range(len(self._non_trainable)):
      merged.append(outside.pop(0) if i in places else carried.pop(0))
    return merged

  def _step(self, trainable, carried, optimizer, outside, metrics, batch):
    non_trainable = self._merge(carried, outside)
    before = optimizer[self._counter] if self._counter is not None else None
    logs, state = self.model.train_step((trainable, non_trainable, optimizer, metrics), (batch,))
    trainable, non_trainable, optimizer, _ = state
    places = set(self._outside)
    carried = [v for i, v in enumerate(non_trainable) if i not in places]
    finite = jnp.asarray(True) if before is None else jnp.equal(optimizer[self._counter], before)
    logs = dict(logs, finite=finite)
    return logs, (list(trainable), carried, list(optimizer))

  def _args(self, batch) -> tuple:
    trainable, carried, optimizer = self._state
    return trainable, carried, optimizer, self.outside_values(), self._metrics_zero, batch

  def precompile(self, batches: Sequence[Dict]) -> int:
    """Traces the step for each example batch (arrays or `jax.ShapeDtypeStruct`s; only their
    shapes and dtypes matter) now and compiles it in a background thread; the number of new
    programs."""
    if self._state is None:
      self.load()
    if self._pool is None:
      self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="compile")
    new = 0
    for batch in batches:
      key = shape_key(batch)
      if key not in self._programs:
        self._programs[key] = self._pool.submit(self._compiled.lower(*self._args(batch)).compile)
        new += 1
    return new

  def __call__(self, batch: Dict) -> Dict:
    """One step on the carried state; the logs as device scalars."""
    if self._state is None:
      self.load()
    key = shape_key(batch)
    program = self._programs.get(key)
    if program is None:
      program = concurrent.futures.Future()
      program.set_result(self._compiled.lower(*self._args(batch)).compile())
      self._programs[key] = program
      self.late += 1
    logs, self._state = program.result()(*self._args(batch))
    return logs

  @property
  def programs(self) -> int:
    """The number of step programs compiled or compiling."""
    return len(self._programs)


def on_accelerator() -> bool:
  """True when jax's default device is not the CPU (a GPU or TPU)."""
  return jax.default_backend() != "cpu"


def shape_key(batch: Dict) -> Tuple:
  """((name, shape, dtype), ...) of a batch, sorted by name."""
  return tuple(sorted((k, tuple(v.shape), str(v.dtype)) for k, v in batch.items()))
