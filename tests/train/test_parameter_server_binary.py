"""`python -m train --strategy=parameter_server` as a cluster of processes on 127.0.0.1: it
recovers from a killed chief (restarted alone, it resumes), a killed worker (the others take its
steps) and a killed ps (the chief exits with EXIT_PS_LOST and one line naming the ps and the
command that resumes; rerun, it resumes from the checkpoint); and
`distribute.lost_parameter_servers` reads the lost ps from the error. Nothing here connects the
test process to a cluster (the in-process cluster's tests: test_parameter_server.py)."""

import json
import re

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import tensorflow as tf

from train import distribute

MIN_SHARD_BYTES = 512  # tables of 41 x 8 float32 (1312 bytes) split in 2; small weights do not
STEPS = 50  # per epoch: enough for every failure to land inside a run of 4 epochs


def test_lost_parameter_servers_reads_the_ps_task_from_the_error():
  def unavailable(text):
    return tf.errors.UnavailableError(None, None, text)

  assert distribute.lost_parameter_servers(
    unavailable(
      "Socket closed ... remote target /job:ps/replica:0/task:1/device:CPU:0 while calling "
      "RunComponentFunction"
    )
  ) == [1]
  wrapped = RuntimeError("closure failed")
  wrapped.original_exception = unavailable(
    "from /job:ps/replica:0/task:0 and /job:ps/replica:0/task:2"
  )
  assert distribute.lost_parameter_servers(wrapped) == [0, 2]
  restarted = tf.errors.InvalidArgumentError(
    None,
    None,
    "Unable to find the relevant tensor remote_handle: Op ID: 7 on /job:ps/replica:0/task:0",
  )
  assert distribute.lost_parameter_servers(restarted) == [0]
  # A worker's failure, or an error that only mentions a ps, is not the loss of a ps.
  assert (
    distribute.lost_parameter_servers(unavailable("Socket closed: /job:worker/replica:0/task:1"))
    is None
  )
  assert (
    distribute.lost_parameter_servers(
      tf.errors.InvalidArgumentError(None, None, "bad shape for /job:ps/replica:0/task:0")
    )
    is None
  )
  assert distribute.lost_parameter_servers(ValueError("x")) is None


class _ProcessCluster:
  """`python -m train --strategy=parameter_server` as processes on 127.0.0.1 (one chief, workers,
  ps from TF_CONFIG); each process's stdout and stderr go to a log file under ``logs``."""

  def __init__(self, run, logs, args, workers=2, ps=1):
    import os

    ports = distribute.free_ports(1 + workers + ps)
    self.cluster = {
      "chief": [f"127.0.0.1:{ports[0]}"],
      "worker": [f"127.0.0.1:{p}" for p in ports[1 : 1 + workers]],
      "ps": [f"127.0.0.1:{p}" for p in ports[1 + workers :]],
    }
    self.args = ["--strategy=parameter_server", f"--model_dir={run}", *args]
    self.logs, self.procs, self.count = logs, {}, 0
    logs.mkdir(parents=True, exist_ok=True)
    self.root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

  def start(self, task, index=0):
    """Starts (or restarts) a task; returns (process, its log path)."""
    import os
    import subprocess
    import sys

    self.count += 1
    log = self.logs / f"{self.count}_{task}{index}.log"
    env = dict(
      os.environ,
      TF_CPP_MIN_LOG_LEVEL="2",
      CUDA_VISIBLE_DEVICES="",
      TF_CONFIG=json.dumps({"cluster": self.cluster, "task": {"type": task, "index": index}}),
    )
    with open(log, "w") as out:
      proc = subprocess.Popen(
        [sys.executable, "-m", "train", *self.args],
        cwd=self.root,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
      )
    self.procs[(task, index, self.count)] = proc
    return proc, log

  def kill(self, proc):
    import signal

    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

  def stop_all(self):
    for proc in self.procs.values():
      if proc.poll() is None:
        proc.kill()
      proc.wait(timeout=30)


def _wait_for_line(proc, log, needle, seconds=150):
  """Waits until ``needle`` is in the log of the (running) process; returns the log's text."""
  import time

  deadline = time.time() + seconds
  while True:
    text = log.read_text()
    if needle in text:
      return text
    assert proc.poll() is None, f"exited ({proc.returncode}) before {needle!r}:\n{text[-3000:]}"
    assert time.time() < deadline, f"no {needle!r} within {seconds} s:\n{text[-3000:]}"
    time.sleep(0.1)


def _steps(text, pattern):
  return [int(m) for m in re.findall(pattern, text)]


def test_binary_cluster_recovers_from_killed_chief_worker_and_ps(tmp_path):
  """`python -m train --strategy=parameter_server` as processes (chief, 2 workers, 1 ps from
  TF_CONFIG on 127.0.0.1), 4 epochs of STEPS steps, three failures in one run:

  1. the chief is SIGKILLed after its first epoch's checkpoint and restarted alone (workers and
     ps kept): it logs "resumed from .../ckpt-STEPS: epoch 1, step STEPS" and its epochs go on from
     there (2, 3, ...);
  2. worker 1 is SIGKILLed after epoch 2: the coordinator runs its steps on worker 0 (at least
     once: a step in flight may already have reached the ps, so global steps are >= the number
     scheduled);
  3. the ps is SIGKILLed after epoch 3: the chief exits with status EXIT_PS_LOST and a last line
     ``error: ps 0 (address) was lost ... checkpoint of epoch 3 ... rerun this chief's command
     to resume: ...``; restarting the ps (and worker 1) and rerunning the chief resumes from
     epoch 3 and finishes epoch 4 (worker 0 kept all along).
  """
  from train import trainer as trainer_lib

  run = tmp_path / "run"
  cluster = _ProcessCluster(
    run,
    tmp_path / "logs",
    [
      "--dataset=synthetic",
      "--synthetic_users=80",
      "--synthetic_items=40",
      "--synthetic_min_len=6",
      "--synthetic_max_len=14",
      "--max_len=10",
      "--embedding_dim=8",
      "--num_blocks=1",
      "--num_negatives=16",
      "--batch_size=8",
      f"--steps_per_epoch={STEPS}",
      "--epochs=4",
      "--frequency=count_min",
      "--progress=false",
      f"--ps_min_shard_bytes={MIN_SHARD_BYTES}",
    ],
  )
  try:
    ps, _ = cluster.start("ps")
    cluster.start("worker", 0)
    worker_1, _ = cluster.start("worker", 1)
    chief, log = cluster.start("chief")
    _wait_for_line(chief, log, f"epoch 1 step {STEPS} ")
    cluster.kill(chief)  # 1. the chief
    chief, log = cluster.start("chief")
    text = _wait_for_line(chief, log, "epoch 2 step ")
    assert re.search(rf"resumed from \S+/ckpt/ckpt-{STEPS}: epoch 1, step {STEPS},", text), text
    assert _steps(text, r"epoch 2 step (\d+) ") == [2 * STEPS]
    cluster.kill(worker_1)  # 2. a worker
    _wait_for_line(chief, log, "epoch 3 step ")
    cluster.kill(ps)  # 3. the ps
    chief.wait(timeout=150)
    text = log.read_text()
    assert chief.returncode == trainer_lib.EXIT_PS_LOST, text[-3000:]
    last = text.strip().splitlines()[-1]
    step_3 = _steps(text, r"epoch 3 step (\d+) ")[0]
    assert step_3 >= 3 * STEPS
    assert last.startswith(f"error: ps 0 ({cluster.cluster['ps'][0]}) was lost"), last
    assert (
      f"the checkpoint of epoch 3 (step {step_3}) in {run / 'ckpt'} is kept" in last
      and "rerun this chief's command to resume: " in last
      and "-m train" in last
    ), last
    cluster.start("ps")
    cluster.start("worker", 1)
    chief, log = cluster.start("chief")
    chief.wait(timeout=200)
    text = log.read_text()
    assert chief.returncode == 0, text[-3000:]
    assert f"resumed from {run / 'ckpt'}/ckpt-{step_3}: epoch 3, step {step_3}," in text, text
    assert _steps(text, r"epoch 4 step (\d+) ")[0] >= step_3 + STEPS
    assert "done: step" in text
  finally:
    cluster.stop_all()
  metrics = json.loads((run / "metrics.json").read_text())
  assert metrics["epochs_done"] == 4 and metrics["global_step"] >= 4 * STEPS
  assert [h["epoch"] for h in metrics["history"]] == [1, 2, 3, 4]
  assert all(np.isfinite(h["loss"]) for h in metrics["history"])
