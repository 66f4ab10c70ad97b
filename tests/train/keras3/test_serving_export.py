"""`python -m train.keras3 --backend=tensorflow --export_dir=...` writes the serving SavedModel
of `python -m train` (train/export.py's layout), which the evaluation and the ScaNN serving
model take unchanged: on ML-100K, `python -m eval.evaluate` on the export gives the training
run's test Recall/NDCG@10,20 (the same protocol on the same encoder), and the serving SavedModel
that it builds (--serving_dir, `eval.serving`: ScaNN, history filtered) returns the brute-force
top-k of the exported query encoder's embeddings over the item table, the history's items
removed (ties within 1e-4 may swap)."""

import json
import os
import pathlib
import subprocess
import sys

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

from eval import serving
from train import data as data_lib
from train.config import RunConfig

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]

ML100K = [
  "--dataset=movielens_raw",
  "--max_len=30",
  "--embedding_dim=16",
  "--num_blocks=1",
  "--num_negatives=16",
  "--batch_size=32",
  "--eval_batch_size=512",
  "--steps_per_epoch=6",
  "--learning_rate=0.01",
  "--noprogress",
  "--epochs=1",
]
K = 20


def _env():
  env = {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS", "KERAS_BACKEND")}
  env.update(
    PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3"
  )
  return env


def _run(args, module):
  return subprocess.run(
    [sys.executable, "-m", module, *args],
    cwd=ROOT,
    env=_env(),
    capture_output=True,
    text=True,
    timeout=900,
  )


@pytest.fixture(scope="module")
def exported(data_dir, tmp_path_factory):
  """(model_dir, export_dir, eval output dir, serving dir) of one TensorFlow-backend run."""
  del data_dir  # fails (never skips) without the shared datasets
  base = tmp_path_factory.mktemp("keras3_serving")
  model_dir, export_dir = base / "run", base / "run" / "export"
  proc = _run(
    ML100K + ["--backend=tensorflow", f"--model_dir={model_dir}", f"--export_dir={export_dir}"],
    "train.keras3",
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "needs --backend=tensorflow" not in proc.stdout
  out, served = base / "eval", base / "serving"
  proc = _run(
    [
      f"--export_dir={export_dir}",
      f"--output_dir={out}",
      f"--serving_dir={served}",
      f"--serving_k={K}",
      "--noplot",
      "--timing_repeats=1",
    ],
    "eval.evaluate",
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "SUMMARY" in proc.stdout.splitlines()[-1], proc.stdout
  return model_dir, export_dir, out, served


def test_export_has_the_tf_keras_binarys_layout(exported):
  _, export_dir, _, _ = exported
  for name in ("query_encoder", "item_embeddings"):
    assert (export_dir / name / "saved_model.pb").is_file(), name
  for name in (
    "item_embeddings.npy",
    "export_meta.json",
    "item_ids.txt",
    "query_encoder.keras",
    "metadata.json",
  ):
    assert (export_dir / name).is_file(), name
  encoder = tf.saved_model.load(str(export_dir / "query_encoder"))
  fn = encoder.signatures["serving_default"]
  spec = fn.structured_input_signature[1]["history"]
  assert spec.dtype == tf.int64 and spec.shape.as_list() == [None, None]
  assert list(fn.structured_outputs) == ["embedding"]
  meta = json.loads((export_dir / "export_meta.json").read_text())
  table = np.load(export_dir / "item_embeddings.npy")
  assert meta["max_len"] == 30 and meta["embedding_dim"] == 16
  assert table.shape == (meta["num_items"] + 1, 16)


def test_evaluate_on_the_export_gives_the_training_runs_test_metrics(exported):
  model_dir, _, out, _ = exported
  trained = json.loads((model_dir / "metrics.json").read_text())["test"]
  result = json.loads((out / "eval_results.json").read_text())
  assert result["num_queries"] == trained["num_queries"] == 943
  for search in ("exact", "scann"):  # ScaNN brute force (a small catalog)
    got = result["metrics"][search]
    for k in ("recall@10", "ndcg@10", "recall@20", "ndcg@20"):
      assert got[k] == pytest.approx(trained[k], abs=1e-6), (search, k)


def test_serving_savedmodel_top_k_is_the_brute_force_top_k(exported):
  _, export_dir, _, served = exported
  meta = json.loads((export_dir / "export_meta.json").read_text())
  data = RunConfig.from_dict(meta["run_config"]).data.load()
  histories = [np.asarray(h, np.int64) for h in data.test.inputs[:200]]
  encoder = tf.saved_model.load(str(export_dir / "query_encoder"))
  queries = encoder.signatures["serving_default"](
    history=tf.constant(data_lib.left_pad(histories, meta["max_len"]), tf.int64)
  )["embedding"].numpy()
  items = np.load(export_dir / "item_embeddings.npy")
  scores = queries.astype(np.float64) @ items.T.astype(np.float64)
  scores[:, 0] = -np.inf  # padding row
  for row, h in enumerate(histories):
    scores[row, h] = -np.inf  # the rated items
  want_ids = np.argsort(-scores, axis=1, kind="stable")[:, :K]
  want_scores = np.take_along_axis(scores, want_ids, axis=1)

  model = serving.load_serving_model(served)
  out = model.signatures["serving_default"](history=tf.constant(data_lib.left_pad(histories)))
  got_ids, got_scores = out["item_ids"].numpy(), out["scores"].numpy()
  assert got_ids.shape == (len(histories), K)
  np.testing.assert_allclose(got_scores, want_scores, rtol=1e-5, atol=1e-4)
  differ = got_ids != want_ids
  # a swapped pair must be a tie: the served id's exact score equals the brute-force one there
  tie = np.abs(np.take_along_axis(scores, got_ids, axis=1) - want_scores) <= 1e-4
  assert np.all(tie[differ]), np.argwhere(differ & ~tie)[:5]
  assert differ.mean() < 0.01, differ.mean()
