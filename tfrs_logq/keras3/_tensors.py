"""Input handling shared by the Keras 3 modules: dtypes, static shapes and value checks.

Only ``keras`` and ``keras.ops``. Value checks (Q in (0, 1], ids in range) need concrete values:
they run in eager execution (the PyTorch backend, ``run_eagerly=True``, direct calls on arrays)
and are skipped while a backend traces a compiled function (``jax.jit``, ``tf.function``), where
a failed check cannot raise; there invalid log Q shows up as a NaN / inf loss.
"""

from typing import Any, Optional, Tuple, Union

import keras
import numpy as np
from keras import ops

# What the Keras 3 front takes and returns as an array: a tensor of the backend, or anything
# keras.ops.convert_to_tensor accepts (numpy arrays, lists, scalars).
Tensor = Any

# A seed of keras.random: an int or a keras.random.SeedGenerator (its state advances at every
# draw, also inside a compiled step); None (Optional[Seed]) draws from Keras's global generator.
Seed = Any

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def dtype_of(x: Tensor) -> str:
  return keras.backend.standardize_dtype(x.dtype)


def as_float32(x: Tensor, name: str) -> Tensor:
  """x as a float32 tensor; TypeError for non-floating input."""
  x = ops.convert_to_tensor(x)
  if dtype_of(x) not in FLOAT_DTYPES:
    raise TypeError(f"{name} must be a floating tensor, got dtype {dtype_of(x)}")
  return ops.cast(x, "float32")


def as_ids(x: Tensor, name: str) -> Tensor:
  """Integer ids as a tensor (dtype kept); TypeError for anything else (strings included)."""
  if isinstance(x, (str, bytes)) or (isinstance(x, np.ndarray) and x.dtype.kind in "OSU"):
    raise TypeError(
      f"{name} must be integer ids; map strings to integers first (keras.layers.StringLookup)"
    )
  x = ops.convert_to_tensor(x)
  if dtype_of(x) not in INT_DTYPES:
    raise TypeError(f"{name} must be integer ids, got dtype {dtype_of(x)}")
  return x


def check_rank(x: Tensor, ranks: Union[int, Tuple[int, ...]], name: str) -> None:
  ranks = (ranks,) if isinstance(ranks, int) else tuple(ranks)
  if len(x.shape) not in ranks:
    raise ValueError(
      f"{name} must have rank {' or '.join(map(str, ranks))}, got shape {tuple(x.shape)}"
    )


def check_same_dim(a: Tensor, a_axis: int, b: Tensor, b_axis: int, what: str) -> None:
  da, db = a.shape[a_axis], b.shape[b_axis]
  if da is not None and db is not None and da != db:
    raise ValueError(
      f"{what}: sizes differ ({da} vs {db}); shapes {tuple(a.shape)} and {tuple(b.shape)}"
    )


def concrete(x: Tensor) -> Optional[np.ndarray]:
  """x as a numpy array when its value is known now, None while a backend traces."""
  try:
    return np.asarray(ops.convert_to_numpy(x))
  except Exception:  # tracers, symbolic tensors
    return None


def check_log_q(log_q: Tensor, name: str, slack: float) -> None:
  """ValueError when a concrete log Q has NaN, +-inf or a value above ``slack`` (Q > 1)."""
  value = concrete(log_q)
  if value is None:
    return
  if not np.all(np.isfinite(value)):
    raise ValueError(f"{name} has NaN or inf: every sampled negative needs 0 < Q <= 1")
  if np.any(value > slack):
    raise ValueError(f"{name} > 0: a sampling probability above 1")


def check_probability(q: Tensor, name: str, slack: float) -> None:
  """ValueError when a concrete probability is NaN, <= 0 or > 1."""
  value = concrete(q)
  if value is None:
    return
  if not np.all(np.isfinite(value)):
    raise ValueError(f"{name} has NaN or inf")
  if np.any(value <= 0):
    raise ValueError(
      f"{name} must be > 0 (no clipping: Q = 0 is not a proposal that sampled the item)"
    )
  if np.any(value > 1.0 + slack):
    raise ValueError(f"{name} must be <= 1")
