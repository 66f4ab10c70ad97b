"""hashing.bucket is SplitMix64 mod 2**63 mod H, bit-for-bit against a numpy uint64 reference."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras.frequency import hashing

import numpy as np
import tensorflow as tf

_M64 = (1 << 64) - 1


def np_mix64(keys, seed):
  """Independent uint64 SplitMix64 finaliser of key + (seed + 1) * φ (numpy wraps mod 2**64)."""
  x = keys.astype(np.int64).view(np.uint64) + np.uint64(((seed + 1) * 0x9E3779B97F4A7C15) & _M64)
  x = x ^ (x >> np.uint64(30))
  x = x * np.uint64(0xBF58476D1CE4E5B9)
  x = x ^ (x >> np.uint64(27))
  x = x * np.uint64(0x94D049BB133111EB)
  return x ^ (x >> np.uint64(31))


def np_bucket(keys, seed, num_buckets):
  x = np_mix64(keys, seed) & np.uint64((1 << 63) - 1)
  return (x % np.uint64(num_buckets)).astype(np.int64)


def test_mix64_is_splitmix64():
  # SplitMix64 seeded with 0: its first output is 0xE220A8397B1DCDAF (Vigna's reference).
  out = hashing.mix64(tf.constant([0], tf.int64), seed=0).numpy().view(np.uint64)[0]
  assert int(out) == 0xE220A8397B1DCDAF


def test_bucket_matches_numpy_reference():
  rng = np.random.default_rng(0)
  keys = np.concatenate(
    [rng.integers(0, 2**62, 1000), np.arange(50), [2**63 - 1, 2**63 - 2, 12345678901234]]
  ).astype(np.int64)
  for seed in (0, 1, 7):
    for num_buckets in (1, 7, 1000, 2**20, 2**31 - 1):
      got = hashing.bucket(tf.constant(keys), seed, num_buckets).numpy()
      np.testing.assert_array_equal(got, np_bucket(keys, seed, num_buckets))
      assert got.min() >= 0 and got.max() < num_buckets


def test_seeds_give_different_hashes_and_spread():
  keys = tf.range(100000, dtype=tf.int64)
  h0 = hashing.bucket(keys, 0, 1024).numpy()
  h1 = hashing.bucket(keys, 1, 1024).numpy()
  assert np.mean(h0 == h1) < 0.01
  counts = np.bincount(h0, minlength=1024)
  assert counts.min() > 50 and counts.max() < 150  # mean 97.7, uniform spread


def test_string_keys_are_stable_fingerprints():
  s = tf.constant(["item_1", "item_2", "item_1", ""])
  keys = hashing.ids_to_keys(s).numpy()
  assert keys[0] == keys[2] and keys[0] != keys[1]
  assert np.all(keys >= 0)
  np.testing.assert_array_equal(keys, tf.strings.to_hash_bucket_fast(s, 2**63 - 1).numpy())


def test_ids_to_keys_dtypes():
  assert hashing.ids_to_keys(tf.constant([1, 2], tf.int32)).dtype == tf.int64
  try:
    hashing.ids_to_keys(tf.constant([1.0]))
  except TypeError as e:
    assert "float32" in str(e)
  else:
    raise AssertionError("float ids accepted")
