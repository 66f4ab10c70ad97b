"""train.trainer: every estimator and tower setting of the RunConfig reaches the object built
(get_config of the estimators; the two-tower's layers), so no flag is silently ignored."""

import shutil

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import frequency

import numpy as np
import pytest

from train import data as data_lib
from train.config import RunConfig
from train.trainer import build_estimator, build_model


@pytest.fixture(scope="module")
def tiny():
  return data_lib.load("synthetic", num_users=40, num_items=30, min_len=4, max_len=8)


def test_estimator_settings_reach_the_estimator(tiny):
  exact = build_estimator(RunConfig.create(frequency="exact", frequency_min_count=0.5), tiny)
  assert isinstance(exact, frequency.ExactCounts) and exact.min_count == 0.5
  np.testing.assert_array_equal(exact.counts.numpy()[:31], tiny.item_counts)
  hashed = build_estimator(
    RunConfig.create(
      frequency="hash_array",
      frequency_buckets=512,
      hash_array_hashes=3,
      hash_array_alpha=0.05,
      hash_array_warmup=False,
      hash_array_pending_gap=False,
      seed=7,
    ),
    tiny,
  )
  assert isinstance(hashed, frequency.HashArrayEstimator)
  got = hashed.get_config()
  assert (
    got["num_buckets"],
    got["num_hashes"],
    got["alpha"],
    got["warmup"],
    got["pending_gap"],
    got["seed"],
  ) == (512, 3, 0.05, False, False, 7)
  sketch = build_estimator(
    RunConfig.create(
      frequency="count_min",
      count_min_depth=3,
      count_min_conservative=True,
      count_min_half_life=100.0,
      frequency_min_count=2.0,
    ),
    tiny,
  )
  assert isinstance(sketch, frequency.CountMinSketch)
  assert (sketch.width, sketch.depth, sketch.conservative, sketch.half_life, sketch.min_count) == (
    1024,
    3,
    True,
    100.0,
    2.0,
  )  # width: max(1024, 4 (N + 1))


def test_two_tower_tower_settings_reach_the_model(tiny):
  model = build_model(
    RunConfig.create(
      model="two_tower", hidden_dims=(12, 6), use_user_id=True, use_history=False, embedding_dim=6
    ),
    tiny,
  ).build_all()
  tower = model.query_tower
  assert [layer.units for layer in tower.mlp] == [12, 6]
  assert tower.use_user_id and not tower.use_history
  q = model.serving_queries(np.zeros((2, 200), np.int64), user_ids=np.array([1, 2]))
  assert q.shape == (2, 6)


def test_sasrec_settings_reach_the_model(tiny):
  """Block style, tying, token packing and attention blocks reach the SASRec built; the flags'
  defaults are the model's own (one definition)."""
  from models import sasrec

  default = build_model(RunConfig.create(max_len=8, embedding_dim=8), tiny)
  assert (default.pack_tokens, default.attention_blocks) == (
    sasrec.DEFAULT_PACK_TOKENS,
    sasrec.DEFAULT_ATTENTION_BLOCKS,
  )
  model = build_model(
    RunConfig.create(
      max_len=8,
      embedding_dim=8,
      sasrec_block="pre_ln",
      tie_embeddings=True,
      sasrec_pack_tokens=False,
      sasrec_attention_blocks=4,
    ),
    tiny,
  )
  assert (model.block_style, model.tie_embeddings, model.pack_tokens, model.attention_blocks) == (
    "pre_ln",
    True,
    False,
    4,
  )
  with pytest.raises(ValueError, match="sasrec_attention_blocks"):
    RunConfig.create(sasrec_attention_blocks=0)


def test_jit_compile_step_trains_like_the_uncompiled_step(tiny, tmp_path):
  """--jit_compile_step: the Trainer's whole replica step as one XLA program gives the same
  losses, weights and estimator state as the uncompiled step (dropout 0, streaming estimator)."""
  import tensorflow as tf

  from train.trainer import Trainer

  results = []
  for jit in (False, True):
    cfg = RunConfig.create(
      model="sasrec",
      max_len=8,
      embedding_dim=8,
      num_blocks=1,
      dropout=0.0,
      batch_size=8,
      num_negatives=8,
      uniform_negatives="query",
      frequency="count_min",
      logq="corrected",
      steps_per_epoch=3,
      epochs=1,
      jit_compile_step=jit,
      progress=False,
      model_dir=str(tmp_path / f"jit{int(jit)}"),
    )
    trainer = Trainer(cfg, data=tiny, strategy=tf.distribute.get_strategy())
    losses = [
      tuple(float(x) for x in trainer.train_step(batch)) for batch in trainer.distributed_epoch(0)
    ]
    results.append((np.array(losses), trainer.estimator.weights[0].numpy()))
  assert results[0][0].shape == (3, 2) and np.all(np.isfinite(results[0][0]))
  np.testing.assert_allclose(results[1][0], results[0][0], rtol=2e-4, atol=1e-5)
  np.testing.assert_array_equal(results[1][1], results[0][1])


def test_same_seed_pairs_rows_same_initial_model_and_batches(tiny, tmp_path):
  """Table 1's report (bench.analysis table1) pairs rows by seed: runs that differ only in the
  loss's correction start from the same weights and see the same batches in the same order (a
  different seed does not)."""
  import tensorflow as tf

  from train.trainer import Trainer

  def state(logq, seed):
    cfg = RunConfig.create(
      model="sasrec",
      max_len=8,
      embedding_dim=8,
      num_blocks=1,
      batch_size=8,
      num_negatives=8,
      logq=logq,
      seed=seed,
      steps_per_epoch=2,
      epochs=1,
      progress=False,
      model_dir=str(tmp_path / f"{logq}{seed}"),
    )
    trainer = Trainer(cfg, data=tiny, strategy=tf.distribute.get_strategy())
    trainer.model.build_all()
    weights = [w.numpy() for w in trainer.model.weights]
    batches = [{k: v.numpy() for k, v in b.items()} for b in trainer.epoch_dataset(1).take(2)]
    return weights, batches

  runs = {logq: state(logq, 3) for logq in ("none", "standard_no_positive", "corrected")}
  ref_w, ref_b = runs["corrected"]
  for logq in ("none", "standard_no_positive"):
    w, b = runs[logq]
    assert len(w) == len(ref_w)
    for x, y in zip(w, ref_w):
      np.testing.assert_array_equal(x, y)
    for x, y in zip(b, ref_b):
      assert x.keys() == y.keys()
      for k in x:
        np.testing.assert_array_equal(x[k], y[k])
  other_w, other_b = state("corrected", 4)
  assert not all(np.array_equal(x, y) for x, y in zip(other_w, ref_w))
  assert not all(np.array_equal(x["inputs"], y["inputs"]) for x, y in zip(other_b, ref_b))


@pytest.mark.parametrize("allocator,calls", [("retain", 1), ("default", 0)])
def test_free_heap_is_returned_once_after_the_first_epoch_under_retain(
  tiny, tmp_path, monkeypatch, allocator, calls
):
  import tensorflow as tf

  from train import host_memory
  from train.trainer import Trainer

  seen = []
  monkeypatch.setattr(host_memory, "release_free_memory", lambda: seen.append(1) or True)
  cfg = RunConfig.create(
    model="sasrec",
    max_len=8,
    embedding_dim=8,
    num_blocks=1,
    batch_size=8,
    num_negatives=8,
    steps_per_epoch=1,
    epochs=3,
    progress=False,
    host_allocator=allocator,
    model_dir=str(tmp_path / allocator),
  )
  Trainer(cfg, data=tiny, strategy=tf.distribute.get_strategy()).run()
  assert len(seen) == calls


def _small_trainer(tiny, model_dir, report=None, **overrides):
  import tensorflow as tf

  from train.trainer import Trainer

  settings = dict(
    model="sasrec",
    max_len=8,
    embedding_dim=8,
    num_blocks=1,
    batch_size=8,
    num_negatives=8,
    steps_per_epoch=2,
    epochs=2,
    progress=False,
    model_dir=str(model_dir),
  )
  cfg = RunConfig.create(**{**settings, **overrides})
  return Trainer(cfg, data=tiny, strategy=tf.distribute.get_strategy(), report=report)


def _interrupt_at_call(trainer, n):
  """Ctrl-C (KeyboardInterrupt) at the trainer's n-th call of train_step, before it runs."""
  real, calls = trainer.train_step, []

  def step(batch):
    calls.append(1)
    if len(calls) == n:
      raise KeyboardInterrupt
    return real(batch)

  trainer.train_step = step


def test_interrupt_mid_epoch_saves_nothing_newer_than_the_last_epoch(tiny, tmp_path):
  """Ctrl-C inside epoch 2: TrainingInterrupted names epoch 1's checkpoint, the newest on disk
  (a mid-epoch state is never saved: resuming replays epoch 2 exactly)."""
  import tensorflow as tf

  from train.trainer import TrainingInterrupted

  lines = []
  trainer = _small_trainer(tiny, tmp_path / "run", lines.append)
  _interrupt_at_call(trainer, 4)
  with pytest.raises(TrainingInterrupted) as info:
    trainer.run()
  assert isinstance(info.value, KeyboardInterrupt) and info.value.step == 3
  assert info.value.checkpoint == (1, 2, str(tmp_path / "run" / "ckpt"))
  assert "the checkpoint of epoch 1 (step 2)" in str(info.value)
  assert tf.train.latest_checkpoint(str(tmp_path / "run" / "ckpt")).endswith("ckpt-2")
  assert len(lines) == 1 and lines[0].startswith("epoch 1 step 2 loss")


def test_interrupt_between_an_epochs_end_and_its_save_saves_it_and_resumes(tiny, tmp_path):
  """Ctrl-C after epoch 1 ended but before its checkpoint was written: the handler writes it
  (the state is an epoch's end), and a new Trainer on the same folder resumes from it."""
  import json

  from train.trainer import TrainingInterrupted

  trainer = _small_trainer(tiny, tmp_path / "run")
  real, calls = trainer._save_history, []

  def save_history(history):
    calls.append(1)
    if len(calls) == 1:
      raise KeyboardInterrupt
    real(history)

  trainer._save_history = save_history
  with pytest.raises(TrainingInterrupted) as info:
    trainer.run()
  assert info.value.checkpoint[:2] == (1, 2)
  assert [h["epoch"] for h in json.loads((tmp_path / "run" / "history.json").read_text())] == [1]
  lines = []
  result = _small_trainer(tiny, tmp_path / "run", lines.append).run()
  assert lines[0].startswith(
    f"resumed from {tmp_path / 'run' / 'ckpt' / 'ckpt-2'}: epoch 1, step 2"
  )
  assert result["global_step"] == 4 and [h["epoch"] for h in result["history"]] == [1, 2]


def test_checkpoint_every_seconds_writes_the_last_epoch_and_no_mid_epoch_state(tiny, tmp_path):
  """With a checkpoint interval longer than the run, epochs 1 and 2 are not checkpointed; a
  Ctrl-C inside epoch 3 saves nothing (the state is mid-epoch, not epoch 2's end); the rerun
  trains from the start and its last epoch (the run's end) is the one checkpoint on disk."""
  import tensorflow as tf

  from train.trainer import TrainingInterrupted

  run_dir = tmp_path / "run"
  trainer = _small_trainer(tiny, run_dir, epochs=3, checkpoint_every_seconds=1e9)
  _interrupt_at_call(trainer, 6)  # epoch 3 has taken one step
  with pytest.raises(TrainingInterrupted) as info:
    trainer.run()
  assert info.value.checkpoint is None
  assert tf.train.latest_checkpoint(str(run_dir / "ckpt")) is None
  result = _small_trainer(tiny, run_dir, epochs=3, checkpoint_every_seconds=1e9).run()
  assert result["global_step"] == 6 and [h["epoch"] for h in result["history"]] == [1, 2, 3]
  assert [p.name for p in (run_dir / "ckpt").glob("ckpt-*.index")] == ["ckpt-6.index"]


def test_checkpoint_every_seconds_is_refused_for_multi_worker():
  with pytest.raises(ValueError, match="checkpoint_every_seconds"):
    RunConfig.create(strategy="multi_worker", checkpoint_every_seconds=60)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_mixed_precision_bfloat16(tiny, tmp_path, jit_compile):
  """--mixed_precision=bfloat16: the SASRec layers compute in bfloat16 with float32 weights, the
  training queries and item embeddings (so the scores, log Q and the loss) are float32, the
  global policy is float32 again after the build, and the first steps' losses are finite, close
  to float32's and not equal to them (bfloat16 is used); eager and XLA encoders."""
  import tensorflow as tf

  from train.trainer import Trainer

  runs = {}
  for precision in ("float32", "bfloat16"):
    cfg = RunConfig.create(
      model="sasrec",
      max_len=8,
      embedding_dim=8,
      num_blocks=1,
      dropout=0.0,
      batch_size=8,
      num_negatives=8,
      logq="corrected",
      steps_per_epoch=3,
      epochs=1,
      progress=False,
      jit_compile=jit_compile,
      mixed_precision=precision,
      model_dir=str(tmp_path / precision),
    )
    trainer = Trainer(cfg, data=tiny, strategy=tf.distribute.get_strategy())
    assert tf.keras.mixed_precision.global_policy().name == "float32"
    layers = [
      layer for layer in trainer.model._flatten_layers() if isinstance(layer, tf.keras.layers.Dense)
    ]
    assert layers
    assert {layer.compute_dtype for layer in layers} == {precision}
    assert {layer.kernel.dtype for layer in layers} == {tf.float32}
    batches = list(trainer.distributed_epoch(0))
    tq = trainer.model.training_queries(batches[0], training=False)
    assert tq.queries.dtype == tf.float32
    assert trainer.model.item_embeddings(tq.positive_ids).dtype == tf.float32
    losses = [float(trainer.train_step(batch)[0]) for batch in batches]
    runs[precision] = (tq.queries.numpy(), np.array(losses))
  (q32, l32), (q16, l16) = runs["float32"], runs["bfloat16"]
  assert np.all(np.isfinite(l16)) and np.max(np.abs(q16 - q32)) > 1e-4
  np.testing.assert_allclose(q16, q32, atol=0.1)
  np.testing.assert_allclose(l16, l32, rtol=2e-2)


def test_mixed_precision_is_for_sasrec():
  with pytest.raises(ValueError, match="mixed_precision=bfloat16"):
    RunConfig.create(model="two_tower", mixed_precision="bfloat16")
  with pytest.raises(ValueError):
    RunConfig.create(mixed_precision="float16")


def test_frequency_seed_is_the_hash_seed(tiny):
  """--frequency_seed sets the streaming estimators' hash seed; by default it is --seed."""
  for kind in ("hash_array", "count_min"):
    assert build_estimator(RunConfig.create(frequency=kind, seed=3), tiny).seed == 3
    assert (
      build_estimator(RunConfig.create(frequency=kind, seed=3, frequency_seed=9), tiny).seed == 9
    )


def test_a_stopped_run_continued_with_a_longer_patience_is_that_patiences_run(tiny, tmp_path):
  """The patience factor's method (docs/results/table1/patience_factor/): a run stopped by
  patience 1, rerun on a copy of its folder with patience 3, is the run trained with patience 3
  from the start: the same epochs, losses and validation curve, best epoch and test metrics."""

  def run(folder, patience):
    return _small_trainer(
      tiny, tmp_path / folder, epochs=14, early_stopping_patience=patience, learning_rate=0.02
    ).run()

  short = run("short", 1)
  longer = run("long", 3)
  assert short["stopped_early"] and short["epochs_done"] < longer["epochs_done"]
  shutil.copytree(tmp_path / "short", tmp_path / "continued")
  continued = run("continued", 3)
  strip = lambda h: [{k: v for k, v in e.items() if "seconds" not in k} for e in h]
  assert strip(continued["history"]) == strip(longer["history"])
  for key in ("epochs_done", "global_step", "best_epoch", "best_step", "stopped_early"):
    assert continued[key] == longer[key], key
  assert continued["test"] == longer["test"] and continued["val"] == longer["val"]
