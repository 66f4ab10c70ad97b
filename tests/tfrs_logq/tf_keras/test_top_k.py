"""Recall@k / NDCG@k with rated-item filtering against plain-Python references."""

import math

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import top_k as top_k_lib

import numpy as np
import pytest


def _ref_rank_filtered(score_row, history, target):
  """Plain Python: rank items != 0 not in history (target kept) by score desc, id asc."""
  banned = set(int(h) for h in history) - {int(target)}
  items = [d for d in range(1, len(score_row)) if d not in banned]
  items.sort(key=lambda d: (-float(score_row[d]), d))
  return items


def _ref_metrics(ranked, target, k):
  top = list(ranked[:k])
  if target in top:
    r = top.index(target)
    return 1.0, 1.0 / math.log2(r + 2)
  return 0.0, 0.0


def _random_case(seed, num_q=40, num_items=60, max_len=12):
  rng = np.random.default_rng(seed)
  scores = rng.normal(size=(num_q, num_items + 1)).astype(np.float32)
  history = np.zeros((num_q, max_len), np.int64)
  targets = rng.integers(1, num_items + 1, size=num_q)
  for q in range(num_q):
    n = rng.integers(0, max_len + 1)
    history[q, max_len - n :] = rng.integers(1, num_items + 1, size=n)  # left padded, dups ok
    if q % 5 == 0 and n > 0:
      history[q, -1] = targets[q]  # target also in history: must never be filtered
  return scores, history, targets


@pytest.mark.parametrize("seed", [0, 1])
def test_filtered_metrics_match_plain_python(seed):
  scores, history, targets = _random_case(seed)
  ids, top_scores = top_k_lib.filtered_top_k_from_scores(scores, history, 20, targets=targets)
  for k in (1, 5, 20):
    rec = top_k_lib.recall_at_k(ids, targets, k)
    ndcg = top_k_lib.ndcg_at_k(ids, targets, k)
    for q in range(len(targets)):
      ranked = _ref_rank_filtered(scores[q], history[q], targets[q])
      assert list(ids[q]) == ranked[:20]
      np.testing.assert_allclose(top_scores[q], scores[q, ranked[:20]])
      r_ref, n_ref = _ref_metrics(ranked, int(targets[q]), k)
      assert rec[q] == r_ref
      assert ndcg[q] == pytest.approx(n_ref, rel=1e-6)
  summary = top_k_lib.retrieval_metrics(ids, targets, ks=(5, 20))
  assert summary["recall@5"] == pytest.approx(np.mean(top_k_lib.recall_at_k(ids, targets, 5)))


def test_filtering_changes_rank_and_keeps_target():
  # Scores: item 3 > 2 > 1 > 4. History {3, 4}, target 4 -> ranking [2, 1, 4].
  scores = np.array([[0.0, 0.5, 0.8, 0.9, 0.1]], np.float32)
  ids, _ = top_k_lib.filtered_top_k_from_scores(scores, [np.array([3, 4])], 3, targets=[4])
  assert ids.tolist() == [[2, 1, 4]]
  assert top_k_lib.ndcg_at_k(ids, [4], 3)[0] == pytest.approx(1 / math.log2(4))
  assert top_k_lib.recall_at_k(ids, [4], 2)[0] == 0.0
  # Without the target exemption, 4 is gone and the list has an empty slot.
  ids2, sc2 = top_k_lib.filtered_top_k_from_scores(scores, [np.array([3, 4])], 3)
  assert ids2.tolist() == [[2, 1, -1]]
  assert np.all(np.isfinite(sc2))


def test_filter_rated_over_fetch_equals_exact():
  scores, history, targets = _random_case(3)
  k, max_len = 10, history.shape[1]
  order = np.argsort(-scores[:, 1:], axis=1, kind="stable")[:, : k + max_len] + 1
  over_scores = np.take_along_axis(scores, order, axis=1)
  ids, sc = top_k_lib.filter_rated(order, over_scores, history, k, targets=targets)
  ref_ids, ref_sc = top_k_lib.filtered_top_k_from_scores(scores, history, k, targets=targets)
  np.testing.assert_array_equal(ids, ref_ids)
  np.testing.assert_allclose(sc, ref_sc)


def test_tf_versions_match_numpy():
  scores, history, targets = _random_case(4)
  ids, sc = top_k_lib.filtered_top_k_from_scores(scores, history, 15, targets=targets)
  tf_ids, tf_sc = top_k_lib.filtered_top_k_tf(scores, history, 15, targets=targets)
  np.testing.assert_array_equal(tf_ids.numpy(), ids)
  np.testing.assert_allclose(tf_sc.numpy(), sc)
  for k in (3, 15):
    np.testing.assert_allclose(
      top_k_lib.recall_at_k_tf(ids, targets, k).numpy(), top_k_lib.recall_at_k(ids, targets, k)
    )
    np.testing.assert_allclose(
      top_k_lib.ndcg_at_k_tf(ids, targets, k).numpy(),
      top_k_lib.ndcg_at_k(ids, targets, k),
      rtol=1e-6,
    )


def test_multi_target_recall():
  ranked = np.array([[5, 3, 9, 1], [2, 4, 6, 8]])
  got = top_k_lib.multi_target_recall_at_k(ranked, [np.array([3, 7]), np.array([8, 8, 2])], 3)
  # query 0: {3} of {3, 7} -> 1/2; query 1: {2} of {2, 8} -> 1/2 (8 is at rank 3).
  np.testing.assert_allclose(got, [0.5, 0.5])
  got4 = top_k_lib.multi_target_recall_at_k(ranked, [np.array([3, 7]), np.array([8, 2])], 4)
  np.testing.assert_allclose(got4, [0.5, 1.0])


def test_popularity_deciles_and_group_means():
  counts = np.array([0, 5, 50, 1, 50, 7, 0, 3, 9, 2, 100])  # items 1..10
  bins = top_k_lib.popularity_deciles(counts, num_bins=5)
  # Sorted desc (ties by id): 10, 2, 4, 8, 5, 1, 7, 9, 3, 6 -> two per bin.
  expected = {10: 0, 2: 0, 4: 1, 8: 1, 5: 2, 1: 2, 7: 3, 9: 3, 3: 4, 6: 4}
  assert bins[0] == -1
  assert {i: int(bins[i]) for i in range(1, 11)} == expected
  means, n = top_k_lib.mean_by_group([1.0, 0.0, 1.0, 1.0], [0, 0, 2, 2], 4)
  np.testing.assert_allclose(means, [0.5, 0.0, 1.0, 0.0])
  np.testing.assert_array_equal(n, [2, 0, 2, 0])


def test_bad_input_errors():
  with pytest.raises(ValueError, match="empty batch"):
    top_k_lib.recall_at_k(np.zeros((0, 3), np.int64), np.zeros(0, np.int64), 1)
  with pytest.raises(ValueError, match="integer"):
    top_k_lib.recall_at_k(np.zeros((1, 3)), [1], 1)
  with pytest.raises(ValueError, match="exceeds"):
    top_k_lib.ndcg_at_k(np.ones((1, 3), np.int64), [1], 4)
  with pytest.raises(ValueError, match="rows"):
    top_k_lib.recall_at_k(np.ones((2, 3), np.int64), [1], 1)
  with pytest.raises(ValueError, match=">= 1"):
    top_k_lib.recall_at_k(np.ones((1, 3), np.int64), [0], 1)
  with pytest.raises(ValueError, match="outside"):
    top_k_lib.filtered_top_k_from_scores(np.zeros((1, 4)), [np.array([7])], 2)
  with pytest.raises(ValueError, match="groups"):
    top_k_lib.mean_by_group([1.0], [3], 2)


def _ref_top_k(scores, history, target, k, keep_target):
  """Plain Python: items 1..N not in the history (the target kept only with keep_target),
  sorted by score desc then id asc, first k, -1 for empty slots."""
  banned = set(int(h) for h in history)
  if keep_target:
    banned.discard(int(target))
  items = sorted(
    (d for d in range(1, len(scores)) if d not in banned), key=lambda d: (-float(scores[d]), d)
  )[:k]
  return items + [-1] * (k - len(items))


@pytest.mark.parametrize("keep_target", [False, True])
def test_exact_top_k_matches_plain_python_under_both_protocols(keep_target):
  rng = np.random.default_rng(11)
  items = rng.normal(size=(41, 6)).astype(np.float32)
  items[0] = 0.0
  q = rng.normal(size=(23, 6)).astype(np.float32)
  hist = [rng.integers(1, 41, size=rng.integers(0, 38)) for _ in range(23)]
  hist[5] = np.arange(1, 41)  # everything rated: only empty slots (or the kept target) remain
  targets = np.array([h[0] if h.size and i % 2 else 7 for i, h in enumerate(hist)])
  ids, scores = top_k_lib.exact_top_k(
    q, items, 12, rated=hist, targets=targets if keep_target else None, chunk_size=5
  )
  full = q.astype(np.float64) @ items.astype(np.float64).T
  for row in range(23):
    assert ids[row].tolist() == _ref_top_k(full[row], hist[row], targets[row], 12, keep_target)
    found = ids[row] > 0
    np.testing.assert_allclose(scores[row][found], full[row][ids[row][found]], rtol=1e-5, atol=1e-5)
  raw_ids, _ = top_k_lib.exact_top_k(q, items, 12)  # no filtering: padding row 0 never returned
  for row in range(23):
    assert raw_ids[row].tolist() == _ref_top_k(full[row], [], 0, 12, False)
  with pytest.raises(ValueError, match="outside"):
    top_k_lib.exact_top_k(q[:1], items, 3, rated=[np.array([41])])
  with pytest.raises(ValueError, match="k must be"):
    top_k_lib.exact_top_k(q, items, 41)
  with pytest.raises(ValueError, match="NaN"):
    bad = items.copy()
    bad[2, 0] = np.inf
    top_k_lib.exact_top_k(q, bad, 3)
