"""bench/catalog/points.py (the points of bench/catalog_size.py): the Zipf(1)-like item law its
batches are drawn from, the projected memory of a full-softmax step, the merging of passes and the
size labels; the variant grammar of a point (negatives, frequency, memory, optimizer)."""

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


def test_merge_pools_the_steps_of_two_passes_and_keeps_the_larger_memory():
  ps = lambda peak, rss: {"ps 0": dict(peak_kib=peak, rss_kib=rss)}
  old = dict(times=[1.0], peak_rss_kib=10, rss_import_kib=1, servers=ps(5, 4))
  new = dict(times=[2.0], peak_rss_kib=20, rss_import_kib=2, servers=ps(3, 6))
  merged = points.merge(old, new)
  assert merged["times"] == [1.0, 2.0] and merged["servers"] == ps(5, 6)
  assert (merged["peak_rss_kib"], merged["rss_import_kib"]) == (20, 2)
  assert points.merge(new, old)["peak_rss_kib"] == 20
  failed = dict(error="timeout after 1 s")
  assert points.merge(failed, new) is new and points.merge(old, failed) is old


def test_size_labels():
  sizes = (1, 2000, 10_000, 3_000_000, 10**10)
  assert [points.fmt_size(n) for n in sizes] == ["1e0", "2e3", "1e4", "3e6", "1e10"]


def test_build_point_variant_grammar():
  spec = dict(num_items=50, batch_size=8, dim=4, num_users=10, num_negatives=8, buckets=64, seed=0)
  in_batch = points.build_point(dict(spec, variant="in_batch+exact"))
  assert type(in_batch.objective.sampler).__name__ == "InBatchNegatives"
  assert in_batch.objective.memory is None and "SGD" in type(in_batch.optimizer).__name__
  mixed = points.build_point(dict(spec, variant="mixed+exact+embeddings@adam", memory_slots=32))
  memory = mixed.objective.memory
  assert type(mixed.objective.sampler).__name__ == "JoinedNegatives"
  assert (memory.mode, memory.num_batches, memory.slots_per_batch) == ("embeddings", 4, 8)
  assert type(mixed.optimizer).__name__ == "Adam"
