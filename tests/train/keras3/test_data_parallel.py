"""`python -m train.keras3 --strategy=mirrored --cpu_replicas=2` (JAX): keras.distribution's
DataParallel over two host CPU devices (XLA_FLAGS set by the binary before jax is imported).
On ML-100K with mixed negatives (the in-batch pool gathered across the devices) the weights live
on 2 devices and the first epoch's loss, mean weight and validation metrics equal the
single-device run's within float tolerance; a data-parallel run killed mid-epoch 2 and rerun ends
with the uninterrupted data-parallel run's checkpoint, history and metrics, bit for bit. Other
backends and a batch that does not split evenly are one `error:` line (status 2); the host
device flag is added to (or replaced in) XLA_FLAGS only for jax."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np

from train.keras3 import settings

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]

ML100K = ["--dataset=movielens_raw", "--max_len=30", "--embedding_dim=16", "--num_blocks=1",
          "--num_negatives=16", "--batch_size=32", "--eval_batch_size=512",
          "--steps_per_epoch=6", "--learning_rate=0.01", "--noprogress", "--epochs=2",
          "--backend=jax", "--negatives=mixed"]
PARALLEL = ["--strategy=mirrored", "--cpu_replicas=2"]
# SIGKILL in the middle of epoch 2 (after global step 6 + 3), epoch 1's checkpoint on disk.
KILL_IN_EPOCH_2 = """
import os, runpy, signal
from train.keras3 import settings
settings.select_backend()
from train.keras3 import trainer
step = trainer.Trainer.train_step
def killing(self, batch):
  if self.step == 9:
    os.kill(os.getpid(), signal.SIGKILL)
  return step(self, batch)
trainer.Trainer.train_step = killing
runpy.run_module("train.keras3", run_name="__main__", alter_sys=True)
"""


def _start(args, script=None):
  env = {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS",
                                                           "TF_CPP_MIN_LOG_LEVEL", "XLA_FLAGS")}
  env.update(PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
  head = ["-c", script] if script else ["-m", "train.keras3"]
  return subprocess.Popen(["nice", "-n", "10", sys.executable, *head, *args], cwd=ROOT,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


_RUNS = {}


def _runs(data_dir, tmp_path_factory):
  """One device, two devices, two devices killed + resumed (once per session)."""
  if _RUNS:
    return _RUNS
  assert data_dir.exists()
  base = tmp_path_factory.mktemp("keras3_data_parallel")
  procs = {"one": _start(ML100K + [f"--model_dir={base / 'one'}"])}
  killed = _start(ML100K + PARALLEL + [f"--model_dir={base / 'resumed'}"], KILL_IN_EPOCH_2)
  killed.communicate(timeout=900)
  assert killed.returncode == -9, killed.returncode
  procs["two"] = _start(ML100K + PARALLEL + [f"--model_dir={base / 'two'}"])
  procs["resumed"] = _start(ML100K + PARALLEL + [f"--model_dir={base / 'resumed'}"])
  for name, proc in procs.items():
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, f"{name}: {err[-3000:]}"
    _RUNS[name] = base / name
    _RUNS[f"{name}_stdout"] = out
  return _RUNS


def _metrics(directory):
  with open(directory / "metrics.json") as f:
    return json.load(f)


def _last_checkpoint(directory):
  path = sorted((directory / "ckpt").glob("ckpt-*.npz"),
                key=lambda p: int(p.stem.split("-")[1]))[-1]
  with np.load(path) as f:
    return json.loads(str(f["paths"])), {k: f[k] for k in f.files if k.startswith("v")}


def test_two_devices_give_the_single_device_first_epoch(data_dir, tmp_path_factory):
  runs = _runs(data_dir, tmp_path_factory)
  one, two = _metrics(runs["one"]), _metrics(runs["two"])
  assert one["devices"] == 1 and two["devices"] == 2
  assert "over 2 devices, 16 sequences each" in runs["two_stdout"]
  first_one, first_two = one["history"][0], two["history"][0]
  keys = [k for k in first_one if k.startswith("val_") or k in ("loss", "mean_weight")]
  assert "val_ndcg@10" in keys and "loss" in keys
  for key in keys:
    np.testing.assert_allclose(first_two[key], first_one[key], rtol=1e-4, atol=1e-6,
                               err_msg=key)
  losses = [h["loss"] for h in two["history"]]
  assert len(losses) == 2 and np.all(np.isfinite(losses)) and losses[1] < losses[0], losses
  assert all(np.isfinite(v) for v in two["test"].values())


def test_data_parallel_run_resumes_bit_exactly(data_dir, tmp_path_factory):
  runs = _runs(data_dir, tmp_path_factory)
  assert "resumed from" in runs["resumed_stdout"]
  paths, a = _last_checkpoint(runs["two"])
  paths_b, b = _last_checkpoint(runs["resumed"])
  assert paths == paths_b and sorted(a) == sorted(b)
  for key in a:
    np.testing.assert_array_equal(a[key], b[key], err_msg=key)
  ma, mb = _metrics(runs["two"]), _metrics(runs["resumed"])
  assert ma["test"] == mb["test"] and ma["val"] == mb["val"] and mb["devices"] == 2
  strip = lambda h: [{k: v for k, v in e.items() if "seconds" not in k} for e in h]  # noqa
  assert strip(ma["history"]) == strip(mb["history"])


BAD_INPUT = [
    (["--backend=tensorflow"] + PARALLEL, "needs --backend=jax"),
    (["--backend=torch", "--strategy=mirrored"], "needs --backend=jax"),
    (["--batch_size=33"] + PARALLEL, "multiple of the 2"),
    (["--strategy=multi_worker"], "--strategy=multi_worker is not available"),
]


def test_bad_input_is_one_error_line(data_dir, tmp_path):
  procs = [_start(ML100K + args + [f"--model_dir={tmp_path}"]) for args, _ in BAD_INPUT]
  for (args, needle), proc in zip(BAD_INPUT, procs):
    _, err = proc.communicate(timeout=600)
    lines = err.strip().splitlines()
    assert proc.returncode == 2, (args, err[-2000:])
    assert lines and lines[-1].startswith("error: ") and needle in lines[-1], (args, err[-2000:])


def test_host_device_count_is_set_for_jax_only(monkeypatch):
  monkeypatch.setenv("XLA_FLAGS", "--xla_foo=1 --xla_force_host_platform_device_count=8")
  monkeypatch.setenv("KERAS_BACKEND", "jax")
  assert settings.select_backend(["prog", "--backend=jax", "--cpu_replicas", "3"]) == "jax"
  assert os.environ["XLA_FLAGS"] == "--xla_foo=1 --xla_force_host_platform_device_count=3"
  monkeypatch.setenv("XLA_FLAGS", "")
  settings.select_backend(["prog", "--backend=torch", "--cpu_replicas=3"])
  assert os.environ["XLA_FLAGS"] == "" and os.environ["KERAS_BACKEND"] == "torch"
  settings.select_backend(["prog", "--cpu_replicas=0"])
  assert os.environ["XLA_FLAGS"] == "" and os.environ["KERAS_BACKEND"] == "jax"
