"""Stable in-graph hashing of item ids for the frequency estimators.

Two steps, both pure TensorFlow ops that give the same bits on every device and every run:

* ``ids_to_keys``: int32/int64 ids are widened to int64 keys unchanged; string ids become
  ``Fingerprint64(s) mod (2**63 - 1)`` via ``tf.strings.to_hash_bucket_fast`` (FarmHash, stable
  across processes and versions, unlike Python's ``hash``).
* ``bucket(keys, seed, num_buckets)``: the SplitMix64 finaliser applied to ``key + (seed + 1) * φ``
  (φ = 0x9E3779B97F4A7C15, arithmetic modulo 2**64), then ``(x mod 2**63) mod num_buckets``.
  Different seeds give the independent hash functions h_1..h_m of the hash-array estimator and
  the rows of the count-min sketch.

The 64-bit arithmetic is done in int64 with two's-complement wrap-around (which is what the
CPU/GPU kernels and XLA do) and logical right shifts written as ``(x >> s) & (2**(64-s) - 1)``;
tests check it bit-for-bit against a numpy uint64 reference.
"""

import tensorflow as tf

__all__ = ["ids_to_keys", "mix64", "bucket"]

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_STRING_KEY_RANGE = (1 << 63) - 1


def _signed(u: int) -> int:
  """An unsigned 64-bit Python int as the int64 with the same bits."""
  u &= _MASK64
  return u - (1 << 64) if u >= (1 << 63) else u


def _shift_right_logical(x: tf.Tensor, s: int) -> tf.Tensor:
  return tf.bitwise.bitwise_and(tf.bitwise.right_shift(x, s), (1 << (64 - s)) - 1)


def ids_to_keys(ids: tf.Tensor) -> tf.Tensor:
  """int64 keys of ids: integers unchanged, strings by Fingerprint64 mod (2**63 - 1).

  Raises:
    TypeError: ids are neither integer nor string.
  """
  ids = tf.convert_to_tensor(ids)
  if ids.dtype == tf.string:
    return tf.strings.to_hash_bucket_fast(ids, _STRING_KEY_RANGE)
  if ids.dtype in (tf.int32, tf.int64, tf.int16, tf.int8, tf.uint8, tf.uint16, tf.uint32):
    return tf.cast(ids, tf.int64)
  raise TypeError(f"item ids must be an integer or string tensor, got dtype {ids.dtype.name}")


def mix64(keys: tf.Tensor, seed: int) -> tf.Tensor:
  """SplitMix64 finaliser of ``keys + (seed + 1) * GOLDEN`` (mod 2**64), as int64 bits."""
  x = tf.add(keys, tf.constant(_signed((seed + 1) * _GOLDEN), tf.int64))
  x = tf.bitwise.bitwise_xor(x, _shift_right_logical(x, 30))
  x = tf.multiply(x, tf.constant(_signed(_MIX1), tf.int64))
  x = tf.bitwise.bitwise_xor(x, _shift_right_logical(x, 27))
  x = tf.multiply(x, tf.constant(_signed(_MIX2), tf.int64))
  return tf.bitwise.bitwise_xor(x, _shift_right_logical(x, 31))


def bucket(keys: tf.Tensor, seed: int, num_buckets: int) -> tf.Tensor:
  """Hash h_seed(key) in [0, num_buckets): ``(mix64(key, seed) mod 2**63) mod num_buckets``."""
  x = tf.bitwise.bitwise_and(mix64(keys, seed), tf.constant((1 << 63) - 1, tf.int64))
  return tf.math.floormod(x, tf.constant(num_buckets, tf.int64))
