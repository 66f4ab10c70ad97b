"""tfrs_logq/tf_keras/_static_shapes.py: sort-based first occurrences and per-key totals with static
shapes (against numpy oracles), 32-bit stateless seeds that draw the same with and without XLA,
and XLA-context detection."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import _static_shapes

import numpy as np
import pytest
import tensorflow as tf


def np_first_occurrence(keys, valid):
  """Reference: first valid row of each key, and the first-occurrence rank of each row's key."""
  first = np.zeros(len(keys), bool)
  order = {}
  for i, (k, v) in enumerate(zip(keys, valid)):
    if v and k not in order:
      order[k] = len(order)
      first[i] = True
  segment = np.array([order.get(k, -1) for k in keys])
  return first, segment, len(order)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_first_occurrence_matches_reference(seed):
  rng = np.random.default_rng(seed)
  keys = rng.integers(-3, 9, size=50) * (2**40 if seed == 2 else 1)  # int64 keys beyond 2^32
  valid = rng.random(50) < 0.6
  first, segment, u = _static_shapes.first_occurrence(
    tf.constant(keys, tf.int64), tf.constant(valid)
  )
  ref_first, ref_segment, ref_u = np_first_occurrence(keys.tolist(), valid)
  np.testing.assert_array_equal(first.numpy(), ref_first)
  known = ref_segment >= 0  # rows whose key has a valid row
  np.testing.assert_array_equal(segment.numpy()[known], ref_segment[known])
  assert int(u) == ref_u
  # Compacting the static answer gives tf.unique over the valid rows.
  np.testing.assert_array_equal(keys[first.numpy()], tf.unique(tf.constant(keys[valid])).y.numpy())


def test_first_occurrence_without_mask_and_empty():
  first, segment, u = _static_shapes.first_occurrence(tf.constant([5, 5, 2, 5, 2, 7]))
  np.testing.assert_array_equal(first.numpy(), [1, 0, 1, 0, 0, 1])
  np.testing.assert_array_equal(segment.numpy(), [0, 0, 1, 0, 1, 2])
  assert int(u) == 3
  first, _, u = _static_shapes.first_occurrence(tf.zeros([0], tf.int64))
  assert first.shape == (0,) and int(u) == 0


def test_run_totals_are_per_key_sums_and_maxima():
  keys = np.array([4, 1, 4, 9, 1, 4])
  values = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], np.float32)
  runs = _static_shapes.sorted_runs(tf.constant(keys))
  sorted_values = tf.gather(values, runs.order)
  totals = _static_shapes.unsort(runs, _static_shapes.run_total(runs, sorted_values))
  maxima = _static_shapes.unsort(runs, _static_shapes.run_total(runs, sorted_values, "max"))
  np.testing.assert_array_equal(runs.keys.numpy(), np.sort(keys))
  np.testing.assert_array_equal(totals.numpy(), [values[keys == k].sum() for k in keys])
  np.testing.assert_array_equal(maxima.numpy(), [values[keys == k].max() for k in keys])


def test_valid_rank_counts_valid_rows_before():
  np.testing.assert_array_equal(
    _static_shapes.valid_rank(tf.constant([True, False, True, True, False])).numpy(),
    [0, 1, 1, 2, 3],
  )


@pytest.mark.parametrize("seed", [[5, 7], [-2124193061, 1], [2**40 + 5, -3]])
def test_stateless_seed_draws_the_same_compiled_or_not(seed):
  """XLA reads the low 32 bits of each seed component: the reduced seed draws identically."""

  def draw(s):
    s = _static_shapes.stateless_seed(s)
    return (
      tf.random.stateless_uniform([9], s, 1, 100, dtype=tf.int64),
      tf.random.stateless_uniform([9], s, minval=None, maxval=None, dtype=tf.int32),
    )

  seed = tf.constant(seed, tf.int64)
  for eager, compiled in zip(draw(seed), tf.function(draw, jit_compile=True)(seed)):
    np.testing.assert_array_equal(eager.numpy(), compiled.numpy())
  reduced = _static_shapes.stateless_seed(seed).numpy()
  assert ((reduced >= 0) & (reduced < 2**32)).all()


def test_xla_context_is_detected_while_compiling():
  seen = []

  def probe(x):
    seen.append(
      (
        _static_shapes.in_xla_context(),
        _static_shapes.use_static_shapes(None),
        _static_shapes.use_static_shapes(False),
      )
    )
    return x

  tf.function(probe, jit_compile=True)(tf.constant(1.0))
  tf.function(probe)(tf.constant(1.0))
  probe(tf.constant(1.0))
  assert seen == [(True, True, False), (False, False, False), (False, False, False)]
