"""python -m train end to end on tiny synthetic data: flags -> training -> metrics JSON -> export
-> python -m eval.evaluate on the export's own data (no data flag given)."""

import json
import os
import re
import subprocess
import sys

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

from train import config_flags
from train.config import RunConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = [
  "--dataset=synthetic",
  "--synthetic_users=120",
  "--synthetic_items=60",
  "--synthetic_min_len=6",
  "--synthetic_max_len=14",
  "--max_len=10",
  "--embedding_dim=8",
  "--num_negatives=16",
  "--batch_size=16",
  "--steps_per_epoch=4",
  "--progress=false",
  "--eval_batch_size=50",
]


def run_binary(args, timeout=240, module="train"):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
  return subprocess.run(
    [sys.executable, "-m", module, *args],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=timeout,
  )


def test_help_documents_every_setting():
  out = run_binary(["--help"], timeout=120)  # absl prints the module's flags
  assert "Traceback" not in out.stderr, out.stderr[-2000:]
  for leaf in config_flags.leaves(RunConfig):  # every RunConfig setting, with its help text
    match = re.search(rf"^  --(\[no\])?{leaf.flag}:", out.stdout, re.M)
    assert match, leaf.flag
    assert " ".join(leaf.help.split()[:3]) in " ".join(out.stdout[match.end() :].split()[:40])
  assert re.search(r"^  -v,--verbosity: How much to say: quiet", out.stdout, re.M)  # train/cli.py


def test_end_to_end_metrics_json_and_export(tmp_path):
  model_dir, export_dir = tmp_path / "run", tmp_path / "export"
  out = run_binary(
    TINY
    + [
      "--epochs=2",
      "--early_stopping_patience=5",
      "--loss=sampled_softmax",
      "--negatives=mixed",
      "--logq=corrected",
      "--frequency=count_min",
      f"--model_dir={model_dir}",
      f"--export_dir={export_dir}",
    ]
  )
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

  # The run's whole configuration is recorded, in the metrics and in the export.
  cfg = config_flags.parse(
    RunConfig,
    TINY
    + [
      "--epochs=2",
      "--early_stopping_patience=5",
      "--frequency=count_min",
      f"--model_dir={model_dir}",
      f"--export_dir={export_dir}",
    ],
  )
  assert RunConfig.from_dict(metrics["config"]) == cfg
  meta = json.loads((export_dir / "export_meta.json").read_text())
  assert meta["num_items"] == 60 and meta["max_len"] == 10 and meta["embedding_dim"] == 8
  assert RunConfig.from_dict(meta["run_config"]) == cfg
  assert meta["data_fingerprint"] == metrics["data_fingerprint"]
  assert meta["data_fingerprint"]["num_users"] == 120
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
  np.testing.assert_allclose(
    serve(history=tf.constant(h[:, 3:]))["embedding"].numpy(), e10, atol=1e-5
  )
  longer = np.concatenate([np.array([[11, 12, 13]]), h[:, 3:]], 1)
  longer = np.concatenate([np.array([[1, 2, 3, 4]]), longer], 1)  # 14 items
  e_long = serve(history=tf.constant(longer))["embedding"].numpy()
  e_last = serve(history=tf.constant(longer[:, -10:]))["embedding"].numpy()
  np.testing.assert_allclose(e_long, e_last, atol=1e-5)

  # Evaluation defaults to the export's data: the 120-user world it was trained on, not the
  # default 2,000-user one; asking for another world is refused.
  ev = run_binary(
    [
      f"--export_dir={export_dir}",
      f"--output_dir={tmp_path / 'eval'}",
      "--ks=5,10",
      "--timing_repeats=1",
      "--noplot",
    ],
    module="eval.evaluate",
  )
  assert ev.returncode == 0, ev.stderr[-3000:]
  res = json.loads((tmp_path / "eval" / "eval_results.json").read_text())
  assert res["num_queries"] == 120 and res["data"]["synthetic_users"] == 120
  # Its exact search and the training binary's validation are the same computation.
  assert res["metrics"]["exact"]["recall@10"] == pytest.approx(
    metrics["test"]["recall@10"], abs=1e-6
  )
  ev = run_binary(
    [
      f"--export_dir={export_dir}",
      f"--output_dir={tmp_path / 'eval2'}",
      "--ks=5",
      "--synthetic_users=500",
    ],
    module="eval.evaluate",
  )
  assert ev.returncode != 0 and "not the data the export was trained on" in ev.stderr
  assert "--synthetic_users=500 (export: 120)" in ev.stderr


def test_other_losses_and_two_tower_run(tmp_path):
  for i, extra in enumerate(
    [
      ["--loss=gbce", "--negatives=uniform"],
      ["--model=two_tower", "--loss=full_softmax", "--use_user_id", "--hidden_dims=16"],
    ]
  ):
    out = run_binary(TINY + ["--epochs=1", f"--model_dir={tmp_path / str(i)}"] + extra)
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = json.loads((tmp_path / str(i) / "metrics.json").read_text())
    assert metrics["global_step"] == 4
  assert metrics["config"]["hidden_dims"] == [16] and metrics["config"]["use_user_id"]


def test_bad_flag_combination_fails_clearly(tmp_path):
  out = run_binary(TINY + ["--loss=bce", "--negatives=in_batch", f"--model_dir={tmp_path}"])
  assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
  assert out.stderr.strip().splitlines()[-1] == (  # one line (train/cli.py)
    "error: loss=bce draws uniform negatives (gSASRec's alpha is the uniform sampling rate); "
    "got negatives=in_batch"
  )
