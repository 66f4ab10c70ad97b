"""eval.evaluate: --help, the binary end to end on a tiny export, the export's own data by default
(and the refusal of other data), train.data datasets, both rated-item protocols."""

import json
import math
import os
import pathlib
import shutil
import subprocess
import sys

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

from eval import evaluate
from eval.config import EvalConfig
from train import data as data_lib
from train.config import RunConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_LEN = 6


def _run(args, quiet_env=True):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  if not quiet_env:  # the binary's own default (train/cli.py)
    env.pop("TF_CPP_MIN_LOG_LEVEL")
  return subprocess.run(
    [sys.executable, "-m", "eval.evaluate", *args],
    cwd=ROOT,
    capture_output=True,
    text=True,
    env=env,
    timeout=240,
  )


def _reference(qe, items, histories, targets, ks, keep_target=False):
  """Plain Python: rank all items != 0 by <q, c> (ties by id), drop the history's items (the
  target too, unless keep_target: then a repeated target is a miss)."""
  inputs = np.zeros((len(histories), MAX_LEN), np.int64)
  for i, h in enumerate(histories):
    h = np.asarray(h)[-MAX_LEN:]
    if h.size:
      inputs[i, MAX_LEN - h.size :] = h
  q = qe.serve(tf.constant(inputs))["embedding"].numpy().astype(np.float64)
  scores = q @ items.astype(np.float64).T
  out = {f"{m}@{k}": [] for k in ks for m in ("recall", "ndcg")}
  ranks = []
  for u, t in enumerate(targets):
    banned = set(int(x) for x in histories[u])
    if keep_target:
      banned.discard(int(t))
    better = sum(
      1
      for d in range(1, items.shape[0])
      if d not in banned and d != t and scores[u, d] > scores[u, t]
    )
    if int(t) in banned:
      better = items.shape[0]  # filtered out: never retrieved
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
  for flag in (
    "--export_dir",
    "--dataset",
    "--split",
    "--synthetic_users",
    "--eval_npz",
    "--filter_rated",
    "--index_mode",
    "--num_leaves_to_search",
    "--reorder_k",
    "--anisotropic_quantization_threshold",
    "--dimensions_per_block",
    "--ks",
    "--verbosity",
  ):
    assert flag in proc.stdout
  assert "Default: the export's" in proc.stdout


def test_default_output_is_a_short_result(tiny_export, tiny_eval_npz, tmp_path):
  """No TensorFlow logs, no markdown tables (they are in eval_summary.md): where the files
  went, the ScaNN line and the SUMMARY line."""
  export_dir, _, _ = tiny_export
  npz = tiny_eval_npz[0]
  proc = _run(
    [
      f"--export_dir={export_dir}",
      f"--eval_npz={npz}",
      f"--output_dir={tmp_path}",
      "--ks=5,10",
      "--timing_repeats=1",
      "--noplot",
    ],
    quiet_env=False,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stderr.strip() == "", proc.stderr[-3000:]
  lines = proc.stdout.strip().splitlines()
  assert len(lines) == 3 and lines[0] == f"wrote {tmp_path}: eval_results.json, eval_summary.md"
  assert lines[1].startswith("ScaNN (") and lines[2].startswith("SUMMARY R@5=")
  assert "| search |" in (tmp_path / "eval_summary.md").read_text()


def test_missing_or_wrong_export_folder_is_one_line_and_status_2(tmp_path):
  missing = _run([f"--export_dir={tmp_path / 'none'}", f"--output_dir={tmp_path / 'out'}"])
  assert missing.returncode == 2, missing.stderr[-3000:]
  assert missing.stderr.strip().splitlines() == [
    f"error: export folder not found: {tmp_path / 'none'}"
  ]
  wrong = _run([f"--export_dir={tmp_path}", f"--output_dir={tmp_path / 'out'}"])
  assert wrong.returncode == 2, wrong.stderr[-3000:]
  assert wrong.stderr.strip().splitlines() == [
    f"error: {tmp_path} is not a training export: no query_encoder/ (SavedModel) in it "
    "(python -m train --export_dir writes one)"
  ]
  assert not (tmp_path / "out").exists()


def test_binary_end_to_end_on_tiny_export(tiny_export, tiny_eval_npz, tmp_path):
  export_dir, qe, items = tiny_export
  npz, inputs, targets, counts = tiny_eval_npz
  out = tmp_path / "eval"
  proc = _run(
    [
      f"--export_dir={export_dir}",
      f"--eval_npz={npz}",
      f"--output_dir={out}",
      "--ks=5,10,20",
      "--timing_repeats=1",
      "--index_mode=tree_ah",
      "--num_leaves=10",
      "--num_leaves_to_search=10",
      "--reorder_k=300",
      f"--serving_dir={tmp_path / 'serving'}",
    ]
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.strip().splitlines()[-1].startswith("SUMMARY")
  # The serving SavedModel was written, reloaded, and serves the in-process index's ids.
  assert (tmp_path / "serving" / "saved_model.pb").exists()
  assert "agreement with the in-process index on" in proc.stdout
  assert (
    proc.stdout.split("agreement with the in-process index on")[1].split(":")[1].split()[0]
    == "1.0000"
  )
  res = json.loads((out / "eval_results.json").read_text())
  histories = [row[row > 0] for row in inputs]
  assert sum(int(t) in set(h.tolist()) for h, t in zip(histories, targets)) > 5
  ref, ranks = _reference(qe, items, histories, targets, (5, 10, 20))  # the paper's protocol
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
  with pytest.raises(FileNotFoundError, match="export folder not found"):
    evaluate.load_export(tmp_path / "missing")
  (tmp_path / "other").mkdir()
  with pytest.raises(FileNotFoundError, match="not a training export: no query_encoder"):
    evaluate.load_export(tmp_path / "other")


@pytest.mark.parametrize("split", ["leave_one_out", "temporal"])
def test_train_data_synthetic_dataset(tmp_path, split, export_factory):
  qe, items = export_factory(tmp_path, seed=3, num_items=1000)
  encode, loaded_items, meta = evaluate.load_export(tmp_path)
  np.testing.assert_array_equal(loaded_items, items)
  eval_set = evaluate.eval_set_from_data(data_lib.DataConfig(split=split).load(), "test")
  n = 150  # a slice keeps the plain-Python reference fast
  eval_set["histories"] = eval_set["histories"][:n]
  eval_set["targets"] = eval_set["targets"][:n]
  res = evaluate.evaluate(
    encode, loaded_items, meta, eval_set, EvalConfig(ks=(10, 20, 100), timing_repeats=1)
  )
  ref, _ = _reference(qe, items, eval_set["histories"], eval_set["targets"], (10, 20, 100))
  for key, value in ref.items():
    assert res["metrics"]["exact"][key] == pytest.approx(value, abs=1e-6), key
    assert res["metrics"]["scann"][key] == pytest.approx(value, abs=1e-6), key  # brute force
  assert res["index"]["mode"] == "brute_force" and res["filter_rated"] == "all"


def test_except_target_protocol_keeps_repeated_targets(tiny_export, tiny_eval_npz):
  export_dir, qe, items = tiny_export
  npz, inputs, targets, _ = tiny_eval_npz
  encode, loaded, meta = evaluate.load_export(export_dir)
  eval_set = evaluate.load_npz_eval_set(npz, 300)
  ks = (5, 10, 20)
  for keep in (False, True):
    cfg = EvalConfig(ks=ks, timing_repeats=1, filter_rated="except_target" if keep else "all")
    res = evaluate.evaluate(encode, loaded, meta, eval_set, cfg)
    ref, _ = _reference(qe, items, eval_set["histories"], targets, ks, keep_target=keep)
    for key, value in ref.items():
      assert res["metrics"]["exact"][key] == pytest.approx(value, abs=1e-6), (keep, key)
      assert res["metrics"]["scann"][key] == pytest.approx(value, abs=1e-6), (keep, key)


def _meta_as_exported(cfg, data):
  """export_meta.json as train/export.py writes it (without the SavedModels)."""
  return {
    "num_items": data.num_items,
    "max_len": cfg.max_len,
    "run_config": json.loads(json.dumps(cfg.to_dict())),
    "data_fingerprint": data_lib.fingerprint(data),
  }


def test_evaluation_data_defaults_to_the_exports_and_other_data_is_refused(tmp_path):
  # A run trained on a 150-user world must not be evaluated on the default 2,000-user one.
  cfg = RunConfig.create(
    synthetic_users=150,
    synthetic_items=80,
    synthetic_min_len=5,
    synthetic_max_len=10,
    synthetic_seed=2,
  )
  data = cfg.data.load()
  meta = _meta_as_exported(cfg, data)
  resolved = evaluate.export_data_config(meta)
  assert resolved == cfg.data
  evaluate.check_data_matches_export(meta, resolved.load(), resolved)
  for override, word in [
    ({"synthetic_users": 500}, "synthetic_users"),
    ({"synthetic_seed": 0}, "synthetic_seed"),
    ({"split": "temporal"}, "split"),
  ]:
    other = evaluate.export_data_config(meta, override)
    with pytest.raises(ValueError, match=f"not the data the export was trained on.*{word}"):
      evaluate.check_data_matches_export(meta, other.load(), other)
  with pytest.raises(ValueError, match="records no data configuration"):
    evaluate.export_data_config({"num_items": 80})
  assert (
    evaluate.export_data_config({"num_items": 80}, {"dataset": "synthetic"})
    == data_lib.DataConfig()
  )


def test_a_copy_of_the_files_elsewhere_is_accepted(tmp_path):
  root = tmp_path / "a" / "mini"
  root.mkdir(parents=True)
  seqs = [[1, 2, 3, 4, 5], [2, 3, 4, 5, 6, 1], [6, 5, 4, 3]]
  for sub in ("train", "val", "test"):
    (root / sub).mkdir()
  line = lambda xs: " ".join(map(str, xs)) + "\n"
  (root / "train" / "input.txt").write_text(
    line(seqs[0][:-3]) + line(seqs[1][:-2]) + line(seqs[2][:-2])
  )
  (root / "test" / "input.txt").write_text("".join(line(s[:-1]) for s in seqs))
  (root / "test" / "output.txt").write_text("".join(f"{s[-1]}\n" for s in seqs))
  (root / "val" / "input.txt").write_text(line(seqs[0][:-2]))
  (root / "val" / "output.txt").write_text(f"{seqs[0][-2]}\n")
  (root / "dataset_stats.json").write_text(
    json.dumps({"num_users": 3, "num_items": 6, "num_interactions": 15})
  )
  cfg = RunConfig.create(dataset="gsasrec", data_path=str(root))
  meta = _meta_as_exported(cfg, cfg.data.load())
  copy = tmp_path / "b" / "mini"
  shutil.copytree(root, copy)
  moved = evaluate.export_data_config(meta, {"data_path": str(copy)})
  evaluate.check_data_matches_export(meta, moved.load(), moved)  # same content: accepted
  (copy / "test" / "output.txt").write_text("5\n1\n4\n")  # other targets: refused
  with pytest.raises(ValueError, match="digest"):
    evaluate.check_data_matches_export(meta, moved.load(), moved)
