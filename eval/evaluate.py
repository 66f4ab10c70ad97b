r"""Evaluates an exported retrieval model through a ScaNN index and an exact top-k.

  python -m eval.evaluate --export_dir=/tmp/run/export --output_dir=/tmp/run/eval
  tfrs-logq-evaluate ...          # the same, as the console script of `pip install ".[app]"`

Data: by default the dataset the export was trained on, exactly (export_meta.json records the
run's `train.data.DataConfig` and a fingerprint of the data). The data flags (--dataset,
--data_path, --split, --synthetic_*, --tfds_name) override single settings, e.g. --data_path
for a copy of the files elsewhere; data whose fingerprint (sizes, item counts, targets) differs
from the recorded one is refused with a message naming what differs. --eval_npz evaluates on a
custom file instead: ``inputs`` int [Q, L] (left-padded full histories), ``targets`` int [Q],
optional ``item_counts`` [num_items + 1].

Protocol (the paper's, §4.1): for every test query u (all test users; in the temporal split,
every test interaction), q_u = query_encoder(last max_len items of H_u, left-padded); all
items are ranked by s(u, d) = <q_u, c_d>, the rated items H_u (the full input history; the
target too when it occurs there, unless --filter_rated=except_target) are removed, and
Recall@k = 1[r_u < k], NDCG@k = 1[r_u < k] / log2(r_u + 2) are averaged over queries for k in
--ks (tfrs_logq.tf_keras.top_k).

Reported (JSON ``eval_results.json`` + markdown ``eval_summary.md`` + PNG in --output_dir):
* metrics from the exact top-k (`tfrs_logq.tf_keras.top_k.exact_top_k`, the reference) and from the
  ScaNN index (filtering by over-fetching k + |H_u|, see eval/index.py);
* agreement: mean |ScaNN top-k ∩ exact top-k| / k, on the filtered lists and on the raw
  (unfiltered) top-max(ks);
* throughput (queries/s, min and median of --timing_repeats) of both searches, raw top-max(ks);
* Recall@k by the target's popularity decile (items ranked by training count; decile 0 =
  the most popular tenth of the catalog) as a table and ``recall_by_popularity.png``.

Export layout read (train/export.py): query_encoder/ (SavedModel, serving_default: history
int64 [B, L] -> {"embedding": float32 [B, d]}), item_embeddings.npy ([num_items + 1, d], row 0
padding), export_meta.json; when the .npy is missing, item_embeddings/ (SavedModel item_ids ->
embedding) is called instead. Every flag is a field of `eval.config.EvalConfig` (or of the
nested `eval.index.IndexConfig`, `train.data.DataConfig`).

Output (train/cli.py): by default a short result on stdout (where the files went, the ScaNN
metrics and agreement, and the ``SUMMARY`` line last); --verbosity=info also prints the markdown
summary and the INFO logs, --verbosity=debug the DEBUG logs and tracebacks. Bad input (a flag, an
export folder that is missing or not a training export, data that is not the export's) ends with
one line ``error: ...`` on stderr and exit status 2.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Dict, Optional

from train import cli

if __name__ == "__main__" or cli.started_as("tfrs-logq-evaluate"):
  cli.quiet_tensorflow()  # before TensorFlow is imported (it logs while it loads)

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import top_k as top_k_lib

import numpy as np
import tensorflow as tf
from absl import flags

from eval import index as index_lib
from eval.config import EvalConfig
from train import config_flags
from train import data as data_lib
from train import export as export_lib

FLAGS = flags.FLAGS
config_flags.define_flags(EvalConfig)
config_flags.define_flags(
  data_lib.DataConfig,
  defaults={leaf.flag: None for leaf in config_flags.leaves(data_lib.DataConfig)},
  help_note="Default: the export's (export_meta.json).",
)
cli.declare_verbosity_flag()


# ----------------------------------------------------------------------------- loading


def load_export(export_dir):
  """(query encoder fn history[B, L] -> [B, d], item embeddings [N + 1, d], meta dict)."""
  export_dir = pathlib.Path(export_dir)
  if not export_dir.is_dir():
    raise FileNotFoundError(f"export folder not found: {export_dir}")
  if not (export_dir / "query_encoder").is_dir():
    raise FileNotFoundError(
      f"{export_dir} is not a training export: no query_encoder/ "
      "(SavedModel) in it (python -m train --export_dir writes one)"
    )
  meta = export_lib.read_meta(export_dir)
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
    raise ValueError(
      f"item embeddings have {items.shape[0]} rows, expected num_items + 1 = "
      f"{int(meta['num_items']) + 1}"
    )
  meta.setdefault("num_items", items.shape[0] - 1)

  def encode(history: np.ndarray) -> np.ndarray:
    return serve(history=tf.constant(history, tf.int64))["embedding"].numpy()

  # Keep the loaded object alive as long as the function is.
  encode.saved_model = encoder
  return encode, items, meta


def export_data_config(meta: Dict, overrides: Optional[Dict] = None) -> data_lib.DataConfig:
  """The export's recorded DataConfig with ``overrides`` (flag name -> value) applied.

  Raises:
    ValueError: the export records no data configuration and ``overrides`` names no dataset.
  """
  overrides = dict(overrides or {})
  recorded = meta.get("run_config", {}).get("data")
  if recorded is None:
    if "dataset" not in overrides:
      raise ValueError(
        "the export records no data configuration (export_meta.json has no "
        "run_config): pass --dataset and the other data flags, or --eval_npz"
      )
    return config_flags.from_dict(data_lib.DataConfig, overrides)
  return config_flags.from_dict(
    data_lib.DataConfig, overrides, base=data_lib.DataConfig(**recorded)
  )


def check_data_matches_export(meta: Dict, data, data_config: data_lib.DataConfig) -> None:
  """Refuses data that is not what the export was trained on.

  Raises:
    ValueError: the catalog size differs, or the recorded fingerprint (sizes, item counts,
      targets) differs; the message names the differing entries and settings.
  """
  problems = []
  if int(data.num_items) != int(meta["num_items"]):
    problems.append(f"num_items: export {meta['num_items']}, data {data.num_items}")
  recorded = meta.get("data_fingerprint")
  if recorded is not None:
    got = data_lib.fingerprint(data)
    problems += [
      f"{k}: export {recorded[k]!r}, data {got.get(k)!r}"
      for k in sorted(recorded)
      if k != "num_items" and got.get(k) != recorded[k]
    ]
  if problems:
    trained = meta.get("run_config", {}).get("data", {})
    settings = [
      f"--{k}={v} (export: {trained[k]})"
      for k, v in data_config.to_dict().items()
      if k in trained and trained[k] != v
    ]
    raise ValueError(
      "the evaluation data is not the data the export was trained on: "
      + "; ".join(problems)
      + (". Settings that differ: " + ", ".join(settings) if settings else "")
    )


def eval_set_from_data(data, eval_split: str) -> Dict[str, object]:
  """{"histories", "targets", "item_counts"} of one held-out split of a SequenceData."""
  part = getattr(data, eval_split)
  return {
    "histories": [np.asarray(h, np.int64) for h in part.inputs],
    "targets": np.asarray(part.targets, np.int64),
    "item_counts": np.asarray(data.item_counts, np.float64),
  }


def load_npz_eval_set(path, num_items: int) -> Dict[str, object]:
  """{"histories", "targets", "item_counts"} from a custom evaluation file (module docstring)."""
  z = np.load(path)
  inputs = np.asarray(z["inputs"], np.int64)
  histories = [row[row > 0] for row in inputs]
  targets = np.asarray(z["targets"], np.int64)
  if "item_counts" in z:
    counts = np.asarray(z["item_counts"], np.float64)
  else:
    counts = np.bincount(
      np.concatenate(histories + [np.zeros(0, np.int64)]), minlength=num_items + 1
    ).astype(np.float64)
  if len(histories) != targets.shape[0] or targets.shape[0] == 0:
    raise ValueError(
      f"evaluation set is empty or inconsistent: {len(histories)} histories, "
      f"{targets.shape[0]} targets"
    )
  if targets.min() < 1 or targets.max() > num_items:
    raise ValueError(f"targets outside [1, {num_items}]")
  return {"histories": histories, "targets": targets, "item_counts": counts}


def encode_all(encode, inputs: np.ndarray, batch_size: int) -> np.ndarray:
  out = [encode(inputs[s : s + batch_size]) for s in range(0, inputs.shape[0], batch_size)]
  q = np.concatenate(out).astype(np.float32)
  if not np.all(np.isfinite(q)):
    raise ValueError("the query encoder produced NaN/inf embeddings")
  return q


# ----------------------------------------------------------------------------- evaluation


def evaluate(encode, items: np.ndarray, meta: Dict, eval_set: Dict, cfg: EvalConfig) -> Dict:
  """All numbers of the report (see the module docstring)."""
  histories, targets = eval_set["histories"], eval_set["targets"]
  ks = list(cfg.ks)
  num_items = items.shape[0] - 1
  kmax = max(ks)
  if kmax > num_items:
    raise ValueError(f"max k={kmax} exceeds the catalog size {num_items}")
  max_len = int(meta.get("max_len") or max(1, max(len(h) for h in histories)))
  # "all": the target is removed like any rated item; "except_target": it never is.
  keep = targets if cfg.filter_rated == "except_target" else None

  t0 = time.perf_counter()
  queries = encode_all(encode, data_lib.left_pad(histories, max_len), cfg.batch_size)
  encode_seconds = time.perf_counter() - t0

  exact_ids, _ = top_k_lib.exact_top_k(queries, items, kmax, rated=histories, targets=keep)
  scann = index_lib.ScannIndex(items, kmax, cfg.index)
  scann_ids, _ = scann.search_filtered(queries, histories, kmax, targets=keep)

  result = {
    "num_queries": int(len(targets)),
    "num_items": int(num_items),
    "max_len": max_len,
    "ks": ks,
    "filter_rated": cfg.filter_rated,
    "index": vars(scann.config),
    "index_build_seconds": scann.build_seconds,
    "encode_seconds": encode_seconds,
    "metrics": {
      "exact": top_k_lib.retrieval_metrics(exact_ids, targets, ks),
      "scann": top_k_lib.retrieval_metrics(scann_ids, targets, ks),
    },
    "agreement": {f"filtered@{k}": index_lib.agreement_at_k(scann_ids, exact_ids, k) for k in ks},
  }

  # Raw top-kmax throughput of both searches (no filtering), after one warm-up call.
  warm = queries[: min(8, len(queries))]
  top_k_lib.exact_top_k(warm, items, kmax)
  scann.search(warm, kmax)
  (raw_exact, _), t_exact = index_lib.timed(
    top_k_lib.exact_top_k, queries, items, kmax, repeats=cfg.timing_repeats
  )
  (raw_scann, _), t_scann = index_lib.timed(scann.search, queries, kmax, repeats=cfg.timing_repeats)
  tp_exact = index_lib.throughput(len(queries), t_exact)
  tp_scann = index_lib.throughput(len(queries), t_scann)
  result["agreement"][f"unfiltered@{kmax}"] = index_lib.agreement_at_k(raw_scann, raw_exact, kmax)
  result["throughput"] = {
    "exact": tp_exact,
    "scann": tp_scann,
    "speedup_median": tp_scann["qps_median"] / tp_exact["qps_median"],
    "speedup_best": tp_scann["qps_best"] / tp_exact["qps_best"],
  }

  num_bins = cfg.num_bins
  bins = top_k_lib.popularity_deciles(eval_set["item_counts"], num_bins)
  target_bins = bins[targets]
  pop = {
    "num_bins": num_bins,
    "definition": "items sorted by training count, descending; "
    "bin b holds sorted positions [b N / B, (b + 1) N / B); bin 0 = most popular",
  }
  for k in ks:
    means, counts = top_k_lib.mean_by_group(
      top_k_lib.recall_at_k(exact_ids, targets, k), target_bins, num_bins
    )
    pop[f"recall@{k}"] = means.tolist()
    pop["num_targets"] = counts.tolist()
  pop["target_share"] = (np.asarray(pop["num_targets"]) / len(targets)).tolist()
  result["popularity"] = pop
  return result


def markdown_summary(result: Dict) -> str:
  ks = result["ks"]
  lines = [
    f"# Evaluation: {result.get('export_dir', '')}",
    "",
    f"{result['num_queries']} queries, {result['num_items']} items, dataset "
    f"{result.get('dataset', '?')} ({result.get('split', '?')}, "
    f"{result.get('eval_split', '?')}), rated items filtered "
    f"({result.get('filter_rated', 'all')}).",
    "",
    "| search | " + " | ".join(f"Recall@{k} | NDCG@{k}" for k in ks) + " |",
    "|---|" + "---|---|" * len(ks),
  ]
  for name in ("exact", "scann"):
    m = result["metrics"][name]
    lines.append(
      f"| {name} | "
      + " | ".join(f"{m[f'recall@{k}']:.4f} | {m[f'ndcg@{k}']:.4f}" for k in ks)
      + " |"
    )
  lines += ["", "| ScaNN agreement with exact | value |", "|---|---|"]
  lines += [f"| {key} | {v:.4f} |" for key, v in result["agreement"].items()]
  tp = result["throughput"]
  lines += [
    "",
    f"Throughput, raw top-{max(ks)} (queries/s; min-time / median of repeats; "
    "shared machine, noisy):",
    "",
    "| search | qps (best) | qps (median) |",
    "|---|---|---|",
    f"| exact tf matmul+top_k | {tp['exact']['qps_best']:.0f} | {tp['exact']['qps_median']:.0f} |",
    f"| ScaNN ({result['index']['mode']}) | {tp['scann']['qps_best']:.0f} | "
    f"{tp['scann']['qps_median']:.0f} |",
    f"| speed-up | {tp['speedup_best']:.2f}x | {tp['speedup_median']:.2f}x |",
    "",
    f"ScaNN build {result['index_build_seconds']:.2f}s, config: `{result['index']}`",
    "",
  ]
  pop = result["popularity"]
  lines += [
    "Recall (exact) by the target's popularity decile (0 = most popular items):",
    "",
    "| decile | share of targets | " + " | ".join(f"Recall@{k}" for k in ks) + " |",
    "|---|---|" + "---|" * len(ks),
  ]
  for b in range(pop["num_bins"]):
    if pop["num_targets"][b] == 0:
      cells = " | ".join("n/a" for _ in ks)
    else:
      cells = " | ".join(f"{pop[f'recall@{k}'][b]:.4f}" for k in ks)
    lines.append(f"| {b} | {pop['target_share'][b]:.3f} | {cells} |")
  return "\n".join(lines) + "\n"


def plot_popularity(result: Dict, path: pathlib.Path):
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  pop, ks = result["popularity"], result["ks"]
  bins = np.arange(pop["num_bins"])
  has = np.asarray(pop["num_targets"]) > 0
  fig, ax = plt.subplots(figsize=(7, 4))
  width = 0.8 / len(ks)
  for i, k in enumerate(ks):
    ax.bar(bins[has] + i * width, np.asarray(pop[f"recall@{k}"])[has], width, label=f"Recall@{k}")
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


def export_serving(cfg: EvalConfig, histories) -> None:
  """Exports the serving SavedModel, reloads it and checks it against the in-process index."""
  from eval import serving

  path = serving.export_from_training_export(
    cfg.export_dir, cfg.serving_dir, k=cfg.serving_k, index_config=cfg.index
  )
  loaded = serving.load_serving_model(path)
  batch = data_lib.left_pad(histories)  # the whole history: the model cuts and filters inside
  served = loaded.signatures["serving_default"](history=tf.constant(batch))["item_ids"].numpy()
  encode, items, meta = load_export(cfg.export_dir)
  # The serving model encodes the last max_len items and filters the whole history.
  scann = index_lib.ScannIndex(items, cfg.serving_k, cfg.index)
  queries = encode(data_lib.left_pad(histories, int(meta.get("max_len") or batch.shape[1])))
  ids, _ = scann.search_filtered(queries, [np.asarray(h) for h in histories], cfg.serving_k)
  agreement = index_lib.agreement_at_k(served, ids, cfg.serving_k)
  print(
    f"serving SavedModel: {path} (signature serving_default: history int64 [B, L] -> "
    f"item_ids int64 [B, {cfg.serving_k}], scores float32); agreement with the in-process "
    f"index on {len(histories)} users: {agreement:.4f}"
  )


def load_eval_data(cfg: EvalConfig, meta: Dict, data_overrides: Dict):
  """(eval set, data description for the report) for ``cfg`` (module docstring: Data)."""
  num_items = int(meta["num_items"])
  if cfg.eval_npz:
    if data_overrides:
      raise ValueError(f"--eval_npz replaces the dataset: drop {sorted(data_overrides)}")
    return load_npz_eval_set(cfg.eval_npz, num_items), {"eval_npz": cfg.eval_npz}
  data_config = export_data_config(meta, data_overrides)
  data = data_config.load()
  check_data_matches_export(meta, data, data_config)
  return eval_set_from_data(data, cfg.eval_split), data_config.to_dict()


def main(argv):
  del argv  # checked by cli.run
  with cli.bad_input():  # flags, the export folder, the data (module docstring)
    cfg = config_flags.from_flags(EvalConfig)
    if not cfg.export_dir or not cfg.output_dir:
      raise ValueError("--export_dir and --output_dir are required")
    encode, items, meta = load_export(cfg.export_dir)
    eval_set, data_description = load_eval_data(
      cfg, meta, config_flags.present_settings(data_lib.DataConfig)
    )
    if max(cfg.ks) > int(meta["num_items"]):
      raise ValueError(f"--ks: max k={max(cfg.ks)} exceeds the catalog size {meta['num_items']}")
  if cfg.max_queries:
    eval_set["histories"] = eval_set["histories"][: cfg.max_queries]
    eval_set["targets"] = eval_set["targets"][: cfg.max_queries]
  result = evaluate(encode, items, meta, eval_set, cfg)
  result.update(
    {
      "export_dir": str(cfg.export_dir),
      "data": data_description,
      "dataset": data_description.get("dataset", "npz"),
      "split": data_description.get("split", "?"),
      "eval_split": cfg.eval_split,
      "eval_config": dataclasses.asdict(cfg),
      "export_meta": meta,
    }
  )
  out = pathlib.Path(cfg.output_dir)
  out.mkdir(parents=True, exist_ok=True)
  (out / "eval_results.json").write_text(json.dumps(result, indent=2, default=str))
  summary = markdown_summary(result)
  (out / "eval_summary.md").write_text(summary)
  written = ["eval_results.json", "eval_summary.md"]
  if cfg.plot:
    plot_popularity(result, out / "recall_by_popularity.png")
    written.append("recall_by_popularity.png")
  if cli.verbosity() != "quiet":
    print(summary)
  ks = list(cfg.ks)
  scann, kmax = result["metrics"]["scann"], max(ks)
  print(f"wrote {out}: {', '.join(written)}")
  print(
    f"ScaNN ({result['index']['mode']}): "
    + " ".join(f"R@{k}={scann[f'recall@{k}']:.4f}" for k in ks)
    + f", agreement with exact@{kmax}={result['agreement'][f'filtered@{kmax}']:.4f}, "
    f"{result['throughput']['speedup_median']:.1f}x the queries/s of the exact search"
  )
  if cfg.serving_dir:
    export_serving(cfg, eval_set["histories"][:256])
  m = result["metrics"]["exact"]
  print(
    "SUMMARY "
    + " ".join(f"R@{k}={m[f'recall@{k}']:.4f} NDCG@{k}={m[f'ndcg@{k}']:.4f}" for k in ks)
    + f" agreement@{ks[-1]}={result['agreement'][f'filtered@{ks[-1]}']:.4f}"
  )


def run():
  """Console-script entry point (tfrs-logq-evaluate)."""
  config_flags.expose_in_help(__name__)
  cli.run(main)


if __name__ == "__main__":
  run()
