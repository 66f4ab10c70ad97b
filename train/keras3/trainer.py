"""The trainer of `python -m train.keras3`: the protocol of `train.trainer` on Keras 3; the epoch
loop (early stopping, history, report line, non-finite stop, phases) is `train.epochs`, shared
with `python -m train`; this module supplies the step, the model, validation and checkpoints.

Per epoch e (0-based): the global batches of the stream seeded with `train.data.epoch_seed`(seed,
e) = seed * 1_000_003 + e, ``steps_per_epoch`` of them, built in numpy (`train.data.batches`):
with ``shuffle_rng="tensorflow"`` (the default) the tf-keras trainer's batches
(`train.data.sasrec_train_dataset`'s permutation), with "numpy" another order that needs no
TensorFlow; with --negatives=midx the epoch starts by refreshing the MIDX index
from the current item table (`objective.RetrievalModel.refresh_index`, the tf-keras trainer's
schedule); each step updates a streaming frequency estimator with the batch's
positives, then runs the compiled Keras step (objective, gradients, Adam): on jax the model's
``train_step`` compiled once with its state kept on the device and its loss read every 10 steps
(`train.keras3.jax_step`), elsewhere ``train_on_batch``.
With --sasrec_pack_tokens (the default, as python -m train) each batch carries its token index
(`models.keras3.sasrec_ops.with_token_index`, computed here on the host: "token_rows" [C],
"token_slots" [B, L]) and the encoder's per-token layers run on the packed non-padding tokens (at
most 8 compiled shapes per batch shape; on an accelerator at least the largest likely capacity,
so one program); not under --strategy=mirrored, whose batches are split by rows (a line in the
log says so). After the epoch: exact validation
Recall/NDCG@10,20 (`train.validation.evaluate_queries`, the tf-keras binary's metrics): the
queries by the serving encoder compiled once (`tfrs_logq.keras3.compiled`, fixed-shape batches),
the top-k on the device (`tfrs_logq.keras3.top_k`, chunked over queries and items), the best
model by NDCG@10 kept in ``model_dir/best``, early stopping after ``early_stopping_patience``
epochs without improvement, and a checkpoint of everything that changes
(`train.keras3.checkpoints`: model, optimizer, estimator, the samplers' and dropouts' seed
states, epoch, step, best NDCG@10, patience counter, history). Rerunning the same command
resumes from the last finished epoch and replays the rest exactly. At the end the best model is
evaluated on validation and test, ``metrics.json`` is written (with ``devices``: how many
devices the weights live on), and with ``export_dir`` the query encoder is saved as
``export_dir/query_encoder.keras`` (with ``metadata.json``; on the tensorflow backend also the
serving SavedModels, `export`). --strategy=mirrored
(JAX): every step is data parallel over N devices (`train.keras3.parallel`: the global batch
split, weights replicated, the in-batch pool gathered onto every device), the rest as above.

TensorBoard (``model_dir/tensorboard``, `train.summaries`): the tf-keras binary's tags,
train/loss and train/mean_weight per step, val/* (test/* at improving epochs with test_curve)
and train/epoch_loss per epoch. Failures: a non-finite loss, or a step whose gradients were not
all finite (counted by the optimizer inside the compiled step, `train.keras3.finite`), stops
training at that step with `NonFiniteError` naming it and the last finished epoch's checkpoint,
which is kept (nothing newer is written), as `train.trainer` does.
"""

from __future__ import annotations

import json
import logging
import os
import time

import numpy as np

# The application's data and metrics (numpy; `train` sets TF_USE_LEGACY_KERAS) before keras: on
# the tensorflow backend, keras imported first would make tf.keras Keras 3, which the tf-keras
# front rejects. Nothing here imports TensorFlow unless shuffle_rng="tensorflow".
from train import data as data_lib
from train import epochs, summaries, validation
from train.data import batches as batches_lib
from train.epochs import EXIT_PAUSED, NonFiniteError

# isort: split
import keras
from keras import ops

from models.keras3 import sasrec_ops
from tfrs_logq.keras3 import compiled, top_k
from train.keras3 import checkpoints, finite, parallel
from train.keras3 import objective as objective_lib

__all__ = ["EXIT_PAUSED", "NonFiniteError", "Trainer", "query_embeddings"]


def query_embeddings(encoder, inputs: np.ndarray, batch_size: int, encode=None) -> np.ndarray:
  """float32 [Q, d]: serving queries of left-padded histories [Q, max_len], in batches of one
  shape (`train.validation.pad_batches`), by ``encode`` (default: ``encoder.serving_queries``
  compiled with the encoder's current weights, `tfrs_logq.keras3.compiled`); every batch is
  issued before the first is read, so an asynchronous backend pipelines them."""
  if encode is None:
    encode = compiled.compile_with_state(encoder.serving_queries, encoder.variables)
  outs = [
    (encode(ops.convert_to_tensor(chunk.astype(np.int32))), rows)
    for chunk, rows in validation.pad_batches(inputs, batch_size)
  ]
  return np.concatenate(
    [np.asarray(ops.convert_to_numpy(q), np.float32)[:rows] for q, rows in outs]
  )


# --table_optimizer=lazy_adam: the item tables of SASRec (input and output, one when tied).
ITEM_TABLES = r"(^|/)(input|output)_item_embedding/embeddings$"


def build_optimizer(cfg):
  """Adam, or with --table_optimizer=lazy_adam `tfrs_logq.keras3.LazyAdam` for the item tables
  (``ITEM_TABLES``) and Adam's update for the rest, as the tf-keras binary; both count the
  steps with non-finite gradients (`train.keras3.finite`)."""
  if cfg.table_optimizer == "lazy_adam":
    return finite.GradientCheckedLazyAdam(cfg.learning_rate, table_pattern=ITEM_TABLES)
  return finite.GradientCheckedAdam(cfg.learning_rate)


class Trainer:
  """Builds the model, optimizer and estimator and runs the epochs (module docstring)."""

  def __init__(self, cfg, data, report=None, shuffle_rng: str = "tensorflow", logq_variants=None):
    self.cfg, self.data = cfg, data
    self.shuffle_rng = batches_lib.check_shuffle_rng(shuffle_rng)
    self.report = report or logging.info
    self.steps_per_epoch = cfg.steps_per_epoch or max(
      1, len(data.train_sequences) // cfg.batch_size
    )
    # --strategy=mirrored: DataParallel (train.keras3.parallel), set before any variable exists.
    self.distribution = parallel.distribution(cfg)
    if self.distribution is not None:
      keras.distribution.set_distribution(self.distribution)
    self.encoder = objective_lib.build_encoder(cfg, data.num_items)
    self.estimator = objective_lib.build_estimator(cfg, data)
    self.model = objective_lib.RetrievalModel(
      cfg, self.encoder, self.estimator, logq_variants=logq_variants, name="retrieval"
    )
    self.model.built = True
    jit = (
      True
      if keras.backend.backend() == "jax"
      else (bool(cfg.jit_compile) if keras.backend.backend() == "tensorflow" else False)
    )
    self.model.compile(optimizer=build_optimizer(cfg), jit_compile=jit)
    self.model.optimizer.build(self.model.trainable_variables)
    if self.distribution is not None:
      self.report(
        f"data parallel (keras.distribution.DataParallel) over {self.devices()} "
        f"devices, {cfg.batch_size // self.devices()} sequences each"
      )
      if cfg.sasrec_pack_tokens:
        self.report(
          "--sasrec_pack_tokens: off under --strategy=mirrored (the token index is "
          "the whole batch's, the batch is split by rows): the padded encoder"
        )
    self.pack_tokens = bool(cfg.sasrec_pack_tokens) and self.distribution is None
    self.jax_step = None  # train.keras3.jax_step on jax without data parallelism
    if keras.backend.backend() == "jax" and self.distribution is None:
      from train.keras3 import jax_step

      self.jax_step = jax_step.JaxStep(
        self.model, outside=self.estimator.variables, counter=self.model.optimizer.nonfinite_steps
      )
    # Every likely step shape compiled at the start, in the background, on an accelerator (the
    # host's cores are free while the device trains); on a CPU the compilations would take the
    # training's cores, for shapes that may never come: there each compiles when it first comes.
    self.precompile_shapes = self.jax_step is not None and jax_step.on_accelerator()
    # On an accelerator every packed batch takes at least the largest likely token capacity:
    # one step program instead of one per capacity (a run otherwise waits for its capacities
    # to compile one after another, docs/keras3.md; the extra filler rows cost the device
    # little). Deterministic: the capacity depends on the batch alone, never on compile timing.
    self.token_floor = 0
    if self.pack_tokens and self.precompile_shapes:
      self.token_floor = max(self._likely_capacities())
    self.epoch = self.step = self.best_epoch = self.bad_epochs = 0
    self._saved = None  # (epoch, step) of the last checkpoint on disk
    self.best_metric = -1.0
    self.history = []
    self.ckpt_dir = os.path.join(cfg.model_dir, "ckpt")
    self.best_path = os.path.join(cfg.model_dir, "best", "weights.npz")
    self.summaries = summaries.SummaryWriter(os.path.join(cfg.model_dir, "tensorboard"))
    self._encode = None  # the compiled serving queries (validate)
    self.phases = epochs.Phases()  # wall-clock by phase, this process (metrics.json "phases")
    self.shape_log = epochs.ShapeLog(self.report)  # the step's compiled input shapes

  def devices(self) -> int:
    """The number of devices the weights live on (N data-parallel devices, else 1)."""
    value = self.model.trainable_variables[0].value
    sharding = getattr(value, "sharding", None)
    return len(sharding.device_set) if sharding is not None else 1

  # ---------------------------------------------------------------------------- state & data
  def _checkpoint_info(self):
    """(epoch, step, folder) of the last checkpoint on disk, or None."""
    return None if self._saved is None else (*self._saved, self.ckpt_dir)

  def state_variables(self):
    """Every variable that changes in training: the model's, then the optimizer's."""
    return list(self.model.variables) + list(self.model.optimizer.variables)

  def _state(self) -> dict:
    return dict(
      epoch=self.epoch,
      step=self.step,
      best_metric=self.best_metric,
      best_epoch=self.best_epoch,
      bad_epochs=self.bad_epochs,
      history=self.history,
    )

  def restore(self) -> bool:
    """Restores the latest checkpoint of ``model_dir/ckpt``; True when there was one."""
    path = checkpoints.latest(self.ckpt_dir)
    if path is None:
      return False
    state = checkpoints.restore(path, self.state_variables())
    self.epoch, self.step = int(state["epoch"]), int(state["step"])
    self.best_metric, self.best_epoch = float(state["best_metric"]), int(state["best_epoch"])
    self.bad_epochs, self.history = int(state["bad_epochs"]), list(state["history"])
    self._saved = (self.epoch, self.step)
    self.report(
      f"resumed from {path}: epoch {self.epoch}, step {self.step}, best NDCG@10 "
      f"{self.best_metric:.4f}"
    )
    return True

  def epoch_batches(self, epoch: int):
    """The numpy batches of one epoch (the tf-keras trainer's stream for (seed, epoch)), with
    their token index when packing (module docstring)."""
    cfg = self.cfg
    for batch in batches_lib.sasrec_batches(
      self.data,
      batch_size=cfg.batch_size,
      max_len=cfg.max_len,
      seed=data_lib.epoch_seed(cfg.seed, epoch),
      num_batches=self.steps_per_epoch,
      rng=self.shuffle_rng,
    ):
      batch = {k: v.astype(np.int32) for k, v in batch.items()}
      if self.pack_tokens:
        batch = sasrec_ops.with_token_index(batch, min_capacity=self.token_floor)
      yield batch

  def train_step(self, batch):
    """One step: the estimator's update, then the compiled Keras step; returns (its loss, its
    mean weight w, whether every gradient was finite). On jax (not data parallel) the values
    are device scalars and the state stays on the device until `sync_state`
    (`train.keras3.jax_step`); elsewhere ``train_on_batch`` (numpy, a host synchronisation)."""
    self.estimator_update(batch)
    self.step += 1
    if self.jax_step is not None:
      logs = self.jax_step(batch)
      return logs["loss"], logs["mean_weight"], logs["finite"]
    self.model.reset_metrics()
    logs = self.model.train_on_batch(batch, return_dict=True)
    finite_grads = self.model.optimizer.nonfinite_count() == 0
    return float(logs["loss"]), float(logs["mean_weight"]), finite_grads

  def estimator_update(self, batch) -> None:
    """The streaming estimator counts the batch's positives (outside the compiled step)."""
    objective_lib.update_estimator(self.cfg, self.estimator, batch)

  def sync_state(self) -> None:
    """The device state of the jax step written into the Keras variables (a no-op elsewhere)."""
    if self.jax_step is not None:
      self.jax_step.sync()

  def validate(self, split_name: str = "val") -> dict:
    """Exact Recall/NDCG@10,20 of the encoder on a split (`train.validation`'s metrics); the
    jax step's device state is written into the variables first (`sync_state`)."""
    self.sync_state()
    cfg = self.cfg
    split = getattr(self.data, split_name)
    validation.check_split(split, cfg.filter_rated)
    if self._encode is None:  # compiled once: the weights are passed in at every call
      self._encode = compiled.compile_with_state(
        self.encoder.serving_queries, self.encoder.variables
      )
    queries = query_embeddings(
      self.encoder,
      data_lib.left_pad(split.inputs, cfg.max_len),
      cfg.eval_batch_size,
      encode=self._encode,
    )
    table = np.asarray(ops.convert_to_numpy(self.encoder.all_item_embeddings()), np.float32)
    return validation.evaluate_queries(
      queries,
      table,
      split,
      batch_size=cfg.eval_batch_size,
      filter_rated=cfg.filter_rated,
      exact_top_k=top_k.exact_top_k,
    )

  # ------------------------------------------- the epoch loop's interface (train.epochs)
  def get_state(self) -> dict:
    return dict(
      epoch=self.epoch,
      step=self.step,
      best_metric=self.best_metric,
      best_epoch=self.best_epoch,
      bad_epochs=self.bad_epochs,
    )

  def set_state(self, **values) -> None:
    for name, value in values.items():
      setattr(self, name, value)

  def begin_epoch(self, epoch: int) -> None:
    del epoch
    self.model.refresh_index()  # --negatives=midx: the index of this epoch's start

  def epoch_steps(self, epoch: int):
    """(loss, mean weight, global step) of each step of the epoch; a step whose gradients were
    not all finite yields a NaN loss (the loop stops there). The batches are built ahead by a
    background thread (`train.epochs.prefetch`); each new input shape is logged (`ShapeLog`:
    with --sasrec_pack_tokens at most 8 packed sizes per batch shape, each compiled once)."""
    if self.jax_step is not None:
      self.jax_step.load()  # the variables as restored / refreshed (begin_epoch)
    for batch in epochs.prefetch(self.epoch_batches(epoch), depth=2):
      if self.jax_step is not None and self.precompile_shapes and not self.jax_step.programs:
        self.precompile(batch)
      self.shape_log.seen(batch, self.step + 1)
      loss, w, finite_grads = self.train_step(batch)
      if self.jax_step is None:
        yield (loss if finite_grads else float("nan")), w, self.step
      else:  # device scalars: NaN where a gradient was not finite, read every k steps
        yield ops.where(finite_grads, loss, float("nan")), w, self.step
    self.sync_state()

  def precompile(self, batch: dict) -> None:
    """Compiles the jax step for every input shape the run is likely to see, from its first
    batch: with --sasrec_pack_tokens every token capacity a batch reaches except with
    probability ~1e-9 (`models.keras3.sasrec_ops.likely_capacities`) from the token floor up
    (on an accelerator the largest: one program), the first batch's first; traced now,
    compiled in the background (`train.keras3.jax_step`)."""
    examples = [batch]
    if self.pack_tokens:
      first = batch["token_rows"].shape[0]
      capacities = sorted({first, *(c for c in self._likely_capacities() if c >= self.token_floor)})
      examples += [
        dict(batch, token_rows=np.zeros((c,), np.int32)) for c in capacities if c != first
      ]
      self.report(
        f"compiling the step for {len(examples)} token capacities {capacities} at the start "
        "(in the background)"
      )
    self.jax_step.precompile(examples)

  def _likely_capacities(self) -> list:
    """The token capacities a batch reaches except with probability ~1e-9
    (`models.keras3.sasrec_ops.likely_capacities`)."""
    _, starts, ends = batches_lib.sasrec_sequences(self.data)
    return sasrec_ops.likely_capacities(ends - starts - 1, self.cfg.batch_size, self.cfg.max_len)

  def progbar(self, steps: int):
    return keras.utils.Progbar(
      steps, verbose=1 if self.cfg.progress else 0, stateful_metrics=["loss", "w"]
    )

  def save_best(self, epoch: int) -> None:
    self.sync_state()
    checkpoints.save_values(self.best_path, self.encoder.variables, dict(epoch=epoch))

  def save_checkpoint(self, history) -> None:
    self.sync_state()  # a loop that left the epoch early (budget, NaN) did not sync
    self.history = history
    checkpoints.save(
      self.ckpt_dir, self.step, self.state_variables(), self._state(), keep=self.cfg.max_checkpoints
    )
    self._saved = (self.epoch, self.step)

  def checkpoint_info(self):
    return self._checkpoint_info()

  def pause(self, seconds: float) -> dict:
    del seconds
    return dict(
      paused=True,
      global_step=self.step,
      epochs_done=self.epoch,
      best_epoch=self.best_epoch,
      best_val_ndcg10=self.best_metric,
    )

  # --------------------------------------------------------------------------------- the loop
  def run(self, restore: bool = True) -> dict:
    """Trains (resuming if possible; ``restore=False``: the caller has called `restore`), then
    evaluates the best model, exports, writes JSON; ``{"paused": True, ...}`` when the time
    budget ends first."""
    started = time.time()
    if restore:
      self.restore()
    paused = epochs.EpochLoop(self, self.phases).run(self.history, started)
    return paused if paused is not None else self.finish()

  def finish(self) -> dict:
    """Evaluates the best model on validation and test, exports it, writes metrics.json."""
    cfg = self.cfg
    if os.path.exists(self.best_path):
      checkpoints.restore_values(self.best_path, self.encoder.variables)
    with self.phases("validation"):
      val = self.validate("val")
    with self.phases("test"):
      test = self.validate("test")
    result = dict(
      config=cfg.to_dict(),
      backend=keras.backend.backend(),
      shuffle_rng=self.shuffle_rng,
      data_fingerprint=data_lib.fingerprint(self.data),
      num_items=self.data.num_items,
      steps_per_epoch=self.steps_per_epoch,
      devices=self.devices(),
      global_step=self.step,
      epochs_done=self.epoch,
      best_epoch=self.best_epoch,
      best_step=epochs.best_step(self.history, self.best_epoch),
      best_val_ndcg10=self.best_metric,
      train_wall_seconds=float(sum(h["wall_seconds"] for h in self.history)),
      stopped_early=self.bad_epochs >= cfg.early_stopping_patience,
      val=val,
      test=test,
      history=self.history,
    )
    if cfg.export_dir:
      with self.phases("export"):
        result["export"] = export(self.encoder, cfg.export_dir, cfg, self.data, self.report)
    result["phases"] = self.phases.as_dict()
    result["step_shapes"] = self.shape_log.shapes
    if self.jax_step is not None:  # compiled step programs: all, and those not precompiled
      result["step_programs"] = dict(compiled=self.jax_step.programs, late=self.jax_step.late)
    epochs.write_metrics(result, cfg)
    return result


def export(encoder, export_dir: str, cfg, data, report=None) -> dict:
  """Saves the query encoder as ``export_dir/query_encoder.keras`` (the Keras 3 SASRec:
  ``serving_queries`` / ``query_embeddings`` give the queries, ``all_item_embeddings`` the item
  table) and ``export_dir/metadata.json`` (run config, backend, catalog size).

  On the tensorflow backend it also writes the serving SavedModels of `python -m train`
  (`train.export.export`, the same function: query_encoder/ with ``serving_default``: history
  int64 [B, L] -> {"embedding": float32 [B, d]}, item_embeddings/, item_embeddings.npy,
  export_meta.json, the id maps), which `python -m eval.evaluate` and `eval.serving` read
  unchanged. On jax / torch a SavedModel cannot be traced from the model: ``report`` says so in
  one line and only the ``.keras`` export is written."""
  os.makedirs(export_dir, exist_ok=True)
  path = os.path.join(export_dir, "query_encoder.keras")
  encoder.save(path)
  meta = dict(
    run_config=cfg.to_dict(),
    backend=keras.backend.backend(),
    num_items=data.num_items,
    max_len=cfg.max_len,
    data_fingerprint=data_lib.fingerprint(data),
  )
  with open(os.path.join(export_dir, "metadata.json"), "w") as f:
    json.dump(meta, f, indent=2)
  written = dict(query_encoder=path)
  if keras.backend.backend() == "tensorflow":
    from train import export as export_lib

    export_lib.export(encoder, export_dir, config=cfg, data=data)
    written["saved_model"] = os.path.join(export_dir, "query_encoder")
  else:
    (report or logging.info)(
      f"export: the serving SavedModel (query_encoder/, item_embeddings/ for python -m "
      f"eval.evaluate) needs --backend=tensorflow; wrote {path} only"
    )
  return written
