"""Two-tower model: tower formulas against numpy; trains with tfrs_logq.tf_keras.Retrieval."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import frequency
from tfrs_logq.tf_keras.retrieval import Retrieval

import numpy as np
import tensorflow as tf

from models.two_tower import TwoTower


def test_query_tower_is_mean_of_non_padding_history():
  m = TwoTower(num_items=20, embedding_dim=8, seed=3).build_all()
  hist = np.array([[0, 0, 3, 5], [0, 0, 0, 7]], np.int64)
  table = m.query_tower.history_embedding.embeddings.numpy()
  expected = np.stack([(table[3] + table[5]) / 2, table[7]])
  np.testing.assert_allclose(m.query_embeddings({"history": hist}).numpy(), expected, atol=1e-6)
  np.testing.assert_allclose(
    m.item_embeddings(np.array([[1, 2]])).numpy()[0],
    m.candidate_tower.item_embedding.embeddings.numpy()[[1, 2]],
  )
  assert m.all_item_embeddings().shape == (21, 8)


def test_user_tower_and_item_features():
  feats = np.random.default_rng(0).normal(size=(11, 3)).astype(np.float32)
  m = TwoTower(
    num_items=10,
    num_users=5,
    embedding_dim=4,
    use_user_id=True,
    item_features=feats,
    hidden_dims=(8,),
    max_len=6,
  ).build_all()
  q = m.query_embeddings({"history": np.ones((2, 6), np.int64), "user_id": np.array([1, 99])})
  assert q.shape == (2, 4)  # unknown user 99 -> bucket 0
  assert m.item_embeddings(np.arange(11)).shape == (11, 4)


def test_fit_with_retrieval_task_decreases_loss():
  rng = np.random.default_rng(0)
  n_items, n = 30, 512
  # the next item is a deterministic function of the last history item: learnable
  last = rng.integers(1, n_items + 1, size=n)
  hist = np.zeros((n, 5), np.int64)
  hist[:, -1] = last
  hist[:, -2] = rng.integers(1, n_items + 1, size=n)
  item = (last * 7) % n_items + 1
  counts = np.bincount(item, minlength=n_items + 1)
  est = frequency.ExactCounts(n_items + 1, counts=counts)
  model = TwoTower(
    num_items=n_items,
    embedding_dim=16,
    max_len=5,
    seed=0,
    task=Retrieval(correction="corrected", remove_accidental_hits=True),
    frequency_estimator=est,
  )
  model.compile(optimizer=tf.keras.optimizers.Adam(0.05))
  ds = tf.data.Dataset.from_tensor_slices(
    {"history": hist, "item_id": item.astype(np.int64)}
  ).batch(64)
  hist_loss = model.fit(ds, epochs=6, verbose=0).history["loss"]
  assert np.all(np.isfinite(hist_loss))
  assert hist_loss[-1] < 0.6 * hist_loss[0]


def test_query_model_interface_training_and_serving_queries():
  from models import TrainingQueries

  m = TwoTower(
    num_items=10, num_users=5, embedding_dim=4, use_user_id=True, max_len=6, seed=2
  ).build_all()
  hist = np.random.default_rng(1).integers(0, 11, size=(3, 6)).astype(np.int64)
  batch = {"history": hist, "user_id": np.array([1, 2, 3]), "item_id": np.array([4, 5, 4])}
  out = m.training_queries(batch, training=False)
  assert isinstance(out, TrainingQueries)
  np.testing.assert_allclose(out.queries.numpy(), m.query_embeddings(batch).numpy(), atol=1e-6)
  np.testing.assert_array_equal(out.positive_ids.numpy(), [4, 5, 4])
  np.testing.assert_array_equal(out.sequence_ids.numpy(), [0, 1, 2])  # one sequence per pair
  assert out.positive_ids.dtype == tf.int64 and out.sequence_ids.dtype == tf.int64
  # Serving: the history with the unknown-user bucket 0 (what the export serves).
  unknown = m.query_embeddings({"history": hist, "user_id": np.zeros(3, np.int64)}).numpy()
  np.testing.assert_allclose(m.serving_queries(hist).numpy(), unknown, atol=1e-6)
  np.testing.assert_allclose(
    m.serving_queries(hist, user_ids=np.array([1, 2, 3])).numpy(), out.queries.numpy(), atol=1e-6
  )


def test_build_all_creates_every_variable_without_scoring_the_catalog(monkeypatch):
  """build_all must not read the whole item table (under ParameterServerStrategy that gathers
  the sharded table onto the chief): the same variables as a full forward pass."""

  def refuse(self):
    raise AssertionError("build_all read the whole item table")

  kwargs = dict(
    num_items=30,
    num_users=5,
    embedding_dim=4,
    use_user_id=True,
    hidden_dims=(8,),
    item_features=np.ones((31, 2), np.float32),
    max_len=6,
    seed=1,
  )
  full = TwoTower(**kwargs)
  full({"history": np.zeros((1, 6), np.int64), "user_id": np.zeros([1], np.int64)})
  with monkeypatch.context() as m:
    m.setattr(TwoTower, "all_item_embeddings", refuse)
    built = TwoTower(**kwargs).build_all()
  assert built.built
  names = lambda m: sorted(
    (v.name.replace(m.name + "/", "<model>/", 1), tuple(v.shape)) for v in m.variables
  )
  assert names(built) == names(full)
  assert all(name.startswith("<model>/") for name, _ in names(built))
  scores = built({"history": np.array([[0, 0, 0, 0, 3, 4]]), "user_id": np.array([2])})
  assert scores.shape == (1, 31)
