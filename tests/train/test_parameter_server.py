"""--strategy=parameter_server: ParameterServerStrategy + ClusterCoordinator on an in-process
cluster (2 workers, 2 ps on 127.0.0.1): one step's loss and gradients equal the single-process
step on the same batch and weights; the count-min estimator's state after steps scheduled on
both workers equals the single-process state over the same batches (every worker's positives
count, in any order); LazyAdam (all its slots) and the hash array after scheduled steps equal
the single-process steps; the two-tower model trains under the strategy; a Trainer run trains,
checkpoints, exports, and a second run resumes; the item and estimator tables are
ShardedVariables with a shard on each ps. The binary as a cluster of processes:
test_parameter_server_binary.py.

The cluster lives in this process and connects it for good (its device context changes), so
this file runs last in its process (tests/conftest.py)."""

import json
import re

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import sharded

import numpy as np
import pytest
import tensorflow as tf

from train import data as data_lib
from train import distribute
from train.config import RunConfig
from train.trainer import Trainer

MIN_SHARD_BYTES = 512  # tables of 41 x 8 float32 (1312 bytes) split in 2; small weights do not


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
    ps_min_shard_bytes=MIN_SHARD_BYTES,
  )
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


def test_tables_are_sharded_over_both_ps_and_small_state_is_not(tmp_path, tiny_data, ps_strategy):
  trainer = Trainer(_cfg(tmp_path), data=tiny_data, strategy=ps_strategy)
  assert trainer.coordinator is not None
  assert (
    distribute.ps_addresses(ps_strategy)
    == ps_strategy._cluster_resolver.cluster_spec().as_dict()["ps"]
    and len(distribute.ps_addresses(ps_strategy)) == 2
  )
  for table in (
    trainer.model.input_embedding.embeddings,
    trainer.model.output_embedding.embeddings,
    trainer.estimator.table,
  ):
    assert sharded.is_sharded(table), table
    assert len(table.variables) == 2 and _ps_devices(table) == {0, 1}
    assert all("/job:ps/" in v.device for v in table.variables)
  for small in (trainer.model.position_embedding.embeddings, trainer.estimator.total, trainer.step):
    assert not sharded.is_sharded(small) and "/job:ps/" in small.device


def test_one_step_loss_and_gradients_equal_the_single_process_step(
  tmp_path, tiny_data, ps_strategy
):
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


def test_estimator_state_after_scheduled_steps_equals_single_process(
  tmp_path, tiny_data, ps_strategy
):
  cfg = _cfg(tmp_path, steps_per_epoch=8)
  single = Trainer(cfg, data=tiny_data)
  ps = Trainer(cfg.replace(model_dir=str(tmp_path / "ps")), data=tiny_data, strategy=ps_strategy)
  batches = list(single.epoch_dataset(0))
  assert len(batches) == 8
  for batch in batches:
    single.train_step(batch)

  @tf.function
  def scheduled(batch, step):
    return ps_strategy.run(ps._replica_step, args=(batch, step))

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
  cfg = _cfg(
    tmp_path / "run",
    steps_per_epoch=4,
    epochs=2,
    strategy="parameter_server",
    export_dir=str(tmp_path / "run" / "export"),
  )
  first = Trainer(cfg, data=tiny_data, strategy=ps_strategy, report=lines.append).run()
  assert first["global_step"] == 8 and first["epochs_done"] == 2
  assert all(np.isfinite(h["loss"]) for h in first["history"])
  assert np.isfinite(first["val"]["ndcg@10"])
  ckpt = tf.train.latest_checkpoint(str(tmp_path / "run" / "ckpt"))
  assert ckpt and ckpt.endswith("ckpt-8")
  shapes = tf.train.load_checkpoint(ckpt).get_variable_to_shape_map()
  tables = [
    n
    for n in shapes
    if "output_embedding/embeddings" in n and "OPTIMIZER" not in n and n.endswith("VARIABLE_VALUE")
  ]
  assert tables and all(shapes[n] == [41, 8] for n in tables)  # saved whole, not per shard
  table = np.load(tmp_path / "run" / "export" / "item_embeddings.npy")
  assert table.shape == (41, 8) and np.isfinite(table).all()
  meta = json.loads((tmp_path / "run" / "export" / "export_meta.json").read_text())
  assert meta["run_config"]["strategy"] == "parameter_server"
  assert not any(l.startswith("resumed") for l in lines)
  # Rerun with more epochs: restores epoch 2 (model, optimizer, estimator, step) and goes on.
  resumed = Trainer(
    cfg.replace(epochs=3), data=tiny_data, strategy=ps_strategy, report=lines.append
  )
  result = resumed.run()
  assert any(l.startswith("resumed from") and "epoch 2, step 8" in l for l in lines)
  assert result["global_step"] == 12 and result["epochs_done"] == 3
  assert [h["epoch"] for h in result["history"]] == [1, 2, 3]
  assert int(resumed.estimator.step.numpy()) == 12  # 8 restored + 4 new steps
  assert tf.train.latest_checkpoint(str(tmp_path / "run" / "ckpt")).endswith("ckpt-12")


def _optimizer_state(trainer):
  """{model variable name: {"value", "m", "v"(, "row_count")}} with the shards of a partitioned
  variable (and of its slots) concatenated, plus the optimizer's iteration count."""
  opt = trainer.optimizer
  state = {}
  for name, parts in _whole(trainer.model.trainable_variables):
    slots = [opt._index_dict[opt._var_key(p)] for p in parts]
    kinds = dict(m=opt._momentums, v=opt._velocities)
    if hasattr(opt, "_row_counts"):
      kinds["row_count"] = opt._row_counts
    state[name] = dict(
      value=_value(parts), **{k: _value([kind[i] for i in slots]) for k, kind in kinds.items()}
    )
  return state, int(opt.iterations.numpy())


def _assert_same_state(single, ps, rtol=1e-5):
  (one, it_1), (two, it_2) = _optimizer_state(single), _optimizer_state(ps)
  assert list(one) == list(two) and it_1 == it_2
  for name in one:
    assert one[name].keys() == two[name].keys()
    for kind in one[name]:
      np.testing.assert_allclose(
        two[name][kind], one[name][kind], rtol=rtol, atol=1e-7, err_msg=f"{name} {kind}"
      )
  for (name, a), (_, b) in zip(_whole(single.estimator.weights), _whole(ps.estimator.weights)):
    np.testing.assert_array_equal(_value(b), _value(a), err_msg=name)


def test_lazy_adam_and_hash_array_steps_equal_the_single_process_steps(
  tmp_path, tiny_data, ps_strategy
):
  """--table_optimizer=lazy_adam, --frequency=hash_array: one scheduled step updates the sharded
  tables, every slot (m, v, the per-row counts k_r) and the estimator exactly as the
  single-process step on the same batch and weights; so do 2 more steps scheduled one after
  the other (join between them: the hash array reads then writes its cells, so only sequential
  steps are comparable), whichever worker runs them."""
  cfg = _cfg(
    tmp_path,
    table_optimizer="lazy_adam",
    frequency="hash_array",
    frequency_buckets=256,
    steps_per_epoch=3,
  )
  single = Trainer(cfg, data=tiny_data)
  ps = Trainer(cfg.replace(model_dir=str(tmp_path / "ps")), data=tiny_data, strategy=ps_strategy)
  opt = ps.optimizer
  table = ps.model.output_embedding.embeddings
  assert sharded.is_sharded(table) and sharded.is_sharded(ps.estimator.gap)
  for part in table.variables:  # LazyAdam's slots live beside their shard, whole
    slot = opt._row_counts[opt._index_dict[opt._var_key(part)]]
    assert not sharded.is_sharded(slot) and slot.device == part.device
    assert slot.shape == part.shape[:1]
  _copy_weights(single.model, ps.model)
  batches = list(single.epoch_dataset(0))

  @tf.function
  def scheduled(batch, step):
    return ps_strategy.run(ps._replica_step, args=(batch, step))

  for i, batch in enumerate(batches):
    single.train_step(batch)
    ps.coordinator.schedule(scheduled, args=(batch, tf.constant(i, tf.int64)))
    ps.coordinator.join()
    if i == 0:
      _assert_same_state(single, ps)
      counts = _optimizer_state(ps)[0]["output_item_embedding/embeddings"]["row_count"]
      assert 0 < (counts == 1).sum() < counts.size  # a sparse update: only the batch's rows
  _assert_same_state(single, ps, rtol=1e-4)
  assert int(ps.estimator.step.numpy()) == len(batches) == 3


def test_two_tower_trains_under_the_strategy(tmp_path, tiny_data, ps_strategy):
  """--model=two_tower (mixed negatives, hash array, LazyAdam): its item table is sharded over
  both ps, a Trainer run trains, validates and checkpoints."""
  cfg = _cfg(
    tmp_path,
    model="two_tower",
    use_user_id=True,
    table_optimizer="lazy_adam",
    frequency="hash_array",
    frequency_buckets=256,
    steps_per_epoch=6,
    epochs=2,
    strategy="parameter_server",
  )
  trainer = Trainer(cfg, data=tiny_data, strategy=ps_strategy)
  table = trainer.model.candidate_tower.item_embedding.embeddings
  assert sharded.is_sharded(table) and _ps_devices(table) == {0, 1}
  before = _value(table.variables)
  result = trainer.run()
  assert result["global_step"] == 12 and result["epochs_done"] == 2
  assert all(np.isfinite(h["loss"]) for h in result["history"])
  assert np.isfinite(result["val"]["ndcg@10"])
  assert not np.allclose(_value(table.variables), before)
  assert tf.train.latest_checkpoint(str(tmp_path / "ckpt")).endswith("ckpt-12")
