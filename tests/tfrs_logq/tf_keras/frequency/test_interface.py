"""The common FrequencyEstimator interface: log Q', strings, bad input, checkpoints,
SavedModels, model.fit and MirroredStrategy (2 logical CPUs from tests/conftest.py)."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras.frequency import (
  MIN_ONE_MINUS_Q,
  CountMinSketch,
  ExactCounts,
  HashArrayEstimator,
  hashing,
)

import numpy as np
import pytest
import tensorflow as tf

FACTORIES = {
  "exact": lambda: ExactCounts(50),
  "hash": lambda: HashArrayEstimator(num_buckets=32, num_hashes=2, alpha=0.2),
  "cms": lambda: CountMinSketch(width=17, depth=3, conservative=True, half_life=5.0),
}


@pytest.fixture
def strategy(mirrored_strategy):
  """The session's MirroredStrategy (tests/conftest.py explains why there is only one)."""
  return mirrored_strategy


def _batches(seed=0, steps=8, vocab=50, size=40):
  rng = np.random.default_rng(seed)
  p = np.arange(1, vocab + 1) ** -1.1
  return [rng.choice(vocab, size=size, p=p / p.sum()).astype(np.int64) for _ in range(steps)]


def _state(est):
  return [v.numpy() for v in est.weights]


def _assert_same_state(a, b):
  for x, y in zip(_state(a), _state(b)):
    np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("kind", ["hash", "cms"])
def test_log_one_minus_q_is_stable_and_floored(kind):
  """log(1 − Q(p)) from log Q(p), with 1 − Q floored at MIN_ONE_MINUS_Q: a stream made of one
  id gives Q = 1 and a finite log(1e-6), other ids log1p(−Q)."""
  est = FACTORIES[kind]()
  for _ in range(3):
    est.update(tf.constant([7] * 40, tf.int64))
  ids = tf.constant([7, 3, 11], tf.int64)
  lq = est.log_q(ids).numpy().astype(np.float64)
  ref = np.log(np.maximum(-np.expm1(lq), MIN_ONE_MINUS_Q))
  got = est.log_one_minus_q(ids).numpy()
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)
  assert np.all(np.isfinite(got)) and lq[0] > -1e-6  # Q(7) = 1


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_log_q_prime_broadcasts_and_matches_formula(kind):
  est = FACTORIES[kind]()
  for ids in _batches():
    est.update(tf.constant(ids))
  ids = np.arange(30, dtype=np.int64).reshape(3, 10)
  pos = np.array([[0], [5], [40]], np.int64)
  lq = est.log_q(ids).numpy().astype(np.float64)
  lp = est.log_q(pos).numpy().astype(np.float64)
  ref = lq - np.log1p(-np.exp(lp))  # log Q(d) − log(1 − Q(p))
  np.testing.assert_allclose(est.log_q_prime(ids, pos).numpy(), ref, rtol=1e-5, atol=1e-5)
  shared = est.log_q_prime(ids[0], pos).numpy()  # [N] against [A, 1] -> [A, N]
  assert shared.shape == (3, 10)
  np.testing.assert_allclose(shared, lq[0][None, :] - np.log1p(-np.exp(lp)), rtol=1e-5, atol=1e-5)
  q = np.exp(est.log_q(tf.range(50)).numpy())
  assert np.all(np.isfinite(est.log_q(tf.range(50)).numpy())) and np.all(q <= 1.0)
  assert est(tf.constant([1, 2])).dtype == tf.float32


@pytest.mark.parametrize("kind", ["hash", "cms"])
def test_string_ids_equal_their_fingerprint_keys(kind):
  by_string, by_key = FACTORIES[kind](), FACTORIES[kind]()
  for ids in _batches():
    strings = tf.strings.as_string(tf.constant(ids))
    by_string.update(strings)
    by_key.update(hashing.ids_to_keys(strings))
  _assert_same_state(by_string, by_key)
  probe = tf.constant(["3", "17", "never-seen"])
  np.testing.assert_array_equal(
    by_string.log_q(probe).numpy(), by_key.log_q(hashing.ids_to_keys(probe)).numpy()
  )


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_bad_input_errors_leave_state_untouched(kind):
  est = FACTORIES[kind]()
  est.update(tf.constant(_batches()[0]))
  before = _state(est)
  update = tf.function(est.update)
  with pytest.raises(tf.errors.InvalidArgumentError, match=">= 0"):
    update(tf.constant([3, -1, 4], tf.int64))
  with pytest.raises(tf.errors.InvalidArgumentError, match=">= 0"):
    est.update(tf.constant([-2], tf.int32))
  with pytest.raises(TypeError, match="float32"):
    est.update(tf.constant([1.0, 2.0]))
  with pytest.raises(ValueError, match="rank"):
    est.update(tf.constant(3, tf.int64))
  est.update(tf.constant([], tf.int64))  # empty batch: documented no-op
  update(tf.zeros([0], tf.int64))
  for x, y in zip(before, _state(est)):
    np.testing.assert_array_equal(x, y)


def test_declared_range_is_checked():
  for est in (
    ExactCounts(10),
    HashArrayEstimator(num_buckets=8, num_items=10),
    CountMinSketch(width=8, depth=2, num_items=10),
  ):
    before = _state(est)
    with pytest.raises(tf.errors.InvalidArgumentError, match="num_items=10"):
      est.update(tf.constant([1, 10]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="num_items=10"):
      est.log_q(tf.constant([11]))
    for x, y in zip(before, _state(est)):
      np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_checkpoint_resume_gives_same_state(kind, tmp_path):
  batches = _batches(steps=10)
  est = FACTORIES[kind]()
  for ids in batches[:5]:
    est.update(tf.constant(ids))
  path = tf.train.Checkpoint(estimator=est).save(str(tmp_path / "ckpt"))
  resumed = FACTORIES[kind]()
  tf.train.Checkpoint(estimator=resumed).restore(path).assert_consumed()
  _assert_same_state(est, resumed)
  for ids in batches[5:]:
    est.update(tf.constant(ids))
    resumed.update(tf.constant(ids))
  _assert_same_state(est, resumed)


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_saved_model_round_trip(kind, tmp_path):
  est = FACTORIES[kind]()
  for ids in _batches()[:4]:
    est.update(tf.constant(ids))
  module = tf.Module()
  module.estimator = est
  module.log_q = tf.function(est.log_q, input_signature=[tf.TensorSpec([None], tf.int64)])
  module.update = tf.function(est.update, input_signature=[tf.TensorSpec([None], tf.int64)])
  tf.saved_model.save(module, str(tmp_path / "sm"))
  loaded = tf.saved_model.load(str(tmp_path / "sm"))
  probe = tf.range(50, dtype=tf.int64)
  np.testing.assert_array_equal(loaded.log_q(probe).numpy(), est.log_q(probe).numpy())
  nxt = tf.constant(_batches(seed=9)[0])
  loaded.update(nxt)  # the state keeps updating after load
  est.update(nxt)
  np.testing.assert_array_equal(loaded.log_q(probe).numpy(), est.log_q(probe).numpy())


class _Model(tf.keras.Model):
  """Toy model whose train_step updates the estimator from the batch's candidate ids."""

  def __init__(self, estimator):
    super().__init__()
    self.estimator = estimator
    self.dense = tf.keras.layers.Dense(1)

  def train_step(self, data):
    ids, y = data
    self.estimator.update(ids)
    with tf.GradientTape() as tape:
      pred = self.dense(tf.expand_dims(tf.stop_gradient(self.estimator(ids)), -1))
      loss = tf.reduce_mean(tf.square(pred[:, 0] - y))
    self.optimizer.apply_gradients(
      zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables)
    )
    return {"loss": loss}


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_mirrored_strategy_equals_single_device(kind, strategy):
  """2 replicas with unequal shares of each global batch: all_gather + identical update gives
  the same state on both replicas as one device fed the global batches."""
  with strategy.scope():
    dist = FACTORIES[kind]()
  single = FACTORIES[kind]()
  batches = _batches(steps=6, size=41)

  @tf.function
  def step(per_replica):
    strategy.run(dist.update, args=(per_replica,))
    return strategy.run(dist.log_q, args=(tf.range(50, dtype=tf.int64),))

  for ids in batches:
    parts = [ids[:17], ids[17:]]
    values = strategy.experimental_distribute_values_from_function(
      lambda ctx, parts=parts: tf.constant(parts[ctx.replica_id_in_sync_group])
    )
    out = step(values)
    single.update(tf.constant(ids))
    for replica_out in strategy.experimental_local_results(out):
      np.testing.assert_array_equal(
        replica_out.numpy(), single.log_q(tf.range(50, dtype=tf.int64)).numpy()
      )
  for dv, sv in zip(dist.weights, single.weights):
    for copy in strategy.experimental_local_results(dv):
      np.testing.assert_array_equal(copy.numpy(), sv.numpy())


def test_model_fit_under_mirrored_strategy(strategy):
  batches = _batches(steps=5, size=32)
  with strategy.scope():
    model = _Model(HashArrayEstimator(num_buckets=32, alpha=0.2))
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01))
  data = tf.data.Dataset.from_tensor_slices(
    (np.concatenate(batches), np.ones(160, np.float32))
  ).batch(32)
  model.fit(data, epochs=1, verbose=0)
  single = HashArrayEstimator(num_buckets=32, alpha=0.2)
  for ids in batches:
    single.update(tf.constant(ids))
  for dv, sv in zip(model.estimator.weights, single.weights):
    for copy in strategy.experimental_local_results(dv):
      np.testing.assert_array_equal(copy.numpy(), sv.numpy())
