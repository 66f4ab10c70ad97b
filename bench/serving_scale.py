r"""Serving at 10^7 items: the project's ScaNN index against FAISS, and the serving SavedModel.

    python -m bench.serving_scale --out DIR                      # 1e5, 1e6, 1e7 items
    python -m bench.serving_scale --quick --out DIR              # 1e4, 1e5 (a smoke run)
    python -m bench.serving_scale --sizes=1000000 --target_recall=0.99 --no_serving

Catalog (``Geometry``, seeded, generated in chunks that can be regenerated one by one): dim 64
float32. C = clip(N / 1000, 10, 10,000) cluster centres c ~ R diag(sqrt(λ)) z with a decaying
spectrum λ_j ∝ j^-0.8 (mean 1) and a random rotation R (anisotropic, like trained embeddings);
cluster sizes ∝ rank^-0.5; item = (c + σ s_c R diag(sqrt(λ)) ε) · n_i with a per-cluster spread
s_c ~ LogNormal(0, 0.3) and a per-item norm n_i ~ LogNormal(0, 0.2) (dot-product models put
popularity into norms). Queries are drawn near items: q = x_i + σ_q R diag(sqrt(λ)) ε for
uniformly drawn items i. Row 0 of the item table is padding (the export layout); ids are 1..N.

Per catalog size N, in a process of its own (one after the other):
* exact top-k (k = 100) of a tuning and an evaluation query sample: chunked float32 matmul in
  numpy over the catalog, candidates above each query's running k-th score kept and merged;
* ScaNN through the project's builder (`eval.index.ScannIndex` with `eval.index.IndexConfig`:
  its defaults -- tree of ≈ 2 sqrt(N) leaves, 4-bit anisotropic hashing, exact re-scoring -- and
  only its existing options); FAISS: ``IVF{nlist},PQ32x4fs,RFlat`` (inverted lists + 4-bit
  fast-scan PQ, 2 dims per code like ScaNN's AH, + exact float re-scoring), nlist = ScaNN's
  leaf count rounded to a power of two, coarse quantizer HNSW32 from 10^6 items (FAISS's
  guideline for 1M-10M vectors; flat below). Each build is timed (ScaNN: the builder's
  ``build()``; FAISS: train + add), its memory is the growth of the resident set over the build
  and the size of the index serialized to disk (ScaNN ``searcher.serialize``, FAISS
  ``write_index``);
* a sweep of the query-time knobs on the tuning queries -- ScaNN leaves searched × reorder_k,
  FAISS nprobe × k_factor (k_factor · k = the candidates re-scored, like reorder_k) -- and, per
  index, the fastest setting (batched queries/s) whose recall@k reaches ``--target_recall``;
* at those settings, on the evaluation queries: recall@k = mean over queries of
  |approx top-k ∩ exact top-k| / k, batched queries/s (all evaluation queries in one call) and
  single-query queries/s (``--single_queries`` calls of one query), ``--rounds`` rounds with the
  two indexes interleaved (order rotated per round), min-time and median.
The catalog is freed after the ScaNN build and regenerated chunk by chunk for FAISS's add, so
the process holds the catalog plus one index, or both indexes, never all three.

At the largest size (unless ``--no_serving``): the serving SavedModel path. One process builds
`eval.serving.ServingModule` over the same catalog with ScaNN at the setting chosen above (a
stand-in query encoder: the mean of the history items' cluster centres), answers a batch of
histories in process (first and second call timed), saves it with
`eval.serving.save_serving_module`; a fresh process loads it with
`eval.serving.load_serving_model` (timed), answers the same histories and checks that the ids are
the in-process ones (scores to 1e-5).

Writes ``--out``/serving_scale.json, serving_scale.md (the command at the top, the machine label,
the tables) and serving_scale.png (recall against batched queries/s per size; build time and
queries/s against N). A point that fails (memory, time) is reported as such, never filled in.
The last line is a one-line summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from bench.common import memory  # noqa: E402
from bench.common import report  # noqa: E402
from bench.common import timing  # noqa: E402
from bench.common import workers  # noqa: E402

MODULE = "bench.serving_scale"
CHUNK = 1 << 18  # rows per generated chunk (the unit that can be regenerated)


# --------------------------------------------------------------------------- the catalog

@dataclasses.dataclass
class Geometry:
  """The small seeded part of a catalog: centres, cluster weights, rotation, spectrum."""
  num_items: int
  dim: int
  seed: int
  item_noise: float = 0.5
  query_noise: float = 0.5

  def __post_init__(self):
    rng = np.random.default_rng([self.seed, 0])
    self.num_clusters = int(np.clip(self.num_items // 1000, 10, 10_000))
    lam = np.arange(1, self.dim + 1, dtype=np.float64) ** -0.8
    self.sqrt_lam = np.sqrt(lam / lam.mean()).astype(np.float32)
    self.rotation = np.linalg.qr(rng.standard_normal((self.dim, self.dim)))[0].astype(np.float32)
    z = rng.standard_normal((self.num_clusters, self.dim)).astype(np.float32)
    self.centres = (z * self.sqrt_lam) @ self.rotation.T
    self.spread = rng.lognormal(0.0, 0.3, self.num_clusters).astype(np.float32)
    w = 1.0 / np.arange(1, self.num_clusters + 1) ** 0.5
    self.weights = w / w.sum()

  def shaped_noise(self, rng, rows: int) -> np.ndarray:
    """rows × dim draws of N(0, R diag(λ) Rᵀ)."""
    return (rng.standard_normal((rows, self.dim), dtype=np.float32) * self.sqrt_lam) @ self.rotation.T

  def chunk(self, index: int) -> Tuple[np.ndarray, np.ndarray]:
    """Items of chunk ``index`` (ids 1 + index·CHUNK ...): (float32 [c, d], clusters int32 [c]);
    the same values whenever it is regenerated."""
    start = index * CHUNK
    rows = min(CHUNK, self.num_items - start)
    if rows <= 0:
      raise ValueError(f"chunk {index} is past the catalog of {self.num_items} items")
    rng = np.random.default_rng([self.seed, 1, index])
    cluster = rng.choice(self.num_clusters, size=rows, p=self.weights).astype(np.int32)
    x = self.centres[cluster] + (self.item_noise * self.spread[cluster, None]
                                 * self.shaped_noise(rng, rows))
    x *= rng.lognormal(0.0, 0.2, (rows, 1)).astype(np.float32)
    return x.astype(np.float32, copy=False), cluster

  @property
  def num_chunks(self) -> int:
    return -(-self.num_items // CHUNK)

  def items(self, path: Optional[str] = None) -> Tuple[np.ndarray, np.ndarray]:
    """The item table float32 [N + 1, d] (row 0 = padding zeros) and clusters int32 [N + 1]
    (row 0 = -1). With ``path``, the table is written to that .npy file and returned memory-mapped
    read-only (file-backed pages, which the kernel can reclaim, instead of anonymous memory)."""
    if path is not None:
      table = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32,
                                        shape=(self.num_items + 1, self.dim))
      table[0] = 0.0
    else:
      table = np.zeros((self.num_items + 1, self.dim), np.float32)
    cluster = np.full(self.num_items + 1, -1, np.int32)
    for c in range(self.num_chunks):
      x, cl = self.chunk(c)
      table[1 + c * CHUNK:1 + c * CHUNK + len(x)] = x
      cluster[1 + c * CHUNK:1 + c * CHUNK + len(x)] = cl
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


# --------------------------------------------------------------------------- exact top-k, recall

def exact_top_k(queries: np.ndarray, table: np.ndarray, k: int,
                chunk: int = 1 << 16) -> Tuple[np.ndarray, np.ndarray]:
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
      cand_s, cand_i = s, np.broadcast_to(np.arange(start, stop), s.shape)
      all_s = np.concatenate([best_s, cand_s], 1)
      all_i = np.concatenate([best_i, cand_i], 1)
    else:
      thresh = best_s.min(axis=1)
      r, c = np.nonzero(s > thresh[:, None])
      if r.size == 0:
        continue
      width = np.bincount(r, minlength=q.shape[0]).max()
      # Ragged candidates padded into [Q, width]; r is sorted, so a rank within each row:
      pos = np.arange(r.size) - np.searchsorted(r, r)
      pad_s = np.full((q.shape[0], width), -np.inf, np.float32)
      pad_i = np.zeros((q.shape[0], width), np.int64)
      pad_s[r, pos] = s[r, c]
      pad_i[r, pos] = c + start
      all_s = np.concatenate([best_s, pad_s], 1)
      all_i = np.concatenate([best_i, pad_i], 1)
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


# --------------------------------------------------------------------------- the two indexes

def faiss_spec(num_items: int, scann_leaves: int) -> Tuple[str, int]:
  """(index_factory string, nlist) for a catalog of ``num_items``."""
  nlist = int(2 ** round(np.log2(max(scann_leaves, 2))))
  nlist = max(1, min(nlist, num_items // 39 or 1))
  quantizer = f"IVF{nlist}_HNSW32" if num_items >= 1_000_000 else f"IVF{nlist}"
  return f"{quantizer},PQ32x4fs,RFlat", nlist


class ScannSide:
  """The project's ScaNN index; ``params`` = (leaves_to_search, reorder_k) or (None, None)."""

  name = "scann"

  def __init__(self, table, k, config):
    from eval import index as index_lib  # pylint: disable=g-import-not-at-top
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

  def __init__(self, geometry: Geometry, train_sample: np.ndarray, k: int, spec: str,
               nlist: int):
    import faiss  # pylint: disable=g-import-not-at-top
    self.faiss, self.k, self.spec, self.nlist = faiss, k, spec, nlist
    self.index = faiss.index_factory(geometry.dim, spec, faiss.METRIC_INNER_PRODUCT)
    self.refine = faiss.downcast_index(self.index)  # IndexRefineFlat: k_factor
    self.ivf = faiss.extract_index_ivf(self.index)   # nprobe
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


def _rss() -> int:
  return memory.status_kib("VmRSS")


def _log(msg: str):
  print(f"[serving_scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _mmap_path(spec: dict) -> Optional[str]:
  """Where a catalog of at least --mmap_from items is memory-mapped (None: in memory)."""
  if spec["num_items"] < spec.get("mmap_from", float("inf")):
    return None
  return os.path.join(spec["work_dir"], f"catalog_{spec['num_items']}_{os.getpid()}.npy")


def run_point(spec: dict) -> dict:
  """One catalog size: both indexes, sweep, chosen settings, interleaved timing."""
  from eval import index as index_lib  # pylint: disable=g-import-not-at-top
  n, k = spec["num_items"], spec["k"]
  out = {"num_items": n, "dim": spec["dim"], "k": k}
  rss0 = _rss()
  geo = Geometry(n, spec["dim"], spec["seed"])
  start = time.perf_counter()
  table, _ = geo.items(_mmap_path(spec))
  tune_q = geo.queries(table, spec["tune_queries"], 0)
  eval_q = geo.queries(table, spec["eval_queries"], 1)
  out["generate_seconds"] = time.perf_counter() - start
  out["num_clusters"] = geo.num_clusters
  _log(f"N={n}: catalog generated in {out['generate_seconds']:.1f}s")
  start = time.perf_counter()
  exact_tune, _ = exact_top_k(tune_q, table, k)
  exact_eval, _ = exact_top_k(eval_q, table, k)
  out["exact_seconds"] = time.perf_counter() - start
  _log(f"N={n}: exact top-{k} of {len(tune_q) + len(eval_q)} queries in "
       f"{out['exact_seconds']:.1f}s")

  config = index_lib.IndexConfig(**spec["scann_options"])
  rss = _rss()
  wall = time.perf_counter()
  scann = ScannSide(table, k, config)
  wall = time.perf_counter() - wall
  out["scann"] = {"build_seconds": scann.build_seconds, "build_wall_seconds": wall,
                  "rss_growth_kib": _rss() - rss, "config": vars(scann.config)}
  _log(f"N={n}: ScaNN built in {scann.build_seconds:.1f}s ({wall:.1f}s with training setup)")
  fspec, nlist = faiss_spec(n, scann.config.num_leaves or 2 * int(np.sqrt(n)))
  train_n = min(n, max(39 * nlist, spec["faiss_train_min"]))
  train_sample = np.ascontiguousarray(table[1:1 + train_n])
  del table  # FAISS adds regenerated chunks
  rss = _rss()
  wall = time.perf_counter()
  faiss_side = FaissSide(geo, train_sample, k, fspec, nlist)
  wall = time.perf_counter() - wall
  del train_sample
  out["faiss"] = {"build_seconds": faiss_side.build_seconds, "build_wall_seconds": wall,
                  "rss_growth_kib": _rss() - rss, "factory": fspec, "nlist": nlist,
                  "train_sample": train_n}
  _log(f"N={n}: FAISS {fspec} built in {faiss_side.build_seconds:.1f}s")
  tmp = spec["work_dir"]
  for side in (scann, faiss_side):
    out[side.name]["serialized_bytes"] = side.serialized_bytes(tmp)

  sides = {"scann": scann, "faiss": faiss_side}
  grids = {"scann": scann.sweep(spec["fractions"], spec["reorders"]),
           "faiss": faiss_side.sweep(spec["fractions"], [r / k for r in spec["reorders"]])}
  for name, side in sides.items():
    rows = []
    side.search(tune_q[:8], grids[name][0])  # warm-up
    for params in grids[name]:
      seconds = []
      for _ in range(2):  # the faster of two calls (a shared machine)
        start = time.perf_counter()
        ids = side.search(tune_q, params)
        seconds.append(time.perf_counter() - start)
      seconds = min(seconds)
      rows.append({"params": list(params), "recall": recall_at_k(ids, exact_tune, k),
                   "qps": len(tune_q) / seconds})
    out[name]["sweep"] = rows
    out[name]["chosen"] = choose(rows, spec["target_recall"])
    _log(f"N={n}: {name} chosen {out[name]['chosen']}")

  chosen = {name: tuple(out[name]["chosen"]["params"]) for name in sides}
  results = {}
  for name, side in sides.items():
    ids = side.search(eval_q, chosen[name])
    results[name] = ids
    out[name]["recall"] = recall_at_k(ids, exact_eval, k)
  single_q = eval_q[:spec["single_queries"]]

  def batched(name, _):
    sides[name].search(eval_q, chosen[name])

  def single(name, _):
    for i in range(len(single_q)):
      sides[name].search(single_q[i:i + 1], chosen[name])

  for name in sides:  # warm-up of both paths
    batched(name, 0)
    sides[name].search(single_q[:1], chosen[name])
  t_batch = timing.time_interleaved(batched, list(sides), spec["rounds"])
  t_single = timing.time_interleaved(single, list(sides), spec["rounds"], calls=len(single_q))
  for name in sides:
    bmin, bmed = timing.min_median(t_batch[name])
    smin, smed = timing.min_median(t_single[name])
    out[name].update(batched_qps_best=len(eval_q) / bmin, batched_qps_median=len(eval_q) / bmed,
                     single_qps_best=1 / smin, single_qps_median=1 / smed,
                     single_ms_median=1e3 * smed)
  out["peak_rss_kib"] = memory.status_kib("VmHWM")
  out["start_rss_kib"] = rss0
  out["catalog_memory_mapped"] = _mmap_path(spec) is not None
  if _mmap_path(spec):
    os.remove(_mmap_path(spec))
  out["eval_queries"], out["single_queries"] = len(eval_q), len(single_q)
  if spec.get("save_ids"):
    np.savez(os.path.join(spec["out"], f"ids_{n}.npz"), exact=exact_eval,
             scann=results["scann"], faiss=results["faiss"])
  return out


# --------------------------------------------------------------------------- serving SavedModel

def _encoder(geo: Geometry, cluster: np.ndarray):
  """A stand-in query tower: history [B, L] -> mean of its items' cluster centres."""
  import tfrs_logq  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  class ClusterMeanEncoder(tf.Module):

    def __init__(self):
      super().__init__(name="cluster_mean_encoder")
      self.centres = tf.Variable(geo.centres, trainable=False, name="centres")
      self.cluster = tf.Variable(np.maximum(cluster, 0), trainable=False, name="cluster")

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64, name="history")])
    def __call__(self, history):
      mask = tf.cast(history > 0, tf.float32)[..., None]
      e = tf.gather(self.centres, tf.gather(self.cluster, history)) * mask
      return {"embedding": tf.reduce_sum(e, 1) / tf.maximum(tf.reduce_sum(mask, 1), 1.0)}

  return ClusterMeanEncoder()


def _histories(geo: Geometry, batch: int, length: int) -> np.ndarray:
  rng = np.random.default_rng([geo.seed, 3])
  h = rng.integers(1, geo.num_items + 1, (batch, length)).astype(np.int64)
  h[np.arange(length)[None, :] < rng.integers(0, length // 2 + 1, (batch, 1))] = 0
  return h


def run_serving_build(spec: dict) -> dict:
  import tfrs_logq  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from eval import index as index_lib  # pylint: disable=g-import-not-at-top
  from eval import serving  # pylint: disable=g-import-not-at-top
  geo = Geometry(spec["num_items"], spec["dim"], spec["seed"])
  table, cluster = geo.items(_mmap_path(spec))
  encoder = _encoder(geo, cluster)
  del cluster
  config = index_lib.IndexConfig(**spec["scann_options"])
  start = time.perf_counter()
  module = serving.ServingModule(encoder, table, k=spec["k"], index_config=config)
  out = {"build_seconds": time.perf_counter() - start, "config": vars(module.index_config)}
  del table
  history = tf.constant(_histories(geo, spec["serving_batch"], spec["history_len"]))
  for call in ("first_call_seconds", "second_call_seconds"):
    start = time.perf_counter()
    res = module.recommend(history)
    ids = res["item_ids"].numpy()
    out[call] = time.perf_counter() - start
  start = time.perf_counter()
  serving.save_serving_module(module, spec["model_dir"])
  out["save_seconds"] = time.perf_counter() - start
  out["saved_bytes"] = sum(p.stat().st_size for p in pathlib.Path(spec["model_dir"]).rglob("*")
                           if p.is_file())
  np.savez(os.path.join(spec["model_dir"], "..", "in_process.npz"), ids=ids,
           scores=res["scores"].numpy(), history=history.numpy())
  out["peak_rss_kib"] = memory.status_kib("VmHWM")
  if _mmap_path(spec):
    os.remove(_mmap_path(spec))
  return out


def run_serving_load(spec: dict) -> dict:
  import tfrs_logq  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from eval import serving  # pylint: disable=g-import-not-at-top
  ref = np.load(os.path.join(spec["model_dir"], "..", "in_process.npz"))
  start = time.perf_counter()
  model = serving.load_serving_model(spec["model_dir"])
  out = {"load_seconds": time.perf_counter() - start}
  fn = model.signatures["serving_default"]
  for call in ("first_call_seconds", "second_call_seconds"):
    start = time.perf_counter()
    res = fn(history=tf.constant(ref["history"]))
    ids, scores = res["item_ids"].numpy(), res["scores"].numpy()
    out[call] = time.perf_counter() - start
  out["same_ids"] = bool(np.array_equal(ids, ref["ids"]))
  out["ids_equal_fraction"] = float(np.mean(ids == ref["ids"]))
  found = ref["ids"] >= 0
  out["max_score_diff"] = float(np.max(np.abs(scores[found] - ref["scores"][found]))
                                if found.any() else 0.0)
  out["same_scores"] = bool(out["max_score_diff"] <= 1e-5)
  out["peak_rss_kib"] = memory.status_kib("VmHWM")
  return out


WORKERS = {"point": run_point, "serving_build": run_serving_build,
           "serving_load": run_serving_load}


def _worker(kind: str, spec: dict) -> dict:
  """Runs WORKERS[kind](spec) in a fresh interpreter; {"error": ...} when it fails."""
  cmd = workers.worker_command(MODULE, {"kind": kind, **spec})
  # Idle OpenMP threads sleep instead of spinning: FAISS's spin-waits cost 10-100x on a loaded
  # machine (measured here: IVF-PQ training 21 s -> 0.9 s, one query 2.9 -> 0.2 ms).
  env = dict(os.environ)
  env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
  start = time.perf_counter()
  proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env,
                        cwd=os.getcwd(), timeout=spec.get("timeout_s"))
  replies = [r for r in map(workers.parse_reply, proc.stdout.splitlines()) if r is not None]
  if proc.returncode != 0 or not replies:
    return {"error": f"worker {kind} exited with status {proc.returncode} after "
                     f"{time.perf_counter() - start:.0f}s, no result"
                     + (" (SIGKILL: out of memory?)" if proc.returncode == -9 else "")}
  return replies[-1]


# --------------------------------------------------------------------------- report

def _size(n: int) -> str:
  """1e7 for powers of ten, 25,000 otherwise."""
  e = int(round(np.log10(n)))
  return f"1e{e}" if 10 ** e == n else f"{n:,}"


def _params(name, p):
  if p[0] is None:
    return "brute force"
  return (f"leaves {p[0]}, reorder {p[1]}" if name == "scann"
          else f"nprobe {p[0]}, k_factor {p[1]:g}")


def write_report(result: dict, out: str) -> str:
  lines = ["# Serving at scale: ScaNN (eval.index) vs FAISS, and the serving SavedModel", "",
           "```", result["command"], "```", ""]
  prev = result.get("previous")
  if prev:
    lines += ["with the points marked (a) from an earlier run with the same settings "
              f"(started {prev['started']}, {prev['total_seconds'] / 60:.1f} min):", "", "```",
              prev["command"], "```", ""]
  lines += [f"Machine: {result['machine']}. Run started {result['started']}, "
           f"total {result['total_seconds'] / 60:.1f} min. Dim {result['dim']}, k = "
           f"{result['k']}, target recall@{result['k']} = {result['target_recall']}; "
           f"{result['tune_queries']} tuning and {result['eval_queries']} evaluation queries; "
           f"{result['rounds']} interleaved rounds (batched: all evaluation queries in one call; "
           f"single: {result['single_queries']} one-query calls). Catalog: clustered anisotropic "
           f"Gaussian embeddings, queries near items (bench/serving_scale.py docstring).", ""]
  cols = ["N", "index", "setting (chosen on tuning queries)", "recall@k (eval)",
          "batched q/s best / median", "single q/s best / median", "build s",
          "RSS growth GiB", "serialized GiB", "process peak GiB"]
  lines += report.markdown_header(cols)
  for p in result["points"]:
    n = p["num_items"]
    label = _size(n) + (" (a)" if p.get("run") == "previous" else "")
    if "error" in p:
      lines.append(report.markdown_row([label, "both", p["error"]] + ["-"] * 7))
      continue
    for name in ("scann", "faiss"):
      s = p[name]
      lines.append(report.markdown_row([
          label, name, _params(name, s["chosen"]["params"]),
          f"{s['recall']:.4f}" + ("" if s["chosen"]["meets_target"] else " (target not met)"),
          f"{s['batched_qps_best']:.0f} / {s['batched_qps_median']:.0f}",
          f"{s['single_qps_best']:.0f} / {s['single_qps_median']:.0f}",
          f"{s['build_seconds']:.1f}", report.gib(s["rss_growth_kib"]),
          f"{s['serialized_bytes'] / 2 ** 30:.2f}", report.gib(p["peak_rss_kib"])]))
  lines += ["", "Index configurations:", ""]
  for p in result["points"]:
    if "error" in p:
      continue
    c = p["scann"]["config"]
    lines.append(f"* N = {_size(p['num_items'])}: ScaNN mode {c['mode']}, leaves {c['num_leaves']}, "
                 f"training sample {c['training_sample_size']}, AH {c['dimensions_per_block']} "
                 f"dims/block η {c['anisotropic_quantization_threshold']}; FAISS "
                 f"`{p['faiss']['factory']}` (train sample {p['faiss']['train_sample']}). "
                 f"Catalog generated in {p['generate_seconds']:.0f}s, exact top-k of the "
                 f"samples in {p['exact_seconds']:.0f}s.")
  lines += ["", "Sweeps on the tuning queries (recall@k, batched q/s of one call):", ""]
  for p in result["points"]:
    if "error" in p:
      continue
    for name in ("scann", "faiss"):
      rows = ", ".join(f"{_params(name, r['params'])}: {r['recall']:.3f} @ {r['qps']:.0f}"
                       for r in p[name]["sweep"])
      lines.append(f"* N = {_size(p['num_items'])} {name}: {rows}")
  s = result.get("serving")
  lines += ["", "## Serving SavedModel (eval.serving) at the largest size", ""]
  if s is None:
    lines.append("Not run (--no_serving).")
  elif "error" in s.get("build", {}) or "error" in s.get("load", {}):
    lines.append(f"Failed: build {s.get('build')}, load {s.get('load')}.")
  else:
    b, l = s["build"], s["load"]
    lines += [
        f"N = {_size(s['num_items'])}, k = {result['k']}, {s['batch']} histories of length "
        f"{s['history_len']} (history filtered), ScaNN at leaves "
        f"{b['config']['num_leaves_to_search']}, reorder {b['config']['reorder_k']}.", "",
        f"* build (ServingModule: index + state variables): {b['build_seconds']:.1f}s; in-process "
        f"first call {b['first_call_seconds']:.2f}s (builds the searcher from the state), second "
        f"{b['second_call_seconds'] * 1e3:.0f} ms; save {b['save_seconds']:.1f}s, "
        f"{b['saved_bytes'] / 2 ** 30:.2f} GiB on disk; process peak RSS "
        f"{report.gib(b['peak_rss_kib'])} GiB",
        f"* fresh process: load_serving_model {l['load_seconds']:.1f}s, first call "
        f"{l['first_call_seconds']:.2f}s, second {l['second_call_seconds'] * 1e3:.0f} ms; peak RSS "
        f"{report.gib(l['peak_rss_kib'])} GiB",
        f"* same top-{result['k']} ids as in process: **{l['same_ids']}** (fraction equal "
        f"{l['ids_equal_fraction']:.4f}); max |score difference| {l['max_score_diff']:.2e}"]
  lines += ["", result["summary"], ""]
  path = os.path.join(out, "serving_scale.md")
  pathlib.Path(path).write_text("\n".join(lines))
  return path


def plot(result: dict, path: str):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  points = [p for p in result["points"] if "error" not in p]
  fig, axes = plt.subplots(1, len(points) + 1, figsize=(4.2 * (len(points) + 1), 3.8))
  axes = np.atleast_1d(axes)
  colors = {"scann": "C0", "faiss": "C1"}
  for ax, p in zip(axes, points):
    for name in ("scann", "faiss"):
      rows = p[name]["sweep"]
      ax.scatter([r["recall"] for r in rows], [r["qps"] for r in rows], s=12, c=colors[name],
                 alpha=0.6, label=f"{name} sweep")
      ax.scatter([p[name]["recall"]], [p[name]["batched_qps_median"]], marker="*", s=150,
                 c=colors[name], edgecolors="k", label=f"{name} chosen (eval)")
    ax.axvline(result["target_recall"], color="r", ls=":", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel(f"recall@{result['k']}")
    ax.set_ylabel("batched queries / s")
    ax.set_title(f"N = {_size(p['num_items'])}")
    ax.legend(fontsize=6)
  ax = axes[-1]
  ns = [p["num_items"] for p in points]
  for name in ("scann", "faiss"):
    ax.plot(ns, [p[name]["build_seconds"] for p in points], "o-", c=colors[name],
            label=f"{name} build s")
    ax.plot(ns, [p[name]["single_ms_median"] for p in points], "s--", c=colors[name],
            label=f"{name} single-query ms (median)")
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("catalog size N")
  ax.set_title("time vs size (at the target)")
  ax.legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def summarize(result: dict) -> str:
  parts = []
  for p in result["points"]:
    if "error" in p:
      parts.append(f"{_size(p['num_items'])}: failed")
      continue
    parts.append(f"{_size(p['num_items'])}: " + ", ".join(
        f"{n} recall {p[n]['recall']:.3f} {p[n]['batched_qps_median']:.0f} q/s batched "
        f"{p[n]['single_ms_median']:.2f} ms single build {p[n]['build_seconds']:.0f}s"
        for n in ("scann", "faiss")))
  s = result.get("serving")
  if s and "error" not in s.get("load", {"error": 1}):
    parts.append(f"serving SavedModel reload {s['load']['load_seconds']:.1f}s, same ids "
                 f"{s['load']['same_ids']}")
  elif s:
    parts.append("serving SavedModel: failed")
  return report.summary_line(parts, head=f"serving_scale recall@{result['k']} target "
                             f"{result['target_recall']}")


# --------------------------------------------------------------------------- main

def parse_args(argv):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=__doc__)
  p.add_argument("--sizes", default="100000,1000000,10000000", help="Catalog sizes, comma-separated.")
  p.add_argument("--quick", action="store_true", help="1e4 and 1e5 items, fewer queries.")
  p.add_argument("--dim", type=int, default=64)
  p.add_argument("--k", type=int, default=100)
  p.add_argument("--target_recall", type=float, default=0.95)
  p.add_argument("--tune_queries", type=int, default=300)
  p.add_argument("--eval_queries", type=int, default=1000)
  p.add_argument("--single_queries", type=int, default=100)
  p.add_argument("--rounds", type=int, default=5)
  p.add_argument("--fractions", default="0.005,0.01,0.02,0.04,0.08,0.16",
                 help="Leaves searched (ScaNN) / nprobe (FAISS) as fractions of the partitions.")
  p.add_argument("--reorders", default="200,500,1000,2000,4000",
                 help="ScaNN reorder_k; FAISS k_factor = these / k.")
  p.add_argument("--scann_options", default="{}",
                 help="JSON of eval.index.IndexConfig fields (default: its defaults).")
  p.add_argument("--scann_options_by_size", default="{}",
                 help='JSON {"N": {IndexConfig fields}}: options for one catalog size on top of '
                      '--scann_options (e.g. fewer leaves where the default build is too slow).')
  p.add_argument("--faiss_train_min", type=int, default=100_000,
                 help="FAISS training sample: max(39 nlist, this), capped at N.")
  p.add_argument("--mmap_from", type=int, default=5_000_000,
                 help="Catalogs of at least this many items are written to a .npy in --work_dir "
                      "and memory-mapped (file-backed pages) instead of held in anonymous memory.")
  p.add_argument("--previous", default=None,
                 help="serving_scale.json of an earlier run whose points (other sizes) the "
                      "report also lists, with that run's command.")
  p.add_argument("--no_serving", action="store_true", help="Skip the serving SavedModel part.")
  p.add_argument("--serving_batch", type=int, default=64)
  p.add_argument("--history_len", type=int, default=20)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--timeout_s", type=int, default=3600, help="Per worker process.")
  p.add_argument("--machine", default=f"{os.cpu_count()}-core CPU ({platform.machine()})",
                 help="Machine label for the report.")
  p.add_argument("--work_dir", default=None,
                 help="Scratch space for serialized indexes and the SavedModel (default: a "
                      "temporary folder, removed).")
  p.add_argument("--save_ids", action="store_true",
                 help="Also write ids_N.npz (exact and both indexes' evaluation ids) to --out.")
  p.add_argument("--out", default="bench/out/serving_scale", help="Output folder.")
  return p.parse_args(argv)


def main(argv=None):
  argv = sys.argv[1:] if argv is None else list(argv)
  if len(argv) == 2 and argv[0] == "--_worker":
    spec = json.loads(argv[1])
    memory.reset_peak_rss()
    print(workers.reply_line(WORKERS[spec.pop("kind")](spec)), flush=True)
    return
  args = parse_args(argv)
  if args.quick:
    sizes = [10_000, 100_000]
    args.tune_queries, args.eval_queries = min(args.tune_queries, 100), min(args.eval_queries, 200)
    args.single_queries, args.rounds = min(args.single_queries, 20), min(args.rounds, 3)
  else:
    sizes = [int(float(s)) for s in args.sizes.split(",")]
  os.makedirs(args.out, exist_ok=True)
  work = args.work_dir or tempfile.mkdtemp(prefix="serving_scale_")
  os.makedirs(work, exist_ok=True)
  started, t0 = time.strftime("%Y-%m-%d %H:%M:%S"), time.perf_counter()
  base = {"dim": args.dim, "k": args.k, "seed": args.seed, "work_dir": work,
          "mmap_from": args.mmap_from,
          "scann_options": json.loads(args.scann_options), "timeout_s": args.timeout_s}
  result = {"command": "python -m bench.serving_scale " + shlex.join(argv),
            "machine": args.machine, "started": started, "sizes": sizes,
            "target_recall": args.target_recall, "tune_queries": args.tune_queries,
            "eval_queries": args.eval_queries, "single_queries": args.single_queries,
            "rounds": args.rounds, **{k: base[k] for k in ("dim", "k", "seed", "scann_options")},
            "scann_options_by_size": json.loads(args.scann_options_by_size),
            "points": []}
  try:
    for n in sizes:
      _log(f"point N={n}")
      by_size = json.loads(args.scann_options_by_size).get(str(n), {})
      spec = dict(base, num_items=n, tune_queries=args.tune_queries,
                  scann_options=dict(base["scann_options"], **by_size),
                  eval_queries=args.eval_queries, single_queries=args.single_queries,
                  rounds=args.rounds, target_recall=args.target_recall,
                  fractions=[float(f) for f in args.fractions.split(",")],
                  reorders=[int(r) for r in args.reorders.split(",")],
                  faiss_train_min=args.faiss_train_min, save_ids=args.save_ids, out=args.out)
      try:
        point = _worker("point", spec)
      except subprocess.TimeoutExpired:
        point = {"error": f"timed out after {args.timeout_s}s"}
      result["points"].append(dict(point, num_items=n))
    done = [p for p in result["points"] if "error" not in p]
    if not args.no_serving and done:
      largest = max(done, key=lambda p: p["num_items"])
      chosen = largest["scann"]["chosen"]["params"]
      options = dict(base["scann_options"], **json.loads(args.scann_options_by_size).get(
          str(largest["num_items"]), {}))
      if chosen[0] is not None:
        options.update(num_leaves_to_search=chosen[0], reorder_k=chosen[1])
      model_dir = os.path.join(work, "serving_model", "model")
      os.makedirs(os.path.dirname(model_dir), exist_ok=True)
      spec = dict(base, num_items=largest["num_items"], scann_options=options,
                  model_dir=model_dir, serving_batch=args.serving_batch,
                  history_len=args.history_len)
      _log(f"serving SavedModel at N={largest['num_items']}")
      serving_res = {"num_items": largest["num_items"], "batch": args.serving_batch,
                     "history_len": args.history_len}
      for kind in ("serving_build", "serving_load"):
        try:
          serving_res[kind.split("_")[1]] = _worker(kind, spec)
        except subprocess.TimeoutExpired:
          serving_res[kind.split("_")[1]] = {"error": f"timed out after {args.timeout_s}s"}
        if "error" in serving_res[kind.split("_")[1]]:
          break
      result["serving"] = serving_res
      shutil.rmtree(os.path.dirname(model_dir), ignore_errors=True)
  finally:
    if args.work_dir is None:
      shutil.rmtree(work, ignore_errors=True)
  result["total_seconds"] = time.perf_counter() - t0
  if args.previous:  # an earlier run's points at other sizes, marked with its command
    prev = json.loads(pathlib.Path(args.previous).read_text())
    result["previous"] = {k: prev[k] for k in ("command", "started", "total_seconds")}
    mine = {p["num_items"] for p in result["points"]}
    result["points"] = sorted(
        result["points"] + [dict(p, run="previous") for p in prev["points"]
                            if p["num_items"] not in mine and "error" not in p],
        key=lambda p: p["num_items"])
    if "serving" in prev and "serving" not in result:
      result["serving"] = dict(prev["serving"], run="previous")
  result["summary"] = summarize(result)
  report.write_json(args.out, "serving_scale.json", result)
  write_report(result, args.out)
  if any("error" not in p for p in result["points"]):
    plot(result, os.path.join(args.out, "serving_scale.png"))
  print(pathlib.Path(args.out, "serving_scale.md").read_text())
  print(result["summary"])
  return result


if __name__ == "__main__":
  main()
