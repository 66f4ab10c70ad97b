"""bench/catalog/points.py (the points of bench/catalog_size.py): the Zipf(1)-like item law its
batches are drawn from, the projected memory of a full-softmax step."""

import numpy as np

from bench.catalog import points


def test_zipf_probabilities_are_the_law_of_the_drawn_ids():
  v, draws = 40, 400_000
  p = points.zipf_probabilities(v)
  assert p.shape == (v + 1,) and p[0] == 0.0
  np.testing.assert_allclose(p.sum(), 1.0, rtol=1e-12)
  # P(i) = P(i <= exp(u log(V + 1)) < i + 1) = log((i + 1) / i) / log(V + 1).
  np.testing.assert_allclose(p[1:], np.diff(np.log(np.arange(1, v + 2))) / np.log(v + 1))
  ids = points.zipf_ids(np.random.default_rng(3), v, draws)
  assert ids.min() >= 1 and ids.max() <= v
  freq = np.bincount(ids, minlength=v + 1) / draws
  se = np.sqrt(p * (1 - p) / draws)
  assert np.all(np.abs(freq - p) <= 5 * se + 1e-12)


def test_full_softmax_projection_grows_with_batch_times_catalog():
  small = points.full_softmax_bytes(256, 10_000, 64)
  large = points.full_softmax_bytes(256, 10_000_000, 64)
  assert large / small > 900
  assert large > 3 * 256 * 10_000_000 * 4  # the [B, |I|] logits, softmax and gradient
