"""Compiling a function of tensors on the current Keras 3 backend, for inference loops.

    compile_function(fn)          jax: jax.jit(fn)   tensorflow: tf.function(fn, autograph=False)
                                  torch: fn under torch.no_grad() (eager)
    compile_with_state(fn, vars)  the same for a function that reads Keras variables (a model's
                                  forward pass): on jax the variables' current values are passed
                                  in at every call (``keras.StatelessScope``), so the program is
                                  compiled once and never sees stale weights; tensorflow and
                                  torch read the variables themselves.

One trace per input shape: callers pad their batches to a fixed shape (the evaluation loops of
the binaries, `tfrs_logq.keras3.top_k`). Keras's own ``predict_on_batch`` does the same inside a
``keras.Model``; these wrap any method (``serving_queries``, the top-k) without one.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import keras

__all__ = ["compile_function", "compile_with_state"]


def compile_function(fn: Callable) -> Callable:
  """``fn`` compiled on the backend (module docstring); ``fn`` must not read Keras variables."""
  backend = keras.backend.backend()
  if backend == "jax":
    import jax

    return jax.jit(fn)
  if backend == "tensorflow":
    import tensorflow as tf

    return tf.function(fn, autograph=False)  # as the tf-keras front's (its docstring)
  if backend == "torch":
    import torch

    def run(*args: Any) -> Any:
      with torch.no_grad():
        return fn(*args)

    return run
  return fn


def compile_with_state(fn: Callable, variables: Sequence) -> Callable:
  """``fn(*args)`` compiled with the current values of ``variables`` (module docstring)."""
  if keras.backend.backend() != "jax":
    return compile_function(fn)
  import jax

  variables = list(variables)

  def pure(values: list, *args: Any) -> Any:
    with keras.StatelessScope(state_mapping=list(zip(variables, values))):
      return fn(*args)

  jitted = jax.jit(pure)

  def run(*args: Any) -> Any:
    return jitted([v.value for v in variables], *args)

  return run
