"""--strategy=parameter_server: ParameterServerStrategy + ClusterCoordinator on an in-process
cluster (2 workers, 2 ps on 127.0.0.1): one step's loss and gradients equal the single-process
step on the same batch and weights; the count-min estimator's state after steps scheduled on
both workers equals the single-process state over the same batches (every worker's positives
count, in any order); a Trainer run trains, checkpoints, exports, and a second run resumes; the
item and estimator tables are ShardedVariables with a shard on each ps. The binary as a cluster
of processes finishes after one of its workers is killed."""

import json
import re

import numpy as np
import pytest

import tfrs_logq  # noqa: F401
import tensorflow as tf

from tfrs_logq import sharded
from train import data as data_lib
from train import distribute
from train.config import RunConfig
from train.trainer import Trainer

MIN_SHARD_BYTES = 512   # tables of 41 x 8 float32 (1312 bytes) split in 2; small weights do not


def _cfg(tmp, **kw):
  args = dict(dataset="synthetic", model="sasrec", loss="sampled_softmax", negatives="mixed",
              num_negatives=16, logq="corrected", frequency="count_min", batch_size=8,
              uniform_negatives="batch", max_len=10, embedding_dim=8, num_blocks=1,
              dropout=0.0, steps_per_epoch=3, epochs=1, model_dir=str(tmp), progress=False,
              seed=5, ps_min_shard_bytes=MIN_SHARD_BYTES)
  args.update(kw)
  return RunConfig.create(**args)


@pytest.fixture(scope="module")
def tiny_data():
  return data_lib.load("synthetic", num_users=80, num_items=40, min_len=6, max_len=14)


@pytest.fixture(scope="module")
def ps_strategy():
  """One in-process cluster for the module (its servers cannot be stopped in-process)."""
  resolver = distribute.local_cluster(num_workers=2, num_ps=2)
  return distribute.parameter_server_strategy(resolver, min_shard_bytes=MIN_SHARD_BYTES)


def _whole(variables):
  """[(name without the model's prefix and /part_k, [the variable or its shards])], in order."""
  out = []
  for v in variables:
    m = re.match(r"(?:sas_rec[^/]*/)?(.*?)(?:/part_(\d+))?:\d+$", v.name)
    if m.group(2) not in (None, "0"):
      assert out[-1][0] == m.group(1)
      out[-1][1].append(v)
    else:
      out.append((m.group(1), [v]))
  return out


def _value(parts):
  return np.concatenate([v.numpy() for v in parts]) if len(parts) > 1 else parts[0].numpy()


def _copy_weights(src_model, dst_model):
  """Assigns the single-process model's weights to the (partitioned) PS model."""
  src, dst = _whole(src_model.weights), _whole(dst_model.weights)
  assert [n for n, _ in src] == [n for n, _ in dst]
  for (_, (value,)), (_, parts) in zip(src, dst):
    rows = np.cumsum([p.shape[0] for p in parts])[:-1]
    for part, block in zip(parts, np.split(value.numpy(), rows)):
      part.assign(block)


def _grads_fn(trainer):
  def replica(batch, step):
    with tf.GradientTape() as tape:
      terms = trainer.objective(batch, step, training=True)
    grads = tape.gradient(terms["loss"], trainer.model.trainable_variables)
    return terms["loss"], [tf.convert_to_tensor(g) for g in grads]
  return replica


def _ps_devices(variable):
  return {tf.DeviceSpec.from_string(v.device).task for v in variable.variables}


def test_tables_are_sharded_over_both_ps_and_small_state_is_not(tmp_path, tiny_data,
                                                                 ps_strategy):
  trainer = Trainer(_cfg(tmp_path), data=tiny_data, strategy=ps_strategy)
  assert trainer.coordinator is not None
  for table in (trainer.model.input_embedding.embeddings,
                trainer.model.output_embedding.embeddings, trainer.estimator.table):
    assert sharded.is_sharded(table), table
    assert len(table.variables) == 2 and _ps_devices(table) == {0, 1}
    assert all("/job:ps/" in v.device for v in table.variables)
  for small in (trainer.model.position_embedding.embeddings, trainer.estimator.total,
                trainer.step):
    assert not sharded.is_sharded(small) and "/job:ps/" in small.device


def test_one_step_loss_and_gradients_equal_the_single_process_step(tmp_path, tiny_data,
                                                                   ps_strategy):
  single = Trainer(_cfg(tmp_path / "one"), data=tiny_data)
  ps = Trainer(_cfg(tmp_path / "ps"), data=tiny_data, strategy=ps_strategy)
  _copy_weights(single.model, ps.model)
  batch = next(iter(single.epoch_dataset(0)))
  step = tf.constant(0, tf.int64)
  loss_1, grads_1 = _grads_fn(single)(batch, step)

  @tf.function
  def scheduled(batch, step):
    return ps_strategy.run(_grads_fn(ps), args=(batch, step))

  remote = ps.coordinator.schedule(scheduled, args=(batch, step))
  ps.coordinator.join()
  loss_2, grads_2 = remote.fetch()
  np.testing.assert_allclose(loss_2, loss_1.numpy(), rtol=1e-5)
  names_1 = _whole(single.model.trainable_variables)
  names_2 = _whole(ps.model.trainable_variables)
  assert [n for n, _ in names_1] == [n for n, _ in names_2]
  assert any(len(parts) == 2 for _, parts in names_2)
  i = 0
  for (name, _), g1, (_, parts) in zip(names_1, grads_1, names_2):
    g2 = np.concatenate([np.asarray(grads_2[i + k]) for k in range(len(parts))])
    i += len(parts)
    np.testing.assert_allclose(g2, g1.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
  # The step's estimator update (positives of the batch) landed on the ps.
  for (name, a), (_, b) in zip(_whole(single.estimator.weights), _whole(ps.estimator.weights)):
    np.testing.assert_array_equal(_value(b), _value(a), err_msg=name)


def test_estimator_state_after_scheduled_steps_equals_single_process(tmp_path, tiny_data,
                                                                     ps_strategy):
  cfg = _cfg(tmp_path, steps_per_epoch=8)
  single = Trainer(cfg, data=tiny_data)
  ps = Trainer(cfg.replace(model_dir=str(tmp_path / "ps")), data=tiny_data,
               strategy=ps_strategy)
  batches = list(single.epoch_dataset(0))
  assert len(batches) == 8
  for batch in batches:
    single.train_step(batch)

  @tf.function
  def scheduled(batch, step):
    return ps_strategy.run(ps._replica_step, args=(batch, step))  # pylint: disable=protected-access

  for i, batch in enumerate(batches):
    ps.coordinator.schedule(scheduled, args=(batch, tf.constant(i, tf.int64)))
  ps.coordinator.join()
  one, two = _whole(single.estimator.weights), _whole(ps.estimator.weights)
  assert [n for n, _ in one] == [n for n, _ in two]
  for (name, a), (_, b) in zip(one, two):
    np.testing.assert_array_equal(_value(b), _value(a), err_msg=name)
  assert int(ps.estimator.step.numpy()) == 8
  assert float(ps.estimator.total.numpy()) == float(single.estimator.total.numpy()) > 0


def test_trainer_run_checkpoints_exports_and_resumes(tmp_path, tiny_data, ps_strategy):
  lines = []
  cfg = _cfg(tmp_path / "run", steps_per_epoch=4, epochs=2, strategy="parameter_server",
             export_dir=str(tmp_path / "run" / "export"))
  first = Trainer(cfg, data=tiny_data, strategy=ps_strategy, report=lines.append).run()
  assert first["global_step"] == 8 and first["epochs_done"] == 2
  assert all(np.isfinite(h["loss"]) for h in first["history"])
  assert np.isfinite(first["val"]["ndcg@10"])
  ckpt = tf.train.latest_checkpoint(str(tmp_path / "run" / "ckpt"))
  assert ckpt and ckpt.endswith("ckpt-8")
  shapes = tf.train.load_checkpoint(ckpt).get_variable_to_shape_map()
  tables = [n for n in shapes if "output_embedding/embeddings" in n and "OPTIMIZER" not in n
            and n.endswith("VARIABLE_VALUE")]
  assert tables and all(shapes[n] == [41, 8] for n in tables)   # saved whole, not per shard
  table = np.load(tmp_path / "run" / "export" / "item_embeddings.npy")
  assert table.shape == (41, 8) and np.isfinite(table).all()
  meta = json.loads((tmp_path / "run" / "export" / "export_meta.json").read_text())
  assert meta["run_config"]["strategy"] == "parameter_server"
  assert not any(l.startswith("resumed") for l in lines)
  # Rerun with more epochs: restores epoch 2 (model, optimizer, estimator, step) and goes on.
  resumed = Trainer(cfg.replace(epochs=3), data=tiny_data, strategy=ps_strategy,
                    report=lines.append)
  result = resumed.run()
  assert any(l.startswith("resumed from") and "epoch 2, step 8" in l for l in lines)
  assert result["global_step"] == 12 and result["epochs_done"] == 3
  assert [h["epoch"] for h in result["history"]] == [1, 2, 3]
  assert int(resumed.estimator.step.numpy()) == 12    # 8 restored + 4 new steps
  assert tf.train.latest_checkpoint(str(tmp_path / "run" / "ckpt")).endswith("ckpt-12")


def test_binary_cluster_of_processes_survives_a_killed_worker(tmp_path):
  """`python -m train --strategy=parameter_server` as 4 processes (chief, 2 workers, 1 ps, from
  TF_CONFIG on 127.0.0.1); worker 1 is SIGKILLed after the first epoch's checkpoint: the
  coordinator runs its steps on worker 0 and the chief finishes. At-least-once: a step in
  flight on the killed worker may already have reached the ps before it is run again, so the
  global step is >= the number of scheduled steps."""
  import os  # pylint: disable=g-import-not-at-top
  import signal  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  ports = distribute._free_ports(4)  # pylint: disable=protected-access
  cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "ps": [f"127.0.0.1:{ports[3]}"],
             "worker": [f"127.0.0.1:{p}" for p in ports[1:3]]}
  run = tmp_path / "run"
  args = ["--strategy=parameter_server", "--dataset=synthetic", "--synthetic_users=80",
          "--synthetic_items=40", "--synthetic_min_len=6", "--synthetic_max_len=14",
          "--max_len=10", "--embedding_dim=8", "--num_blocks=1", "--num_negatives=16",
          "--batch_size=8", "--steps_per_epoch=200", "--epochs=3", "--frequency=count_min",
          "--progress=false", f"--ps_min_shard_bytes={MIN_SHARD_BYTES}", f"--model_dir={run}"]
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

  def start(task, index):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
               TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": task,
                                                                  "index": index}}))
    return subprocess.Popen([sys.executable, "-m", "train", *args], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

  servers = [start("ps", 0), start("worker", 0), start("worker", 1)]
  chief = start("chief", 0)
  try:
    deadline = time.time() + 150
    while not (run / "ckpt" / "checkpoint").exists():
      assert chief.poll() is None, chief.communicate()[1][-3000:]
      assert time.time() < deadline, "no checkpoint within 150 s"
      time.sleep(0.1)
    assert chief.poll() is None, "the chief finished before a worker could be killed"
    servers[2].send_signal(signal.SIGKILL)
    out, err = chief.communicate(timeout=150)
  finally:
    for p in servers + [chief]:
      if p.poll() is None:
        p.kill()
      p.wait(timeout=30)
  assert servers[2].returncode == -signal.SIGKILL
  assert chief.returncode == 0, err[-3000:]
  assert "epoch 3 step" in out and "done: step" in err
  metrics = json.loads((run / "metrics.json").read_text())
  assert metrics["epochs_done"] == 3 and metrics["global_step"] >= 600
  assert all(np.isfinite(h["loss"]) for h in metrics["history"])
