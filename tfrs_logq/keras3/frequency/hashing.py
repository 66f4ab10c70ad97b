"""Stable 32-bit hashing of integer item ids for the Keras 3 estimators (``keras.ops`` only).

JAX keeps 32-bit integers unless x64 is enabled, so the Keras 3 path hashes in int32 (the
tf-keras path's SplitMix64 needs int64). ``bucket(keys, seed, num_buckets)`` is the "lowbias32"
integer finaliser (C. Wellons' hash prospector: xor-shift 16, multiply 0x7feb352d, xor-shift
15, multiply 0x846ca68b, xor-shift 16) applied to ``key + (seed + 1) * 0x9e3779b9`` (mod 2**32),
then ``(h mod 2**31) mod num_buckets``. int32 arithmetic wraps around (two's complement) on
every backend; logical right shifts are written ``(x >> s) & (2**(32-s) - 1)``. Tests check it
bit-for-bit against a numpy uint32 reference on every backend.
"""

import numpy as np
from keras import ops

from tfrs_logq.keras3._tensors import Tensor

GOLDEN32 = 0x9E3779B9
MIX1 = 0x7FEB352D
MIX2 = 0x846CA68B

__all__ = ["mix32", "bucket", "GOLDEN32", "MIX1", "MIX2"]


def _int32(u: int) -> np.ndarray:
  """The int32 with the bits of the unsigned 32-bit value u."""
  return np.array(u & 0xFFFFFFFF, np.uint32).view(np.int32)


def _xor_shift(x: Tensor, s: int) -> Tensor:
  return ops.bitwise_xor(x, ops.bitwise_and(ops.right_shift(x, s), _int32((1 << (32 - s)) - 1)))


def mix32(keys: Tensor, seed: int) -> Tensor:
  """lowbias32 of ``keys + (seed + 1) * GOLDEN32`` (mod 2**32), as int32 bits."""
  x = ops.add(ops.cast(keys, "int32"), _int32((seed + 1) * GOLDEN32))
  x = ops.multiply(_xor_shift(x, 16), _int32(MIX1))
  x = ops.multiply(_xor_shift(x, 15), _int32(MIX2))
  return _xor_shift(x, 16)


def bucket(keys: Tensor, seed: int, num_buckets: int) -> Tensor:
  """h_seed(key) in [0, num_buckets), int32: ``(mix32(key, seed) mod 2**31) mod num_buckets``."""
  x = ops.bitwise_and(mix32(keys, seed), _int32(0x7FFFFFFF))
  return ops.mod(x, _int32(num_buckets))
