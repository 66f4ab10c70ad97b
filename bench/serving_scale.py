"""Serving at 10^7 items: the project's ScaNN index against FAISS, and the serving SavedModel.

The commands, what is measured, how, and the results: bench/README.md, `serving_scale.py`. The parts
(bench/serving/): data (catalog, exact top-k, recall), indexes (ScaNN and FAISS sides, the setting
chosen), report (markdown, PNG, summary); here: the worker processes and the command line.

Catalog (``Geometry``, seeded, generated in chunks that can be regenerated one by one): dim 64
float32. C = clip(N / 1000, 10, 10,000) cluster centres c ~ R diag(sqrt(λ)) z with a decaying
spectrum λ_j ∝ j^-0.8 (mean 1) and a random rotation R (anisotropic, like trained embeddings);
cluster sizes ∝ rank^-0.5; item = (c + σ s_c R diag(sqrt(λ)) ε) · n_i with a per-cluster spread
s_c ~ LogNormal(0, 0.3) and a per-item norm n_i ~ LogNormal(0, 0.2) (dot-product models put
popularity into norms). Queries are drawn near items: q = x_i + σ_q R diag(sqrt(λ)) ε for
uniformly drawn items i. Row 0 of the item table is padding (the export layout); ids are 1..N.
``--catalog=topics``: the ScaNN claim's catalog (``TopicGeometry``, bench/serving/data.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

from bench.common import memory, report, timing, workers
from bench.common.flags import listed
from bench.serving.data import GEOMETRIES, Geometry, exact_top_k, recall_at_k
from bench.serving.indexes import FaissSide, ScannSide, choose, dir_bytes, faiss_spec
from bench.serving.report import plot, summarize, write_report

MODULE = "bench.serving_scale"
INDEXES = ("scann", "brute", "faiss")  # build order: FAISS last, it frees the catalog
# The settings recorded in serving_scale.json (after its command, machine and start).
RECORDED = ("sizes", "target_recall", "tune_queries", "eval_queries", "single_queries", "rounds")
RECORDED += ("indexes", "catalog", "dim", "k", "seed", "scann_options", "scann_options_by_size")


def _geometry(spec: dict) -> Geometry:
  return GEOMETRIES[spec["catalog"]](spec["num_items"], spec["dim"], spec["seed"])


def _rss() -> int:
  return memory.status_kib("VmRSS")


def _log(msg: str):
  print(f"[serving_scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _clock(out: dict, key):
  """Sets ``out[key]`` to the seconds the block took."""
  start = time.perf_counter()
  yield
  out[key] = time.perf_counter() - start


def _spec(settings: dict, n: int) -> dict:
  """The workers' spec at size ``n``: --scann_options_by_size's options on top of --scann_options,
  ``mmap``: the .npy file of a catalog of at least --mmap_from items (None: in memory)."""
  mmap = os.path.join(settings["work_dir"], f"catalog_{n}_{os.getpid()}.npy")
  options = dict(settings["scann_options"], **settings["scann_options_by_size"].get(str(n), {}))
  return dict(
    settings, num_items=n, scann_options=options, mmap=mmap if n >= settings["mmap_from"] else None
  )


def run_point(spec: dict) -> dict:
  """One catalog size: the indexes, sweep, chosen settings, interleaved timing."""
  from eval import index as index_lib

  n, k = spec["num_items"], spec["k"]
  out = {"num_items": n, "dim": spec["dim"], "k": k}
  rss0, geo = _rss(), _geometry(spec)
  with _clock(out, "generate_seconds"):
    table, _ = geo.items(spec["mmap"])
    tune_q = geo.queries(table, spec["tune_queries"], 0)
    eval_q = geo.queries(table, spec["eval_queries"], 1)
  out["num_clusters"] = geo.num_clusters
  _log(f"N={n}: catalog generated in {out['generate_seconds']:.1f}s")
  with _clock(out, "exact_seconds"):
    exact_tune, _ = exact_top_k(tune_q, table, k)
    exact_eval, _ = exact_top_k(eval_q, table, k)
  num_queries = len(tune_q) + len(eval_q)
  _log(f"N={n}: exact top-{k} of {num_queries} queries in {out['exact_seconds']:.1f}s")

  config = index_lib.IndexConfig(**spec["scann_options"])
  configs = {"scann": config, "brute": index_lib.IndexConfig(mode="brute_force")}
  sides: dict = {}
  for name in spec["indexes"]:
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
      sides[name] = ScannSide(table, k, configs[name])
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

  for name, side in sides.items():
    factors = [r / k for r in spec["reorders"]] if name == "faiss" else spec["reorders"]
    grid = side.sweep(spec["fractions"], factors)
    side.search(tune_q[:8], grid[0])  # warm-up
    rows = []
    for params in grid:
      seconds: dict = {}
      for call in range(2):  # the faster of two calls (a shared machine)
        with _clock(seconds, call):
          ids = side.search(tune_q, params)
      recall, qps = recall_at_k(ids, exact_tune, k), len(tune_q) / min(seconds.values())
      rows.append({"params": list(params), "recall": recall, "qps": qps})
    out[name]["sweep"] = rows
    out[name]["chosen"] = choose(rows, spec["target_recall"])
    _log(f"N={n}: {name} chosen {out[name]['chosen']}")

  chosen = {name: tuple(out[name]["chosen"]["params"]) for name in sides}
  results = {name: side.search(eval_q, chosen[name]) for name, side in sides.items()}
  for name in sides:
    out[name]["recall"] = recall_at_k(results[name], exact_eval, k)
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
    for stat in ("median", "best"):
      qps = f"batched_qps_{stat}"
      out[name][f"speedup_{stat}"] = out[name][qps] / out["brute"][qps]
  out.update(
    peak_rss_kib=memory.status_kib("VmHWM"),
    start_rss_kib=rss0,
    catalog_memory_mapped=spec["mmap"] is not None,
    eval_queries=len(eval_q),
    single_queries=len(single_q),
  )
  if spec["mmap"]:
    os.remove(spec["mmap"])
  if spec["save_ids"]:
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


def _two_calls(out: dict, call) -> dict:
  """The first and the second ``call()`` timed into ``out``; returns the second's result."""
  for key in ("first_call_seconds", "second_call_seconds"):
    with _clock(out, key):
      res = call()
      res = {name: res[name].numpy() for name in ("item_ids", "scores")}
  return res


def run_serving_build(spec: dict) -> dict:
  import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

  import tensorflow as tf

  from eval import index as index_lib
  from eval import serving

  geo = _geometry(spec)
  table, cluster = geo.items(spec["mmap"])
  encoder = _encoder(geo, cluster)
  del cluster
  config = index_lib.IndexConfig(**spec["scann_options"])
  out: dict = {}
  with _clock(out, "build_seconds"):
    module = serving.ServingModule(encoder, table, k=spec["k"], index_config=config)
  out["config"] = vars(module.index_config)
  del table
  history = tf.constant(_histories(geo, spec["serving_batch"], spec["history_len"]))
  res = _two_calls(out, lambda: module.recommend(history))
  with _clock(out, "save_seconds"):
    serving.save_serving_module(module, spec["model_dir"])
  out["saved_bytes"] = dir_bytes(spec["model_dir"])
  reference = os.path.join(spec["model_dir"], "..", "in_process.npz")
  np.savez(reference, ids=res["item_ids"], scores=res["scores"], history=history.numpy())
  out["peak_rss_kib"] = memory.status_kib("VmHWM")
  if spec["mmap"]:
    os.remove(spec["mmap"])
  return out


def run_serving_load(spec: dict) -> dict:
  import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

  import tensorflow as tf

  from eval import serving

  ref = np.load(os.path.join(spec["model_dir"], "..", "in_process.npz"))
  out: dict = {}
  with _clock(out, "load_seconds"):
    model = serving.load_serving_model(spec["model_dir"])
  fn = model.signatures["serving_default"]
  res = _two_calls(out, lambda: fn(history=tf.constant(ref["history"])))
  ids, scores, found = res["item_ids"], res["scores"], ref["ids"] >= 0
  out["same_ids"] = bool(np.array_equal(ids, ref["ids"]))
  out["ids_equal_fraction"] = float(np.mean(ids == ref["ids"]))
  diff = np.abs(scores[found] - ref["scores"][found])
  out["max_score_diff"] = float(np.max(diff) if found.any() else 0.0)
  out["same_scores"] = bool(out["max_score_diff"] <= 1e-5)
  out["peak_rss_kib"] = memory.status_kib("VmHWM")
  return out


WORKERS = {"point": run_point, "serving_build": run_serving_build, "serving_load": run_serving_load}


def _worker(kind: str, spec: dict) -> dict:
  """Runs WORKERS[kind](spec) in a fresh interpreter; {"error": ...} when it fails."""
  cmd = workers.worker_command(MODULE, {"kind": kind, **spec})
  # Idle OpenMP threads sleep instead of spinning: FAISS's spin-waits cost 10-100x on a loaded
  # machine (measured here: IVF-PQ training 21 s -> 0.9 s, one query 2.9 -> 0.2 ms).
  env = {"OMP_WAIT_POLICY": "PASSIVE", **os.environ}
  start = time.perf_counter()
  try:
    status, reply = workers.run_worker(cmd, env=env, cwd=os.getcwd(), timeout=spec["timeout_s"])
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
    "--sizes",
    type=listed(lambda s: int(float(s))),
    default="100000,1000000,10000000",
    help="Catalog sizes, comma-separated.",
  )
  p.add_argument("--quick", action="store_true", help="1e4 and 1e5 items, fewer queries.")
  p.add_argument(
    "--indexes",
    default="scann,faiss",
    help="Comma-separated, of scann, faiss, brute (ScaNN's exact top-k: the speed-up's base).",
  )
  p.add_argument("--catalog", default="anisotropic", choices=sorted(GEOMETRIES))
  for name, default in dict(
    dim=64, k=100, target_recall=0.95, tune_queries=300, eval_queries=1000, single_queries=100
  ).items():
    p.add_argument(f"--{name}", type=type(default), default=default)
  p.add_argument("--rounds", type=int, default=5)
  p.add_argument(
    "--fractions",
    type=listed(float),
    default="0.005,0.01,0.02,0.04,0.08,0.16",
    help="Leaves searched (ScaNN) / nprobe (FAISS) as fractions of the partitions.",
  )
  p.add_argument(
    "--reorders",
    type=listed(int),
    default="200,500,1000,2000,4000",
    help="ScaNN reorder_k; FAISS k_factor = these / k.",
  )
  p.add_argument(
    "--scann_options", type=json.loads, default="{}", help="JSON of IndexConfig fields."
  )
  p.add_argument(
    "--scann_options_by_size",
    type=json.loads,
    default="{}",
    help='JSON {"N": {IndexConfig fields}} on top of --scann_options for size N.',
  )
  p.add_argument("--faiss_train_min", type=int, default=100_000, help="min FAISS training sample")
  p.add_argument("--mmap_from", type=int, default=5_000_000, help="memory-map catalogs this large")
  p.add_argument(
    "--previous", help="serving_scale.json of an earlier run whose points are also listed"
  )
  p.add_argument("--no_serving", action="store_true", help="Skip the serving SavedModel part.")
  p.add_argument("--serving_batch", type=int, default=64)
  p.add_argument("--history_len", type=int, default=20)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--timeout_s", type=int, default=3600, help="Per worker process.")
  p.add_argument("--machine", default=f"{os.cpu_count()}-core CPU ({platform.machine()})")
  p.add_argument("--work_dir", help="Scratch space (default: a temporary folder, removed).")
  p.add_argument(
    "--save_ids", action="store_true", help="Also write ids_N.npz (evaluation ids) to --out."
  )
  p.add_argument("--out", default="bench/out/serving_scale", help="Output folder.")
  return p.parse_args(argv)


def _merge_previous(result: dict, path: str):
  """An earlier run's points at other sizes (and its serving part), marked with its command."""
  prev = json.loads(pathlib.Path(path).read_text())
  result["previous"] = {k: prev[k] for k in ("command", "started", "total_seconds")}
  mine = {p["num_items"] for p in result["points"]}
  old = [dict(p, run="previous") for p in prev["points"] if "error" not in p]
  old = [p for p in old if p["num_items"] not in mine]
  result["points"] = sorted(result["points"] + old, key=lambda p: p["num_items"])
  if "serving" in prev and "serving" not in result:
    result["serving"] = dict(prev["serving"], run="previous")


def main(argv=None):
  argv = sys.argv[1:] if argv is None else list(argv)
  if len(argv) == 2 and argv[0] == "--_worker":
    spec = json.loads(argv[1])
    memory.reset_peak_rss()
    print(workers.reply_line(WORKERS[spec.pop("kind")](spec)), flush=True)
    return
  args = parse_args(argv)
  if args.quick:
    args.sizes = [10_000, 100_000]
    args.tune_queries, args.eval_queries = min(args.tune_queries, 100), min(args.eval_queries, 200)
    args.single_queries, args.rounds = min(args.single_queries, 20), min(args.rounds, 3)
  names = args.indexes.split(",")
  args.indexes = [s for s in INDEXES if s in names]
  if not args.indexes or set(names) - set(INDEXES):
    raise SystemExit(f"--indexes: a comma-separated subset of {INDEXES}, got {','.join(names)!r}")
  os.makedirs(args.out, exist_ok=True)
  work = args.work_dir or tempfile.mkdtemp(prefix="serving_scale_")
  os.makedirs(work, exist_ok=True)
  settings = dict(vars(args), work_dir=work)
  started = time.strftime("%Y-%m-%d %H:%M:%S")
  result = {"command": report.command(MODULE, argv), "machine": args.machine, "started": started}
  result.update({k: settings[k] for k in RECORDED}, points=[])
  t0 = time.perf_counter()
  try:
    for n in args.sizes:
      _log(f"point N={n}")
      result["points"].append(dict(_worker("point", _spec(settings, n)), num_items=n))
    done = [p for p in result["points"] if "error" not in p]
    if not args.no_serving and done and "scann" in args.indexes:
      largest = max(done, key=lambda p: p["num_items"])
      n = largest["num_items"]
      spec = _spec(settings, n)
      leaves, reorder = largest["scann"]["chosen"]["params"]
      if leaves is not None:
        spec["scann_options"].update(num_leaves_to_search=leaves, reorder_k=reorder)
      spec["model_dir"] = model_dir = os.path.join(work, "serving_model", "model")
      os.makedirs(os.path.dirname(model_dir), exist_ok=True)
      _log(f"serving SavedModel at N={n}")
      serving = {"num_items": n, "batch": args.serving_batch, "history_len": args.history_len}
      result["serving"] = serving
      for kind in ("build", "load"):
        serving[kind] = _worker(f"serving_{kind}", spec)
        if "error" in serving[kind]:
          break
      shutil.rmtree(os.path.dirname(model_dir), ignore_errors=True)
  finally:
    if args.work_dir is None:
      shutil.rmtree(work, ignore_errors=True)
  result["total_seconds"] = time.perf_counter() - t0
  if args.previous:
    _merge_previous(result, args.previous)
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
