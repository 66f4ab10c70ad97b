"""The cases of the on-device top-k tests (numpy, deterministic), shared by test_top_k.py and the
per-backend worker: tie-heavy integer scores (exact in float32, so every backend computes the
same scores and the ties are real), rated items with and without the "except target" rule, query
and item chunkings that do and do not divide the sizes, fewer allowed items than k, and one case
of normal floats."""

import numpy as np

# (name, num_items, dim, queries, k, chunk_size, item_chunk, rated, except_target, integer)
CASES = [
  ("plain", 300, 6, 23, 20, None, None, False, False, True),
  ("rated", 300, 6, 23, 20, None, None, True, False, True),
  ("except_target", 300, 6, 23, 20, None, None, True, True, True),
  ("chunks_divide", 255, 6, 32, 16, 8, 64, True, False, True),
  ("chunks_ragged", 300, 6, 23, 20, 5, 37, True, True, True),
  ("chunk_equals_k", 300, 4, 17, 25, 4, 25, True, False, True),
  ("few_allowed", 12, 4, 9, 10, 4, 10, True, False, True),
  ("floats", 1000, 16, 40, 50, 16, 128, True, False, False),
]


def make_case(
  name,
  num_items,
  dim,
  num_queries,
  k,
  chunk_size,
  item_chunk,
  rated,
  except_target,
  integer,
  seed=0,
):
  """The arrays of one case: queries [Q, d], table [N + 1, d], rated rows (list), targets."""
  del chunk_size, item_chunk, except_target
  rng = np.random.default_rng(seed + sum(map(ord, name)))
  if integer:
    table = rng.integers(-2, 3, size=(num_items + 1, dim)).astype(np.float32)
    queries = rng.integers(-2, 3, size=(num_queries, dim)).astype(np.float32)
  else:
    table = rng.normal(size=(num_items + 1, dim)).astype(np.float32)
    queries = rng.normal(size=(num_queries, dim)).astype(np.float32)
  targets = rng.integers(1, num_items + 1, size=num_queries)
  rows = None
  if rated:
    top = num_items - 3 if name == "few_allowed" else min(60, num_items)
    rows = [rng.integers(0, num_items + 1, size=rng.integers(0, top)) for _ in range(num_queries)]
    if name == "few_allowed":
      rows = [np.arange(1, num_items - 2) for _ in range(num_queries)]
    for j in range(0, num_queries, 3):  # every third query has its target in its history
      rows[j] = np.append(rows[j], targets[j])
  return queries, table, rows, targets


def run_cases(exact_top_k, item_chunks=True):
  """{case name: (ids, scores)} of ``exact_top_k`` (a front's search) on every case; without
  ``item_chunks`` (the numpy search, which has no item chunks) no item_chunk is passed."""
  out = {}
  for case in CASES:
    name, _, _, _, k, chunk_size, item_chunk, _, except_target, _ = case
    queries, table, rows, targets = make_case(*case)
    out[name] = exact_top_k(
      queries,
      table,
      k,
      rated=rows,
      targets=targets if except_target else None,
      chunk_size=chunk_size,
      **(dict(item_chunk=item_chunk) if item_chunks else {}),
    )
  return out
