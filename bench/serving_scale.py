r"""Serving at 10^7 items: the project's ScaNN index against FAISS, and the serving SavedModel.

(One file: the workers of one bench and its command line; the catalog, the indexes and the
report are in bench/serving/. A third of the file is this docstring, the definitions of what it
measures.)

    python -m bench.serving_scale --out DIR                      # 1e5, 1e6, 1e7 items
    python -m bench.serving_scale --quick --out DIR              # 1e4, 1e5 (a smoke run)
    python -m bench.serving_scale --sizes=1000000 --target_recall=0.99 --no_serving
    python -m bench.serving_scale --sizes=1000000 --catalog=topics --indexes=scann,brute \
        --target_recall=0.99 --fractions=0.005,0.0125,0.025,0.05 --reorders=300,500,1000 \
        --no_serving                                             # the ScaNN >= 5x claim

Catalog (``Geometry``, seeded, generated in chunks that can be regenerated one by one): dim 64
float32. C = clip(N / 1000, 10, 10,000) cluster centres c ~ R diag(sqrt(λ)) z with a decaying
spectrum λ_j ∝ j^-0.8 (mean 1) and a random rotation R (anisotropic, like trained embeddings);
cluster sizes ∝ rank^-0.5; item = (c + σ s_c R diag(sqrt(λ)) ε) · n_i with a per-cluster spread
s_c ~ LogNormal(0, 0.3) and a per-item norm n_i ~ LogNormal(0, 0.2) (dot-product models put
popularity into norms). Queries are drawn near items: q = x_i + σ_q R diag(sqrt(λ)) ε for
uniformly drawn items i. Row 0 of the item table is padding (the export layout); ids are 1..N.
``--catalog=topics``: the ScaNN claim's catalog (``TopicGeometry``: sub-topic clusters of 100
topics, queries near cluster centres; bench/serving/data.py).

Per catalog size N, in a process of its own (one after the other):
* exact top-k (k = 100) of a tuning and an evaluation query sample: chunked float32 matmul in
  numpy over the catalog, candidates above each query's running k-th score kept and merged;
* the indexes of ``--indexes`` (default scann,faiss; ``brute``: the same builder in ScaNN's
  brute-force mode, the exact top-k, whose batched queries/s in the same rounds is the speed-up
  column's denominator);
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
  indexes interleaved (order rotated per round), min-time and median.
The catalog is freed after the ScaNN (and brute-force) builds and regenerated chunk by chunk for
FAISS's add, so with scann,faiss the process never holds the catalog and both indexes at once.

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
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from bench.common import memory, report, timing, workers
from bench.serving.data import CHUNK, GEOMETRIES, Geometry, exact_top_k, recall_at_k  # noqa: F401
from bench.serving.indexes import FaissSide, ScannSide, choose, faiss_spec
from bench.serving.report import plot, summarize, write_report

# The parts, bench/serving/: data (catalog, exact top-k, recall), indexes (ScaNN and
# FAISS sides, the setting chosen), report (markdown, PNG, summary); this file runs
# the points in worker processes, the serving SavedModel check and the command line.

MODULE = "bench.serving_scale"
INDEXES = ("scann", "brute", "faiss")  # build order: FAISS last, it frees the catalog


def _geometry(spec: dict) -> Geometry:
  return GEOMETRIES[spec.get("catalog", "anisotropic")](
    spec["num_items"], spec["dim"], spec["seed"]
  )


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
  """One catalog size: the indexes, sweep, chosen settings, interleaved timing."""
  from eval import index as index_lib

  n, k, names = spec["num_items"], spec["k"], spec["indexes"]
  out = {"num_items": n, "dim": spec["dim"], "k": k}
  rss0 = _rss()
  geo = _geometry(spec)
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
  _log(
    f"N={n}: exact top-{k} of {len(tune_q) + len(eval_q)} queries in {out['exact_seconds']:.1f}s"
  )

  config = index_lib.IndexConfig(**spec["scann_options"])
  configs = {"scann": config, "brute": index_lib.IndexConfig(mode="brute_force")}
  sides: dict = {}
  for name in [s for s in INDEXES if s in names]:
    rss, wall = _rss(), time.perf_counter()
    if name == "faiss":
      fspec, nlist = faiss_spec(n, config.resolve(n, k).num_leaves or 2 * int(np.sqrt(n)))
      train_n = min(n, max(39 * nlist, spec["faiss_train_min"]))
      train_sample = np.ascontiguousarray(table[1 : 1 + train_n])
      del table  # FAISS adds regenerated chunks (so it is built last)
      rss, wall = _rss(), time.perf_counter()
      sides[name] = FaissSide(geo, train_sample, k, fspec, nlist)
      del train_sample
      info = {"factory": fspec, "nlist": nlist, "train_sample": train_n}
    else:
      sides[name] = ScannSide(table, k, configs[name], name)
      info = {"config": vars(sides[name].config)}
    out[name] = dict(
      info,
      build_seconds=sides[name].build_seconds,
      build_wall_seconds=time.perf_counter() - wall,
      rss_growth_kib=_rss() - rss,
    )
    _log(f"N={n}: {name} built in {sides[name].build_seconds:.1f}s")
  for name, side in sides.items():
    out[name]["serialized_bytes"] = side.serialized_bytes(spec["work_dir"])

  grids = {
    name: side.sweep(
      spec["fractions"], [r / k for r in spec["reorders"]] if name == "faiss" else spec["reorders"]
    )
    for name, side in sides.items()
  }
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
      rows.append(
        {
          "params": list(params),
          "recall": recall_at_k(ids, exact_tune, k),
          "qps": len(tune_q) / seconds,
        }
      )
    out[name]["sweep"] = rows
    out[name]["chosen"] = choose(rows, spec["target_recall"])
    _log(f"N={n}: {name} chosen {out[name]['chosen']}")

  chosen = {name: tuple(out[name]["chosen"]["params"]) for name in sides}
  results = {}
  for name, side in sides.items():
    ids = side.search(eval_q, chosen[name])
    results[name] = ids
    out[name]["recall"] = recall_at_k(ids, exact_eval, k)
  single_q = eval_q[: spec["single_queries"]]

  def batched(name, _):
    sides[name].search(eval_q, chosen[name])

  def single(name, _):
    for i in range(len(single_q)):
      sides[name].search(single_q[i : i + 1], chosen[name])

  for name in sides:  # warm-up of both paths
    batched(name, 0)
    sides[name].search(single_q[:1], chosen[name])
  t_batch = timing.time_interleaved(batched, list(sides), spec["rounds"])
  t_single = timing.time_interleaved(single, list(sides), spec["rounds"], calls=len(single_q))
  for name in sides:
    bmin, bmed = timing.min_median(t_batch[name])
    smin, smed = timing.min_median(t_single[name])
    out[name].update(
      batched_qps_best=len(eval_q) / bmin,
      batched_qps_median=len(eval_q) / bmed,
      single_qps_best=1 / smin,
      single_qps_median=1 / smed,
      single_ms_median=1e3 * smed,
    )
  for name in sides if "brute" in sides else ():  # speed-up over the exact top-k, same rounds
    out[name]["speedup_median"] = (
      out[name]["batched_qps_median"] / out["brute"]["batched_qps_median"]
    )
    out[name]["speedup_best"] = out[name]["batched_qps_best"] / out["brute"]["batched_qps_best"]
  out["peak_rss_kib"] = memory.status_kib("VmHWM")
  out["start_rss_kib"] = rss0
  out["catalog_memory_mapped"] = _mmap_path(spec) is not None
  if _mmap_path(spec):
    os.remove(_mmap_path(spec))
  out["eval_queries"], out["single_queries"] = len(eval_q), len(single_q)
  if spec.get("save_ids"):
    np.savez(os.path.join(spec["out"], f"ids_{n}.npz"), exact=exact_eval, **results)
  return out


# --------------------------------------------------------------------------- serving SavedModel


def _encoder(geo: Geometry, cluster: np.ndarray):
  """A stand-in query tower: history [B, L] -> mean of its items' cluster centres."""
  import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

  import tensorflow as tf

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
  import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

  import tensorflow as tf

  from eval import index as index_lib
  from eval import serving

  geo = _geometry(spec)
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
  out["saved_bytes"] = sum(
    p.stat().st_size for p in pathlib.Path(spec["model_dir"]).rglob("*") if p.is_file()
  )
  np.savez(
    os.path.join(spec["model_dir"], "..", "in_process.npz"),
    ids=ids,
    scores=res["scores"].numpy(),
    history=history.numpy(),
  )
  out["peak_rss_kib"] = memory.status_kib("VmHWM")
  if _mmap_path(spec):
    os.remove(_mmap_path(spec))
  return out


def run_serving_load(spec: dict) -> dict:
  import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

  import tensorflow as tf

  from eval import serving

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
  out["max_score_diff"] = float(
    np.max(np.abs(scores[found] - ref["scores"][found])) if found.any() else 0.0
  )
  out["same_scores"] = bool(out["max_score_diff"] <= 1e-5)
  out["peak_rss_kib"] = memory.status_kib("VmHWM")
  return out


WORKERS = {"point": run_point, "serving_build": run_serving_build, "serving_load": run_serving_load}


def _worker(kind: str, spec: dict) -> dict:
  """Runs WORKERS[kind](spec) in a fresh interpreter; {"error": ...} when it fails."""
  cmd = workers.worker_command(MODULE, {"kind": kind, **spec})
  # Idle OpenMP threads sleep instead of spinning: FAISS's spin-waits cost 10-100x on a loaded
  # machine (measured here: IVF-PQ training 21 s -> 0.9 s, one query 2.9 -> 0.2 ms).
  env = dict(os.environ)
  env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
  start = time.perf_counter()
  try:
    status, reply = workers.run_worker(cmd, env=env, cwd=os.getcwd(), timeout=spec.get("timeout_s"))
  except subprocess.TimeoutExpired:
    return {"error": f"timed out after {spec['timeout_s']}s"}
  if status != 0 or reply is None:
    return {
      "error": f"worker {kind} exited with status {status} after "
      f"{time.perf_counter() - start:.0f}s, no result"
      + (" (SIGKILL: out of memory?)" if status == -9 else "")
    }
  return reply


# --------------------------------------------------------------------------- main


def parse_args(argv):
  p = argparse.ArgumentParser(
    description=__doc__.split("\n\n")[0],
    formatter_class=argparse.RawDescriptionHelpFormatter,
    epilog=__doc__,
  )
  p.add_argument(
    "--sizes", default="100000,1000000,10000000", help="Catalog sizes, comma-separated."
  )
  p.add_argument("--quick", action="store_true", help="1e4 and 1e5 items, fewer queries.")
  p.add_argument(
    "--indexes",
    default="scann,faiss",
    help="Indexes compared, of scann, faiss, brute (the exact top-k by ScaNN's brute-force "
    "scorer, timed in the same rounds: the speed-up column).",
  )
  p.add_argument(
    "--catalog",
    default="anisotropic",
    choices=sorted(GEOMETRIES),
    help="Catalog law: anisotropic (the default, docstring) or topics (the ScaNN claim's: "
    "bench/serving/data.py TopicGeometry).",
  )
  p.add_argument("--dim", type=int, default=64)
  p.add_argument("--k", type=int, default=100)
  p.add_argument("--target_recall", type=float, default=0.95)
  p.add_argument("--tune_queries", type=int, default=300)
  p.add_argument("--eval_queries", type=int, default=1000)
  p.add_argument("--single_queries", type=int, default=100)
  p.add_argument("--rounds", type=int, default=5)
  p.add_argument(
    "--fractions",
    default="0.005,0.01,0.02,0.04,0.08,0.16",
    help="Leaves searched (ScaNN) / nprobe (FAISS) as fractions of the partitions.",
  )
  p.add_argument(
    "--reorders",
    default="200,500,1000,2000,4000",
    help="ScaNN reorder_k; FAISS k_factor = these / k.",
  )
  p.add_argument(
    "--scann_options",
    default="{}",
    help="JSON of eval.index.IndexConfig fields (default: its defaults).",
  )
  p.add_argument(
    "--scann_options_by_size",
    default="{}",
    help='JSON {"N": {IndexConfig fields}}: options for one catalog size on top of '
    "--scann_options (e.g. fewer leaves where the default build is too slow).",
  )
  p.add_argument(
    "--faiss_train_min",
    type=int,
    default=100_000,
    help="FAISS training sample: max(39 nlist, this), capped at N.",
  )
  p.add_argument(
    "--mmap_from",
    type=int,
    default=5_000_000,
    help="Catalogs of at least this many items are written to a .npy in --work_dir "
    "and memory-mapped (file-backed pages) instead of held in anonymous memory.",
  )
  p.add_argument(
    "--previous",
    default=None,
    help="serving_scale.json of an earlier run whose points (other sizes) the "
    "report also lists, with that run's command.",
  )
  p.add_argument("--no_serving", action="store_true", help="Skip the serving SavedModel part.")
  p.add_argument("--serving_batch", type=int, default=64)
  p.add_argument("--history_len", type=int, default=20)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--timeout_s", type=int, default=3600, help="Per worker process.")
  p.add_argument(
    "--machine",
    default=f"{os.cpu_count()}-core CPU ({platform.machine()})",
    help="Machine label for the report.",
  )
  p.add_argument(
    "--work_dir",
    default=None,
    help="Scratch space for serialized indexes and the SavedModel (default: a "
    "temporary folder, removed).",
  )
  p.add_argument(
    "--save_ids",
    action="store_true",
    help="Also write ids_N.npz (exact and both indexes' evaluation ids) to --out.",
  )
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
  indexes = [s for s in INDEXES if s in args.indexes.split(",")]
  if not indexes or set(args.indexes.split(",")) - set(INDEXES):
    raise SystemExit(f"--indexes: a comma-separated subset of {INDEXES}, got {args.indexes!r}")
  base = {
    "indexes": indexes,
    "catalog": args.catalog,
    "dim": args.dim,
    "k": args.k,
    "seed": args.seed,
    "work_dir": work,
    "mmap_from": args.mmap_from,
    "scann_options": json.loads(args.scann_options),
    "timeout_s": args.timeout_s,
  }
  result = {
    "command": report.command(MODULE, argv),
    "machine": args.machine,
    "started": started,
    "sizes": sizes,
    "target_recall": args.target_recall,
    "tune_queries": args.tune_queries,
    "eval_queries": args.eval_queries,
    "single_queries": args.single_queries,
    "rounds": args.rounds,
    **{k: base[k] for k in ("indexes", "catalog", "dim", "k", "seed", "scann_options")},
    "scann_options_by_size": json.loads(args.scann_options_by_size),
    "points": [],
  }
  try:
    for n in sizes:
      _log(f"point N={n}")
      by_size = json.loads(args.scann_options_by_size).get(str(n), {})
      spec = dict(
        base,
        num_items=n,
        tune_queries=args.tune_queries,
        scann_options=dict(base["scann_options"], **by_size),
        eval_queries=args.eval_queries,
        single_queries=args.single_queries,
        rounds=args.rounds,
        target_recall=args.target_recall,
        fractions=[float(f) for f in args.fractions.split(",")],
        reorders=[int(r) for r in args.reorders.split(",")],
        faiss_train_min=args.faiss_train_min,
        save_ids=args.save_ids,
        out=args.out,
      )
      result["points"].append(dict(_worker("point", spec), num_items=n))
    done = [p for p in result["points"] if "error" not in p]
    if not args.no_serving and done and "scann" in indexes:
      largest = max(done, key=lambda p: p["num_items"])
      chosen = largest["scann"]["chosen"]["params"]
      options = dict(
        base["scann_options"],
        **json.loads(args.scann_options_by_size).get(str(largest["num_items"]), {}),
      )
      if chosen[0] is not None:
        options.update(num_leaves_to_search=chosen[0], reorder_k=chosen[1])
      model_dir = os.path.join(work, "serving_model", "model")
      os.makedirs(os.path.dirname(model_dir), exist_ok=True)
      spec = dict(
        base,
        num_items=largest["num_items"],
        scann_options=options,
        model_dir=model_dir,
        serving_batch=args.serving_batch,
        history_len=args.history_len,
      )
      _log(f"serving SavedModel at N={largest['num_items']}")
      serving_res = {
        "num_items": largest["num_items"],
        "batch": args.serving_batch,
        "history_len": args.history_len,
      }
      for kind in ("serving_build", "serving_load"):
        serving_res[kind.split("_")[1]] = reply = _worker(kind, spec)
        if "error" in reply:
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
      result["points"]
      + [
        dict(p, run="previous")
        for p in prev["points"]
        if p["num_items"] not in mine and "error" not in p
      ],
      key=lambda p: p["num_items"],
    )
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
