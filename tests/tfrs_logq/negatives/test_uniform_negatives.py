"""Uniform negatives: ids in the catalog, uniform frequencies, log Q = -log |D|, errors."""

import math

import numpy as np
import pytest

import tfrs_logq  # noqa: F401
import tensorflow as tf

from tfrs_logq.negatives import UniformNegatives


def table_embedder(num_items, dim=3, offset=0):
  table = np.random.default_rng(0).normal(size=(num_items, dim)).astype(np.float32)
  return table, (lambda ids: tf.gather(table, ids - offset))


def chi_square(counts, expected):
  return float(((counts - expected) ** 2 / expected).sum())


def test_range_draws_are_in_range_uniform_and_embedded():
  lo, hi = 10, 30
  table, embed = table_embedder(20, offset=lo)
  sampler = UniformNegatives(embed, 4000, id_range=(lo, hi))
  neg = sampler(seed=[1, 2])
  ids = neg.ids.numpy()
  assert neg.ids.dtype == tf.int64 and ids.shape == (4000,)
  assert ids.min() >= lo and ids.max() < hi
  counts = np.bincount(ids - lo, minlength=20)
  assert chi_square(counts, 4000 / 20) < 43.8  # 19 dof, p = 0.001
  np.testing.assert_allclose(neg.embeddings.numpy(), table[ids - lo])
  np.testing.assert_allclose(neg.log_q.numpy(), np.full(4000, -math.log(20)), rtol=1e-6)
  assert neg.positive_log_q is None


def test_table_draws_only_table_ids_uniformly():
  catalog = np.array([3, 17, 42, 8, 99])
  _, embed = table_embedder(100)
  sampler = UniformNegatives(embed, 3000, candidate_ids=catalog)
  neg = sampler(positive_ids=np.array([3, 1000]), seed=[7, 7])
  ids = neg.ids.numpy()
  assert set(ids) <= set(catalog)
  counts = np.array([(ids == c).sum() for c in catalog])
  assert chi_square(counts, 3000 / 5) < 18.5  # 4 dof, p = 0.001
  np.testing.assert_allclose(neg.log_q.numpy(), -math.log(5), rtol=1e-6)
  np.testing.assert_allclose(neg.positive_log_q.numpy(), [-math.log(5)] * 2, rtol=1e-6)
  assert sampler.catalog_size == 5


def test_seeded_draws_repeat_and_unseeded_draws_vary():
  _, embed = table_embedder(1000)
  sampler = UniformNegatives(embed, 50, id_range=(0, 1000))
  a = sampler.sample_ids(seed=[1, 1]).numpy()
  np.testing.assert_array_equal(a, sampler.sample_ids(seed=[1, 1]).numpy())
  assert not np.array_equal(sampler.sample_ids().numpy(), sampler.sample_ids().numpy())


def test_feature_tower_as_embedder():
  tower = tf.keras.Sequential([tf.keras.layers.Embedding(50, 4), tf.keras.layers.Dense(2)])
  neg = UniformNegatives(tower, 6, id_range=(0, 50))(seed=[0, 1])
  assert neg.embeddings.shape == (6, 2)
  np.testing.assert_allclose(neg.embeddings.numpy(), tower(neg.ids).numpy(), rtol=1e-6)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(id_range=(5, 5)), ValueError, "hi > lo"),
    (dict(id_range=(0, 5), candidate_ids=[1, 2]), ValueError, "exactly one"),
    (dict(), ValueError, "exactly one"),
    (dict(candidate_ids=[1, 2, 2]), ValueError, "duplicate"),
    (dict(candidate_ids=[]), ValueError, "non-empty"),
    (dict(candidate_ids=[1.5, 2.0]), TypeError, "integer"),
    (dict(id_range=(0.0, 3.0)), ValueError, "ints"),
])
def test_bad_catalog_raises(kwargs, error, match):
  with pytest.raises(error, match=match):
    UniformNegatives(lambda ids: tf.zeros([tf.size(ids), 2]), 4, **kwargs)


def test_bad_sampler_arguments_raise():
  with pytest.raises(ValueError, match="num_negatives"):
    UniformNegatives(lambda ids: ids, 0, id_range=(0, 3))
  with pytest.raises(TypeError, match="callable"):
    UniformNegatives(None, 2, id_range=(0, 3))
  with pytest.raises(ValueError, match="rows"):
    UniformNegatives(lambda ids: tf.zeros([3, 2]), 2, id_range=(0, 3))()
  with pytest.raises(TypeError, match="floating"):
    UniformNegatives(lambda ids: ids, 2, id_range=(0, 3))()
