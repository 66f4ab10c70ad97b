"""`python -m train.keras3 --backend=torch`: a run of 2 epochs, resumed by the same command with
--epochs=3, ends with the checkpoint (every variable: weights, Adam moments, the hash-array
estimator's state, the seed states), history and val/test metrics of an uninterrupted 3-epoch
run, bit for bit (as the JAX run in test_binary.py); its query_encoder.keras export reloads in a
fresh torch process and gives the run's validation metrics."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]

TINY = ["--dataset=synthetic", "--synthetic_users=60", "--synthetic_items=50",
        "--synthetic_min_len=5", "--synthetic_max_len=20", "--max_len=20", "--embedding_dim=16",
        "--num_blocks=1", "--num_negatives=8", "--batch_size=16", "--eval_batch_size=60",
        "--steps_per_epoch=5", "--learning_rate=0.01", "--frequency=hash_array",
        "--early_stopping_patience=10", "--noprogress", "--backend=torch"]


def _env():
  env = {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS", "KERAS_BACKEND")}
  env.update(PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
  return env


def _start(args, head=("-m", "train.keras3"), env=None):
  return subprocess.Popen(["nice", "-n", "10", sys.executable, *head, *args], cwd=ROOT,
                          env=env or _env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def _finish(proc, timeout=900):
  out, err = proc.communicate(timeout=timeout)
  return proc.returncode, out, err


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  base = tmp_path_factory.mktemp("keras3_torch")
  full, resumed = base / "full", base / "resumed"
  procs = {"full": _start(TINY + ["--epochs=3", f"--model_dir={full}",
                                  f"--export_dir={full / 'export'}"]),
           "first": _start(TINY + ["--epochs=2", f"--model_dir={resumed}"])}
  result = {name: _finish(proc) for name, proc in procs.items()}
  result["resumed"] = _finish(_start(TINY + ["--epochs=3", f"--model_dir={resumed}"]))
  result["dirs"] = dict(full=full, resumed=resumed)
  return result


def _metrics(directory):
  return json.loads((directory / "metrics.json").read_text())


def _last_checkpoint(directory):
  path = sorted((directory / "ckpt").glob("ckpt-*.npz"),
                key=lambda p: int(p.stem.split("-")[1]))[-1]
  with np.load(path) as f:
    return path.name, {k: f[k] for k in f.files if k.startswith("v")}


def test_resumed_third_epoch_equals_the_uninterrupted_run(runs):
  for name in ("full", "first", "resumed"):
    assert runs[name][0] == 0, (name, runs[name][2][-3000:])
  assert "resumed from" in runs["resumed"][1] and "epoch 2, step 10" in runs["resumed"][1]
  full, resumed = _metrics(runs["dirs"]["full"]), _metrics(runs["dirs"]["resumed"])
  assert full["backend"] == resumed["backend"] == "torch"
  assert full["global_step"] == resumed["global_step"] == 15
  name_a, a = _last_checkpoint(runs["dirs"]["full"])
  name_b, b = _last_checkpoint(runs["dirs"]["resumed"])
  assert name_a == name_b == "ckpt-15.npz"
  assert a.keys() == b.keys() and len(a) > 20
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  strip = lambda hs: [{k: v for k, v in h.items() if "seconds" not in k} for h in hs]  # noqa: E731
  assert strip(full["history"]) == strip(resumed["history"])
  assert full["test"] == resumed["test"] and full["val"] == resumed["val"]
  losses = [h["loss"] for h in full["history"]]
  assert all(np.isfinite(losses)) and losses[-1] < losses[0], losses


def test_export_reloads_in_a_fresh_torch_process(runs):
  assert runs["full"][0] == 0, runs["full"][2][-3000:]
  assert "needs --backend=tensorflow" in runs["full"][1]
  export = runs["dirs"]["full"] / "export"
  out = export.parent / "reloaded_torch.npz"
  code, _, err = _finish(_start([str(export), str(out)], head=(str(HERE / "export_worker.py"),),
                                env=dict(_env(), KERAS_BACKEND="torch")))
  assert code == 0, err[-3000:]
  got = np.load(out)
  assert str(got["backend"]) == "torch"
  metrics = json.loads(str(got["metrics"]))
  want = _metrics(runs["dirs"]["full"])["val"]      # the best model, evaluated in training
  assert metrics["num_queries"] == want["num_queries"]
  for k in ("recall@10", "ndcg@10", "recall@20", "ndcg@20"):
    assert metrics[k] == pytest.approx(want[k], abs=1e-6), k
