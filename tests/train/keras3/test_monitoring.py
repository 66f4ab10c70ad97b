"""`python -m train.keras3` stops on a non-finite gradient and writes TensorBoard scalars, as
`python -m train` does (tests/train/test_cli.py): on JAX, a gradient that turns NaN from the
third step on (the loss stays finite) stops training at step 3 with exit status 1 and one
`error:` line naming the step and the kept checkpoint of epoch 1 (step 2), nothing newer is
written and that checkpoint is finite; the per-step train/loss and train/mean_weight and the
epoch's val/* and train/epoch_loss are in model_dir/tensorboard with the run's values.
`train.keras3.finite.GradientCheckedAdam` counts a step with a NaN or inf gradient (and not a
finite one) on the tensorflow and torch backends too."""

import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from tensorboard_events import read_scalars

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]

TINY = [
  "--dataset=synthetic",
  "--synthetic_users=60",
  "--synthetic_items=50",
  "--synthetic_min_len=5",
  "--synthetic_max_len=20",
  "--max_len=20",
  "--embedding_dim=16",
  "--num_blocks=1",
  "--num_negatives=8",
  "--batch_size=16",
  "--eval_batch_size=60",
  "--learning_rate=0.01",
  "--noprogress",
  "--logq=corrected",
  "--shuffle_rng=numpy",  # no TensorFlow in the jax and torch runs (keras3_binary_harness.py)
]

# From the third step on (global step 2 done), the loss gets + p * sqrt(0 * sum(E_out) + 1 - p)
# with p = 1: its value is 0 (the loss stays finite), its gradient d/dE_out = inf * 0 = NaN.
# p comes from a non-trainable step counter the training call increments, so the compiled step
# computes it from its own state (the jax step keeps the state on the device between steps).
NAN_GRADIENT = """
import runpy
from train.keras3 import settings
settings.select_backend()
from train.keras3 import trainer   # (the application's tf-keras stack before keras)
from train.keras3 import objective
import keras
from keras import ops

init, call = objective.RetrievalModel.__init__, objective.RetrievalModel.call

def patched_init(self, *args, **kwargs):
  init(self, *args, **kwargs)
  self.calls = keras.Variable(0.0, trainable=False, name="calls")

def patched_call(self, batch, training=False):
  loss, weight, valid = call(self, batch, training=training)
  if training:
    self.calls.assign_add(1.0)
  poison = ops.cast(ops.greater_equal(self.calls, 3.0), "float32")
  z = ops.sum(self.encoder.all_item_embeddings()) * 0.0 + (1.0 - poison)
  return loss + poison * ops.sqrt(z), weight, valid

objective.RetrievalModel.__init__ = patched_init
objective.RetrievalModel.call = patched_call
runpy.run_module("train.keras3", run_name="__main__", alter_sys=True)
"""

COUNTS = """
from train.keras3 import settings
settings.select_backend()
import numpy as np
import keras
from train.keras3 import finite
w = keras.Variable(np.ones(3, "float32"))
opt = finite.GradientCheckedAdam(0.1)
opt.build([w])
counts = []
for g in ([1.0, 2.0, 3.0], [1.0, float("nan"), 3.0], [0.5, 0.5, 0.5], [float("inf"), 0.0, 0.0]):
  opt.apply([keras.ops.convert_to_tensor(np.array(g, "float32"))], [w])
  counts.append(opt.nonfinite_count())
print("COUNTS", counts)
"""


def _env(backend):
  env = {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS", "KERAS_BACKEND")}
  env.update(
    PYTHONPATH=str(ROOT),
    JAX_PLATFORMS="cpu",
    CUDA_VISIBLE_DEVICES="",
    TF_CPP_MIN_LOG_LEVEL="3",
    KERAS_BACKEND=backend,
  )
  return env


def _python(args, backend, timeout=600):
  return subprocess.run(
    [sys.executable, *args],
    cwd=ROOT,
    env=_env(backend),
    capture_output=True,
    text=True,
    timeout=timeout,
  )


def _lines(text):
  return [line for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory):
  model_dir = tmp_path_factory.mktemp("keras3_nan") / "run"
  out = _python(
    [
      "-c",
      NAN_GRADIENT,
      *TINY,
      "--backend=jax",
      "--epochs=3",
      "--steps_per_epoch=2",
      f"--model_dir={model_dir}",
    ],
    "jax",
  )
  return model_dir, out


def test_nan_gradient_stops_at_its_step_and_keeps_the_last_epoch(nan_run):
  model_dir, out = nan_run
  assert out.returncode == 1, out.stderr[-3000:]
  assert "Traceback" not in out.stderr
  last = _lines(out.stderr)[-1]
  assert last.startswith("error: non-finite loss or gradient at step 3 (epoch 2)"), out.stderr
  assert f"the checkpoint of epoch 1 (step 2) in {model_dir / 'ckpt'} is kept" in last
  assert re.findall(r"^epoch (\d+)", out.stdout, re.M) == ["1"]
  assert sorted(p.name for p in (model_dir / "ckpt").glob("*.npz")) == ["ckpt-2.npz"]
  assert not (model_dir / "metrics.json").exists()
  with np.load(model_dir / "ckpt" / "ckpt-2.npz") as f:
    values = {k: f[k] for k in f.files if k.startswith("v")}
    state = json.loads(str(f["state"]))
  assert state["epoch"] == 1 and state["step"] == 2 and len(values) > 20
  for k, v in values.items():
    if np.issubdtype(v.dtype, np.floating):
      assert np.all(np.isfinite(v)), k


def test_tensorboard_scalars_are_the_tf_keras_binarys_tags(nan_run):
  model_dir, out = nan_run
  scalars, _ = read_scalars(model_dir / "tensorboard")
  with np.load(model_dir / "ckpt" / "ckpt-2.npz") as f:
    epoch1 = json.loads(str(f["state"]))["history"][0]
  # per step: the two finished steps of epoch 1 and the finished step of epoch 2, not step 3
  assert sorted(scalars["train/loss"]) == sorted(scalars["train/mean_weight"]) == [1, 2]
  assert np.mean([scalars["train/loss"][s] for s in (1, 2)]) == pytest.approx(
    epoch1["loss"], rel=1e-6
  )
  assert np.mean([scalars["train/mean_weight"][s] for s in (1, 2)]) == pytest.approx(
    epoch1["mean_weight"], rel=1e-6
  )
  assert all(0 < w <= 1 for w in scalars["train/mean_weight"].values())  # corrected: w < 1
  assert scalars["train/epoch_loss"] == {2: pytest.approx(epoch1["loss"], rel=1e-6)}
  for k in ("recall@10", "ndcg@10", "recall@20", "ndcg@20"):
    assert scalars[f"val/{k}"] == {2: pytest.approx(epoch1[f"val_{k}"], rel=1e-6)}, k
  assert not any(tag.endswith("num_queries") for tag in scalars)
  assert re.search(r"^epoch 1 step 2 loss [\d.]+ w [\d.]+ val R@10", out.stdout, re.M), out.stdout


@pytest.mark.parametrize("backend", ["tensorflow", "torch"])
def test_the_optimizer_counts_non_finite_gradients(backend):
  out = _python(["-c", COUNTS], backend, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  assert "COUNTS [0, 1, 1, 2]" in out.stdout, out.stdout
