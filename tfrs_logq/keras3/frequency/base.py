"""Common interface of the Keras 3 streaming estimators of Q(d), the per-draw probability.

The Keras 3 twin of ``tfrs_logq.tf_keras.frequency.base``: every estimator is a
``keras.layers.Layer`` whose state lives in non-trainable ``keras.Variable``s created in
``__init__`` and updated with backend-neutral ``keras.ops`` (``assign`` of a scattered copy), so it
works inside a compiled JAX / TensorFlow train step (Keras threads the non-trainable state through
``jax.jit``) and on PyTorch, and is saved in ``.keras`` files and checkpoints.

* ``update(ids, valid=None)``: once per training step with the step's candidate ids (integer, any
  rank >= 1, flattened). ``valid`` (bool, ids' shape) marks the entries to count: the padding of
  a static-shape batch is passed with ``valid`` False, so the update's shapes depend on the batch
  shape only (on JAX an eager or compiled update is traced once per batch shape, not once per
  count of positives). An update that counts nothing (static size 0, or nothing valid) is a no-op.
* ``log_q(ids) -> float32, same shape``: log Q(d), always finite (documented floors).
* ``log_one_minus_q(ids)``: log(1 - Q(d)), stable, 1 - Q floored at ``MIN_ONE_MINUS_Q`` = 1e-6.
* ``log_q_prime(ids, positive_ids)``: log Q(d) - log(1 - Q(p)) with broadcasting.
* ``call(ids)`` is ``log_q(ids)``.

Ids are integers; JAX without x64 holds them as int32 (ids < 2**31). Id checks (>= 0, <
``num_items``) run where values are concrete (eager) and raise ValueError before any state
changes; inside a compiled step they cannot raise (out-of-range gathers are clamped by JAX).
Cross-replica updates: under ``keras.distribution.DataParallel`` (JAX) the batch passed to
``update`` is the global batch, so every replica applies the same update.
"""

from typing import Any, Dict, Optional, Tuple

import keras
import numpy as np
from keras import ops

from tfrs_logq.core import log_q as log_q_core
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3._tensors import Tensor

MIN_ONE_MINUS_Q = log_q_core.MIN_ONE_MINUS_Q

__all__ = ["FrequencyEstimator", "MIN_ONE_MINUS_Q", "log1m_exp", "group_sorted"]

# `update(ids, valid)`: the entries that do not count are sent to a sentinel index, one past the
# end of the state they would read or write (`masked_index`). Reads clamp it (`take_state`: the
# value read is never used) and writes drop it (`scatter_state`), so the shapes stay static.


def masked_index(index: Tensor, valid: Tensor, size: int) -> Tensor:
  """``index`` where ``valid`` (broadcast against it), else the sentinel ``size``."""
  return ops.where(valid, index, size)


def take_state(state: Tensor, index: Tensor) -> Tensor:
  """``state[index]`` with a sentinel index (= state size) clamped to the last entry."""
  return ops.take(state, ops.minimum(index, state.shape[0] - 1))


def scatter_state(state: Tensor, index: Tensor, values: Tensor, sentinel: bool) -> Tensor:
  """``state`` with ``values`` written at the 1-D ``index``; with ``sentinel``, the writes at the
  sentinel index (= state size) are dropped (written to one extra entry, then cut off)."""
  if not sentinel:
    return ops.scatter_update(state, ops.expand_dims(index, 1), values)
  size = state.shape[0]
  padded = ops.concatenate([state, ops.zeros((1,), state.dtype)])
  return ops.scatter_update(padded, ops.expand_dims(index, 1), ops.cast(values, state.dtype))[:size]


def num_counted(keys: Tensor, valid: Optional[Tensor]) -> Tensor:
  """The number of entries counted: keys' static size, or the sum of ``valid`` (float32)."""
  if valid is None:
    return float(keys.shape[0])
  return ops.sum(ops.cast(valid, "float32"))


def log1m_exp(log_p: Tensor) -> Tensor:
  """log(1 - exp(log_p)) for log_p <= 0, stable, 1 - p floored at MIN_ONE_MINUS_Q."""
  return log_q_core.log1mexp(ops, ops.cast(log_p, "float32"), MIN_ONE_MINUS_Q)


def group_sorted(values: Tensor) -> Tuple[Tensor, Tensor]:
  """Sorts a 1-D int32 tensor and counts each value's occurrences, with static shapes.

  Returns (sorted [n], counts [n]): counts[i] is the multiplicity of sorted[i] (equal for every
  copy of a value), so a scatter that writes a value computed from (sorted[i], counts[i]) writes
  the same thing for each copy: deterministic, without a dynamic-size unique.
  """
  values = ops.sort(ops.reshape(values, (-1,)))
  n = values.shape[0]
  first = ops.concatenate([ops.ones((1,), "bool"), ops.not_equal(values[1:], values[:-1])])
  run = ops.cumsum(ops.cast(first, "int32")) - 1
  per_run = ops.segment_sum(ops.ones((n,), "int32"), run, num_segments=n)
  return values, ops.take(per_run, run)


@keras.saving.register_keras_serializable(package="tfrs_logq")
class FrequencyEstimator(keras.layers.Layer):
  """Base class: id handling, log Q' and the Keras plumbing (see the module docstring).

  Subclasses implement ``_update_keys(keys, valid)`` (1-D int32 keys, static size > 0; ``valid``
  None or 1-D bool of the same size) and ``_log_q_keys(keys)`` (int32 keys of any shape ->
  float32 log Q).
  """

  def __init__(
    self, num_items: Optional[int] = None, validate_ids: bool = True, **kwargs: Any
  ) -> None:
    kwargs.setdefault("trainable", False)
    kwargs["dtype"] = "float32"
    super().__init__(**kwargs)
    if num_items is not None and (int(num_items) != num_items or num_items < 1):
      raise ValueError(f"num_items must be a positive integer, got {num_items!r}")
    self.num_items = None if num_items is None else int(num_items)
    self.validate_ids = bool(validate_ids)

  def _state(
    self, name: str, shape: Tuple[int, ...], dtype: str, initial: Any = 0
  ) -> keras.Variable:
    value = np.full(shape, initial) if np.isscalar(initial) else np.asarray(initial)
    return self.add_weight(
      name=name,
      shape=shape,
      dtype=dtype,
      trainable=False,
      initializer=keras.initializers.Constant(value.astype(dtype)),
    )

  def _keys(self, ids: Tensor, *, flatten: bool, valid: Optional[Tensor] = None) -> Tensor:
    """Validated int32 keys (only the ``valid`` entries are checked), optionally flattened."""
    ids = _tensors.as_ids(ids, f"{self.name}: ids")
    if flatten and len(ids.shape) == 0:
      raise ValueError(f"{self.name}.update expects ids of rank >= 1, got a scalar")
    if self.validate_ids:
      value = _tensors.concrete(ids)
      mask = None if valid is None else _tensors.concrete(valid)
      if value is not None and mask is not None:
        value = value[mask]
      if value is not None and value.size:
        if value.min() < 0:
          raise ValueError(f"{self.name}: item ids must be >= 0")
        if self.num_items is not None and value.max() >= self.num_items:
          raise ValueError(f"{self.name}: item ids must be < num_items={self.num_items}")
    keys = ops.cast(ids, "int32")
    return ops.reshape(keys, (-1,)) if flatten else keys

  def update(self, ids: Tensor, valid: Optional[Tensor] = None) -> None:
    """Counts one training step's candidate ids.

    Args:
      ids: integer ids, any rank >= 1.
      valid: optional bool, same shape as ``ids``: False entries (padding of a static-shape
        batch) are not counted, and the update's shapes do not depend on how many are True.
    """
    if valid is not None:
      valid = self._valid(valid, ids)
    keys = self._keys(ids, flatten=True, valid=valid)
    if keys.shape[0] == 0:
      return
    if valid is None:
      self._update_keys(keys)
    else:
      self._update_keys(keys, ops.reshape(valid, (-1,)))

  def _valid(self, valid: Tensor, ids: Tensor) -> Tensor:
    """``valid`` as a bool tensor of ids' shape; TypeError / ValueError otherwise."""
    valid = ops.convert_to_tensor(valid)
    if _tensors.dtype_of(valid) != "bool":
      raise TypeError(f"{self.name}.update: valid must be bool, got {_tensors.dtype_of(valid)}")
    ids_shape = tuple(ops.shape(ops.convert_to_tensor(ids)))
    if tuple(ops.shape(valid)) != ids_shape:
      raise ValueError(
        f"{self.name}.update: valid {tuple(ops.shape(valid))} does not match ids {ids_shape}"
      )
    return valid

  def log_q(self, ids: Tensor) -> Tensor:
    """log Q(d), float32, same shape as ids."""
    return self._log_q_keys(self._keys(ids, flatten=False))

  def log_one_minus_q(self, ids: Tensor) -> Tensor:
    """log(1 - Q(d)), float32, stable, 1 - Q floored at MIN_ONE_MINUS_Q."""
    return log1m_exp(self.log_q(ids))

  def log_q_prime(self, ids: Tensor, positive_ids: Tensor) -> Tensor:
    """log Q'(d) = log Q(d) - log(1 - Q(p)), broadcasting ids against positive_ids."""
    return self.log_q(ids) - self.log_one_minus_q(positive_ids)

  def call(self, ids: Tensor) -> Tensor:
    return self.log_q(ids)

  def compute_output_spec(self, ids: keras.KerasTensor) -> keras.KerasTensor:
    return keras.KerasTensor(ids.shape, "float32")

  def get_config(self) -> Dict[str, Any]:
    return {**super().get_config(), "num_items": self.num_items, "validate_ids": self.validate_ids}

  def _update_keys(self, keys: Tensor, valid: Optional[Tensor] = None) -> None:
    raise NotImplementedError

  def _log_q_keys(self, keys: Tensor) -> Tensor:
    raise NotImplementedError
