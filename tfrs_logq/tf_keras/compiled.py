"""Compiling a function of tensors with TensorFlow: training steps and inference loops.

    compile_function(fn, **kwargs)   tf.function(fn, autograph=False, **kwargs)
                                     (kwargs: jit_compile, input_signature, reduce_retracing)

The twin of the Keras 3 front's ``compiled``, less its ``compile_with_state``: a TensorFlow
function reads the variables it uses at every call, so no variant that passes them in is needed.

Without AutoGraph. ``tf.function``'s default rewrites the source of every Python function its
trace reaches (the model, this library, Keras's layers) into graph control flow before tracing
it. The library and the binaries write their control flow on tensors as graph ops
(``tf.cond``, ``tf.where``, ``tf.while_loop``), so the rewrite changes no program, and a Python
``if`` on a tensor raises at trace time instead of silently becoming a ``tf.cond``; yet the
rewrite (410 functions for the train step and the validation encoder) was most of a tf-keras
run's first step (measured: docs/training.md, "compile_function"), with the same losses and
metrics. Keras 3's own TensorFlow trainer opts out the same way.

Usable as a decorator with keyword arguments: ``@compile_function(input_signature=[...])``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import tensorflow as tf

__all__ = ["compile_function"]


def compile_function(fn: Optional[Callable] = None, **kwargs: Any) -> Any:
  """``tf.function(fn, autograph=False, **kwargs)`` (module docstring); without ``fn``, the
  decorator with those arguments."""
  if "autograph" in kwargs:
    raise ValueError("compile_function never converts with AutoGraph: drop `autograph`")
  if fn is None:
    return functools.partial(compile_function, **kwargs)
  return tf.function(fn, autograph=False, **kwargs)
