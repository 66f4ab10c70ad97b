"""ScaNN index: exactness against tfrs_logq.tf_keras.top_k.exact_top_k, agreement, over-fetch
filtering
(both rated-item protocols), config."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import top_k as top_k_lib

import numpy as np
import pytest

from eval import index as index_lib


def _catalog(num_items, dim, seed, clusters=None):
  rng = np.random.default_rng(seed)
  if clusters is None:
    items = rng.normal(size=(num_items + 1, dim)).astype(np.float32)
  else:
    centres = rng.normal(size=(clusters, dim)) * 3
    items = centres[rng.integers(0, clusters, num_items + 1)] + rng.normal(
      size=(num_items + 1, dim)
    )
    items = items.astype(np.float32)
  items[0] = 0.0
  return items


def _histories(num_q, num_items, seed, max_len=30):
  rng = np.random.default_rng(seed)
  return [rng.integers(1, num_items + 1, size=rng.integers(0, max_len)) for _ in range(num_q)]


@pytest.mark.parametrize("backend", ["pybind", "tf"])
def test_brute_force_mode_is_exact(backend):
  items = _catalog(2000, 16, 3)
  q = np.random.default_rng(4).normal(size=(50, 16)).astype(np.float32)
  idx = index_lib.ScannIndex(items, 20, index_lib.IndexConfig(), backend=backend)
  assert idx.config.mode == "brute_force"  # auto: 2,000 <= 20,000 items
  ids, scores = idx.search(q, 20)
  ex_ids, ex_scores = top_k_lib.exact_top_k(q, items, 20)
  np.testing.assert_array_equal(ids, ex_ids)
  np.testing.assert_allclose(scores, ex_scores, rtol=1e-5, atol=1e-4)
  # Over-fetch + filter == exact masking (histories up to 30 items, k = 20).
  hist = _histories(50, 2000, 5)
  targets = np.array([h[-1] if h.size else 1 for h in hist])
  f_ids, _ = idx.search_filtered(q, hist, 20, targets=targets, batch_size=16)
  e_ids, _ = top_k_lib.exact_top_k(q, items, 20, rated=hist, targets=targets)
  np.testing.assert_array_equal(f_ids, e_ids)
  # The paper's protocol (the target is filtered like any rated item) agrees as well.
  f_ids, _ = idx.search_filtered(q, hist, 20, batch_size=16)
  e_ids, _ = top_k_lib.exact_top_k(q, items, 20, rated=hist)
  np.testing.assert_array_equal(f_ids, e_ids)
  assert not any(set(row) & set(h.tolist()) for row, h in zip(f_ids, hist))


def test_tree_mode_agrees_with_exact_on_clustered_catalog():
  items = _catalog(6000, 16, 6, clusters=40)
  q = items[np.random.default_rng(7).integers(1, 6001, 100)] + 0.1
  cfg = index_lib.IndexConfig(
    mode="tree_ah", num_leaves=40, num_leaves_to_search=20, reorder_k=400, dimensions_per_block=2
  )
  idx = index_lib.ScannIndex(items, 10, cfg)
  assert idx.config.mode == "tree_ah" and idx.config.training_sample_size == 6000
  ids, _ = idx.search(q, 10)
  ex, _ = top_k_lib.exact_top_k(q, items, 10)
  assert index_lib.agreement_at_k(ids, ex, 10) >= 0.97
  # Probing a single leaf loses neighbours: the agreement must drop (the check can fail).
  few, _ = idx.search(q, 10, leaves_to_search=1, reorder_k=10)
  assert index_lib.agreement_at_k(few, ex, 10) < index_lib.agreement_at_k(ids, ex, 10)
  assert np.all((few == -1) | ((few >= 1) & (few <= 6000)))


def test_agreement_and_throughput_helpers():
  a = np.array([[1, 2, 3], [4, 5, 6]])
  e = np.array([[3, 2, 9], [7, 8, 9]])
  assert index_lib.agreement_at_k(a, e, 3) == pytest.approx((2 / 3 + 0) / 2)
  assert index_lib.agreement_at_k(a, e, 1) == pytest.approx(0.0)
  tp = index_lib.throughput(100, [2.0, 1.0, 4.0])
  assert tp["qps_best"] == 100.0 and tp["qps_median"] == 50.0


def test_config_resolution_and_errors():
  cfg = index_lib.IndexConfig().resolve(1_000_000, 100)
  assert cfg.mode == "tree_ah" and cfg.num_leaves == 2000 and cfg.num_leaves_to_search == 200
  assert cfg.reorder_k == 1000 and cfg.training_sample_size == 250_000
  assert index_lib.IndexConfig().resolve(20_000, 10).mode == "brute_force"
  with pytest.raises(ValueError, match="num_leaves_to_search"):
    index_lib.IndexConfig(num_leaves=10, num_leaves_to_search=11, mode="tree_ah").resolve(100, 5)
  with pytest.raises(ValueError, match="mode"):
    index_lib.IndexConfig(mode="lsh").resolve(100, 5)
  items = _catalog(50, 4, 0)
  with pytest.raises(ValueError, match="row 0"):
    index_lib.ScannIndex(items[:1], 5)
  with pytest.raises(ValueError, match="NaN"):
    bad = items.copy()
    bad[3, 1] = np.nan
    top_k_lib.exact_top_k(np.ones((1, 4), np.float32), bad, 3)
  idx = index_lib.ScannIndex(items, 5)
  with pytest.raises(ValueError, match="empty batch"):
    idx.search(np.zeros((0, 4), np.float32), 5)
  with pytest.raises(ValueError, match=r"\[Q, 4\]"):
    idx.search(np.zeros((2, 3), np.float32), 5)
  with pytest.raises(ValueError, match="k must be"):
    idx.search(np.zeros((2, 4), np.float32), 51)
  with pytest.raises(ValueError, match="outside"):
    top_k_lib.exact_top_k(np.ones((1, 4), np.float32), items, 3, rated=[np.array([51])])
