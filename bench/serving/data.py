"""bench/serving_scale.py's catalogs (the law: its docstring), exact top-k and recall@k."""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import numpy as np

CHUNK = 1 << 18  # rows per generated chunk (the unit that can be regenerated)


@dataclasses.dataclass
class Geometry:
  """The small seeded part of a catalog: centres, cluster weights, rotation, spectrum."""

  num_items: int
  dim: int
  seed: int
  item_noise: float = 0.5
  query_noise: float = 0.5

  def __post_init__(self):
    self._clusters(np.random.default_rng([self.seed, 0]))
    w = 1.0 / np.arange(1, self.num_clusters + 1) ** 0.5
    self.weights = w / w.sum()

  def _clusters(self, rng):
    self.num_clusters = int(np.clip(self.num_items // 1000, 10, 10_000))
    lam = np.arange(1, self.dim + 1, dtype=np.float64) ** -0.8
    self.sqrt_lam = np.sqrt(lam / lam.mean()).astype(np.float32)
    self.rotation = np.linalg.qr(rng.standard_normal((self.dim, self.dim)))[0].astype(np.float32)
    z = rng.standard_normal((self.num_clusters, self.dim)).astype(np.float32)
    self.centres = (z * self.sqrt_lam) @ self.rotation.T
    self.spread = rng.lognormal(0.0, 0.3, self.num_clusters).astype(np.float32)

  def shaped_noise(self, rng, rows: int) -> np.ndarray:
    """rows × dim draws of N(0, R diag(λ) Rᵀ)."""
    return (
      rng.standard_normal((rows, self.dim), dtype=np.float32) * self.sqrt_lam
    ) @ self.rotation.T

  def chunk(self, index: int) -> Tuple[np.ndarray, np.ndarray]:
    """Items of chunk ``index`` (ids 1 + index·CHUNK ...): (float32 [c, d], clusters int32 [c])."""
    start = index * CHUNK
    rows = min(CHUNK, self.num_items - start)
    if rows <= 0:
      raise ValueError(f"chunk {index} is past the catalog of {self.num_items} items")
    rng = np.random.default_rng([self.seed, 1, index])
    cluster = rng.choice(self.num_clusters, size=rows, p=self.weights).astype(np.int32)
    x = self.centres[cluster] + (
      self.item_noise * self.spread[cluster, None] * self.shaped_noise(rng, rows)
    )
    x *= rng.lognormal(0.0, 0.2, (rows, 1)).astype(np.float32)
    return x.astype(np.float32, copy=False), cluster

  @property
  def num_chunks(self) -> int:
    return -(-self.num_items // CHUNK)

  def items(self, path: Optional[str] = None) -> Tuple[np.ndarray, np.ndarray]:
    """The item table float32 [N + 1, d] (row 0 = zeros) and clusters int32 [N + 1] (row 0 = -1);
    with ``path``, written to that .npy file and returned memory-mapped read-only."""
    if path is not None:
      table = np.lib.format.open_memmap(
        path, mode="w+", dtype=np.float32, shape=(self.num_items + 1, self.dim)
      )
      table[0] = 0.0
    else:
      table = np.zeros((self.num_items + 1, self.dim), np.float32)
    cluster = np.full(self.num_items + 1, -1, np.int32)
    for c in range(self.num_chunks):
      x, cl = self.chunk(c)
      rows = slice(1 + c * CHUNK, 1 + c * CHUNK + len(x))
      table[rows], cluster[rows] = x, cl
    if path is not None:
      table.flush()
      del table
      table = np.load(path, mmap_mode="r")
    return table, cluster

  def queries(self, table: np.ndarray, count: int, stream: int) -> np.ndarray:
    """``count`` queries near uniformly drawn items (``stream`` tells samples apart)."""
    rng = np.random.default_rng([self.seed, 2, stream])
    near = rng.integers(1, self.num_items + 1, count)
    return (table[near] + self.query_noise * self.shaped_noise(rng, count)).astype(np.float32)


@dataclasses.dataclass
class TopicGeometry(Geometry):
  """The ScaNN claim's catalog (``--catalog=topics``, the old bench/scann_index.py's law): 100
  topics t ~ N(0, I); C = clip(N / 100, 10, 10,000) cluster centres c = t + 0.6 N(0, I) (t drawn
  uniformly); cluster sizes ∝ rank^-0.5; item = (c + 0.3 ε) · n_i, n_i ~ LogNormal(0, 0.2);
  queries c' + 0.5 ε near the centres of clusters c' drawn with the size weights (where trained
  user vectors sit), not near single items. Isotropic: rotation I, spectrum 1, spread 1."""

  item_noise: float = 0.3

  def _clusters(self, rng):
    self.num_clusters = int(np.clip(self.num_items // 100, 10, 10_000))
    topics = rng.standard_normal((100, self.dim)).astype(np.float32)
    self.centres = topics[rng.integers(0, 100, self.num_clusters)] + 0.6 * rng.standard_normal(
      (self.num_clusters, self.dim), dtype=np.float32
    )
    self.sqrt_lam = np.ones(self.dim, np.float32)
    self.rotation = np.eye(self.dim, dtype=np.float32)
    self.spread = np.ones(self.num_clusters, np.float32)

  def queries(self, table: np.ndarray, count: int, stream: int) -> np.ndarray:
    rng = np.random.default_rng([self.seed, 2, stream])
    near = rng.choice(self.num_clusters, size=count, p=self.weights)
    return (self.centres[near] + self.query_noise * self.shaped_noise(rng, count)).astype(
      np.float32
    )


GEOMETRIES = {"anisotropic": Geometry, "topics": TopicGeometry}


# --------------------------------------------------------------------------- exact top-k, recall


def exact_top_k(
  queries: np.ndarray, table: np.ndarray, k: int, chunk: int = 1 << 16
) -> Tuple[np.ndarray, np.ndarray]:
  """Exact top-k by dot product over rows 1..N of ``table``: (ids int64 [Q, k] in 1..N, scores
  float32 [Q, k]), best first. Chunked float32 matmul; after the first chunk only the scores
  above each query's running k-th best are kept as candidates (ties at the k-th score: any)."""
  q = np.ascontiguousarray(queries, np.float32)
  n = table.shape[0] - 1
  if not 1 <= k <= n:
    raise ValueError(f"k must be in [1, {n}], got {k}")
  best_s = np.full((q.shape[0], 0), -np.inf, np.float32)
  best_i = np.zeros((q.shape[0], 0), np.int64)
  rows = np.arange(q.shape[0])[:, None]
  for start in range(1, n + 1, chunk):
    stop = min(start + chunk, n + 1)
    s = q @ table[start:stop].T
    if best_s.shape[1] < k:  # fill: keep everything, cut to k below
      new_s, new_i = s, np.broadcast_to(np.arange(start, stop), s.shape)
    else:
      thresh = best_s.min(axis=1)
      r, c = np.nonzero(s > thresh[:, None])
      if r.size == 0:
        continue
      width = np.bincount(r, minlength=q.shape[0]).max()
      # Ragged candidates padded into [Q, width]; r is sorted, so a rank within each row:
      pos = np.arange(r.size) - np.searchsorted(r, r)
      new_s = np.full((q.shape[0], width), -np.inf, np.float32)
      new_i = np.zeros((q.shape[0], width), np.int64)
      new_s[r, pos], new_i[r, pos] = s[r, c], c + start
    all_s, all_i = np.concatenate([best_s, new_s], 1), np.concatenate([best_i, new_i], 1)
    if all_s.shape[1] > k:
      keep = np.argpartition(-all_s, k - 1, axis=1)[:, :k]
      best_s, best_i = all_s[rows, keep], all_i[rows, keep]
    else:
      best_s, best_i = all_s, all_i
  order = np.argsort(-best_s, axis=1, kind="stable")
  return best_i[rows, order].astype(np.int64), best_s[rows, order].astype(np.float32)


def recall_at_k(approx_ids: np.ndarray, exact_ids: np.ndarray, k: int) -> float:
  """Mean over queries of |approx top-k ∩ exact top-k| / k (empty slots, id < 1, never count)."""
  a, e = np.asarray(approx_ids)[:, :k], np.asarray(exact_ids)[:, :k]
  if a.shape != e.shape or a.shape[1] != k:
    raise ValueError(f"need [Q, >= {k}] id lists of one shape, got {a.shape} and {e.shape}")
  hits = [np.intersect1d(ar[ar > 0], er).size for ar, er in zip(a, e)]
  return float(np.mean(hits) / k)
