"""Uniform negatives: ids in the catalog, uniform frequencies, log Q = -log |D|, the batch /
sequence / query layouts and their scoring paths against numpy, config round trip, errors;
padding queries (``valid``) and static shapes leave the valid queries' draws unchanged."""

import math

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras.negatives import UniformNegatives

import numpy as np
import pytest
import tensorflow as tf


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


@pytest.mark.parametrize(
  "kwargs, error, match",
  [
    (dict(id_range=(5, 5)), ValueError, "hi > lo"),
    (dict(id_range=(0, 5), candidate_ids=[1, 2]), ValueError, "exactly one"),
    (dict(), ValueError, "exactly one"),
    (dict(candidate_ids=[1, 2, 2]), ValueError, "duplicate"),
    (dict(candidate_ids=[]), ValueError, "non-empty"),
    (dict(candidate_ids=[1.5, 2.0]), TypeError, "integer"),
    (dict(id_range=(0.0, 3.0)), ValueError, "ints"),
  ],
)
def test_bad_catalog_raises(kwargs, error, match):
  with pytest.raises(error, match=match):
    UniformNegatives(lambda ids: tf.zeros([tf.size(ids), 2]), 4, **kwargs)


def test_bad_sampler_arguments_raise():
  with pytest.raises(ValueError, match="num_negatives"):
    UniformNegatives(lambda ids: ids, 0, id_range=(0, 3))
  with pytest.raises(TypeError, match="callable"):
    UniformNegatives(3, 2, id_range=(0, 3))
  with pytest.raises(ValueError, match="per"):
    UniformNegatives(None, 2, id_range=(0, 3), per="position")
  with pytest.raises(ValueError, match="candidate_embedder or an item_table"):
    UniformNegatives(None, 2, id_range=(0, 3))()
  with pytest.raises(ValueError, match="positive_ids"):
    UniformNegatives(None, 2, id_range=(0, 3), per="query")()
  with pytest.raises(ValueError, match="rows"):
    UniformNegatives(lambda ids: tf.zeros([3, 2]), 2, id_range=(0, 3))()
  with pytest.raises(TypeError, match="floating"):
    UniformNegatives(lambda ids: ids, 2, id_range=(0, 3))()


# ---------------------------------------------------------------- per-sequence / per-query layouts
NUM_ITEMS, DIM = 40, 5


def _scoring_case(seed=0, a=9):
  rng = np.random.default_rng(seed)
  table = rng.normal(size=(NUM_ITEMS + 1, DIM)).astype(np.float32)  # row 0 = padding
  query = rng.normal(size=(a, DIM)).astype(np.float32)
  pos = rng.integers(1, NUM_ITEMS + 1, size=a)
  seq = np.array([4, 4, 4, 1, 1, 9, 4, 9, 2])[:a]  # 4 sequences, any order
  return table, query, pos, seq


def _np_scored(query, pos, ids, table, temperature):
  """Scores, mask and log Q of per-row negative ids [A, k] written out in numpy."""
  s_p = np.einsum("ad,ad->a", query, table[pos]) / temperature
  s_n = np.einsum("ad,akd->ak", query, table[ids]) / temperature
  return s_p, s_n, ids != pos[:, None]


@pytest.mark.parametrize("per", ["batch", "sequence", "query"])
@pytest.mark.parametrize("use_table", [False, True])
def test_layouts_score_like_numpy(per, use_table):
  table, query, pos, seq = _scoring_case()
  embed = None if use_table else (lambda ids: tf.gather(table, ids))
  sampler = UniformNegatives(embed, 6, id_range=(1, NUM_ITEMS + 1), per=per)
  kwargs = dict(
    temperature=0.5, seed=[3, 1], sequence_ids=seq, item_table=table if use_table else None
  )
  scored = sampler.score(query, pos, table[pos], **kwargs)
  neg = sampler.sample_negatives(
    query, pos, table[pos], seed=[3, 1], sequence_ids=seq, item_table=table if use_table else None
  )
  ids = np.broadcast_to(neg.ids.numpy(), (len(pos), 6))
  assert ids.min() >= 1 and ids.max() <= NUM_ITEMS
  if per == "batch":
    assert neg.ids.shape == (6,)
  if per == "sequence":  # one set per sequence, shared by its queries
    for a in range(len(pos)):
      for b in range(len(pos)):
        assert np.array_equal(ids[a], ids[b]) == (seq[a] == seq[b])
  if per == "query":
    assert len({tuple(r) for r in ids}) == len(pos)
  s_p, s_n, valid = _np_scored(query, pos, ids, table, 0.5)
  np.testing.assert_allclose(scored.positive_scores.numpy(), s_p, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(scored.negative_scores.numpy(), s_n, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(scored.valid_mask.numpy(), valid)
  np.testing.assert_allclose(scored.negative_log_q.numpy(), -math.log(NUM_ITEMS), rtol=1e-6)
  np.testing.assert_allclose(scored.positive_log_q.numpy(), -math.log(NUM_ITEMS), rtol=1e-6)
  np.testing.assert_allclose(
    np.broadcast_to(neg.embeddings.numpy(), ids.shape + (DIM,)), table[ids], rtol=1e-6
  )


def test_accidental_hits_are_masked_per_row():
  table, query, _, _ = _scoring_case(1)
  sampler = UniformNegatives(None, 30, id_range=(1, 4), per="query")  # 3 items: many hits
  pos = np.array([1, 2, 3, 1, 2, 3, 1, 2, 3])
  scored = sampler.score(query, pos, table[pos], seed=[0, 0], item_table=table)
  ids = sampler(pos, seed=[0, 0], item_table=table).ids.numpy()
  np.testing.assert_array_equal(scored.valid_mask.numpy(), ids != pos[:, None])
  assert (~scored.valid_mask.numpy()).sum() > 20


def test_per_query_draws_are_independent_uniform_draws():
  sampler = UniformNegatives(None, 50, id_range=(0, 10), per="query")
  ids = sampler(np.zeros(400, np.int64), seed=[5, 5], item_table=np.eye(10, dtype=np.float32)).ids
  counts = np.bincount(ids.numpy().ravel(), minlength=10)
  assert chi_square(counts, 400 * 50 / 10) < 27.9  # 9 dof, p = 0.001
  # The same column of two rows is not the same draw.
  assert np.mean(ids.numpy()[0] == ids.numpy()[1]) < 0.3


def test_sequence_ids_none_means_one_sequence_per_query():
  table, query, pos, _ = _scoring_case(2)
  per_seq = UniformNegatives(None, 4, id_range=(1, NUM_ITEMS + 1), per="sequence")
  per_query = UniformNegatives(None, 4, id_range=(1, NUM_ITEMS + 1), per="query")
  a = per_seq.score(query, pos, table[pos], seed=[1, 2], item_table=table)
  b = per_query.score(query, pos, table[pos], seed=[1, 2], item_table=table)
  np.testing.assert_allclose(a.negative_scores.numpy(), b.negative_scores.numpy(), rtol=1e-6)


def test_per_query_matmul_path_gradients_equal_gather_path():
  """Small V (matmul + gather) and the embedder path give the same loss gradients."""
  table, query, pos, _ = _scoring_case(3)
  table_var = tf.Variable(table)

  def grads(use_table):
    sampler = UniformNegatives(
      None if use_table else (lambda i: tf.gather(table_var, i)),
      64,
      id_range=(1, NUM_ITEMS + 1),
      per="query",
    )
    with tf.GradientTape() as tape:
      scored = sampler.score(
        query,
        pos,
        tf.gather(table_var, pos),
        seed=[7, 7],
        item_table=table_var if use_table else None,
      )
      loss = tf.reduce_sum(tf.sin(scored.negative_scores))
    return tf.convert_to_tensor(tape.gradient(loss, table_var)).numpy()

  assert NUM_ITEMS + 1 <= 0.4 * 64 * DIM  # the table path is the matmul one here
  np.testing.assert_allclose(grads(True), grads(False), atol=1e-5)


def test_config_round_trip():
  embed = lambda ids: tf.zeros([tf.size(ids), 2])
  for sampler in (
    UniformNegatives(embed, 5, id_range=(1, 9), per="sequence", jit_compile=True),
    UniformNegatives(None, np.int64(3), candidate_ids=[4, 8, 15], per="query"),
  ):
    clone = UniformNegatives.from_config(sampler.get_config())
    assert clone.get_config() == sampler.get_config()
    np.testing.assert_array_equal(
      clone.sample_ids(seed=[1, 1]).numpy(), sampler.sample_ids(seed=[1, 1]).numpy()
    )


@pytest.mark.parametrize("per", ["query", "sequence"])
def test_padding_queries_leave_the_valid_queries_draws_unchanged(per):
  """With ``valid``, per-query sets are numbered by the rank of each valid query and per-sequence
  sets by the distinct sequences of the valid queries: the padded batch draws for its valid
  queries what the batch without padding draws, with dynamic or static shapes and compiled."""
  table = np.random.default_rng(1).normal(size=(20, 3)).astype(np.float32)
  pos = np.array([0, 3, 5, 0, 7, 2, 0, 9, 0, 4])
  seq = np.array([0, 0, 0, 1, 1, 2, 2, 2, 3, 3])
  valid = pos != 0
  query = np.random.default_rng(2).normal(size=(10, 3)).astype(np.float32)
  sampler = lambda static: UniformNegatives(
    None,
    4,
    id_range=(1, 20),
    per=per,
    static_shapes=static,
  )
  want = sampler(False)(pos[valid], seed=[3, 4], sequence_ids=seq[valid], item_table=table)
  want_scores = sampler(False).score(
    query[valid],
    pos[valid],
    table[pos[valid]],
    seed=[3, 4],
    sequence_ids=seq[valid],
    item_table=table,
  )
  for static in (False, True):
    got = sampler(static)(pos, seed=[3, 4], sequence_ids=seq, item_table=table, valid=valid)
    np.testing.assert_array_equal(got.ids.numpy()[valid], want.ids.numpy())
    scores = sampler(static).score(
      query, pos, table[pos], seed=[3, 4], sequence_ids=seq, item_table=table, valid=valid
    )
    np.testing.assert_allclose(
      scores.negative_scores.numpy()[valid], want_scores.negative_scores.numpy(), rtol=1e-6
    )
  compiled = tf.function(
    lambda q, p, s, v: sampler(None).score(
      q, p, tf.gather(table, p), seed=[3, 4], sequence_ids=s, item_table=table, valid=v
    ),
    jit_compile=True,
  )(query, pos, seq, valid)
  np.testing.assert_allclose(
    compiled.negative_scores.numpy()[valid], want_scores.negative_scores.numpy(), rtol=1e-5
  )
  if per == "sequence":  # the positions of one sequence share their negatives
    rows = want.ids.numpy()
    np.testing.assert_array_equal(rows[0], rows[1])
