"""`Dropout`: Keras's dropout layer with a keep mask drawn from 16 random bits per element.

  u ~ Uniform{0, ..., 2^16 - 1} per element,   t = round((1 - rate) 2^16),   p' = t / 2^16
  dropout(x) = x / p'  where u < t,   0 elsewhere          (training; x itself otherwise)

so E[dropout(x)] = x exactly, and the keep probability p' is 1 - rate rounded to 1/65536 (exact
for the paper's 0.5). Why: on JAX, ``keras.layers.Dropout`` draws a whole 32-bit threefry word
per element (``jax.random.bernoulli``), which on XLA:CPU is about 40 % of the SASRec training
step (B 128 x L 200 x d 128, dropout 0.5, 2 blocks: ~27 M mask elements per step). Here each
word gives two elements (half the bits), and ``jax.random.bits`` of a flat uint32 vector is an
order of magnitude cheaper than a uint8/uint16/bool draw of the same element count (which still
costs a word per element). Other backends draw the same 16-bit uniforms with
``keras.random.randint``. The layer's seed state is Keras's own (`SeedGenerator`, advanced once
per call), so checkpoints, ``stateless_call`` and exact resume work as with Keras's layer.
"""

from __future__ import annotations

import math

import keras
from keras import ops

__all__ = ["Dropout", "keep_threshold"]

_BITS = 16
_LEVELS = 1 << _BITS


def keep_threshold(rate: float) -> int:
  """t = round((1 - rate) 2^16): an element is kept where its 16-bit uniform is < t."""
  return int(round((1.0 - float(rate)) * _LEVELS))


def _uniform16(inputs, seed_generator):
  """Uniform integers on {0, ..., 2^16 - 1} (int32) of the shape of ``inputs``, one seed draw."""
  shape = ops.shape(inputs)
  if keras.backend.backend() == "jax":
    import jax
    import jax.numpy as jnp

    n = math.prod(shape)
    words = jax.random.bits(seed_generator.next(), ((n + 1) // 2,), jnp.uint32)
    halves = jax.lax.bitcast_convert_type(words, jnp.uint16).reshape(-1)[:n]
    return halves.reshape(shape).astype(jnp.int32)
  return keras.random.randint(shape, 0, _LEVELS, dtype="int32", seed=seed_generator)


@keras.saving.register_keras_serializable(package="tfrs_logq_models")
class Dropout(keras.layers.Dropout):
  """``keras.layers.Dropout`` (same arguments, config and seed state) with the 16-bit keep mask
  of the module docstring. ``noise_shape`` is not supported (the SASRec does not use it)."""

  def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
    if noise_shape is not None:
      raise ValueError(
        "models.keras3.dropout.Dropout does not take a noise_shape (use keras.layers.Dropout)"
      )
    super().__init__(rate, noise_shape=None, seed=seed, **kwargs)

  def call(self, inputs, training=False):
    threshold = keep_threshold(self.rate)
    if not training or threshold >= _LEVELS:
      return inputs
    if threshold <= 0:
      return ops.zeros_like(inputs)
    keep = _uniform16(inputs, self.seed_generator) < threshold
    scale = ops.cast(_LEVELS / threshold, inputs.dtype)
    return ops.where(keep, inputs * scale, ops.zeros_like(inputs))
