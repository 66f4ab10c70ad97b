"""CountMinSketch against a numpy reference (eager decay of the whole table), and its ε·N bound."""

import math

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras.frequency import CountMinSketch, hashing, sketch_shape

import numpy as np
import pytest
import tensorflow as tf


class NumpyCountMin:
  """Reference: dense [depth, width] table, multiplied by γ every (non-empty) step."""

  def __init__(self, width, depth, conservative, half_life, seed=0, min_count=1.0):
    self.w, self.d, self.cons, self.seed = width, depth, conservative, seed
    self.gamma = 1.0 if half_life is None else 0.5 ** (1.0 / half_life)
    self.table = np.zeros([depth, width])
    self.total = 0.0
    self.min_count = min_count

  def cells(self, keys):
    keys = tf.constant(np.asarray(keys, np.int64))
    return np.stack([hashing.bucket(keys, self.seed + j, self.w).numpy() for j in range(self.d)])

  def update(self, keys):
    keys = np.asarray(keys, np.int64)
    if keys.size == 0:
      return
    self.table *= self.gamma
    self.total = self.gamma * self.total + keys.size
    ids, counts = np.unique(keys, return_counts=True)
    cells = self.cells(ids)
    if not self.cons:
      for j in range(self.d):
        np.add.at(self.table[j], cells[j], counts)
      return
    est = self.table[np.arange(self.d)[:, None], cells].min(axis=0)
    new = self.table.copy()
    for x in range(ids.size):  # cell = max(old, max_x est(x) + c_x)
      for j in range(self.d):
        new[j, cells[j, x]] = max(new[j, cells[j, x]], est[x] + counts[x])
    self.table = new

  def estimate(self, keys):
    cells = self.cells(np.asarray(keys).ravel())
    return self.table[np.arange(self.d)[:, None], cells].min(axis=0).reshape(np.shape(keys))

  def log_q(self, keys):
    est = np.maximum(self.estimate(keys), self.min_count)
    return np.minimum(np.log(est) - np.log(max(self.total, self.min_count)), 0.0)


def test_sketch_shape_from_epsilon_delta():
  assert sketch_shape(0.01, 0.01) == (math.ceil(math.log(100)), math.ceil(math.e / 0.01))
  cms = CountMinSketch(epsilon=1e-3, delta=0.05)
  assert (cms.depth, cms.width) == (3, 2719)
  assert cms.table.shape == [3 * 2719]
  with pytest.raises(ValueError):
    CountMinSketch(epsilon=0.0, delta=0.1)
  with pytest.raises(ValueError):
    CountMinSketch(epsilon=0.1, width=10, delta=0.1)


def test_documented_signature_defaults_and_numpy_sizes():
  """docs/frequency_estimation.md's CountMinSketch(epsilon, delta, conservative=...,
  half_life=...): ε and δ are the first two positionals, the rest are keywords; with nothing given
  ε = 1e-4, δ = 0.01 (width ⌈e/ε⌉, depth ⌈ln 1/δ⌉); numpy integers are sizes like ints."""
  cms = CountMinSketch(1e-3, 0.05, conservative=True, half_life=10.0)
  assert (cms.depth, cms.width, cms.conservative, cms.half_life) == (3, 2719, True, 10.0)
  default = CountMinSketch()
  assert (default.depth, default.width) == (math.ceil(math.log(100)), math.ceil(math.e / 1e-4))
  with pytest.raises(TypeError):
    CountMinSketch(1e-3, 0.05, 100)  # width is keyword-only
  sized = CountMinSketch(width=np.int64(64), depth=np.int32(3), seed=np.int64(2))
  assert (sized.width, sized.depth, sized.seed) == (64, 3, 2)
  for bad in (64.5, "64", 0):
    with pytest.raises(ValueError, match="width"):
      CountMinSketch(width=bad, depth=2)


@pytest.mark.parametrize(
  "conservative,half_life", [(False, None), (True, None), (False, 3.0), (True, 2.5)]
)
def test_matches_numpy_reference(conservative, half_life):
  rng = np.random.default_rng(2)
  cms = CountMinSketch(width=13, depth=3, conservative=conservative, half_life=half_life, seed=5)
  ref = NumpyCountMin(13, 3, conservative, half_life, seed=5)
  update = tf.function(cms.update, input_signature=[tf.TensorSpec([None], tf.int64)])
  log_q = tf.function(cms.log_q)
  probe = np.arange(60, dtype=np.int64).reshape(6, 10)
  p = np.arange(1, 61) ** -1.1
  for t in range(20):
    n = 0 if t == 4 else int(rng.integers(1, 80))
    ids = rng.choice(60, size=n, p=p / p.sum()).astype(np.int64)
    update(tf.constant(ids))
    ref.update(ids)
    np.testing.assert_allclose(cms.estimate(probe).numpy(), ref.estimate(probe), rtol=1e-5)
    np.testing.assert_allclose(log_q(probe).numpy(), ref.log_q(probe), rtol=1e-5, atol=1e-6)
  assert np.isclose(cms.total.numpy(), ref.total, rtol=1e-6)
  assert cms.step.numpy() == 19


def test_conservative_never_underestimates_and_beats_standard():
  rng = np.random.default_rng(3)
  std = CountMinSketch(width=50, depth=2)
  cons = CountMinSketch(width=50, depth=2, conservative=True)
  seen = np.zeros(400)
  for _ in range(30):
    ids = rng.integers(0, 400, size=200)
    std.update(tf.constant(ids))
    cons.update(tf.constant(ids))
    np.add.at(seen, ids, 1)
  all_ids = tf.range(400, dtype=tf.int64)
  e_std, e_cons = std.estimate(all_ids).numpy(), cons.estimate(all_ids).numpy()
  assert np.all(e_cons >= seen) and np.all(e_std >= seen)
  assert np.all(e_cons <= e_std) and np.sum(e_cons - seen) < 0.8 * np.sum(e_std - seen)


def test_decay_halves_weight_every_half_life():
  cms = CountMinSketch(width=1000, depth=2, half_life=4)
  cms.update(tf.constant([1] * 8, tf.int64))
  for _ in range(4):
    cms.update(tf.constant([2], tf.int64))
  np.testing.assert_allclose(cms.estimate(tf.constant([1], tf.int64)).numpy(), [4.0], rtol=1e-5)
  expected_total = 8 * 0.5 + sum(0.5 ** (k / 4) for k in range(4))
  np.testing.assert_allclose(cms.total.numpy(), expected_total, rtol=1e-5)


def test_zipf_head_within_epsilon_n():
  """Zipf(1.05) over 100k items, batches of 4096: for the 1000 most frequent items
  true ≤ est ≤ true + ε·N (the count-min guarantee), i.e. |Q̂ − Q| ≤ ε. Full size in bench/."""
  vocab, batch, steps = 100_000, 4096, 100
  p = np.arange(1, vocab + 1, dtype=np.float64) ** -1.05
  rng = np.random.default_rng(0)
  u = np.sort(rng.random((steps, batch)), axis=1)
  stream = np.minimum(np.searchsorted(np.cumsum(p / p.sum()), u), vocab - 1).astype(np.int64)
  for conservative in (False, True):
    cms = CountMinSketch(epsilon=1e-3, delta=0.01, conservative=conservative)

    @tf.function
    def run(x, cms=cms):
      for i in tf.range(tf.shape(x)[0]):
        cms.update(x[i])

    run(tf.constant(stream))
    true = np.bincount(stream.ravel(), minlength=vocab)[:1000]
    est = cms.estimate(tf.range(1000, dtype=tf.int64)).numpy()
    n = stream.size
    assert cms.total.numpy() == n
    assert np.all(est >= true) and np.all(est - true <= cms.epsilon * n)
    q = np.exp(cms.log_q(tf.range(1000, dtype=tf.int64)).numpy())
    assert np.max(np.abs(q - true / n)) <= cms.epsilon
