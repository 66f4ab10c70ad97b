"""tf.distribute: MirroredStrategy on 2 logical CPUs matches one device on the same global
batches (cross-replica in-batch negatives, estimator on the global batch);
MultiWorkerMirroredStrategy with 2 local worker processes (TF_CONFIG on 127.0.0.1) gives the same
model on both workers."""

import json
import os
import subprocess
import sys

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

from train import data as data_lib
from train import distribute
from train.config import RunConfig
from train.trainer import Trainer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cfg(tmp, **kw):
  args = dict(
    dataset="synthetic",
    model="sasrec",
    loss="sampled_softmax",
    negatives="mixed",
    num_negatives=16,
    logq="corrected",
    frequency="count_min",
    batch_size=8,
    # Uniform negatives shared by the global batch: every replica draws the same set,
    # as one device does. Per-sequence / per-query draws come from each replica's own
    # stream, so under MirroredStrategy they are other (equally distributed) draws.
    uniform_negatives="batch",
    max_len=10,
    embedding_dim=8,
    num_blocks=1,
    dropout=0.0,
    steps_per_epoch=3,
    epochs=1,
    model_dir=str(tmp),
    progress=False,
    seed=5,
  )
  args.update(kw)
  return RunConfig.create(**args)


@pytest.fixture(scope="module")
def tiny_data():
  return data_lib.load("synthetic", num_users=80, num_items=40, min_len=6, max_len=14)


@pytest.mark.parametrize(
  "extra",
  [
    dict(negatives="mixed", frequency="count_min"),  # cross-replica in-batch + estimator
    dict(negatives="in_batch", frequency="hash_array", logq="standard"),
  ],
)
def test_mirrored_matches_single_device(tmp_path, tiny_data, extra):
  devices = [d.name for d in tf.config.list_logical_devices("CPU")]
  assert len(devices) >= 2, "tests/conftest.py should create 2 logical CPU devices"
  single = Trainer(_cfg(tmp_path / "one", **extra), data=tiny_data)
  mirrored = Trainer(
    _cfg(tmp_path / "two", **extra),
    data=tiny_data,
    strategy=distribute.mirrored_strategy(devices[:2]),
  )
  assert mirrored.replicas == 2
  losses = {}
  for name, trainer in (("one", single), ("two", mirrored)):
    losses[name] = [
      tuple(float(v) for v in trainer.train_step(b)) for b in trainer.distributed_epoch(0)
    ]
  np.testing.assert_allclose(losses["one"], losses["two"], rtol=2e-4, atol=1e-5)
  for a, b in zip(single.model.weights, mirrored.model.weights):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-3, atol=1e-5)
  for a, b in zip(single.estimator.weights, mirrored.estimator.weights):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
  assert int(single.step.numpy()) == int(mirrored.step.numpy()) == 3


def test_multi_worker_two_local_processes(tmp_path):
  ports = distribute.free_ports(2)
  cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
  args = [
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
    "--steps_per_epoch=3",
    "--epochs=1",
    "--dropout=0",
    "--frequency=count_min",
    "--strategy=multi_worker",
    "--progress=false",
    f"--model_dir={tmp_path / 'run'}",
  ]
  procs = []
  try:
    for i in range(2):
      env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        CUDA_VISIBLE_DEVICES="",
        TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
      )
      procs.append(
        subprocess.Popen(
          [sys.executable, "-m", "train", *args],
          cwd=ROOT,
          env=env,
          stdout=subprocess.PIPE,
          stderr=subprocess.PIPE,
          text=True,
        )
      )
    outs = [p.communicate(timeout=200) for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait(timeout=30)
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  chief = tf.train.latest_checkpoint(str(tmp_path / "run" / "ckpt"))
  other = tf.train.latest_checkpoint(str(tmp_path / "run" / ".workers" / "worker_1" / "ckpt"))
  assert chief and other
  r0, r1 = tf.train.load_checkpoint(chief), tf.train.load_checkpoint(other)
  names = [
    n
    for n in r0.get_variable_to_shape_map()
    if "OPTIMIZER_SLOT" not in n and not n.startswith("_CHECKPOINTABLE")
  ]
  assert any("embedding" in n for n in names)
  for n in names:
    np.testing.assert_allclose(r0.get_tensor(n), r1.get_tensor(n), rtol=1e-6, err_msg=n)
  step = [n for n in names if n.startswith("step")][0]
  assert int(r0.get_tensor(step)) == 3
  h0 = json.loads((tmp_path / "run" / "history.json").read_text())
  h1 = json.loads((tmp_path / "run" / ".workers" / "worker_1" / "history.json").read_text())
  assert h0[0]["loss"] == pytest.approx(h1[0]["loss"], rel=1e-6) and np.isfinite(h0[0]["loss"])
  assert (tmp_path / "run" / "metrics.json").exists()
