"""`python -m train.keras3 --backend=jax` where TensorFlow cannot be imported (every import of
tensorflow, tf_keras, TFRS, ScaNN or TFDS raises, as on a machine without them): with
--shuffle_rng=numpy it trains, validates, evaluates test, exports the .keras encoder and writes
the TensorBoard scalars (train.summaries, tf.summary's format without TensorFlow); with
the default --shuffle_rng=tensorflow it stops at once with one `error:` line naming the fix."""

import json

import keras3_binary_harness as harness
import pytest
import without_tensorflow
from tensorboard_events import read_scalars  # TensorFlow's reader; the binary has none

ENV = without_tensorflow.hide(harness.env("jax"))


def test_trains_and_exports_without_tensorflow(tmp_path):
  model_dir = tmp_path / "run"
  proc = harness.start(
    harness.SYNTHETIC
    + [
      "--backend=jax",
      "--shuffle_rng=numpy",
      "--epochs=2",
      f"--model_dir={model_dir}",
      f"--export_dir={model_dir / 'export'}",
    ],
    environment=ENV,
  )
  status, out, err = harness.finish(proc)
  assert status == 0, err[-3000:]
  metrics = harness.metrics(model_dir)
  assert metrics["shuffle_rng"] == "numpy" and metrics["backend"] == "jax"
  assert metrics["epochs_done"] == 2 and 0.0 <= metrics["test"]["ndcg@10"] <= 1.0
  assert len(metrics["history"]) == 2
  assert (model_dir / "export" / "query_encoder.keras").is_file()
  meta = json.loads((model_dir / "export" / "metadata.json").read_text())
  assert meta["backend"] == "jax"
  scalars, _ = read_scalars(model_dir / "tensorboard")  # TensorFlow reads, in this process
  assert sorted(scalars["train/loss"]) == list(range(1, 11))  # 2 epochs of 5 steps
  assert sorted(scalars["val/ndcg@10"]) == [5, 10]
  assert scalars["val/ndcg@10"][10] == pytest.approx(metrics["history"][1]["val_ndcg@10"], rel=1e-6)
  assert {"train/mean_weight", "train/epoch_loss", "val/recall@20"} <= set(scalars)


def test_tensorflow_order_without_tensorflow_is_one_error_line(tmp_path):
  proc = harness.start(
    harness.SYNTHETIC + ["--backend=jax", "--epochs=1", f"--model_dir={tmp_path / 'run'}"],
    environment=ENV,
    shuffle=None,  # the default
  )
  status, _, err = harness.finish(proc, timeout=300)
  assert status == 2, err[-3000:]
  lines = [l for l in err.splitlines() if l.startswith("error:")]
  assert len(lines) == 1 and "--shuffle_rng=numpy" in lines[0], err[-3000:]
