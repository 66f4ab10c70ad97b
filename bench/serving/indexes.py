"""bench/serving_scale.py's indexes, each behind the same small interface: ScaNN through the
project's own builder (eval.index; also in brute-force mode, the baseline), FAISS (IVF + 4-bit PQ
fast-scan + exact re-scoring), their query-time settings, and the choice of the fastest setting
that meets the recall target."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
import time
from typing import List, Sequence, Tuple

import numpy as np

from bench.serving.data import Geometry  # annotations


def faiss_spec(num_items: int, scann_leaves: int) -> Tuple[str, int]:
  """(index_factory string, nlist) for a catalog of ``num_items``."""
  nlist = int(2 ** round(np.log2(max(scann_leaves, 2))))
  nlist = max(1, min(nlist, num_items // 39 or 1))
  quantizer = f"IVF{nlist}_HNSW32" if num_items >= 1_000_000 else f"IVF{nlist}"
  return f"{quantizer},PQ32x4fs,RFlat", nlist


class ScannSide:
  """The project's ScaNN index; ``params`` = (leaves_to_search, reorder_k) or (None, None). The
  side "brute" is the same builder in mode brute_force (the exact top-k, ScaNN's float32 scorer)."""

  def __init__(self, table, k, config, name: str = "scann"):
    from eval import index as index_lib

    self.name = name
    self.index = index_lib.ScannIndex(table, k, config)
    self.build_seconds = self.index.build_seconds
    self.config = self.index.config
    self.k = k

  def sweep(self, fractions, reorders) -> List[Tuple]:
    if self.config.mode != "tree_ah":
      return [(None, None)]
    leaves = self.config.num_leaves
    searched = sorted({max(1, min(leaves, int(round(f * leaves)))) for f in fractions})
    return [(s, r) for s in searched for r in sorted({max(self.k, r) for r in reorders})]

  def search(self, q, params):
    leaves, reorder = params
    return self.index.search(q, self.k, leaves_to_search=leaves, reorder_k=reorder)[0]

  def serialized_bytes(self, tmp: str) -> int:
    path = pathlib.Path(tempfile.mkdtemp(dir=tmp))
    try:
      self.index.searcher.serialize(str(path))
      return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    finally:
      shutil.rmtree(path, ignore_errors=True)


class FaissSide:
  """FAISS IVF-PQ (fast scan) + exact re-scoring; ``params`` = (nprobe, k_factor)."""

  name = "faiss"

  def __init__(self, geometry: Geometry, train_sample: np.ndarray, k: int, spec: str, nlist: int):
    import faiss

    self.faiss, self.k, self.spec, self.nlist = faiss, k, spec, nlist
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
    probes = sorted({max(1, min(self.nlist, int(round(f * self.nlist)))) for f in fractions})
    return [(p, float(f)) for p in probes for f in sorted(set(factors))]

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

  def serialized_bytes(self, tmp: str) -> int:
    fd, path = tempfile.mkstemp(dir=tmp, suffix=".faiss")
    os.close(fd)
    try:
      self.faiss.write_index(self.index, path)
      return os.path.getsize(path)
    finally:
      os.remove(path)


def choose(rows: Sequence[dict], target: float) -> dict:
  """The fastest row (batched queries/s) whose recall reaches ``target``; else the best recall."""
  ok = [r for r in rows if r["recall"] >= target]
  if ok:
    return dict(max(ok, key=lambda r: r["qps"]), meets_target=True)
  return dict(max(rows, key=lambda r: (r["recall"], r["qps"])), meets_target=False)
