"""What the `python -m train.keras3` tests share: the binary started as a subprocess (CPU only,
the repository on PYTHONPATH, tf-keras switches removed from the environment), the small ML-100K
and synthetic run settings, a script that SIGKILLs the binary at a given global step (nothing
cleaned up: the crash a resume must survive), and readers of a run's metrics.json and newest
checkpoint."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[3]

# ML-100K, small enough for a test: 6 steps per epoch of 32 sequences of at most 30 items.
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
]
# Synthetic data, tinier still: 5 steps per epoch of 16 sequences, the hash-array estimator.
SYNTHETIC = [
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
  "--steps_per_epoch=5",
  "--learning_rate=0.01",
  "--frequency=hash_array",
  "--noprogress",
]

_KILL = """
import os, runpy, signal
from train.keras3 import settings
settings.select_backend()
from train.keras3 import trainer
step = trainer.Trainer.train_step
def killing(self, batch):
  if self.step == {step}:
    os.kill(os.getpid(), signal.SIGKILL)
  return step(self, batch)
trainer.Trainer.train_step = killing
runpy.run_module("train.keras3", run_name="__main__", alter_sys=True)
"""


def kill_at_step(step: int) -> str:
  """A ``python -c`` script that runs the binary (its command line as given) and SIGKILLs it
  just before global step ``step``."""
  return _KILL.format(step=int(step))


def env(backend=None, drop=()):
  """The subprocess environment: ``backend`` as KERAS_BACKEND, the variables in ``drop``
  removed; the rest inherited, the session's JAX compilation cache (tests/conftest.py)
  included."""
  removed = ("TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL", *drop)
  result = {k: v for k, v in os.environ.items() if k not in removed}
  result.update(PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
  if backend:
    result["KERAS_BACKEND"] = backend
  return result


def start(args, script=None, environment=None, head=None, shuffle="numpy"):
  """Starts ``python -m train.keras3 ARGS`` (or ``python -c SCRIPT ARGS``, or ``python HEAD
  ARGS``) with ``environment`` (default `env()`); stdout and stderr piped.

  The binary (and SCRIPT, which runs it) gets ``--shuffle_rng=SHUFFLE`` before ARGS (a later
  flag in ARGS wins; None: the binary's default). numpy, because the default (the tf-keras
  binary's order, TensorFlow's stateless shuffle) would import TensorFlow into every Keras 3
  process (~9 s of this CPU each): that order is tested in tests/train/data/test_batches.py and
  followed by the tf-keras comparisons (bench/keras3_trajectory.py), the default's error without
  TensorFlow in test_without_tensorflow.py."""
  if head is None:
    head = ["-c", script] if script else ["-m", "train.keras3"]
    if shuffle is not None:
      args = [f"--shuffle_rng={shuffle}", *args]
  return subprocess.Popen(
    [sys.executable, *head, *args],
    cwd=ROOT,
    env=environment or env(),
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )


def finish(proc, timeout=900):
  """(status, stdout, stderr) of ``proc`` once it ends."""
  out, err = proc.communicate(timeout=timeout)
  return proc.returncode, out, err


def killed(args, step: int, environment=None, timeout=900) -> None:
  """Runs the binary with ``args`` until it is SIGKILLed at global step ``step``."""
  proc = start(args, kill_at_step(step), environment)
  proc.communicate(timeout=timeout)
  assert proc.returncode == -9, proc.returncode


def metrics(directory):
  with open(pathlib.Path(directory) / "metrics.json") as f:
    return json.load(f)


def last_checkpoint(directory):
  """(file name, variable paths, {v<i>: value}) of the run's newest checkpoint."""
  path = sorted(
    (pathlib.Path(directory) / "ckpt").glob("ckpt-*.npz"), key=lambda p: int(p.stem.split("-")[1])
  )[-1]
  with np.load(path) as f:
    return (path.name, json.loads(str(f["paths"])), {k: f[k] for k in f.files if k.startswith("v")})


def assert_same_run(a, b) -> None:
  """Runs ``a`` and ``b`` (folders) end with the same newest checkpoint (file, variable paths,
  every value bit for bit), the same history (timings aside) and the same val / test metrics."""
  name_a, paths_a, values_a = last_checkpoint(a)
  name_b, paths_b, values_b = last_checkpoint(b)
  assert (name_a, paths_a, sorted(values_a)) == (name_b, paths_b, sorted(values_b))
  for key in values_a:
    np.testing.assert_array_equal(values_a[key], values_b[key], err_msg=key)
  ma, mb = metrics(a), metrics(b)
  assert ma["val"] == mb["val"] and ma["test"] == mb["test"]
  strip = lambda h: [{k: v for k, v in e.items() if "seconds" not in k} for e in h]
  assert strip(ma["history"]) == strip(mb["history"])
