"""The training loop behind `python -m train`: strategy, model, estimator, checkpoints.

Exact resume. Everything that changes during training lives in one `tf.train.Checkpoint`
(model, optimizer slots, frequency estimator, MIDX index, global step, epoch, best validation
NDCG@10, epochs without improvement) saved at the end of every epoch. The data of epoch e is a
fresh deterministic stream seeded with (seed, e) and all in-step randomness (negatives, dropout)
is stateless and keyed by (seed, global step), so rerunning the same command after a crash
restores the last finished epoch and replays the interrupted one bit for bit: no step is lost or
counted twice. A run that already finished only re-evaluates and re-exports.

Early stopping: after each epoch the model is validated (exact Recall/NDCG@10,20); the best
model is kept in ``model_dir/best``; training stops after ``early_stopping_patience`` epochs
without a better NDCG@10. Final metrics (best model, validation and test) go to the metrics JSON.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from typing import Optional

import numpy as np

import tfrs_logq  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

from models.sasrec import SASRec
from models.two_tower import TwoTower
from tfrs_logq import frequency
from train import data as data_lib
from train import distribute
from train import validation as evaluation
from train import export as export_lib
from train.objective import Objective, ObjectiveConfig

MODELS = ("sasrec", "two_tower")
FREQUENCIES = ("exact", "hash_array", "count_min")


@dataclasses.dataclass
class TrainConfig:
  """Every setting of a run (the flags of train/__main__.py)."""
  dataset: str = "synthetic"
  data_path: Optional[str] = None
  split: str = "leave_one_out"
  dataset_kwargs: dict = dataclasses.field(default_factory=dict)
  model: str = "sasrec"
  loss: str = "sampled_softmax"
  negatives: str = "mixed"
  num_negatives: int = 256
  uniform_negatives_per_position: bool = False
  logq: str = "corrected"
  q_prime: str = "exact"
  frequency: str = "exact"
  frequency_buckets: int = 0
  temperature: float = 1.0
  gbce_t: float = 0.75
  batch_size: int = 128
  learning_rate: float = 1e-3
  epochs: int = 200
  steps_per_epoch: int = 100
  early_stopping_patience: int = 200
  seed: int = 0
  max_len: int = 200
  embedding_dim: int = 128
  num_blocks: int = 2
  num_heads: int = 1
  dropout: float = 0.5
  sasrec_block: str = "pre_ln"
  tie_embeddings: bool = False
  jit_compile: bool = False
  midx_codewords: int = 32
  strategy: str = "default"
  tpu: Optional[str] = None
  model_dir: str = "/tmp/tfrs_logq_run"
  export_dir: Optional[str] = None
  metrics_json: Optional[str] = None
  eval_batch_size: int = 512
  progress: bool = True
  max_checkpoints: int = 3

  def validate(self):
    if self.model not in MODELS:
      raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
    if self.frequency not in FREQUENCIES:
      raise ValueError(f"frequency must be one of {FREQUENCIES}, got {self.frequency!r}")
    for name in ("batch_size", "epochs", "max_len", "embedding_dim"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
    if self.steps_per_epoch < 0:
      raise ValueError("steps_per_epoch must be >= 0 (0 = one pass over the training data)")
    if self.early_stopping_patience < 1:
      raise ValueError("early_stopping_patience must be >= 1")
    if not self.learning_rate > 0:
      raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
    return self


def build_estimator(cfg: TrainConfig, data) -> frequency.FrequencyEstimator:
  """Q(d) estimator: exact training-set counts, or streaming hash array / count-min sketch."""
  n = data.num_items + 1
  if cfg.frequency == "exact":
    return frequency.ExactCounts(n, counts=data.item_counts, name="frequency")
  buckets = cfg.frequency_buckets or max(1024, 4 * n)
  if cfg.frequency == "hash_array":
    return frequency.HashArrayEstimator(num_buckets=buckets, num_items=n, seed=cfg.seed,
                                        name="frequency")
  return frequency.CountMinSketch(width=buckets, depth=4, num_items=n, seed=cfg.seed,
                                  name="frequency")


def build_model(cfg: TrainConfig, data):
  if cfg.model == "sasrec":
    return SASRec(data.num_items, max_len=cfg.max_len, embedding_dim=cfg.embedding_dim,
                  num_blocks=cfg.num_blocks, num_heads=cfg.num_heads, dropout=cfg.dropout,
                  temperature=cfg.temperature, jit_compile=cfg.jit_compile, seed=cfg.seed,
                  block_style=cfg.sasrec_block, tie_embeddings=cfg.tie_embeddings)
  return TwoTower(data.num_items, num_users=data.num_users, embedding_dim=cfg.embedding_dim,
                  use_user_id=False, temperature=cfg.temperature, max_len=cfg.max_len,
                  seed=cfg.seed)


class Trainer:
  """Builds everything under the strategy and runs the epochs (module docstring)."""

  def __init__(self, cfg: TrainConfig, data=None, strategy=None):
    self.cfg = cfg.validate()
    self.strategy = strategy or distribute.make_strategy(cfg.strategy, cfg.tpu)
    self.chief = distribute.is_chief(self.strategy)
    self.data = data if data is not None else data_lib.load(
        cfg.dataset, cfg.data_path, split=cfg.split, seed=cfg.seed, **cfg.dataset_kwargs)
    self.replicas = self.strategy.num_replicas_in_sync
    if cfg.batch_size % self.replicas:
      raise ValueError(f"global batch_size {cfg.batch_size} is not divisible by the "
                       f"{self.replicas} replicas")
    if cfg.steps_per_epoch == 0:
      cfg.steps_per_epoch = max(1, len(self.data.train_sequences) // cfg.batch_size)
    with self.strategy.scope():
      self.model = build_model(cfg, self.data).build_all()
      self.optimizer = tf.keras.optimizers.Adam(cfg.learning_rate)
      self.optimizer.build(self.model.trainable_variables)
      self.estimator = build_estimator(cfg, self.data)
      self.midx = None
      if cfg.loss == "sampled_softmax" and cfg.negatives == "midx":
        from tfrs_logq.negatives.midx import MIDXSampler  # pylint: disable=g-import-not-at-top
        self.midx = MIDXSampler(cfg.midx_codewords, "pq", num_items=self.data.num_items,
                                dim=cfg.embedding_dim, temperature=cfg.temperature,
                                id_offset=1, seed=cfg.seed, name="midx")
      self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
      self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
      self.best_metric = tf.Variable(-1.0, dtype=tf.float64, trainable=False, name="best_ndcg10")
      self.best_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="best_epoch")
      self.bad_epochs = tf.Variable(0, dtype=tf.int64, trainable=False, name="bad_epochs")
    self.objective = Objective(ObjectiveConfig(
        num_items=self.data.num_items, loss=cfg.loss, negatives=cfg.negatives,
        num_negatives=cfg.num_negatives, per_position=cfg.uniform_negatives_per_position,
        logq=cfg.logq, q_prime=cfg.q_prime, temperature=cfg.temperature, gbce_t=cfg.gbce_t,
        seed=cfg.seed, update_estimator=cfg.frequency != "exact", jit_compile=cfg.jit_compile),
        self.model, self.estimator, self.midx)
    trackables = dict(model=self.model, optimizer=self.optimizer, estimator=self.estimator,
                      step=self.step, epoch=self.epoch, best_metric=self.best_metric,
                      best_epoch=self.best_epoch, bad_epochs=self.bad_epochs)
    if self.midx is not None:
      trackables["midx"] = self.midx
    self.checkpoint = tf.train.Checkpoint(**trackables)
    self.model_dir = cfg.model_dir
    self.manager = tf.train.CheckpointManager(
        self.checkpoint, os.path.join(distribute.worker_dir(cfg.model_dir, self.strategy), "ckpt"),
        max_to_keep=cfg.max_checkpoints)
    self.best_checkpoint = tf.train.Checkpoint(model=self.model)
    self.best_manager = tf.train.CheckpointManager(
        self.best_checkpoint,
        os.path.join(distribute.worker_dir(cfg.model_dir, self.strategy), "best"), max_to_keep=1)
    self._train_step = tf.function(self._train_step_fn)
    self.writer = (tf.summary.create_file_writer(os.path.join(cfg.model_dir, "tensorboard"))
                   if self.chief else tf.summary.create_noop_writer())

  # -------------------------------------------------------------------------------- data & step
  def epoch_dataset(self, epoch: int) -> tf.data.Dataset:
    """The global batches of one epoch: a fresh stream seeded with (seed, epoch)."""
    cfg = self.cfg
    seed = cfg.seed * 1_000_003 + epoch
    if cfg.model == "sasrec":
      ds = data_lib.sasrec_train_dataset(self.data, batch_size=cfg.batch_size,
                                         max_len=cfg.max_len, seed=seed)
    else:
      ds = data_lib.two_tower_train_dataset(self.data, batch_size=cfg.batch_size,
                                            max_len=cfg.max_len, seed=seed)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.take(cfg.steps_per_epoch).with_options(options)

  def distributed_epoch(self, epoch: int):
    return self.strategy.experimental_distribute_dataset(self.epoch_dataset(epoch))

  def _train_step_fn(self, batch):
    step = self.step.read_value()

    def replica_fn(batch):
      with tf.GradientTape() as tape:
        terms = self.objective(batch, step, training=True)
      variables = self.model.trainable_variables
      grads = tape.gradient(terms["loss"], variables)
      pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
      self.optimizer.apply_gradients(pairs)
      return terms["loss_sum"], terms["weight_sum"], terms["count"]

    loss_sum, weight_sum, count = self.strategy.run(replica_fn, args=(batch,))
    total = lambda x: self.strategy.reduce(tf.distribute.ReduceOp.SUM, x, axis=None)
    loss_sum, weight_sum, count = total(loss_sum), total(weight_sum), total(count)
    self.step.assign_add(1)
    return loss_sum / tf.maximum(count, 1.0), weight_sum / tf.maximum(count, 1.0)

  def train_step(self, batch):
    """One optimisation step on a distributed batch; returns (mean loss, mean weight w)."""
    return self._train_step(batch)

  # ---------------------------------------------------------------------------------- the loop
  def restore(self) -> bool:
    """Restores the latest checkpoint (of the chief's folder); True when one was found."""
    latest = tf.train.latest_checkpoint(os.path.join(self.model_dir, "ckpt"))
    if latest is None:
      return False
    self.checkpoint.restore(latest).assert_existing_objects_matched()
    logging.info("restored %s: epoch %d, step %d, best NDCG@10 %.4f", latest,
                 int(self.epoch.numpy()), int(self.step.numpy()), float(self.best_metric.numpy()))
    return True

  def validate(self, split_name="val") -> dict:
    split = getattr(self.data, split_name)
    return evaluation.evaluate(self.model, split, max_len=self.cfg.max_len,
                               batch_size=self.cfg.eval_batch_size,
                               temperature=self.cfg.temperature)

  def run(self) -> dict:
    """Trains (resuming if possible), then evaluates the best model, exports, writes JSON."""
    cfg = self.cfg
    resumed = self.restore()
    history = self._load_history() if resumed else []
    while int(self.epoch.numpy()) < cfg.epochs and int(self.bad_epochs.numpy()) < cfg.early_stopping_patience:
      e = int(self.epoch.numpy())
      if self.midx is not None:
        self.midx.refresh(tf.convert_to_tensor(self.model.all_item_embeddings())[1:])
      bar = tf.keras.utils.Progbar(cfg.steps_per_epoch, verbose=1 if (cfg.progress and self.chief)
                                   else 0, stateful_metrics=["loss", "w"])
      start, losses, weights, n = time.time(), 0.0, 0.0, 0
      for batch in self.distributed_epoch(e):
        loss, w = self.train_step(batch)
        loss, w = float(loss), float(w)
        if not np.isfinite(loss):
          raise FloatingPointError(f"non-finite loss {loss} at step {int(self.step.numpy())}")
        losses, weights, n = losses + loss, weights + w, n + 1
        bar.update(n, [("loss", loss), ("w", w)])
        with self.writer.as_default(step=int(self.step.numpy())):
          tf.summary.scalar("train/loss", loss)
          tf.summary.scalar("train/mean_weight", w)
      seconds = time.time() - start
      metrics = self.validate("val")
      improved = metrics["ndcg@10"] > float(self.best_metric.numpy())
      if improved:
        self.best_metric.assign(metrics["ndcg@10"])
        self.best_epoch.assign(e + 1)
        self.bad_epochs.assign(0)
        self.best_manager.save(checkpoint_number=e + 1)
      else:
        self.bad_epochs.assign_add(1)
      self.epoch.assign(e + 1)
      record = dict(epoch=e + 1, step=int(self.step.numpy()), loss=losses / max(n, 1),
                    mean_weight=weights / max(n, 1), seconds=seconds,
                    seconds_per_step=seconds / max(n, 1), **{f"val_{k}": v for k, v in metrics.items()})
      history.append(record)
      with self.writer.as_default(step=int(self.step.numpy())):
        for k, v in metrics.items():
          if k != "num_queries":
            tf.summary.scalar(f"val/{k}", v)
        tf.summary.scalar("train/epoch_loss", record["loss"])
      self.writer.flush()
      self._save_history(history)
      self.manager.save(checkpoint_number=int(self.step.numpy()))
      logging.info("epoch %d step %d loss %.4f w %.4f val R@10 %.4f N@10 %.4f R@20 %.4f N@20 %.4f"
                   " (%.1fs)%s", e + 1, int(self.step.numpy()), record["loss"], record["mean_weight"],
                   metrics["recall@10"], metrics["ndcg@10"], metrics["recall@20"],
                   metrics["ndcg@20"], seconds, " *best*" if improved else "")
    return self.finish(history)

  def finish(self, history) -> dict:
    cfg = self.cfg
    best = tf.train.latest_checkpoint(os.path.join(self.model_dir, "best"))
    if best is not None:
      self.best_checkpoint.restore(best).assert_existing_objects_matched()
    result = dict(config=dataclasses.asdict(cfg), num_items=self.data.num_items,
                  global_step=int(self.step.numpy()), epochs_done=int(self.epoch.numpy()),
                  best_epoch=int(self.best_epoch.numpy()), best_val_ndcg10=float(self.best_metric.numpy()),
                  stopped_early=int(self.bad_epochs.numpy()) >= cfg.early_stopping_patience,
                  val=self.validate("val"), test=self.validate("test"), history=history)
    if self.chief:
      if cfg.export_dir:
        result["export"] = export_lib.export(self.model, cfg.export_dir, dict(
            num_items=self.data.num_items, max_len=cfg.max_len, model=cfg.model,
            dataset=cfg.dataset, loss=cfg.loss, logq=cfg.logq, negatives=cfg.negatives,
            temperature=cfg.temperature))
      path = cfg.metrics_json or os.path.join(cfg.model_dir, "metrics.json")
      os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
      with open(path, "w") as f:
        json.dump(result, f, indent=2, default=float)
      logging.info("final: val %s test %s -> %s", result["val"], result["test"], path)
    return result

  # history of epochs (for the JSON) survives restarts beside the checkpoints
  def _history_path(self):
    return os.path.join(distribute.worker_dir(self.model_dir, self.strategy), "history.json")

  def _save_history(self, history):
    os.makedirs(os.path.dirname(self._history_path()), exist_ok=True)
    tmp = self._history_path() + ".tmp"
    with open(tmp, "w") as f:
      json.dump(history, f)
    os.replace(tmp, self._history_path())

  def _load_history(self):
    try:
      with open(self._history_path()) as f:
        history = json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
      return []
    return [h for h in history if h["epoch"] <= int(self.epoch.numpy())]
