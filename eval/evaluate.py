r"""Evaluates an exported retrieval model through a ScaNN index and an exact top-k.

  python -m eval.evaluate --export_dir=/tmp/run/export --dataset=ml1m \
      --data_path=../shared/data/ml1m --output_dir=/tmp/run/eval

Protocol (the paper's, §4.1): for every test query u (all test users; in the temporal split,
every test interaction), q_u = query_encoder(last max_len items of H_u, left-padded); all
items are ranked by s(u, d) = <q_u, c_d>, the rated items H_u (the full input history) are
removed (the target never is), and Recall@k = 1[r_u < k], NDCG@k = 1[r_u < k] / log2(r_u + 2)
are averaged over queries for k in --ks (tfrs_logq.metrics).

Reported (JSON ``eval_results.json`` + markdown ``eval_summary.md`` + PNG in --output_dir):
* metrics from the exact top-k (tf.matmul + top_k, the reference) and from the ScaNN index
  (filtering by over-fetching k + |H_u|, see eval/index.py);
* agreement: mean |ScaNN top-k ∩ exact top-k| / k, on the filtered lists and on the raw
  (unfiltered) top-max(ks);
* throughput (queries/s, min and median of --timing_repeats) of both searches, raw top-max(ks);
* Recall@k by the target's popularity decile (items ranked by training count; decile 0 =
  the most popular tenth of the catalog) as a table and ``recall_by_popularity.png``.

Export layout read (from train/__main__.py): query_encoder/ (SavedModel, serving_default:
history int64 [B, L] -> {"embedding": float32 [B, d]}), item_embeddings.npy
([num_items + 1, d], row 0 padding), export_meta.json ({num_items, max_len, ...}); when the
.npy is missing, item_embeddings/ (SavedModel item_ids -> embedding) is called instead.

--dataset=npz reads a custom evaluation file: ``inputs`` int [Q, L] (left-padded full
histories), ``targets`` int [Q], optional ``item_counts`` [num_items + 1].
"""

import json
import pathlib
import sys
import time
from typing import Dict, List, Optional

from absl import app
from absl import flags
from absl import logging

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
  sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import tfrs_logq  # noqa: E402,F401
import tensorflow as tf  # noqa: E402

from eval import index as index_lib  # noqa: E402
from tfrs_logq import metrics  # noqa: E402

FLAGS = flags.FLAGS

flags.DEFINE_string("export_dir", None, "Training export folder (query_encoder/, "
                    "item_embeddings.npy, export_meta.json).")
flags.DEFINE_string("dataset", "ml1m", "synthetic | ml1m | movielens_raw | tfds (train.data "
                    "readers) | npz (custom evaluation file at --data_path).")
flags.DEFINE_string("data_path", None, "Dataset folder or file.")
flags.DEFINE_string("split", "leave_one_out", "leave_one_out | temporal.")
flags.DEFINE_enum("eval_split", "test", ["test", "val"], "Which held-out split to score.")
flags.DEFINE_list("ks", ["10", "20", "100"], "Cut-offs k.")
flags.DEFINE_string("output_dir", None, "Where the JSON, markdown and PNG go.")
flags.DEFINE_integer("batch_size", 512, "Queries per encoder call.")
flags.DEFINE_integer("max_queries", 0, "Evaluate only the first N queries (0 = all).")
flags.DEFINE_integer("num_bins", 10, "Popularity bins (10 = deciles).")
flags.DEFINE_integer("timing_repeats", 3, "Repeats of each timed search.")
flags.DEFINE_bool("plot", True, "Write recall_by_popularity.png.")
flags.DEFINE_enum("index_mode", "auto", list(index_lib.MODES),
                  "ScaNN mode: auto (brute force up to --brute_force_max_items items, tree + AH "
                  "+ reordering above), brute_force, tree_ah.")
flags.DEFINE_integer("brute_force_max_items", 20_000, "auto mode: brute force up to this size.")
flags.DEFINE_integer("num_leaves", 0, "ScaNN tree leaves (0: ≈ 2·sqrt(N)).")
flags.DEFINE_integer("num_leaves_to_search", 0, "Leaves probed per query (0: leaves / 10).")
flags.DEFINE_integer("training_sample_size", 0, "Tree / AH training sample (0: min(N, 250k)).")
flags.DEFINE_integer("dimensions_per_block", 2, "AH dimensions per 4-bit code.")
flags.DEFINE_float("anisotropic_quantization_threshold", 0.2, "AH anisotropic threshold η.")
flags.DEFINE_string("serving_dir", None, "Also export the ScaNN serving SavedModel (history -> "
                    "top-k ids and scores, eval/serving.py) here, reload it and check it serves "
                    "the same ids as the in-process index.")
flags.DEFINE_integer("serving_k", 10, "k of the serving SavedModel.")
flags.DEFINE_integer("reorder_k", 0, "Candidates re-scored exactly (0: max(10·k, 1000)).")


def index_config_from_flags() -> index_lib.IndexConfig:
  return index_lib.IndexConfig(
      mode=FLAGS.index_mode, brute_force_max_items=FLAGS.brute_force_max_items,
      num_leaves=FLAGS.num_leaves or None,
      num_leaves_to_search=FLAGS.num_leaves_to_search or None,
      training_sample_size=FLAGS.training_sample_size or None,
      dimensions_per_block=FLAGS.dimensions_per_block,
      anisotropic_quantization_threshold=FLAGS.anisotropic_quantization_threshold,
      reorder_k=FLAGS.reorder_k or None)


# ----------------------------------------------------------------------------- loading


def load_export(export_dir):
  """(query encoder fn history[B, L] -> [B, d], item embeddings [N + 1, d], meta dict)."""
  export_dir = pathlib.Path(export_dir)
  if not (export_dir / "query_encoder").is_dir():
    raise FileNotFoundError(f"{export_dir}/query_encoder (SavedModel) not found")
  meta_path = export_dir / "export_meta.json"
  meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
  encoder = tf.saved_model.load(str(export_dir / "query_encoder"))
  if "serving_default" not in encoder.signatures:
    raise ValueError(f"{export_dir}/query_encoder has no serving_default signature")
  serve = encoder.signatures["serving_default"]
  spec = serve.structured_input_signature[1].get("history")
  if spec is None:
    raise ValueError("query_encoder serving_default must take an input named 'history'")
  if "max_len" not in meta and spec.shape.rank == 2 and spec.shape[1] is not None:
    meta["max_len"] = int(spec.shape[1])
  npy = export_dir / "item_embeddings.npy"
  if npy.exists():
    items = np.load(npy)
  else:
    item_model = tf.saved_model.load(str(export_dir / "item_embeddings"))
    n = int(meta["num_items"])
    fn = item_model.signatures["serving_default"]
    items = fn(item_ids=tf.range(n + 1, dtype=tf.int64))["embedding"].numpy()
  items = np.asarray(items, np.float32)
  if "num_items" in meta and items.shape[0] != int(meta["num_items"]) + 1:
    raise ValueError(f"item embeddings have {items.shape[0]} rows, expected num_items + 1 = "
                     f"{int(meta['num_items']) + 1}")
  meta.setdefault("num_items", items.shape[0] - 1)

  def encode(history: np.ndarray) -> np.ndarray:
    return serve(history=tf.constant(history, tf.int64))["embedding"].numpy()

  # Keep the loaded object alive as long as the function is.
  encode.saved_model = encoder
  return encode, items, meta


def load_eval_set(dataset: str, data_path: Optional[str], split: str, eval_split: str,
                  num_items: int) -> Dict[str, object]:
  """{"histories": list of int arrays, "targets": int64 [Q], "item_counts": [N + 1]}."""
  if dataset == "npz":
    if not data_path:
      raise ValueError("--dataset=npz needs --data_path=<file.npz>")
    z = np.load(data_path)
    inputs = np.asarray(z["inputs"], np.int64)
    histories = [row[row > 0] for row in inputs]
    targets = np.asarray(z["targets"], np.int64)
    if "item_counts" in z:
      counts = np.asarray(z["item_counts"], np.float64)
    else:
      counts = np.bincount(np.concatenate(histories + [np.zeros(0, np.int64)]),
                           minlength=num_items + 1).astype(np.float64)
  else:
    from train import data as data_lib  # pylint: disable=g-import-not-at-top
    kwargs = {"split": split} if split else {}
    data = data_lib.load(dataset, data_path, **kwargs)
    part = getattr(data, eval_split)
    if part is None:
      raise ValueError(f"dataset {dataset!r} has no {eval_split!r} split")
    histories = [np.asarray(h, np.int64) for h in part.inputs]
    targets = np.asarray(part.targets, np.int64)
    counts = getattr(data, "item_counts", None)
    if counts is None or len(counts) != num_items + 1:
      flat = np.concatenate([np.asarray(s, np.int64) for s in data.train_sequences])
      counts = np.bincount(flat, minlength=num_items + 1)
    counts = np.asarray(counts, np.float64)
    if int(data.num_items) != num_items:
      raise ValueError(f"dataset has {data.num_items} items but the export has {num_items}")
  if len(histories) != targets.shape[0] or targets.shape[0] == 0:
    raise ValueError(f"evaluation set is empty or inconsistent: {len(histories)} histories, "
                     f"{targets.shape[0]} targets")
  if targets.min() < 1 or targets.max() > num_items:
    raise ValueError(f"targets outside [1, {num_items}]")
  return {"histories": histories, "targets": targets, "item_counts": counts}


def encoder_inputs(histories: List[np.ndarray], max_len: int) -> np.ndarray:
  """The last max_len items of each history, left-padded with 0: int64 [Q, max_len]."""
  out = np.zeros((len(histories), max_len), np.int64)
  for i, h in enumerate(histories):
    h = np.asarray(h, np.int64)[-max_len:]
    if h.size:
      out[i, max_len - h.size:] = h
  return out


def encode_all(encode, inputs: np.ndarray, batch_size: int) -> np.ndarray:
  out = [encode(inputs[s:s + batch_size]) for s in range(0, inputs.shape[0], batch_size)]
  q = np.concatenate(out).astype(np.float32)
  if not np.all(np.isfinite(q)):
    raise ValueError("the query encoder produced NaN/inf embeddings")
  return q


# ----------------------------------------------------------------------------- evaluation


def evaluate(encode, items: np.ndarray, meta: Dict, eval_set: Dict, ks: List[int],
             config: index_lib.IndexConfig, batch_size: int = 512, num_bins: int = 10,
             timing_repeats: int = 3) -> Dict:
  """All numbers of the report (see the module docstring)."""
  histories, targets = eval_set["histories"], eval_set["targets"]
  num_items = items.shape[0] - 1
  kmax = max(ks)
  if kmax > num_items:
    raise ValueError(f"max k={kmax} exceeds the catalog size {num_items}")
  max_len = int(meta.get("max_len") or max(1, max(len(h) for h in histories)))

  t0 = time.perf_counter()
  queries = encode_all(encode, encoder_inputs(histories, max_len), batch_size)
  encode_seconds = time.perf_counter() - t0

  exact_ids, _ = index_lib.exact_top_k(queries, items, kmax, history=histories, targets=targets)
  scann = index_lib.ScannIndex(items, kmax, config)
  scann_ids, _ = scann.search_filtered(queries, histories, kmax, targets=targets)

  result = {"num_queries": int(len(targets)), "num_items": int(num_items), "max_len": max_len,
            "ks": ks, "index": vars(scann.config), "index_build_seconds": scann.build_seconds,
            "encode_seconds": encode_seconds,
            "metrics": {"exact": metrics.retrieval_metrics(exact_ids, targets, ks),
                        "scann": metrics.retrieval_metrics(scann_ids, targets, ks)},
            "agreement": {f"filtered@{k}": index_lib.agreement_at_k(scann_ids, exact_ids, k)
                          for k in ks}}

  # Raw top-kmax throughput of both searches (no filtering), after one warm-up call.
  warm = queries[:min(8, len(queries))]
  index_lib.exact_top_k(warm, items, kmax)
  scann.search(warm, kmax)
  (raw_exact, _), t_exact = index_lib.timed(index_lib.exact_top_k, queries, items, kmax,
                                            repeats=timing_repeats)
  (raw_scann, _), t_scann = index_lib.timed(scann.search, queries, kmax, repeats=timing_repeats)
  tp_exact = index_lib.throughput(len(queries), t_exact)
  tp_scann = index_lib.throughput(len(queries), t_scann)
  result["agreement"][f"unfiltered@{kmax}"] = index_lib.agreement_at_k(raw_scann, raw_exact, kmax)
  result["throughput"] = {"exact": tp_exact, "scann": tp_scann,
                          "speedup_median": tp_scann["qps_median"] / tp_exact["qps_median"],
                          "speedup_best": tp_scann["qps_best"] / tp_exact["qps_best"]}

  bins = metrics.popularity_deciles(eval_set["item_counts"], num_bins)
  target_bins = bins[targets]
  pop = {"num_bins": num_bins, "definition": "items sorted by training count, descending; "
         "bin b holds sorted positions [b N / B, (b + 1) N / B); bin 0 = most popular"}
  for k in ks:
    means, counts = metrics.mean_by_group(metrics.recall_at_k(exact_ids, targets, k),
                                          target_bins, num_bins)
    pop[f"recall@{k}"] = means.tolist()
    pop["num_targets"] = counts.tolist()
  pop["target_share"] = (np.asarray(pop["num_targets"]) / len(targets)).tolist()
  result["popularity"] = pop
  return result


def markdown_summary(result: Dict) -> str:
  ks = result["ks"]
  lines = [f"# Evaluation: {result.get('export_dir', '')}", "",
           f"{result['num_queries']} queries, {result['num_items']} items, dataset "
           f"{result.get('dataset', '?')} ({result.get('split', '?')}, "
           f"{result.get('eval_split', '?')}), rated items filtered.", "",
           "| search | " + " | ".join(f"Recall@{k} | NDCG@{k}" for k in ks) + " |",
           "|---|" + "---|---|" * len(ks)]
  for name in ("exact", "scann"):
    m = result["metrics"][name]
    lines.append(f"| {name} | " + " | ".join(f"{m[f'recall@{k}']:.4f} | {m[f'ndcg@{k}']:.4f}"
                                              for k in ks) + " |")
  lines += ["", "| ScaNN agreement with exact | value |", "|---|---|"]
  lines += [f"| {key} | {v:.4f} |" for key, v in result["agreement"].items()]
  tp = result["throughput"]
  lines += ["", f"Throughput, raw top-{max(ks)} (queries/s; min-time / median of repeats; "
            "shared machine, noisy):", "", "| search | qps (best) | qps (median) |",
            "|---|---|---|",
            f"| exact tf matmul+top_k | {tp['exact']['qps_best']:.0f} | "
            f"{tp['exact']['qps_median']:.0f} |",
            f"| ScaNN ({result['index']['mode']}) | {tp['scann']['qps_best']:.0f} | "
            f"{tp['scann']['qps_median']:.0f} |",
            f"| speed-up | {tp['speedup_best']:.2f}x | {tp['speedup_median']:.2f}x |", "",
            f"ScaNN build {result['index_build_seconds']:.2f}s, config: `{result['index']}`", ""]
  pop = result["popularity"]
  lines += ["Recall (exact) by the target's popularity decile (0 = most popular items):", "",
            "| decile | share of targets | " + " | ".join(f"Recall@{k}" for k in ks) + " |",
            "|---|---|" + "---|" * len(ks)]
  for b in range(pop["num_bins"]):
    if pop["num_targets"][b] == 0:
      cells = " | ".join("n/a" for _ in ks)
    else:
      cells = " | ".join(f"{pop[f'recall@{k}'][b]:.4f}" for k in ks)
    lines.append(f"| {b} | {pop['target_share'][b]:.3f} | {cells} |")
  return "\n".join(lines) + "\n"


def plot_popularity(result: Dict, path: pathlib.Path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  pop, ks = result["popularity"], result["ks"]
  bins = np.arange(pop["num_bins"])
  has = np.asarray(pop["num_targets"]) > 0
  fig, ax = plt.subplots(figsize=(7, 4))
  width = 0.8 / len(ks)
  for i, k in enumerate(ks):
    ax.bar(bins[has] + i * width, np.asarray(pop[f"recall@{k}"])[has], width,
           label=f"Recall@{k}")
  ax2 = ax.twinx()
  ax2.plot(bins, pop["target_share"], "k.--", label="share of targets")
  ax2.set_ylabel("share of test targets")
  ax.set_xticks(bins + 0.4 - width / 2)
  ax.set_xticklabels([str(b) for b in bins])
  ax.set_xlabel("target popularity decile (0 = head, 9 = tail)")
  ax.set_ylabel("recall (exact search, rated items filtered)")
  ax.legend(loc="upper right", fontsize=8)
  ax.set_title(str(result.get("export_dir", ""))[-60:], fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def export_serving(serving_dir: pathlib.Path, histories) -> None:
  """Exports the serving SavedModel, reloads it and checks it against the in-process index."""
  from eval import serving  # pylint: disable=g-import-not-at-top
  path = serving.export_from_training_export(
      FLAGS.export_dir, serving_dir, k=FLAGS.serving_k, index_config=index_config_from_flags())
  loaded = serving.load_serving_model(path)
  max_len = max(1, max(len(h) for h in histories))
  batch = np.zeros((len(histories), max_len), np.int64)
  for row, h in enumerate(histories):
    if len(h):
      batch[row, -len(h):] = h
  served = loaded.signatures["serving_default"](history=tf.constant(batch))["item_ids"].numpy()
  encode, items, meta = load_export(FLAGS.export_dir)
  # The serving model encodes the last max_len items and filters the whole history.
  scann = index_lib.ScannIndex(items, FLAGS.serving_k, index_config_from_flags())
  queries = encode(encoder_inputs(histories, int(meta.get("max_len") or max_len)))
  ids, _ = scann.search_filtered(queries, [np.asarray(h) for h in histories], FLAGS.serving_k)
  agreement = index_lib.agreement_at_k(served, ids, FLAGS.serving_k)
  print(f"serving SavedModel: {path} (signature serving_default: history int64 [B, L] -> "
        f"item_ids int64 [B, {FLAGS.serving_k}], scores float32); agreement with the in-process "
        f"index on {len(histories)} users: {agreement:.4f}")


def main(argv):
  del argv
  if not FLAGS.export_dir or not FLAGS.output_dir:
    raise app.UsageError("--export_dir and --output_dir are required")
  ks = sorted({int(k) for k in FLAGS.ks})
  if not ks or ks[0] < 1:
    raise app.UsageError("--ks must be positive integers")
  encode, items, meta = load_export(FLAGS.export_dir)
  eval_set = load_eval_set(FLAGS.dataset, FLAGS.data_path, FLAGS.split, FLAGS.eval_split,
                           items.shape[0] - 1)
  if FLAGS.max_queries:
    eval_set["histories"] = eval_set["histories"][:FLAGS.max_queries]
    eval_set["targets"] = eval_set["targets"][:FLAGS.max_queries]
  result = evaluate(encode, items, meta, eval_set, ks, index_config_from_flags(),
                    batch_size=FLAGS.batch_size, num_bins=FLAGS.num_bins,
                    timing_repeats=FLAGS.timing_repeats)
  result.update({"export_dir": str(FLAGS.export_dir), "dataset": FLAGS.dataset,
                 "data_path": FLAGS.data_path, "split": FLAGS.split,
                 "eval_split": FLAGS.eval_split, "export_meta": meta})
  out = pathlib.Path(FLAGS.output_dir)
  out.mkdir(parents=True, exist_ok=True)
  (out / "eval_results.json").write_text(json.dumps(result, indent=2, default=str))
  summary = markdown_summary(result)
  (out / "eval_summary.md").write_text(summary)
  if FLAGS.plot:
    plot_popularity(result, out / "recall_by_popularity.png")
  print(summary)
  if FLAGS.serving_dir:
    export_serving(pathlib.Path(FLAGS.serving_dir), eval_set["histories"][:256])
  m = result["metrics"]["exact"]
  logging.info("wrote %s", out)
  print("SUMMARY " + " ".join(f"R@{k}={m[f'recall@{k}']:.4f} NDCG@{k}={m[f'ndcg@{k}']:.4f}"
                              for k in ks)
        + f" agreement@{ks[-1]}={result['agreement'][f'filtered@{ks[-1]}']:.4f}")


if __name__ == "__main__":
  app.run(main)
