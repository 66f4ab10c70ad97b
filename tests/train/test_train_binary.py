"""train.train end to end on tiny synthetic data: flags -> training -> metrics JSON -> export."""

import json
import os
import re
import subprocess
import sys

import numpy as np

import tfrs_logq  # noqa: F401
import tensorflow as tf

from train import data as data_lib
from train.validation import evaluate, numpy_reference
from models.sasrec import SASRec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ["--dataset=synthetic", "--synthetic_users=120", "--synthetic_items=60",
        "--synthetic_min_len=6", "--synthetic_max_len=14", "--max_len=10", "--embedding_dim=8",
        "--num_negatives=16", "--batch_size=16", "--steps_per_epoch=4", "--progress=false",
        "--eval_batch_size=50"]


def run_binary(args, timeout=240):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
  return subprocess.run([sys.executable, "-m", "train", *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=timeout)


def test_help_documents_every_flag():
  out = run_binary(["--help"], timeout=120)   # absl prints the module's flags (exit code 1)
  assert "Traceback" not in out.stderr, out.stderr[-2000:]
  for flag in ["dataset", "data_path", "split", "model", "loss", "negatives", "num_negatives",
               "uniform_negatives_per_position", "logq", "q_prime", "frequency", "batch_size",
               "learning_rate", "epochs", "steps_per_epoch", "early_stopping_patience", "seed",
               "strategy", "tpu", "model_dir", "export_dir", "metrics_json", "jit_compile"]:
    assert re.search(rf"--(\[no\])?{flag}:", out.stdout), flag


def test_end_to_end_metrics_json_and_export(tmp_path):
  model_dir, export_dir = tmp_path / "run", tmp_path / "export"
  out = run_binary(TINY + ["--epochs=2", "--early_stopping_patience=5", "--loss=sampled_softmax",
                           "--negatives=mixed", "--logq=corrected", "--frequency=count_min",
                           f"--model_dir={model_dir}", f"--export_dir={export_dir}"])
  assert out.returncode == 0, out.stderr[-3000:]
  metrics = json.loads((model_dir / "metrics.json").read_text())
  assert metrics["global_step"] == 8 and metrics["epochs_done"] == 2
  assert len(metrics["history"]) == 2
  for split in ("val", "test"):
    for k in ("recall@10", "ndcg@10", "recall@20", "ndcg@20"):
      assert 0.0 <= metrics[split][k] <= 1.0
  assert all(np.isfinite(h["loss"]) and 0 < h["mean_weight"] <= 1 for h in metrics["history"])
  assert metrics["val"]["ndcg@10"] == metrics["best_val_ndcg10"] or metrics["best_epoch"] >= 1
  assert list((model_dir / "tensorboard").iterdir())

  meta = json.loads((export_dir / "export_meta.json").read_text())
  assert meta["num_items"] == 60 and meta["max_len"] == 10 and meta["logq"] == "corrected"
  assert {"model", "dataset", "loss", "negatives", "temperature"} <= set(meta)
  table = np.load(export_dir / "item_embeddings.npy")
  assert table.shape == (61, 8)
  items = tf.saved_model.load(str(export_dir / "item_embeddings"))
  emb = items.signatures["serving_default"](item_ids=tf.constant([0, 5, 60], tf.int64))
  np.testing.assert_allclose(emb["embedding"].numpy(), table[[0, 5, 60]])
  enc = tf.saved_model.load(str(export_dir / "query_encoder"))
  serve = enc.signatures["serving_default"]
  h = np.array([[0, 0, 0, 3, 4, 5, 6, 7, 8, 9]], np.int64)
  e10 = serve(history=tf.constant(h))["embedding"].numpy()
  assert e10.shape == (1, 8) and np.all(np.isfinite(e10))
  # shorter input is left-padded, longer is truncated to the last max_len items
  np.testing.assert_allclose(serve(history=tf.constant(h[:, 3:]))["embedding"].numpy(), e10,
                             atol=1e-5)
  longer = np.concatenate([np.array([[11, 12, 13]]), h[:, 3:]], 1)
  longer = np.concatenate([np.array([[1, 2, 3, 4]]), longer], 1)   # 14 items
  e_long = serve(history=tf.constant(longer))["embedding"].numpy()
  e_last = serve(history=tf.constant(longer[:, -10:]))["embedding"].numpy()
  np.testing.assert_allclose(e_long, e_last, atol=1e-5)


def test_other_losses_and_two_tower_run(tmp_path):
  for i, extra in enumerate([["--loss=gbce", "--negatives=uniform"],
                             ["--model=two_tower", "--loss=full_softmax"]]):
    out = run_binary(TINY + ["--epochs=1", f"--model_dir={tmp_path / str(i)}"] + extra)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads((tmp_path / str(i) / "metrics.json").read_text())["global_step"] == 4


def test_bad_flag_combination_fails_clearly(tmp_path):
  out = run_binary(TINY + ["--loss=bce", "--negatives=in_batch", f"--model_dir={tmp_path}"])
  assert out.returncode != 0 and "uniform" in out.stderr


def test_validation_metrics_match_numpy_reference():
  data = data_lib.load("synthetic", num_users=60, num_items=40, min_len=5, max_len=12)
  model = SASRec(40, max_len=8, embedding_dim=8, dropout=0.0, seed=2).build_all()
  got = evaluate(model, data.val, max_len=8, ks=(10, 20), batch_size=17)
  arrays = data_lib.eval_arrays(data.val, 8)
  scores = model(arrays["inputs"]).numpy()
  for k in (10, 20):
    r, n = numpy_reference(scores, data.val.inputs, arrays["targets"], k)
    assert got[f"recall@{k}"] == np.float32(r) or abs(got[f"recall@{k}"] - r) < 1e-6
    assert abs(got[f"ndcg@{k}"] - n) < 1e-5
