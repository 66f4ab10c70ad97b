"""SIGKILL a training run mid-epoch and rerun the same command: it resumes from the last
checkpoint and ends bit-for-bit where an uninterrupted run ends (same step, optimizer state,
estimator counts, cross-batch memory and weights: nothing lost, nothing counted twice)."""

import functools
import json
import os
import signal
import subprocess
import sys
import time

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARGS = [
  "--dataset=synthetic",
  "--synthetic_users=100",
  "--synthetic_items=50",
  "--synthetic_min_len=6",
  "--synthetic_max_len=14",
  "--max_len=10",
  "--embedding_dim=8",
  "--num_blocks=1",
  "--num_negatives=16",
  "--batch_size=16",
  "--steps_per_epoch=60",
  "--epochs=2",
  "--frequency=count_min",
  "--negatives=mixed",
  "--cross_batch=3",  # the memory of the last 3 batches is part of the checkpoint
  "--progress=false",
]


def _start(model_dir):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
  return subprocess.Popen(
    [sys.executable, "-m", "train", *ARGS, f"--model_dir={model_dir}"],
    cwd=ROOT,
    env=env,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.PIPE,
    text=True,
  )


def _finish(proc, timeout=240):
  try:
    _, err = proc.communicate(timeout=timeout)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait(timeout=30)
  assert proc.returncode == 0, err[-3000:]


def _variables(model_dir):
  reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(model_dir / "ckpt")))
  return {
    n: reader.get_tensor(n)
    for n in reader.get_variable_to_shape_map()
    if not n.startswith("_CHECKPOINTABLE")
  }


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
  """The one uninterrupted run of ARGS both tests compare with: started when the first test asks
  for it (beside that test's own runs); calling the fixture's value waits for its end and gives
  its folder."""
  full = tmp_path_factory.mktemp("uninterrupted") / "full"
  proc = _start(full)

  @functools.cache
  def finished():
    _finish(proc)
    return full

  yield finished
  if proc.poll() is None:
    proc.kill()
    proc.wait(timeout=30)


def test_sigkill_mid_epoch_then_rerun_resumes_exactly(tmp_path, uninterrupted):
  killed = tmp_path / "killed"
  victim = _start(killed)
  try:
    deadline = time.time() + 200
    index = killed / "ckpt" / "checkpoint"
    while not index.exists():  # end of epoch 1 is checkpointed
      assert victim.poll() is None, victim.stderr.read()[-3000:]
      assert time.time() < deadline, "no checkpoint within 200 s"
      time.sleep(0.05)
    time.sleep(0.1)  # inside epoch 2 (60 steps)
    assert victim.poll() is None, "the run finished before it could be killed"
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    assert victim.returncode == -signal.SIGKILL
    saved = json.loads((killed / "history.json").read_text())
    assert len(saved) < 2  # killed before the run finished
    assert len(list((killed / "ckpt").glob("ckpt-*.index"))) == len(saved)
  finally:
    if victim.poll() is None:
      victim.kill()
      victim.wait(timeout=30)
  _finish(_start(killed))  # the same command again
  full = uninterrupted()
  a, b = _variables(full), _variables(killed)
  assert set(a) == set(b)
  step = [n for n in a if n.startswith("step")][0]
  assert int(a[step]) == int(b[step]) == 120
  estimator = [n for n in a if n.startswith("estimator")]
  optimizer = [n for n in a if "OPTIMIZER_SLOT" in n or n.startswith("optimizer")]
  assert estimator and optimizer
  memory = [n for n in a if n.startswith("cross_batch")]
  pushed = [n for n in memory if "num_pushed" in n]
  assert pushed and any("ids" in n for n in memory), memory
  assert int(a[pushed[0]]) == 120  # one push per training step
  for n in estimator + memory:  # counts and the memory: nothing lost or double counted
    np.testing.assert_array_equal(a[n], b[n], err_msg=n)
  for n in a:
    np.testing.assert_allclose(a[n], b[n], rtol=1e-5, atol=1e-6, err_msg=n)
  ma = json.loads((full / "metrics.json").read_text())
  mb = json.loads((killed / "metrics.json").read_text())
  assert [h["epoch"] for h in mb["history"]] == [1, 2]
  np.testing.assert_allclose(
    [h["loss"] for h in ma["history"]], [h["loss"] for h in mb["history"]], rtol=1e-5
  )


def test_time_budget_pauses_between_epochs_and_chunks_end_where_one_run_ends(
  tmp_path, uninterrupted
):
  """--time_budget_minutes: a process whose next epoch would pass the budget stops after its
  epoch (exit status EXIT_PAUSED, the checkpoint kept, no metrics.json); rerunning the same
  command one chunk at a time (each does at least one epoch) ends bit-for-bit where one
  uninterrupted run ends."""
  from train.trainer import EXIT_PAUSED

  chunked = tmp_path / "chunked"
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
  command = [
    sys.executable,
    "-m",
    "train",
    *ARGS,
    f"--model_dir={chunked}",
    "--time_budget_minutes=0.0001",
  ]  # 6 ms: one epoch per process
  codes, epochs = [], []
  for _ in range(3):
    proc = subprocess.run(
      command,
      cwd=ROOT,
      env=env,
      stdout=subprocess.DEVNULL,
      stderr=subprocess.PIPE,
      text=True,
      timeout=240,
      check=False,
    )
    codes.append(proc.returncode)
    epochs.append(len(json.loads((chunked / "history.json").read_text())))
    if proc.returncode == EXIT_PAUSED:
      assert "paused: step" in proc.stderr and not (chunked / "metrics.json").exists()
    else:
      assert proc.returncode == 0, proc.stderr[-3000:]
  # Epoch 1 in the first process, 2 in the second, which resumes from the pause and then
  # finishes (no epoch left to pause before); a third run only re-evaluates.
  assert codes == [EXIT_PAUSED, 0, 0] and epochs == [1, 2, 2]
  full = uninterrupted()
  a, b = _variables(full), _variables(chunked)
  assert set(a) == set(b)
  for n in a:
    np.testing.assert_allclose(a[n], b[n], rtol=1e-5, atol=1e-6, err_msg=n)
  ma = json.loads((full / "metrics.json").read_text())
  mb = json.loads((chunked / "metrics.json").read_text())
  assert mb["global_step"] == ma["global_step"] == 120
  np.testing.assert_allclose(
    [h["loss"] for h in ma["history"]], [h["loss"] for h in mb["history"]], rtol=1e-5
  )
  for k in ma["test"]:
    np.testing.assert_allclose(mb["test"][k], ma["test"][k], rtol=1e-6, err_msg=k)
