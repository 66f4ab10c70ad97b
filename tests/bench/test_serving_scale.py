"""bench/serving_scale.py: the exact top-k and recall@k it reports, checked against numpy
oracles written from their definitions, the catalogs' chunks regenerate to the same items, and
the whole bench (ScaNN, FAISS, brute force, serving SavedModel reloaded in a fresh process) runs
end to end at a tiny size and writes its report; so does the ScaNN-only run of the ScaNN claim."""

import json

import numpy as np
import pytest

from bench import serving_scale
from bench.serving import data


def _oracle_top_k(queries, table, k):
  """Top-k ids (1..N) by <q, c_d> from the full score matrix, float64, best first."""
  scores = queries.astype(np.float64) @ table[1:].astype(np.float64).T
  return np.argsort(-scores, axis=1, kind="stable")[:, :k] + 1


def _oracle_recall(approx, exact, k):
  """recall@k = mean over queries of |approx top-k ∩ exact top-k| / k (ids < 1 = empty)."""
  total = 0.0
  for a, e in zip(approx, exact):
    total += len({int(i) for i in a[:k] if i >= 1} & {int(i) for i in e[:k]}) / k
  return total / len(approx)


def test_exact_top_k_matches_the_full_sort(monkeypatch):
  monkeypatch.setattr(data, "CHUNK", 1000)  # several generated chunks
  geo = data.Geometry(5000, 16, seed=3)
  table, cluster = geo.items()
  assert table.shape == (5001, 16) and not table[0].any() and cluster[0] == -1
  queries = geo.queries(table, 37, stream=1)
  for chunk in (97, 1 << 16):  # many item chunks (threshold merging) and one
    ids, scores = data.exact_top_k(queries, table, 50, chunk=chunk)
    expected = _oracle_top_k(queries, table, 50)
    np.testing.assert_array_equal(np.sort(ids, 1), np.sort(expected, 1))  # float32 vs 64 order
    assert np.all(np.diff(scores, axis=1) <= 0)  # best first
    np.testing.assert_allclose(
      scores, np.sum(queries[:, None, :] * table[ids], -1), rtol=1e-5, atol=1e-4
    )


def test_recall_at_k_is_the_mean_overlap_fraction():
  rng = np.random.default_rng(0)
  exact = np.stack([rng.permutation(50)[:10] + 1 for _ in range(20)])
  approx = exact.copy()
  approx[:, 7:] = rng.integers(51, 60, (20, 3))  # 3 misses in every row
  approx[::2, 0] = -1  # an empty slot in half the rows
  approx[1] = exact[1][::-1]  # order does not matter
  got = data.recall_at_k(approx, exact, 10)
  np.testing.assert_allclose(got, _oracle_recall(approx, exact, 10), rtol=1e-12)
  np.testing.assert_allclose(got, (10 * 0.6 + 9 * 0.7 + 1.0) / 20)  # even / odd rows / row 1
  assert data.recall_at_k(exact, exact, 10) == 1.0


@pytest.mark.parametrize("catalog", sorted(data.GEOMETRIES))
def test_chunks_regenerate_identically(catalog, monkeypatch):
  monkeypatch.setattr(data, "CHUNK", 700)
  law = data.GEOMETRIES[catalog]
  geo = law(2000, 8, seed=1)
  table, _ = geo.items()
  again = law(2000, 8, seed=1)
  for c in range(geo.num_chunks):
    x, _ = again.chunk(c)
    np.testing.assert_array_equal(x, table[1 + 700 * c : 1 + 700 * c + len(x)])
  assert not np.array_equal(law(2000, 8, seed=2).items()[0], table)


def test_topic_catalog_follows_its_law():
  """TopicGeometry: N / 100 clusters, items c + 0.3 ε scaled by a norm factor, queries c' + 0.5 ε
  near cluster centres."""
  geo = data.GEOMETRIES["topics"](50_000, 16, seed=0)
  table, cluster = geo.items()
  assert geo.num_clusters == 500
  ratio = np.linalg.norm(table[1:], axis=1) / np.linalg.norm(geo.centres[cluster[1:]], axis=1)
  np.testing.assert_allclose(np.median(ratio), 1.0, atol=0.1)  # LogNormal(0, 0.2) median 1
  own = np.sum(table[1:] * geo.centres[cluster[1:]], 1)
  other = np.sum(table[1:] * geo.centres[(cluster[1:] + 1) % geo.num_clusters], 1)
  assert np.mean(own > other) > 0.9  # items sit at their own centre
  q = geo.queries(table, 2000, stream=0)
  gap = np.min(np.linalg.norm(q[:, None, :] - geo.centres[None], axis=-1), 1)
  np.testing.assert_allclose(np.mean(gap**2), 0.25 * 16, rtol=0.1)  # 0.5 ε from a centre


def test_bench_end_to_end(tmp_path, capsys):
  n, k, num_eval = 25_000, 100, 40
  out = tmp_path / "out"
  serving_scale.main(
    [
      f"--sizes={n}",
      "--tune_queries=30",
      f"--eval_queries={num_eval}",
      "--single_queries=3",
      "--rounds=2",
      "--fractions=0.02,0.1",
      "--reorders=200",
      "--history_len=8",
      "--serving_batch=4",
      "--save_ids",
      "--indexes=scann,faiss,brute",
      "--mmap_from=20000",  # the memory-mapped catalog of the 1e7 run
      "--machine=test box",
      f"--out={out}",
    ]
  )
  summary = capsys.readouterr().out.strip().splitlines()[-1]
  assert summary.startswith("summary: serving_scale") and "same ids True" in summary
  result = json.loads((out / "serving_scale.json").read_text())
  (point,) = result["points"]
  assert "error" not in point, point
  assert point["scann"]["config"]["mode"] == "tree_ah"  # the project's default above 20k items
  assert point["faiss"]["factory"].endswith(",PQ32x4fs,RFlat")
  assert point["catalog_memory_mapped"]

  # Reported recall = the definition applied to the saved ids; the saved exact ids = the full sort.
  saved = np.load(out / f"ids_{n}.npz")
  geo = data.Geometry(n, 64, seed=0)
  table, _ = geo.items()
  eval_q = geo.queries(table, num_eval, stream=1)
  np.testing.assert_array_equal(
    np.sort(saved["exact"], 1), np.sort(_oracle_top_k(eval_q, table, k), 1)
  )
  for name in ("scann", "faiss", "brute"):
    s = point[name]
    np.testing.assert_allclose(
      s["recall"], _oracle_recall(saved[name], saved["exact"], k), rtol=1e-12
    )
    assert 0.5 < s["recall"] <= 1.0
    assert s["batched_qps_median"] > 0 and s["single_qps_median"] > 0
    assert s["build_seconds"] > 0 and s["serialized_bytes"] > n * 64 * 4  # float data re-scored
    assert s["speedup_median"] == pytest.approx(
      s["batched_qps_median"] / point["brute"]["batched_qps_median"]
    )
    assert len(s["sweep"]) == (1 if name == "brute" else 2)
  assert point["brute"]["config"]["mode"] == "brute_force" and point["brute"]["recall"] >= 0.999

  serving = result["serving"]
  assert serving["load"]["same_ids"] and serving["load"]["same_scores"]
  assert serving["build"]["config"]["num_leaves_to_search"] == point["scann"]["chosen"]["params"][0]

  md = (out / "serving_scale.md").read_text()
  assert md.splitlines()[3].startswith("python -m bench.serving_scale --sizes=25000")
  assert "Machine: test box" in md and "| 25,000 | scann |" in md and "| 25,000 | faiss |" in md
  assert "same top-100 ids as in process: **True**" in md
  assert (out / "serving_scale.png").stat().st_size > 0


def test_scann_only_run(tmp_path, capsys):
  """--indexes=scann (no FAISS, no brute force: no speed-up column), the topic catalog."""
  out = tmp_path / "out"
  result = serving_scale.main(
    [
      "--sizes=25000",
      "--catalog=topics",
      "--indexes=scann",
      "--tune_queries=20",
      "--eval_queries=20",
      "--single_queries=2",
      "--rounds=1",
      "--fractions=0.05",
      "--reorders=300",
      "--no_serving",
      f"--out={out}",
    ]
  )
  (point,) = result["points"]
  assert "error" not in point, point
  assert result["catalog"] == "topics" and "faiss" not in point and "brute" not in point
  assert "speedup_median" not in point["scann"] and point["num_clusters"] == 250
  assert "| 25,000 | scann |" in (out / "serving_scale.md").read_text()
  assert capsys.readouterr().out.strip().splitlines()[-1].startswith("summary: serving_scale")
