"""`python -m train.keras3` (SASRec on Keras 3): it trains (the loss goes down) on ML-100K on
JAX and on synthetic data on TensorFlow; a run killed mid-epoch and rerun with the same command
ends with the same checkpoint (every variable: weights, Adam moments, estimator, seed states),
history and test metrics as an uninterrupted run (the TensorFlow run's checkpoint holds the
hash-array estimator's state, updated every step); the exported query encoder reloads in
a fresh process (jax and tensorflow) and gives the same validation metrics; --help lists the
run settings and --backend; bad input is one `error:` line with exit status 2."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]

ML100K = ["--dataset=movielens_raw", "--max_len=30", "--embedding_dim=16", "--num_blocks=1",
          "--num_negatives=16", "--batch_size=32", "--eval_batch_size=512",
          "--steps_per_epoch=6", "--learning_rate=0.01", "--noprogress"]
TINY = ["--dataset=synthetic", "--synthetic_users=60", "--synthetic_items=50",
        "--synthetic_min_len=5", "--synthetic_max_len=20", "--max_len=20", "--embedding_dim=16",
        "--num_blocks=1", "--num_negatives=8", "--batch_size=16", "--eval_batch_size=60",
        "--steps_per_epoch=5", "--learning_rate=0.01", "--frequency=hash_array",
        "--noprogress"]
# Kills the process (SIGKILL, nothing cleaned up) in the middle of epoch 3 (after global step
# 2 * 6 + 3), once epoch 2's checkpoint is on disk.
KILL_IN_EPOCH_3 = """
import os, runpy, signal
from train.keras3 import settings
settings.select_backend()
from train.keras3 import trainer
step = trainer.Trainer.train_step
def killing(self, batch):
  if self.step == 15:
    os.kill(os.getpid(), signal.SIGKILL)
  return step(self, batch)
trainer.Trainer.train_step = killing
runpy.run_module("train.keras3", run_name="__main__", alter_sys=True)
"""


_CACHE = {}


def _env(backend=None):
  env = {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS",
                                                           "TF_CPP_MIN_LOG_LEVEL")}
  env.update(PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
  if "dir" in _CACHE:   # JAX's compilation cache: the resumed run reuses the first runs' step
    env.update(JAX_COMPILATION_CACHE_DIR=_CACHE["dir"],
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
  if backend:
    env["KERAS_BACKEND"] = backend
  return env


def _start(args, script=None, backend=None):
  head = ["-c", script] if script else ["-m", "train.keras3"]
  return subprocess.Popen(["nice", "-n", "10", sys.executable, *head, *args], cwd=ROOT,
                          env=_env(backend), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def _finish(proc, timeout=600):
  out, err = proc.communicate(timeout=timeout)
  return proc.returncode, out, err


_RUNS = {}


def _runs(tmp_path_factory):
  """The ML-100K runs on JAX (uninterrupted; killed + resumed) and the synthetic TensorFlow run,
  started together once per session."""
  if _RUNS:
    return _RUNS
  base = tmp_path_factory.mktemp("keras3_binary")
  _CACHE["dir"] = str(base / "jax_cache")
  full, killed, tf_dir = base / "full", base / "killed", base / "tf"
  common = ML100K + ["--backend=jax", "--epochs=3"]
  procs = {
      "full": _start(common + [f"--model_dir={full}", f"--export_dir={full / 'export'}"]),
      "killed": _start(common + [f"--model_dir={killed}"], script=KILL_IN_EPOCH_3),
      "tf": _start(TINY + ["--backend=tensorflow", "--epochs=2", f"--model_dir={tf_dir}"]),
  }
  for name, proc in procs.items():
    _RUNS[name] = _finish(proc)
  _RUNS["resumed"] = _finish(_start(common + [f"--model_dir={killed}"]))
  _RUNS["dirs"] = dict(full=full, killed=killed, tf=tf_dir)
  return _RUNS


def _metrics(directory):
  with open(directory / "metrics.json") as f:
    return json.load(f)


def _last_checkpoint(directory):
  path = sorted((directory / "ckpt").glob("ckpt-*.npz"),
                key=lambda p: int(p.stem.split("-")[1]))[-1]
  with np.load(path) as f:
    return path.name, {k: f[k] for k in f.files if k.startswith("v")}


def test_trains_on_ml100k_with_jax_and_the_loss_decreases(data_dir, tmp_path_factory):
  runs = _runs(tmp_path_factory)
  code, out, err = runs["full"]
  assert code == 0, err[-3000:]
  m = _metrics(runs["dirs"]["full"])
  assert m["backend"] == "jax" and m["global_step"] == 18 and m["epochs_done"] == 3
  losses = [h["loss"] for h in m["history"]]
  assert losses[-1] < losses[0], losses
  ndcg = [h["val_ndcg@10"] for h in m["history"]]
  assert ndcg[-1] > ndcg[0], ndcg
  assert len([line for line in out.splitlines() if line.startswith("epoch ")]) == 3
  assert err.strip().splitlines()[-1].startswith("done: jax, step 18")
  # no serving SavedModel off the tensorflow backend: one line says so, the .keras is written
  assert len([line for line in out.splitlines() if "needs --backend=tensorflow" in line]) == 1
  export = runs["dirs"]["full"] / "export"
  assert (export / "query_encoder.keras").is_file() and not (export / "query_encoder").exists()
  assert m["test"]["num_queries"] > 900 and 0 <= m["test"]["ndcg@10"] <= 1


def test_killed_and_resumed_run_equals_the_uninterrupted_run(data_dir, tmp_path_factory):
  runs = _runs(tmp_path_factory)
  code, _, _ = runs["killed"]
  assert code == -9                                    # SIGKILL in epoch 3
  code, out, err = runs["resumed"]
  assert code == 0, err[-3000:]
  assert "resumed from" in out and "epoch 2, step 12" in out
  full, resumed = _metrics(runs["dirs"]["full"]), _metrics(runs["dirs"]["killed"])
  name_a, a = _last_checkpoint(runs["dirs"]["full"])
  name_b, b = _last_checkpoint(runs["dirs"]["killed"])
  assert name_a == name_b == "ckpt-18.npz"
  assert a.keys() == b.keys() and len(a) > 20
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  strip = lambda hs: [{k: v for k, v in h.items() if "seconds" not in k} for h in hs]  # noqa: E731
  assert strip(full["history"]) == strip(resumed["history"])
  assert full["test"] == resumed["test"] and full["val"] == resumed["val"]


@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
def test_export_reloads_in_a_fresh_process(backend, data_dir, tmp_path_factory):
  runs = _runs(tmp_path_factory)
  assert runs["full"][0] == 0
  export = runs["dirs"]["full"] / "export"
  out = export.parent / f"reloaded_{backend}.npz"
  proc = subprocess.run(["nice", "-n", "10", sys.executable, str(HERE / "export_worker.py"),
                         str(export), str(out)], env=dict(_env(backend), TF_CPP_MIN_LOG_LEVEL="3"),
                        capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  got = np.load(out)
  assert str(got["backend"]) == backend
  metrics = json.loads(str(got["metrics"]))
  want = _metrics(runs["dirs"]["full"])["val"]      # the best model, evaluated in training
  assert metrics["num_queries"] == want["num_queries"]
  for k in ("recall@10", "ndcg@10", "recall@20", "ndcg@20"):
    assert metrics[k] == pytest.approx(want[k], abs=2e-3), k
  if backend == "tensorflow":    # same embeddings on both backends
    other = np.load(export.parent / "reloaded_jax.npz")["queries"]
    np.testing.assert_allclose(got["queries"], other, rtol=1e-4, atol=1e-5)


def test_trains_on_the_tensorflow_backend(tmp_path_factory):
  code, out, err = _runs(tmp_path_factory)["tf"]
  assert code == 0, err[-3000:]
  m = _metrics(_runs(tmp_path_factory)["dirs"]["tf"])
  assert m["backend"] == "tensorflow" and m["global_step"] == 10
  losses = [h["loss"] for h in m["history"]]
  assert all(np.isfinite(losses)), losses
  _, state = _last_checkpoint(_runs(tmp_path_factory)["dirs"]["tf"])
  # the hash-array estimator's step counter (a scalar int variable equal to the 10 updates)
  assert any(v.shape == () and v.dtype.kind == "i" and int(v) == 10 for v in state.values())
  assert err.strip().splitlines()[-1].startswith("done: tensorflow, step 10")


def test_help_lists_the_run_settings_and_the_backend():
  code, out, err = _finish(_start(["--help"]))
  assert code in (0, 1), err            # absl's --help exits 1 after printing
  for flag in ("--backend", "--logq", "--negatives", "--num_negatives", "--model_dir",
               "--dataset", "--early_stopping_patience"):
    assert flag in out, flag


BAD_INPUT = [
    (["--no_such_flag=1"], "no_such_flag"),
    (["--backend=mxnet"], "backend"),
    (["--model=two_tower"], "--model=two_tower is not available"),
    (["--strategy=parameter_server"], "--strategy=parameter_server is not available"),
]


def test_bad_input_is_one_error_line_and_status_2(tmp_path):
  procs = [_start(args + [f"--model_dir={tmp_path}"]) for args, _ in BAD_INPUT]
  for (args, needle), proc in zip(BAD_INPUT, procs):
    code, _, err = _finish(proc)
    assert code == 2, (args, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], (args, err)
