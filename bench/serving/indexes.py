"""bench/serving_scale.py's indexes behind one interface (``sweep``, ``search``,
``serialized_bytes``): ScaNN by eval.index (also in brute-force mode), FAISS; the setting chosen."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
import time
from typing import List, Sequence, Tuple

import numpy as np

from bench.serving.data import Geometry  # annotations


def dir_bytes(path) -> int:
  """The size of the files under ``path``."""
  return sum(p.stat().st_size for p in pathlib.Path(path).rglob("*") if p.is_file())


def faiss_spec(num_items: int, scann_leaves: int) -> Tuple[str, int]:
  """(index_factory string, nlist) for a catalog of ``num_items``."""
  nlist = int(2 ** round(np.log2(max(scann_leaves, 2))))
  nlist = max(1, min(nlist, num_items // 39 or 1))
  quantizer = f"IVF{nlist}_HNSW32" if num_items >= 1_000_000 else f"IVF{nlist}"
  return f"{quantizer},PQ32x4fs,RFlat", nlist


def _probed(fractions, parts: int) -> list:
  """Fractions of ``parts`` partitions as counts in 1..parts, sorted, without repeats."""
  return sorted({max(1, min(parts, int(round(f * parts)))) for f in fractions})


class _Side:
  def serialized_bytes(self, tmp: str) -> int:
    """The size of the index written by ``save`` to a scratch folder in ``tmp``."""
    path = tempfile.mkdtemp(dir=tmp)
    try:
      self.save(path)
      return dir_bytes(path)
    finally:
      shutil.rmtree(path, ignore_errors=True)


class ScannSide(_Side):
  """The project's ScaNN index; ``params`` = (leaves_to_search, reorder_k), (None, None) in mode
  brute_force (the side "brute")."""

  def __init__(self, table, k, config):
    from eval import index as index_lib

    self.k = k
    self.index = index_lib.ScannIndex(table, k, config)
    self.build_seconds = self.index.build_seconds
    self.config = self.index.config

  def sweep(self, fractions, reorders) -> List[Tuple]:
    if self.config.mode != "tree_ah":
      return [(None, None)]
    reorders = sorted({max(self.k, r) for r in reorders})
    return [(s, r) for s in _probed(fractions, self.config.num_leaves) for r in reorders]

  def search(self, q, params):
    leaves, reorder = params
    return self.index.search(q, self.k, leaves_to_search=leaves, reorder_k=reorder)[0]

  def save(self, path: str):
    self.index.searcher.serialize(path)


class FaissSide(_Side):
  """FAISS IVF-PQ (fast scan) + exact re-scoring; ``params`` = (nprobe, k_factor)."""

  def __init__(self, geometry: Geometry, train_sample: np.ndarray, k: int, spec: str, nlist: int):
    import faiss

    self.faiss, self.k, self.nlist = faiss, k, nlist
    self.index = faiss.index_factory(geometry.dim, spec, faiss.METRIC_INNER_PRODUCT)
    self.refine = faiss.downcast_index(self.index)  # IndexRefineFlat: k_factor
    self.ivf = faiss.extract_index_ivf(self.index)  # nprobe
    quantizer = faiss.downcast_index(self.ivf.quantizer)
    self.hnsw = quantizer.hnsw if hasattr(quantizer, "hnsw") else None  # efSearch
    self.threads = faiss.omp_get_max_threads()
    start = time.perf_counter()
    self.index.train(train_sample)
    seconds = time.perf_counter() - start
    for c in range(geometry.num_chunks):  # regenerated chunk by chunk (not timed)
      x, _ = geometry.chunk(c)
      start = time.perf_counter()
      self.index.add(x)
      seconds += time.perf_counter() - start
    self.build_seconds = seconds

  def sweep(self, fractions, factors) -> List[Tuple]:
    return [(p, float(f)) for p in _probed(fractions, self.nlist) for f in sorted(set(factors))]

  def search(self, q, params):
    nprobe, k_factor = params
    self.ivf.nprobe = int(nprobe)
    if self.hnsw is not None:
      self.hnsw.efSearch = max(64, 2 * int(nprobe))
    self.refine.k_factor = float(k_factor)
    # One query: one thread (FAISS's advice for small batches; nq = 1 is not split anyway).
    self.faiss.omp_set_num_threads(1 if len(q) == 1 else self.threads)
    _, ids = self.index.search(np.ascontiguousarray(q, np.float32), self.k)
    return np.where(ids >= 0, ids + 1, -1)  # FAISS row r = item id r + 1

  def save(self, path: str):
    self.faiss.write_index(self.index, os.path.join(path, "index.faiss"))


def choose(rows: Sequence[dict], target: float) -> dict:
  """The fastest row (batched queries/s) whose recall reaches ``target``; else the best recall."""
  ok = [r for r in rows if r["recall"] >= target]
  if ok:
    return dict(max(ok, key=lambda r: r["qps"]), meets_target=True)
  return dict(max(rows, key=lambda r: (r["recall"], r["qps"])), meets_target=False)
