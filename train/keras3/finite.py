"""The gradient check of `python -m train.keras3`: an Adam that counts the steps whose gradients
are not all finite, on every Keras 3 backend.

    nonfinite_steps += 1  if any(not isfinite(g) for g in grads)  (then Adam's update, unchanged)

The tf-keras binary makes a step's loss NaN when a gradient is not finite (`train.step`), so
its loss check stops training at that step. Keras 3 computes the gradients inside its compiled
train step (``train_on_batch``), out of reach of the trainer; but every backend's train step
hands them to ``optimizer.apply`` (TensorFlow and PyTorch directly, JAX inside
``stateless_apply``'s scope, which returns the optimizer's variables updated). So the count is
an int32 optimizer variable written there, and the trainer reads it after each step
(`train.keras3.trainer`): a finite loss with a count > 0 is a non-finite gradient at that step.
The update itself is Adam's (or LazyAdam's), whatever the gradients (training stops at the step
anyway).
"""

from __future__ import annotations

import keras
from keras import ops

import tfrs_logq.keras3 as tlk

__all__ = ["GradientCheckedAdam", "GradientCheckedLazyAdam", "all_finite"]


def all_finite(tensors):
  """bool scalar: every element of every tensor (None skipped) is finite."""
  checks = [ops.all(ops.isfinite(t)) for t in tensors if t is not None]
  if not checks:
    return ops.convert_to_tensor(True)
  return ops.all(ops.stack(checks))


class _GradientCheck:
  """The count of non-finite steps, mixed into an optimizer (module docstring)."""

  def build(self, variables):
    if self.built:
      return
    super().build(variables)
    self.nonfinite_steps = self.add_variable(
      (), initializer="zeros", dtype="int32", name="nonfinite_steps"
    )

  def apply(self, grads, trainable_variables=None):
    if self.built and len(grads):
      self.nonfinite_steps.assign_add(ops.cast(ops.logical_not(all_finite(grads)), "int32"))
    return super().apply(grads, trainable_variables)

  def nonfinite_count(self) -> int:
    """The number of steps so far whose gradients were not all finite."""
    return int(ops.convert_to_numpy(self.nonfinite_steps.value))


class GradientCheckedAdam(_GradientCheck, keras.optimizers.Adam):
  """``keras.optimizers.Adam`` + ``nonfinite_steps`` (int32 variable, module docstring)."""


class GradientCheckedLazyAdam(_GradientCheck, tlk.LazyAdam):
  """`tfrs_logq.keras3.LazyAdam` + ``nonfinite_steps`` (--table_optimizer=lazy_adam)."""
