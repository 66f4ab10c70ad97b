"""`python -m train.keras3 --negatives=midx` on ML-100K (JAX): the library's Keras 3 MIDX sampler
in the binary trains 2 epochs with a decreasing loss and finite metrics, its index is refreshed
at the start of every epoch (the tf-keras trainer's schedule: refresh count 2 after 2 epochs)
and checkpointed (codebooks, cells, refresh count, seed state); a run killed mid-epoch 2 and
rerun ends with the uninterrupted run's checkpoint (every variable, the index included),
history and metrics, bit for bit."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]

ML100K = ["--dataset=movielens_raw", "--max_len=30", "--embedding_dim=16", "--num_blocks=1",
          "--num_negatives=16", "--batch_size=32", "--eval_batch_size=512",
          "--steps_per_epoch=6", "--learning_rate=0.01", "--noprogress", "--epochs=2",
          "--backend=jax", "--negatives=midx", "--midx_codewords=8"]
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
                                                           "TF_CPP_MIN_LOG_LEVEL")}
  env.update(PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
  head = ["-c", script] if script else ["-m", "train.keras3"]
  return subprocess.Popen(["nice", "-n", "10", sys.executable, *head, *args], cwd=ROOT,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


_RUNS = {}


def _runs(data_dir, tmp_path_factory):
  """The uninterrupted run and the killed + resumed one (once per session)."""
  if _RUNS:
    return _RUNS
  assert data_dir.exists()
  base = tmp_path_factory.mktemp("keras3_midx")
  full = _start(ML100K + [f"--model_dir={base / 'full'}"])
  killed = _start(ML100K + [f"--model_dir={base / 'resumed'}"], KILL_IN_EPOCH_2)
  killed.communicate(timeout=900)
  assert killed.returncode == -9, killed.returncode
  resumed = _start(ML100K + [f"--model_dir={base / 'resumed'}"])
  for name, proc in (("full", full), ("resumed", resumed)):
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, f"{name}: {err[-3000:]}"
    _RUNS[name] = base / name
  _RUNS["resumed_stdout"] = out
  return _RUNS


def _metrics(directory):
  with open(directory / "metrics.json") as f:
    return json.load(f)


def _last_checkpoint(directory):
  """(variable paths, {v<i>: value}) of the newest checkpoint."""
  path = sorted((directory / "ckpt").glob("ckpt-*.npz"),
                key=lambda p: int(p.stem.split("-")[1]))[-1]
  with np.load(path) as f:
    return json.loads(str(f["paths"])), {k: f[k] for k in f.files if k.startswith("v")}


def test_midx_trains_two_epochs_with_a_decreasing_loss(data_dir, tmp_path_factory):
  m = _metrics(_runs(data_dir, tmp_path_factory)["full"])
  assert m["config"]["negatives"] == "midx" and m["config"]["midx_codewords"] == 8
  losses = [h["loss"] for h in m["history"]]
  assert len(losses) == 2 and np.all(np.isfinite(losses)) and losses[1] < losses[0], losses
  for split in ("val", "test"):
    assert all(np.isfinite(v) for v in m[split].values()), m[split]
  assert m["test"]["ndcg@10"] > 0


def test_midx_index_is_refreshed_every_epoch_and_checkpointed(data_dir, tmp_path_factory):
  run = _runs(data_dir, tmp_path_factory)["full"]
  paths, values = _last_checkpoint(run)
  n = _metrics(run)["num_items"]
  midx = {p.split("midx/")[-1]: values[f"v{i}"] for i, p in enumerate(paths)
          if "midx/" in p}
  assert int(midx["num_refreshes"]) == 2, sorted(midx)    # epochs 1 and 2 started with one
  counts = midx["cell_counts"]
  assert counts.shape == (64,) and counts.sum() == midx["item_codes"].shape[0] == n
  assert np.isfinite(midx["codebook_1"]).all() and np.abs(midx["codebook_1"]).sum() > 0
  assert np.array_equal(np.sort(midx["sorted_items"]), np.arange(n))


def test_midx_run_resumes_bit_exactly(data_dir, tmp_path_factory):
  runs = _runs(data_dir, tmp_path_factory)
  assert "resumed from" in runs["resumed_stdout"]
  paths, a = _last_checkpoint(runs["full"])
  paths_b, b = _last_checkpoint(runs["resumed"])
  assert paths == paths_b and sorted(a) == sorted(b)
  for key in a:
    np.testing.assert_array_equal(a[key], b[key], err_msg=key)
  ma, mb = _metrics(runs["full"]), _metrics(runs["resumed"])
  assert ma["test"] == mb["test"] and ma["val"] == mb["val"]
  strip = lambda h: [{k: v for k, v in e.items() if "seconds" not in k} for e in h]  # noqa
  assert strip(ma["history"]) == strip(mb["history"])
