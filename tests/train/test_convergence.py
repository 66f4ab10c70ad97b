"""The convergence protocol of train.trainer: early stopping on validation NDCG@10, the best
checkpoint evaluated on test, steps-to-best, wall-clock and the optional per-epoch test curve;
the --table_optimizer choice reaching the trainer."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

from train import data as data_lib
from train.config import RunConfig
from train.trainer import Trainer


@pytest.fixture(scope="module")
def tiny():
  return data_lib.load("synthetic", num_users=60, num_items=30, min_len=4, max_len=10)


def _run(tiny, tmp_path, name, **settings):
  cfg = RunConfig.create(
    model="sasrec",
    max_len=10,
    embedding_dim=8,
    num_blocks=1,
    batch_size=16,
    num_negatives=8,
    steps_per_epoch=2,
    epochs=6,
    early_stopping_patience=2,
    learning_rate=0.01,
    progress=False,
    model_dir=str(tmp_path / name),
    **settings,
  )
  return Trainer(cfg, data=tiny, strategy=tf.distribute.get_strategy()).run()


def test_best_checkpoint_is_evaluated_and_the_test_curve_changes_nothing(tiny, tmp_path):
  plain = _run(tiny, tmp_path, "plain")
  curve = _run(tiny, tmp_path, "curve", test_curve=True)
  # Recording the test curve leaves training and selection unchanged.
  assert [h["val_ndcg@10"] for h in plain["history"]] == [
    h["val_ndcg@10"] for h in curve["history"]
  ]
  assert "test_ndcg@10" not in plain["history"][0]
  assert (plain["best_epoch"], plain["best_step"]) == (curve["best_epoch"], curve["best_step"])
  # Selection: the first maximum of the validation curve; training stops after `patience`
  # epochs without a better one (or at the epoch cap).
  val = [h["val_ndcg@10"] for h in curve["history"]]
  best = int(np.argmax(val))
  assert curve["best_epoch"] == best + 1
  assert curve["best_step"] == curve["history"][best]["step"] == 2 * (best + 1)
  assert len(val) == 6 or len(val) - 1 - best == 2
  # The model evaluated on test at the end is the best epoch's, not the last one's.
  for m in ("recall@10", "ndcg@10", "recall@20", "ndcg@20"):
    assert curve["test"][m] == pytest.approx(curve["history"][best][f"test_{m}"], abs=1e-6)
    assert plain["test"][m] == pytest.approx(curve["test"][m], abs=1e-6)
  # The test split is evaluated exactly at the epochs that improve on the best validation
  # NDCG@10 (the selected epoch of any patience is one of them).
  improving = [e for e, v in enumerate(val) if v > max(val[:e], default=-np.inf)]
  assert [e for e, h in enumerate(curve["history"]) if "test_ndcg@10" in h] == improving
  assert curve["train_wall_seconds"] >= sum(h["seconds"] for h in curve["history"]) > 0
  assert all(h["wall_seconds"] >= h["seconds"] for h in curve["history"])


def test_table_optimizer_lazy_adam_reaches_the_trainer(tiny, tmp_path):
  from tfrs_logq.tf_keras.lazy_adam import LazyAdam

  cfg = RunConfig.create(
    model="two_tower",
    embedding_dim=8,
    max_len=10,
    batch_size=16,
    num_negatives=8,
    steps_per_epoch=2,
    epochs=1,
    progress=False,
    table_optimizer="lazy_adam",
    model_dir=str(tmp_path / "lazy"),
  )
  trainer = Trainer(cfg, data=tiny, strategy=tf.distribute.get_strategy())
  assert isinstance(trainer.optimizer, LazyAdam)
  result = trainer.run()
  assert np.isfinite(result["history"][0]["loss"])
  with pytest.raises(ValueError, match="lazy_adam"):
    RunConfig.create(table_optimizer="lazy_adam", jit_compile_step=True)
