"""The training loop behind `python -m train`: strategy, model, estimator, checkpoints.

(One class for every strategy — one device, mirrored, multi-worker, TPU and the
parameter-server coordinator — with its checkpoint, resume and early-stopping state; the epoch
loop itself is `train.epochs`, shared with `python -m train.keras3`; the model, objective, step,
data, validation and export it composes live in their own modules.)

Exact resume. Everything that changes during training lives in one `tf.train.Checkpoint` (model,
optimizer slots, frequency estimator, MIDX index, cross-batch memory, global step, epoch, best
validation NDCG@10, epochs without improvement) saved at the end of every epoch. The data of epoch e
is a fresh deterministic stream seeded with (seed, e) and all in-step randomness (negatives,
dropout) is stateless and keyed by (seed, global step), so rerunning the same command after a crash
restores the last finished epoch and replays the interrupted one bit for bit: no step is lost or
counted twice. A run that already finished only re-evaluates and re-exports.

Time budget (``time_budget_minutes`` = T > 0): before each epoch after the first of this
process, training pauses if now + (the last epoch's wall time, validation and checkpoint
included) would pass start + T; the last epoch's checkpoint is kept and `run` returns
``{"paused": True, ...}`` without evaluating or exporting (the binary exits with
``EXIT_PAUSED``). Rerunning resumes exactly, as after a crash.

Early stopping (the convergence protocol): after each epoch the model is validated (exact
Recall/NDCG@10,20); the best model is kept in ``model_dir/best``; training stops after
``early_stopping_patience`` epochs without a better NDCG@10. The best model is the one evaluated
on validation and test. The metrics JSON records it with the steps to the best epoch
(``best_step``), the validation curve (``history``: one record per epoch, with its training and
wall-clock seconds) and the wall-clock of all epochs (``train_wall_seconds``, summed over
resumed chunks). ``test_curve`` also evaluates the test split after every epoch that improves the
best (``test_*`` keys of the history; never used for selection): a shorter patience selects one
of those epochs, so it can be checked against a longer one on the same run
(``python -m bench.analysis patience``).

Failures. A non-finite loss or gradient (`train.step` makes the step's loss NaN when a gradient
is not finite) stops training at that step with `NonFiniteError` naming it: nothing newer than
the last finished epoch's checkpoint is written. Ctrl-C (KeyboardInterrupt) raises
`TrainingInterrupted` (a KeyboardInterrupt) once the checkpoint of the last finished epoch is on
disk: written then if the interrupt fell between an epoch's end and its save; a mid-epoch state is
never saved (resuming replays the interrupted epoch, exactly).

Parameter-server training (``ParameterServerStrategy``; this process is the chief). The
model, optimizer and estimator variables live on the ps tasks (large tables partitioned,
`train.distribute`); each epoch schedules ``steps_per_epoch`` steps with a `ClusterCoordinator`
on per-worker datasets (`worker_dataset`: each worker shuffles the data with its own seed) and
joins them before validating and checkpointing from the chief. Steps update the variables
asynchronously, so the exact-resume guarantee above does not hold: a rerun restores the last
finished epoch (every step scheduled before it applied; at least once after a worker failure),
but the order of updates, the batches of each worker and therefore the resulting weights are not
reproducible. A non-finite loss is found when the epoch's results are fetched, after the join
(docs/distributed.md). A lost ps (its variables are gone; the coordinator does not recover from
it) raises `ParameterServerLost` naming the ps and the checkpoint kept (the binary exits with
``EXIT_PS_LOST``): restart that ps and rerun the chief to resume from the checkpoint (the workers
and the other ps can stay up). A chief that dies is restarted the same way (nothing else
restarted): its new coordinator creates the variables afresh on the ps and restores them.

Messages for the user (the resumed checkpoint, one line per epoch) go to ``report`` (default
`logging.info`; `python -m train` prints them).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import compiled, frequency
from tfrs_logq.tf_keras.lazy_adam import LazyAdam

import tensorflow as tf

from models.sasrec import SASRec
from models.two_tower import TwoTower
from train import data as data_lib
from train import distribute, epochs, estimator_spec, host_memory, summaries, validation
from train import export as export_lib
from train import step as step_lib
from train.config import RunConfig
from train.epochs import EXIT_PAUSED, NonFiniteError, best_step
from train.objective import Objective

__all__ = [
  "EXIT_PAUSED",
  "EXIT_PS_LOST",
  "NonFiniteError",
  "ParameterServerLost",
  "Trainer",
  "TrainingInterrupted",
  "best_step",
  "build_estimator",
  "build_model",
]


class TrainingInterrupted(KeyboardInterrupt):
  """Ctrl-C during `Trainer.run`; the last finished epoch's checkpoint is on disk.

  Attributes: ``step`` (global step count when interrupted), ``checkpoint`` ((epoch, step, path)
  of the checkpoint a rerun resumes from, or None: it starts over).
  """

  def __init__(self, *, step: int, checkpoint):
    if checkpoint is None:
      where = "no epoch had finished, so nothing was saved (a rerun starts over)"
    else:
      where = (
        f"the checkpoint of epoch {checkpoint[0]} (step {checkpoint[1]}) is saved in "
        f"{checkpoint[2]}"
      )
    super().__init__(f"interrupted at step {step}: {where}")
    self.step, self.checkpoint = step, checkpoint


class ParameterServerLost(RuntimeError):
  """A parameter server died during training (its variables with it); module docstring.

  Attributes: ``tasks`` ([(index, address)] of the lost ps tasks; empty when TensorFlow did not
  say which), ``checkpoint`` ((epoch, step, path) of the checkpoint a rerun resumes from, or
  None: it starts over).
  """

  def __init__(self, *, tasks, checkpoint):
    names = ", ".join(f"ps {i} ({address})" for i, address in tasks) or "a parameter server"
    kept = (
      "no epoch had finished, nothing was saved (a rerun starts over)"
      if checkpoint is None
      else f"the checkpoint of epoch {checkpoint[0]} (step {checkpoint[1]}) in {checkpoint[2]} "
      "is kept"
    )
    super().__init__(
      f"{names} was lost, and the variables it held with it: training stopped; {kept}."
    )
    self.tasks, self.checkpoint = list(tasks), checkpoint


def build_estimator(cfg: RunConfig, data) -> frequency.FrequencyEstimator:
  """Q(d) estimator of --frequency and its settings (train/estimator_spec.py)."""
  return estimator_spec.build(frequency, cfg, data)


# Exit status of the chief when a parameter server was lost (restart it, rerun to resume).
EXIT_PS_LOST = 4


@contextlib.contextmanager
def precision(cfg: RunConfig):
  """Layers built inside compute in --mixed_precision (bfloat16: the "mixed_bfloat16" policy,
  float32 weights); the global policy is restored after."""
  previous = tf.keras.mixed_precision.global_policy()
  tf.keras.mixed_precision.set_global_policy(
    "mixed_bfloat16" if cfg.mixed_precision == "bfloat16" else "float32"
  )
  try:
    yield
  finally:
    tf.keras.mixed_precision.set_global_policy(previous)


def build_model(cfg: RunConfig, data):
  """The query model of --model (the `models` query-model interface)."""
  if cfg.model == "sasrec":
    return SASRec(
      data.num_items,
      max_len=cfg.max_len,
      embedding_dim=cfg.embedding_dim,
      num_blocks=cfg.num_blocks,
      num_heads=cfg.num_heads,
      dropout=cfg.dropout,
      temperature=cfg.temperature,
      jit_compile=cfg.jit_compile,
      seed=cfg.seed,
      block_style=cfg.sasrec_block,
      tie_embeddings=cfg.tie_embeddings,
      pack_tokens=cfg.sasrec_pack_tokens,
      attention_blocks=cfg.sasrec_attention_blocks,
    )
  return TwoTower(
    data.num_items,
    num_users=data.num_users,
    embedding_dim=cfg.embedding_dim,
    hidden_dims=cfg.hidden_dims,
    use_user_id=cfg.use_user_id,
    use_history=cfg.use_history,
    temperature=cfg.temperature,
    max_len=cfg.max_len,
    seed=cfg.seed,
  )


class Trainer:
  """Builds everything under the strategy and runs the epochs (module docstring)."""

  def __init__(self, cfg: RunConfig, data=None, strategy=None, report=None):
    if not isinstance(cfg, RunConfig):
      raise TypeError(f"cfg must be a train.config.RunConfig, got {type(cfg).__name__}")
    self.cfg = cfg  # validated when it was built
    self.report = report or logging.info  # messages for the user (module docstring)
    self._saved = None  # (epoch, step) of the last checkpoint on disk
    self.strategy = strategy or distribute.make_strategy(
      cfg.strategy, cfg.tpu, cfg.ps_min_shard_bytes
    )
    self.chief = distribute.is_chief(self.strategy)
    # ParameterServerStrategy: this process is the coordinator; steps are scheduled on the
    # workers (module docstring, "Parameter-server training").
    self.coordinator = (
      tf.distribute.coordinator.ClusterCoordinator(self.strategy)
      if distribute.is_parameter_server(self.strategy)
      else None
    )
    self._worker_iterator = None
    self.data = data if data is not None else cfg.data.load()
    self.replicas = self.strategy.num_replicas_in_sync
    if cfg.batch_size % self.replicas:
      raise ValueError(
        f"global batch_size {cfg.batch_size} is not divisible by the {self.replicas} replicas"
      )
    self.steps_per_epoch = cfg.steps_per_epoch or max(
      1, len(self.data.train_sequences) // cfg.batch_size
    )
    with self.strategy.scope():
      with precision(cfg):
        self.model = build_model(cfg, self.data).build_all()
      self.optimizer = (
        LazyAdam(cfg.learning_rate)
        if cfg.table_optimizer == "lazy_adam"
        else tf.keras.optimizers.Adam(cfg.learning_rate)
      )
      self.optimizer.build(self.model.trainable_variables)
      self.estimator = build_estimator(cfg, self.data)
      self.midx = None
      if cfg.loss == "sampled_softmax" and cfg.negatives == "midx":
        from tfrs_logq.tf_keras.negatives.midx import MIDXSampler

        self.midx = MIDXSampler(
          cfg.midx_codewords,
          "pq",
          num_items=self.data.num_items,
          dim=cfg.embedding_dim,
          temperature=cfg.temperature,
          id_offset=1,
          seed=cfg.seed,
          name="midx",
        )
      self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
      self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
      self.best_metric = tf.Variable(-1.0, dtype=tf.float64, trainable=False, name="best_ndcg10")
      self.best_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="best_epoch")
      self.bad_epochs = tf.Variable(0, dtype=tf.int64, trainable=False, name="bad_epochs")
    self.objective = Objective(cfg, self.model, self.data.num_items, self.estimator, self.midx)
    # The replica's step (objective, gradients, optimizer, estimator update); with
    # --jit_compile_step one static-shape XLA program (train/step.py).
    self._replica_step = step_lib.make_replica_step(
      self.objective,
      self.model,
      self.optimizer,
      jit_compile=cfg.jit_compile_step,
      strategy=self.strategy,
    )
    trackables = dict(
      model=self.model,
      optimizer=self.optimizer,
      estimator=self.estimator,
      step=self.step,
      epoch=self.epoch,
      best_metric=self.best_metric,
      best_epoch=self.best_epoch,
      bad_epochs=self.bad_epochs,
    )
    if self.midx is not None:
      trackables["midx"] = self.midx
    if self.objective.memory is not None:  # --cross_batch: the memory resumes exactly
      trackables["cross_batch"] = self.objective.memory
    self.checkpoint = tf.train.Checkpoint(**trackables)
    self.model_dir = cfg.model_dir
    self.manager = tf.train.CheckpointManager(
      self.checkpoint,
      os.path.join(distribute.worker_dir(cfg.model_dir, self.strategy), "ckpt"),
      max_to_keep=cfg.max_checkpoints,
    )
    self.best_checkpoint = tf.train.Checkpoint(model=self.model)
    self.best_manager = tf.train.CheckpointManager(
      self.best_checkpoint,
      os.path.join(distribute.worker_dir(cfg.model_dir, self.strategy), "best"),
      max_to_keep=1,
    )
    self._train_step = compiled.compile_function(self._train_step_fn)
    self._scheduled_step = compiled.compile_function(self._scheduled_step_fn)
    self.summaries = summaries.SummaryWriter(
      os.path.join(cfg.model_dir, "tensorboard") if self.chief else None
    )
    self.phases = epochs.Phases()  # wall-clock by phase, this process (metrics JSON "phases")

  # -------------------------------------------------------------------------------- data & step
  def epoch_dataset(self, epoch: int) -> tf.data.Dataset:
    """The global batches of one epoch: a fresh stream seeded with (seed, epoch)."""
    cfg = self.cfg
    seed = data_lib.epoch_seed(cfg.seed, epoch)
    if cfg.model == "sasrec":
      ds = data_lib.sasrec_train_dataset(
        self.data, batch_size=cfg.batch_size, max_len=cfg.max_len, seed=seed
      )
    else:
      ds = data_lib.two_tower_train_dataset(
        self.data, batch_size=cfg.batch_size, max_len=cfg.max_len, seed=seed
      )
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.take(self.steps_per_epoch).with_options(options)

  def distributed_epoch(self, epoch: int):
    return self.strategy.experimental_distribute_dataset(self.epoch_dataset(epoch))

  def _train_step_fn(self, batch):
    step = self.step.read_value()
    loss_sum, weight_sum, count = self.strategy.run(self._replica_step, args=(batch, step))
    total = lambda x: self.strategy.reduce(tf.distribute.ReduceOp.SUM, x, axis=None)
    loss_sum, weight_sum, count = total(loss_sum), total(weight_sum), total(count)
    self.step.assign_add(1)
    return loss_sum / tf.maximum(count, 1.0), weight_sum / tf.maximum(count, 1.0)

  def train_step(self, batch):
    """One optimisation step on a distributed batch; returns (mean loss, mean weight w)."""
    return self._train_step(batch)

  # ParameterServerStrategy: one scheduled step = one batch of one worker's stream.
  def worker_dataset(self, input_context=None) -> tf.data.Dataset:
    """One worker's endless stream of batches (of ``batch_size``), for
    ``coordinator.create_per_worker_dataset``: the same pipeline as `epoch_dataset`, shuffled
    with a seed the worker draws itself (workers read different permutations of the data)."""
    del input_context  # every worker reads the whole pipeline (its own shuffle)
    cfg = self.cfg
    seed = tf.random.uniform([], 0, 2**62, dtype=tf.int64)  # unseeded op: differs per worker
    if cfg.model == "sasrec":
      return data_lib.sasrec_train_dataset(
        self.data, batch_size=cfg.batch_size, max_len=cfg.max_len, seed=seed
      )
    return data_lib.two_tower_train_dataset(
      self.data, batch_size=cfg.batch_size, max_len=cfg.max_len, seed=seed
    )

  def worker_iterator(self):
    """The per-worker iterator of `worker_dataset` (created once, on every worker)."""
    if self._worker_iterator is None:
      per_worker = self.coordinator.create_per_worker_dataset(self.worker_dataset)
      self._worker_iterator = iter(per_worker)
    return self._worker_iterator

  def _scheduled_step_fn(self, iterator):
    """A step run by a worker: its next batch, the replica step (variables and estimator state
    on the ps), the global step incremented on the ps. Returns (loss_sum, weight_sum, count)."""
    batch = next(iterator)
    step = self.step.assign_add(1) - 1  # the step's number seeds its negatives and dropout
    loss_sum, weight_sum, count = self.strategy.run(self._replica_step, args=(batch, step))
    total = lambda x: self.strategy.reduce(tf.distribute.ReduceOp.SUM, x, axis=None)
    return total(loss_sum), total(weight_sum), total(count)

  def schedule_step(self, iterator=None):
    """Schedules one step on a free worker; returns its `RemoteValue` (loss_sum, weight_sum,
    count). ``iterator``: a per-worker iterator (default `worker_iterator`)."""
    return self.coordinator.schedule(
      self._scheduled_step, args=(iterator or self.worker_iterator(),)
    )

  def epoch_steps(self, epoch: int):
    """Yields (mean loss, mean weight, global step) of each step of epoch ``epoch``.

    With a ClusterCoordinator, the epoch's ``steps_per_epoch`` steps are all scheduled, then
    joined (every scheduled step is applied, a failed worker's steps are run again elsewhere),
    and their results are yielded afterwards, in the order they were scheduled.
    """
    if self.coordinator is None:  # the values stay on the device until the loop reads them
      first = int(self.step.numpy())
      for i, batch in enumerate(self.distributed_epoch(epoch)):
        loss, w = self.train_step(batch)
        yield loss, w, first + i + 1
      return
    first = int(self.step.numpy())
    results = [self.schedule_step() for _ in range(self.steps_per_epoch)]
    self.coordinator.join()
    for i, result in enumerate(results):
      loss_sum, weight_sum, count = (float(x) for x in result.fetch())
      yield (loss_sum / max(count, 1.0), weight_sum / max(count, 1.0), first + i + 1)

  # ---------------------------------------------------------------------------------- the loop
  def restore(self) -> bool:
    """Restores the latest checkpoint (of the chief's folder); True when one was found."""
    latest = tf.train.latest_checkpoint(os.path.join(self.model_dir, "ckpt"))
    if latest is None:
      return False
    self.checkpoint.restore(latest).assert_existing_objects_matched()
    self._saved = (int(self.epoch.numpy()), int(self.step.numpy()))
    self.report(
      f"resumed from {latest}: epoch {self._saved[0]}, step {self._saved[1]}, best "
      f"NDCG@10 {float(self.best_metric.numpy()):.4f}"
    )
    return True

  def _checkpoint_info(self):
    """(epoch, step, folder) of the last checkpoint on disk, or None."""
    if self._saved is None:
      return None
    return (*self._saved, os.path.join(self.model_dir, "ckpt"))

  def _save(self):
    """Checkpoints the state at the end of an epoch."""
    self.manager.save(checkpoint_number=int(self.step.numpy()))
    self._saved = (int(self.epoch.numpy()), int(self.step.numpy()))

  def validate(self, split_name="val") -> dict:
    """Exact Recall/NDCG@10,20 of the current model on a split (`train.validation`)."""
    return validation.evaluate(
      self.model,
      getattr(self.data, split_name),
      max_len=self.cfg.max_len,
      batch_size=self.cfg.eval_batch_size,
      filter_rated=self.cfg.filter_rated,
    )

  def run(self) -> dict:
    """Trains (resuming if possible), then evaluates the best model, exports, writes JSON;
    returns ``{"paused": True, ...}`` instead when the time budget ends first (module
    docstring).

    Raises:
      NonFiniteError: a non-finite loss or gradient (the last epoch's checkpoint is kept).
      TrainingInterrupted: Ctrl-C (the last finished epoch's checkpoint is on disk).
    """
    started = time.time()
    resumed = self.restore()
    history = self._load_history() if resumed else []
    self._unsaved_epoch = False  # an epoch ended (state and history) but is not checkpointed
    try:
      return self._run(history, started)
    except TrainingInterrupted:
      raise
    except KeyboardInterrupt as e:
      if self._unsaved_epoch:  # the state is an epoch's end: save it as the loop would have
        self._save_history(history)
        self._save()
      raise TrainingInterrupted(
        step=int(self.step.numpy()), checkpoint=self._checkpoint_info()
      ) from e
    except Exception as e:
      lost = distribute.lost_parameter_servers(e) if self.coordinator is not None else None
      if lost is None:
        raise
      addresses = distribute.ps_addresses(self.strategy)
      raise ParameterServerLost(
        tasks=[(i, addresses[i] if i < len(addresses) else "?") for i in lost],
        checkpoint=self._checkpoint_info(),
      ) from e

  def _run(self, history, started: float) -> dict:
    paused = epochs.EpochLoop(self, self.phases).run(history, started)
    return paused if paused is not None else self.finish(history)

  # ------------------------------------------- the epoch loop's interface (train.epochs)
  def get_state(self) -> dict:
    return dict(
      epoch=int(self.epoch.numpy()),
      step=int(self.step.numpy()),
      best_metric=float(self.best_metric.numpy()),
      best_epoch=int(self.best_epoch.numpy()),
      bad_epochs=int(self.bad_epochs.numpy()),
    )

  def set_state(self, **values) -> None:
    for name, value in values.items():
      getattr(self, name).assign(value)
    if "epoch" in values:  # the state is an epoch's end that is not checkpointed yet
      self._unsaved_epoch = True

  def begin_epoch(self, epoch: int) -> None:
    del epoch
    self._unsaved_epoch = False  # from here the state is no longer an epoch's end
    if self.midx is not None:
      self.midx.refresh(tf.convert_to_tensor(self.model.all_item_embeddings())[1:])

  def progbar(self, steps: int):
    return tf.keras.utils.Progbar(
      steps, verbose=1 if (self.cfg.progress and self.chief) else 0, stateful_metrics=["loss", "w"]
    )

  def after_first_epoch(self) -> None:
    if self.cfg.host_allocator == "retain":
      # The first epoch traced and compiled the step (<= 8 XLA shapes): `retain` would keep
      # that garbage resident for the whole run (train/host_memory.py).
      host_memory.release_free_memory()

  def save_best(self, epoch: int) -> None:
    self.best_manager.save(checkpoint_number=epoch)

  def save_checkpoint(self, history) -> None:
    self._save_history(history)
    self._save()
    self._unsaved_epoch = False

  def checkpoint_info(self):
    return self._checkpoint_info()

  def pause(self, seconds: float) -> dict:
    """The time budget's end: the last epoch is checkpointed; nothing is evaluated."""
    result = dict(
      paused=True,
      global_step=int(self.step.numpy()),
      epochs_done=int(self.epoch.numpy()),
      best_epoch=int(self.best_epoch.numpy()),
      best_val_ndcg10=float(self.best_metric.numpy()),
      seconds=seconds,
    )
    logging.info(
      "time budget of %.1f min reached after %.1f min: paused at epoch %d (step %d); "
      "rerun the same command to continue",
      self.cfg.time_budget_minutes,
      seconds / 60,
      result["epochs_done"],
      result["global_step"],
    )
    return result

  def finish(self, history) -> dict:
    cfg = self.cfg
    best = tf.train.latest_checkpoint(os.path.join(self.model_dir, "best"))
    if best is not None:
      self.best_checkpoint.restore(best).assert_existing_objects_matched()
    result = dict(
      config=cfg.to_dict(),
      data_fingerprint=data_lib.fingerprint(self.data),
      num_items=self.data.num_items,
      steps_per_epoch=self.steps_per_epoch,
      global_step=int(self.step.numpy()),
      epochs_done=int(self.epoch.numpy()),
      best_epoch=int(self.best_epoch.numpy()),
      best_step=best_step(history, int(self.best_epoch.numpy())),
      best_val_ndcg10=float(self.best_metric.numpy()),
      train_wall_seconds=float(sum(h.get("wall_seconds", h["seconds"]) for h in history)),
      stopped_early=int(self.bad_epochs.numpy()) >= cfg.early_stopping_patience,
      history=history,
    )
    with self.phases("validation"):
      result["val"] = self.validate("val")
    with self.phases("test"):
      result["test"] = self.validate("test")
    if self.chief:
      if cfg.export_dir:
        with self.phases("export"):
          result["export"] = export_lib.export(
            self.model, cfg.export_dir, config=cfg, data=self.data
          )
      result["phases"] = self.phases.as_dict()
      path = epochs.write_metrics(result, cfg)
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
