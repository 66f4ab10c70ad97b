"""SamplingProbabilityCorrection, RemoveAccidentalHits, accidental_hit_mask, log-Q helpers.

(The package layout and the legacy-Keras switch: tests/tfrs_logq/test_fronts.py.)
"""

import tfrs_logq.tf_keras  # legacy Keras before TensorFlow loads
from tfrs_logq.tf_keras import accidental_hits, log_q, logq_correction

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_recommenders as tfrs


def test_log_q_correction_matches_tfrs_above_the_clip_and_not_below():
  logits = tf.constant([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
  prob = tf.constant([0.5, 1e-3, 1e-9])
  ours = logq_correction.SamplingProbabilityCorrection()(logits, prob).numpy()
  theirs = tfrs.layers.loss.SamplingProbablityCorrection()(logits, prob).numpy()
  np.testing.assert_allclose(ours[:, :2], theirs[:, :2], rtol=1e-6)
  np.testing.assert_allclose(ours[:, 2], logits.numpy()[:, 2] - np.log(1e-9), rtol=1e-6)
  assert np.all(ours[:, 2] - theirs[:, 2] > 6.0)  # TFRS clips 1e-9 to 1e-6
  from_log = logq_correction.SamplingProbabilityCorrection(from_log=True)
  np.testing.assert_allclose(from_log(logits, tf.math.log(prob)).numpy(), ours, rtol=1e-6)
  clipped = logq_correction.SamplingProbabilityCorrection(epsilon=1e-6)(logits, prob).numpy()
  np.testing.assert_allclose(clipped, theirs, rtol=1e-6)  # epsilon=1e-6: TFRS's own clip
  with pytest.raises(ValueError, match="epsilon"):
    logq_correction.SamplingProbabilityCorrection(epsilon=1e-6, from_log=True)
  with pytest.raises(ValueError, match="epsilon"):
    logq_correction.SamplingProbabilityCorrection(epsilon=0.0)


def test_the_former_layer_name_warns_and_loads_its_saved_config():
  with pytest.warns(DeprecationWarning, match="SamplingProbabilityCorrection"):
    logq_correction.LogQCorrection(from_log=True)
  # What tf.keras.layers.serialize wrote for this layer before the tf-keras front had its package.
  saved = {
    "module": "tfrs_logq.logq_correction",
    "class_name": "LogQCorrection",
    "config": {"name": "lq", "trainable": True, "dtype": "float32", "from_log": True},
    "registered_name": "tfrs_logq>LogQCorrection",
  }
  with pytest.warns(DeprecationWarning):
    rebuilt = tf.keras.layers.deserialize(saved)
  assert isinstance(rebuilt, logq_correction.SamplingProbabilityCorrection) and rebuilt.from_log


@pytest.mark.parametrize(
  "bad", [[0.5, 0.0, 0.1], [0.5, -0.1, 0.1], [0.5, np.nan, 0.1], [0.5, 1.5, 0.1]]
)
def test_log_q_correction_rejects_bad_probabilities(bad):
  with pytest.raises(tf.errors.InvalidArgumentError):
    logq_correction.SamplingProbabilityCorrection()(tf.ones([2, 3]), tf.constant(bad, tf.float32))


def test_log_q_correction_shape_and_dtype_errors():
  with pytest.raises(ValueError, match="do not match"):
    logq_correction.SamplingProbabilityCorrection()(tf.ones([2, 3]), tf.constant([0.5, 0.5]))
  with pytest.raises(TypeError, match="floating"):
    logq_correction.SamplingProbabilityCorrection()(tf.ones([2, 3]), tf.constant([1, 1, 1]))


def test_log_q_correction_keeps_low_precision_dtype():
  layer = logq_correction.SamplingProbabilityCorrection(
    dtype="float16"
  )  # what a mixed_float16 policy gives
  out = layer(tf.ones([2, 3], tf.float16), tf.constant([0.5, 0.2, 1e-7]))
  assert out.dtype == tf.float16 and np.all(np.isfinite(out.numpy()))
  np.testing.assert_allclose(out.numpy()[0], 1.0 - np.log([0.5, 0.2, 1e-7]), rtol=1e-3)


def test_accidental_hit_mask_shared_and_per_row():
  pos = tf.constant([1, 2, 3], tf.int64)
  shared = tf.constant([1, 3, 5, 1], tf.int32)
  want = np.array([[0, 1, 1, 0], [1, 1, 1, 1], [1, 0, 1, 1]], bool)
  np.testing.assert_array_equal(accidental_hits.accidental_hit_mask(pos, shared).numpy(), want)
  per_row = tf.constant([[1, 2], [2, 2], [4, 3]], tf.int64)
  np.testing.assert_array_equal(
    accidental_hits.accidental_hit_mask(pos, per_row).numpy(), [[0, 1], [0, 0], [1, 0]]
  )
  np.testing.assert_array_equal(
    accidental_hits.accidental_hit_mask(tf.constant(["a", "b"]), tf.constant(["b", "c"])),
    [[1, 1], [0, 1]],
  )
  with pytest.raises(TypeError, match="same dtype"):
    accidental_hits.accidental_hit_mask(tf.constant(["a"]), tf.constant([1]))
  with pytest.raises(TypeError, match="integer or string"):
    accidental_hits.accidental_hit_mask(tf.constant([1.0]), tf.constant([1.0]))


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16, tf.float16])
def test_remove_accidental_hits_matches_tfrs_and_is_finite_in_low_precision(dtype):
  labels = tf.eye(3, 5)
  logits = tf.constant(np.random.default_rng(0).normal(size=(3, 5)), dtype)
  ids = tf.constant([7, 8, 7, 9, 8])
  ours = accidental_hits.RemoveAccidentalHits()(labels, logits, ids)
  assert ours.dtype == dtype and np.all(np.isfinite(tf.cast(ours, tf.float32).numpy()))
  hit = np.array([[0, 0, 1, 0, 0], [0, 0, 0, 0, 1], [1, 0, 0, 0, 0]], bool)
  ours32 = tf.cast(ours, tf.float32).numpy()
  np.testing.assert_array_equal(ours32[~hit], tf.cast(logits, tf.float32).numpy()[~hit])
  assert np.all(ours32[hit] < -1e4)
  softmax = tf.nn.softmax(tf.cast(ours, tf.float32)).numpy()
  assert np.all(softmax[hit] == 0.0) and np.all(np.isfinite(softmax))
  if dtype == tf.float32:
    theirs = tfrs.layers.loss.RemoveAccidentalHits()(labels, logits, ids)
    np.testing.assert_allclose(tf.nn.softmax(ours).numpy(), tf.nn.softmax(theirs).numpy())


def test_log1mexp_and_log_q_prime():
  x = np.array([-1e-9, -1e-6, -0.1, -0.69, -0.7, -5.0, -40.0])
  np.testing.assert_allclose(
    log_q.log1mexp(tf.constant(x, tf.float64), min_one_minus_p=0.0).numpy(),
    np.log(-np.expm1(x)),
    rtol=1e-9,
    atol=1e-15,
  )
  floored = np.log(np.maximum(-np.expm1(x), log_q.MIN_ONE_MINUS_Q))  # 1 − Q(p) >= 1e-6
  np.testing.assert_allclose(
    log_q.log1mexp(tf.constant(x, tf.float64)).numpy(), floored, rtol=1e-8, atol=1e-15
  )
  assert np.isfinite(log_q.log1mexp(tf.constant([0.0])).numpy()).all()
  neg = np.log(np.array([0.1, 0.2, 0.3]))
  pos = np.log(np.array([0.25, 0.5]))
  got = log_q.log_q_prime(neg, pos).numpy()
  want = np.log(np.exp(neg)[None, :] / (1 - np.exp(pos))[:, None])
  np.testing.assert_allclose(got, want, rtol=1e-6)


# ---- configuration round trips and the public API ---------------------------------------------


def _config_cases():
  from tfrs_logq.tf_keras import frequency, retrieval

  return {
    "SamplingProbabilityCorrection": lambda: logq_correction.SamplingProbabilityCorrection(
      from_log=True, name="lq"
    ),
    "RemoveAccidentalHits": lambda: accidental_hits.RemoveAccidentalHits(name="hits"),
    "ExactCounts": lambda: frequency.ExactCounts(
      7, counts=[1, 2, 3, 4, 5, 6, 7], accumulate=True, min_count=0.5
    ),
    "HashArrayEstimator": lambda: frequency.HashArrayEstimator(
      num_buckets=64, num_hashes=3, alpha=0.05, warmup=False, pending_gap=False, seed=4, num_items=7
    ),
    "CountMinSketch": lambda: frequency.CountMinSketch(
      width=31, depth=3, conservative=True, half_life=4.0, min_count=2.0, seed=1
    ),
    "Retrieval": lambda: retrieval.Retrieval(
      loss=tf.keras.losses.CategoricalCrossentropy(
        from_logits=True, reduction=tf.keras.losses.Reduction.NONE
      ),
      batch_metrics=[tf.keras.metrics.AUC(from_logits=True, name="auc")],
      loss_metrics=[tf.keras.metrics.Mean(name="mean_loss")],
      temperature=0.5,
      num_hard_negatives=3,
      remove_accidental_hits=True,
      correction="standard_no_positive",
      q_prime="proxy",
      frequency_estimator=frequency.HashArrayEstimator(num_buckets=32),
      update_frequency="always",
      check_scores=True,
      name="task",
    ),
  }


@pytest.mark.parametrize(
  "name",
  [
    "SamplingProbabilityCorrection",
    "RemoveAccidentalHits",
    "ExactCounts",
    "HashArrayEstimator",
    "CountMinSketch",
    "Retrieval",
  ],
)
def test_get_config_round_trips(name):
  """from_config(get_config()) rebuilds the same configuration, and so does Keras
  serialisation (tf.keras.layers.serialize / deserialize, no custom_objects needed)."""
  layer = _config_cases()[name]()
  config = layer.get_config()
  rebuilt = type(layer).from_config(config)
  assert type(rebuilt) is type(layer) and rebuilt.get_config() == config
  via_keras = tf.keras.layers.deserialize(tf.keras.layers.serialize(layer))
  assert type(via_keras) is type(layer) and via_keras.get_config() == config


@pytest.mark.parametrize("name", ["ExactCounts", "HashArrayEstimator", "CountMinSketch"])
def test_rebuilt_estimator_with_copied_state_gives_the_same_log_q(name):
  est = _config_cases()[name]()
  est.update(tf.constant([1, 2, 2, 5, 6, 6, 6]))
  rebuilt = type(est).from_config(est.get_config())
  rebuilt.set_weights(est.get_weights())
  probe = tf.range(7)
  np.testing.assert_array_equal(rebuilt.log_q(probe).numpy(), est.log_q(probe).numpy())


def test_retrieval_with_factorized_metrics_is_not_serialisable():
  task = tfrs_logq.tf_keras.Retrieval(
    metrics=tfrs.metrics.FactorizedTopK(
      candidates=tf.data.Dataset.from_tensor_slices(np.ones((4, 3), np.float32)).batch(2)
    )
  )
  with pytest.raises(NotImplementedError, match="cannot be serialised"):
    task.get_config()


@pytest.mark.parametrize(
  "module",
  [
    "tfrs_logq.tf_keras.retrieval",
    "tfrs_logq.tf_keras.logq_correction",
    "tfrs_logq.tf_keras.accidental_hits",
    "tfrs_logq.tf_keras.frequency",
    "tfrs_logq.tf_keras.frequency.base",
    "tfrs_logq.tf_keras.frequency.exact",
    "tfrs_logq.tf_keras.frequency.hash_array",
    "tfrs_logq.tf_keras.frequency.count_min",
    "tfrs_logq.tf_keras.frequency.hashing",
  ],
)
def test_public_modules_declare_all(module):
  """Every public module lists its API in __all__; every other top-level name is _private
  (or an imported module / typing helper)."""
  import importlib
  import inspect

  mod = importlib.import_module(module)
  assert mod.__all__ and all(hasattr(mod, n) for n in mod.__all__)
  for attr, value in vars(mod).items():
    if attr.startswith("_") or attr in mod.__all__ or inspect.ismodule(value):
      continue
    defined_here = getattr(value, "__module__", None) == module
    assert not defined_here, f"{module}.{attr} is neither in __all__ nor _private"
