"""tfrs_logq.core.ranking.exact_top_k_np (numpy, no TensorFlow): the k best items by <q, c_d>
with rated items (all but the target with ``targets``) and padding removed, ties lower id first,
against a per-query oracle written from that description and against the TensorFlow
`tfrs_logq.tf_keras.top_k.exact_top_k`; the same argument errors."""

import numpy as np
import pytest

from tfrs_logq.core import ranking


def _oracle(q, emb, k, rated, targets):
  out = []
  for u in range(q.shape[0]):
    removed = set(int(x) for x in rated[u]) - ({int(targets[u])} if targets is not None else set())
    cand = [
      (-float(np.dot(q[u].astype(np.float64), emb[d].astype(np.float64))), d)
      for d in range(1, emb.shape[0])
      if d not in removed
    ]
    best = [d for _, d in sorted(cand)[:k]]
    out.append(best + [-1] * (k - len(best)))
  return np.array(out)


def _problem(seed=0, num_q=13, num_items=25, dim=4):
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(num_q, dim)).astype(np.float32)
  emb = rng.normal(size=(num_items + 1, dim)).astype(np.float32)
  rated = [rng.integers(0, num_items + 1, size=rng.integers(0, 8)) for _ in range(num_q)]
  targets = rng.integers(1, num_items + 1, size=num_q)
  rated[0] = np.append(rated[0], targets[0])  # a target that is also rated
  return q, emb, rated, targets


@pytest.mark.parametrize("with_targets", [False, True])
@pytest.mark.parametrize("chunk_size", [None, 4])
def test_matches_the_oracle(with_targets, chunk_size):
  q, emb, rated, targets = _problem()
  t = targets if with_targets else None
  ids, scores = ranking.exact_top_k_np(q, emb, 7, rated=rated, targets=t, chunk_size=chunk_size)
  np.testing.assert_array_equal(ids, _oracle(q, emb, 7, rated, t))
  np.testing.assert_allclose(scores, np.einsum("qd,qkd->qk", q, emb[ids]), rtol=1e-5)


def test_ties_lower_id_first_and_empty_slots():
  q = np.ones((1, 2), np.float32)
  emb = np.array([[9, 9], [1, 0], [0, 1], [1, 0], [2, 2]], np.float32)  # ids 1, 2, 3 tie
  ids, scores = ranking.exact_top_k_np(q, emb, 4, rated=[np.array([4])])
  np.testing.assert_array_equal(ids, [[1, 2, 3, -1]])
  assert scores[0, 3] == np.finfo(np.float32).min
  # many ties over a larger catalog: three score levels, each in id order
  levels = np.random.default_rng(0).integers(0, 3, size=300).astype(np.float32)
  emb = np.stack([np.r_[0.0, levels], np.zeros(301)], axis=1).astype(np.float32)
  ids, _ = ranking.exact_top_k_np(np.ones((1, 2), np.float32), emb, 120)
  expected = [d for lvl in (2, 1, 0) for d in range(1, 301) if levels[d - 1] == lvl][:120]
  np.testing.assert_array_equal(ids[0], expected)


def test_same_as_the_tensorflow_search():
  from tfrs_logq.tf_keras import top_k as top_k_lib

  q, emb, rated, targets = _problem(seed=3, num_q=40, num_items=60, dim=8)
  for t in (None, targets):
    a = ranking.exact_top_k_np(q, emb, 10, rated=rated, targets=t, chunk_size=16)
    b = top_k_lib.exact_top_k(q, emb, 10, rated=rated, targets=t, chunk_size=16)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1], rtol=1e-5)


@pytest.mark.parametrize(
  "kwargs,match",
  [
    (dict(k=0), "k must be"),
    (dict(k=26), "k must be"),
    (dict(chunk_size=0), "chunk_size"),
    (dict(rated=[np.array([99])] * 13), "outside"),
    (dict(targets=np.ones(3, int)), "targets"),
  ],
)
def test_bad_arguments_raise(kwargs, match):
  q, emb, _, _ = _problem()
  args = dict(k=3)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    ranking.exact_top_k_np(q, emb, **args)
