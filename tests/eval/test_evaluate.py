"""eval.evaluate: --help, the binary end to end on a tiny export, train.data datasets."""

import json
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tfrs_logq  # noqa: F401
import tensorflow as tf

from eval import evaluate
from eval import index as index_lib

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_LEN = 6


def _run(args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.run([sys.executable, "-m", "eval.evaluate", *args], cwd=ROOT,
                        capture_output=True, text=True, env=env, timeout=240)


def _reference(qe, items, histories, targets, ks):
  """Plain Python: rank all items != 0 by <q, c> (ties by id), drop history except target."""
  inputs = np.zeros((len(histories), MAX_LEN), np.int64)
  for i, h in enumerate(histories):
    h = np.asarray(h)[-MAX_LEN:]
    if h.size:
      inputs[i, MAX_LEN - h.size:] = h
  q = qe.serve(tf.constant(inputs))["embedding"].numpy().astype(np.float64)
  scores = q @ items.astype(np.float64).T
  out = {f"{m}@{k}": [] for k in ks for m in ("recall", "ndcg")}
  ranks = []
  for u, t in enumerate(targets):
    banned = set(int(x) for x in histories[u]) - {int(t)}
    better = sum(1 for d in range(1, items.shape[0])
                 if d not in banned and d != t and scores[u, d] > scores[u, t])
    ranks.append(better)
    for k in ks:
      out[f"recall@{k}"].append(1.0 if better < k else 0.0)
      out[f"ndcg@{k}"].append(1.0 / math.log2(better + 2) if better < k else 0.0)
  return {key: float(np.mean(v)) for key, v in out.items()}, np.array(ranks)


def test_help_lists_flags():
  proc = _run(["--help"])
  # absl prints the usage and exits with status 1 after --help; no traceback.
  assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-2000:]
  assert "Evaluates an exported retrieval model" in proc.stdout
  for flag in ("--export_dir", "--dataset", "--split", "--num_leaves_to_search", "--reorder_k",
               "--anisotropic_quantization_threshold", "--dimensions_per_block"):
    assert flag in proc.stdout


def test_binary_end_to_end_on_tiny_export(tiny_export, tiny_eval_npz, tmp_path):
  export_dir, qe, items = tiny_export
  npz, inputs, targets, counts = tiny_eval_npz
  out = tmp_path / "eval"
  proc = _run([f"--export_dir={export_dir}", "--dataset=npz", f"--data_path={npz}",
               f"--output_dir={out}", "--ks=5,10,20", "--timing_repeats=1",
               "--index_mode=tree_ah", "--num_leaves=10", "--num_leaves_to_search=10",
               "--reorder_k=300", f"--serving_dir={tmp_path / 'serving'}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.strip().splitlines()[-1].startswith("SUMMARY")
  # The serving SavedModel was written, reloaded, and serves the in-process index's ids.
  assert (tmp_path / "serving" / "saved_model.pb").exists()
  assert "agreement with the in-process index on" in proc.stdout
  assert proc.stdout.split("agreement with the in-process index on")[1].split(":")[1].split()[0] \
      == "1.0000"
  res = json.loads((out / "eval_results.json").read_text())
  histories = [row[row > 0] for row in inputs]
  ref, ranks = _reference(qe, items, histories, targets, (5, 10, 20))
  for key, value in ref.items():
    assert res["metrics"]["exact"][key] == pytest.approx(value, abs=1e-6), key
    # All leaves probed and all 300 items re-scored exactly: ScaNN gives the same lists.
    assert res["metrics"]["scann"][key] == pytest.approx(value, abs=1e-6), key
  assert res["agreement"]["filtered@20"] == pytest.approx(1.0)
  assert res["num_queries"] == len(targets) and res["index"]["mode"] == "tree_ah"
  assert res["throughput"]["scann"]["qps_median"] > 0
  # Popularity deciles: bins of 30 items by training count, descending, ties by id.
  order = np.lexsort((np.arange(1, 301), -counts[1:])) + 1
  decile = np.empty(301, np.int64)
  decile[order] = np.arange(300) // 30
  pop = res["popularity"]
  for b in range(10):
    sel = decile[targets] == b
    assert pop["num_targets"][b] == sel.sum()
    if sel.any():
      assert pop["recall@10"][b] == pytest.approx(np.mean(ranks[sel] < 10))
  assert sum(pop["num_targets"]) == len(targets)
  md = (out / "eval_summary.md").read_text()
  assert "Recall@10" in md and "decile" in md
  assert (out / "recall_by_popularity.png").stat().st_size > 1000


def test_item_embeddings_savedmodel_fallback(tmp_path, export_factory):
  _, items = export_factory(tmp_path, seed=5, write_npy=False)
  _, loaded, meta = evaluate.load_export(tmp_path)  # no .npy: calls item_embeddings/
  np.testing.assert_allclose(loaded, items)
  assert meta["max_len"] == MAX_LEN and meta["num_items"] == items.shape[0] - 1
  with pytest.raises(FileNotFoundError, match="query_encoder"):
    evaluate.load_export(tmp_path / "missing")


@pytest.mark.parametrize("split", ["leave_one_out", "temporal"])
def test_train_data_synthetic_dataset(tmp_path, split, export_factory):
  qe, items = export_factory(tmp_path, seed=3, num_items=1000)
  encode, loaded_items, meta = evaluate.load_export(tmp_path)
  np.testing.assert_array_equal(loaded_items, items)
  eval_set = evaluate.load_eval_set("synthetic", None, split, "test", 1000)
  n = 150  # a slice keeps the plain-Python reference fast
  eval_set["histories"] = eval_set["histories"][:n]
  eval_set["targets"] = eval_set["targets"][:n]
  res = evaluate.evaluate(encode, loaded_items, meta, eval_set, [10, 20, 100],
                          index_lib.IndexConfig(), timing_repeats=1)
  ref, _ = _reference(qe, items, eval_set["histories"], eval_set["targets"], (10, 20, 100))
  for key, value in ref.items():
    assert res["metrics"]["exact"][key] == pytest.approx(value, abs=1e-6), key
    assert res["metrics"]["scann"][key] == pytest.approx(value, abs=1e-6), key  # brute force
  assert res["index"]["mode"] == "brute_force"
