"""The epoch loop of both binaries (`python -m train`, `python -m train.keras3`), written once.

    while epoch < epochs and bad_epochs < patience:
      pause           if a time budget T is set and now + the last epoch's wall > start + T
      Ctrl-C          raises KeyboardInterrupt here, before an epoch, or after the running step
                      (a second Ctrl-C at once): `interrupts_between_steps`
      begin_epoch(e)  (--negatives=midx: the index refresh)
      steps           trainer.epoch_steps(e) yields (loss, mean weight w, global step) per step;
                      the values may be device scalars: they are read (a host synchronisation)
                      every ``read_every`` steps and at the epoch's end, where the progress bar
                      and the per-step summaries (train/loss, train/mean_weight) are written
      non-finite      a NaN / inf loss (a non-finite gradient makes the binaries' loss NaN)
                      raises `NonFiniteError` naming the first such step; nothing newer than
                      the last finished epoch's checkpoint is written
      validation      metrics = validate("val"); with --test_curve also validate("test") at
                      the epochs that improve on the best (never selected on): the selected
                      epoch of any patience is one of them (python -m bench.analysis patience)
      early stopping  improved = NDCG@10 > best: best, best_epoch = NDCG@10, e + 1, bad = 0 and
                      save_best(e + 1); else bad += 1
      history         one record per epoch (`epoch_record`), summaries, the report line
                      (`report_line`)
      checkpoint      save_checkpoint(history) at every epoch, or with --checkpoint_every_seconds
                      = S > 0 when S seconds have passed since the last one, at the last epoch
                      and before a pause (a resume trains the epochs after it again, exactly)

A trainer supplies its step and its model through a small interface (`EpochLoop`'s docstring);
the loop keeps the state (epoch, step, best NDCG@10, best epoch, bad epochs) in the trainer
(``get_state`` / ``set_state``) so that each binary checkpoints it its own way, and exact resume
is the trainers' (unchanged).

Time: `Phases` adds up the wall-clock of each phase (first step = start-up compilation, the
other training steps, validation, checkpoints, test, export), written to the metrics JSON as
``phases`` for `bench.analysis phases`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import signal
import threading
import time
from typing import Dict, Iterable, Iterator, List, Optional, Tuple, TypeVar

__all__ = [
  "EXIT_PAUSED",
  "EpochLoop",
  "interrupts_between_steps",
  "NonFiniteError",
  "Phases",
  "ShapeLog",
  "best_step",
  "epoch_record",
  "prefetch",
  "report_line",
  "write_metrics",
]

T = TypeVar("T")

# Exit status of both binaries when the time budget paused the run (rerun to continue).
EXIT_PAUSED = 3


_INTERRUPT = threading.Event()


@contextlib.contextmanager
def interrupts_between_steps() -> Iterator[None]:
  """Within it, Ctrl-C (SIGINT) takes effect between two steps: the first one sets a flag that
  `EpochLoop` reads after every step and before every epoch, and raises KeyboardInterrupt
  there; a second one raises at once. A KeyboardInterrupt raised inside a framework's own code
  (TensorFlow's executor or tf.data iterator half-built) leaves objects whose finalisers print
  tracebacks at exit. Only where Python's own handler is installed, in the main thread;
  elsewhere nothing changes."""
  if (
    threading.current_thread() is not threading.main_thread()
    or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
  ):
    yield
    return

  def handler(signum, frame):
    if _INTERRUPT.is_set():
      signal.default_int_handler(signum, frame)
    _INTERRUPT.set()

  _INTERRUPT.clear()
  signal.signal(signal.SIGINT, handler)
  try:
    yield
  finally:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _INTERRUPT.clear()


def _stop_if_interrupted() -> None:
  if _INTERRUPT.is_set():
    raise KeyboardInterrupt


class NonFiniteError(FloatingPointError):
  """A non-finite loss or gradient stopped training.

  Attributes: ``step`` (the global step count after the failing step), ``epoch`` (1-based, the
  epoch it was in), ``checkpoint`` ((epoch, step, path) of the last checkpoint kept, or None).
  """

  def __init__(self, message: str, *, step: int, epoch: int, checkpoint=None):
    super().__init__(message)
    self.step, self.epoch, self.checkpoint = step, epoch, checkpoint

  @classmethod
  def at(cls, step: int, epoch: int, checkpoint) -> "NonFiniteError":
    kept = (
      "no epoch had finished, nothing was saved"
      if checkpoint is None
      else f"the checkpoint of epoch {checkpoint[0]} (step {checkpoint[1]}) in {checkpoint[2]} "
      "is kept"
    )
    return cls(
      f"non-finite loss or gradient at step {step} (epoch {epoch}): training stopped; {kept}.",
      step=step,
      epoch=epoch,
      checkpoint=checkpoint,
    )


class Phases:
  """Wall-clock seconds by phase: ``with phases("validation"): ...``; ``as_dict()``."""

  NAMES = ("first_step", "steps", "validation", "checkpoints", "test", "export")

  def __init__(self, seconds: Optional[Dict[str, float]] = None):
    self.seconds = {name: 0.0 for name in self.NAMES}
    self.seconds.update(seconds or {})

  @contextlib.contextmanager
  def __call__(self, name: str):
    start = time.perf_counter()
    try:
      yield
    finally:
      self.add(name, time.perf_counter() - start)

  def add(self, name: str, seconds: float) -> None:
    self.seconds[name] = self.seconds.get(name, 0.0) + seconds

  def as_dict(self) -> Dict[str, float]:
    return dict(self.seconds)


def prefetch(items: Iterable[T], depth: int = 2) -> Iterator[T]:
  """``items`` produced ahead by a background thread, at most ``depth`` waiting: the host builds
  the next batches while the device runs the current step. Same items, same order; an exception
  of the producer is raised here, where its item would have come. Closing the iterator early
  (a non-finite stop) stops the producer after its current item."""
  done = object()
  buffer: "queue.Queue" = queue.Queue(maxsize=max(1, depth))
  stop = threading.Event()

  def produce():
    try:
      for item in items:
        while not stop.is_set():
          try:
            buffer.put((item, None), timeout=0.1)
            break
          except queue.Full:
            continue
        if stop.is_set():
          return
      buffer.put((done, None))
    except BaseException as e:  # re-raised in the consumer
      buffer.put((done, e))

  thread = threading.Thread(target=produce, daemon=True, name="prefetch")
  thread.start()
  try:
    while True:
      item, error = buffer.get()
      if item is done:
        if error is not None:
          raise error
        return
      yield item
  finally:
    stop.set()


class ShapeLog:
  """The distinct input shapes a compiled step has seen (each one a compiled program on a
  static-shape backend): ``seen(batch)`` logs a new one with its number and when it came."""

  def __init__(self, report=None):
    self.shapes: List[dict] = []
    self._keys = set()
    self.report = report

  def seen(self, batch: dict, step: int) -> bool:
    key = tuple(sorted((k, tuple(getattr(v, "shape", ()))) for k, v in batch.items()))
    if key in self._keys:
      return False
    self._keys.add(key)
    self.shapes.append(dict(step=step, shapes={k: list(v) for k, v in key}))
    if self.report is not None:
      self.report(
        f"step {step}: new input shape #{len(self.shapes)} (a compiled program): "
        + ", ".join(f"{k} {list(v)}" for k, v in key)
      )
    return True


def best_step(history, best_epoch: int):
  """The global step at the end of epoch ``best_epoch`` (the checkpoint evaluated on test), from
  the run's epoch history; None when that epoch is not in it (no epoch trained)."""
  for h in history:
    if h.get("epoch") == best_epoch:
      return int(h["step"])
  return None


def epoch_record(
  epoch: int,
  step: int,
  loss_sum: float,
  weight_sum: float,
  n: int,
  seconds: float,
  wall_seconds: float,
  metrics: Dict[str, float],
) -> dict:
  """One epoch's history record: mean loss and weight, its training and wall seconds, and its
  metrics (``val_*``, test ones kept as ``test_*``)."""
  return dict(
    epoch=epoch,
    step=step,
    loss=loss_sum / max(n, 1),
    mean_weight=weight_sum / max(n, 1),
    seconds=seconds,
    seconds_per_step=seconds / max(n, 1),
    wall_seconds=wall_seconds,
    **{(k if k.startswith("test_") else f"val_{k}"): v for k, v in metrics.items()},
  )


def report_line(record: dict, improved: bool) -> str:
  """The line printed after each epoch."""
  return (
    f"epoch {record['epoch']} step {record['step']} loss {record['loss']:.4f} w "
    f"{record['mean_weight']:.4f} val R@10 {record['val_recall@10']:.4f} N@10 "
    f"{record['val_ndcg@10']:.4f} R@20 {record['val_recall@20']:.4f} N@20 "
    f"{record['val_ndcg@20']:.4f} ({record['seconds']:.1f}s)" + (" *best*" if improved else "")
  )


def write_metrics(result: dict, cfg) -> str:
  """Writes the run's result to --metrics_json (default model_dir/metrics.json); its path."""
  path = cfg.metrics_json or os.path.join(cfg.model_dir, "metrics.json")
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f:
    json.dump(result, f, indent=2, default=float)
  return path


class EpochLoop:
  """Runs the epochs of a trainer (module docstring).

  The trainer provides: ``cfg`` (epochs, early_stopping_patience, time_budget_minutes,
  test_curve, progress, checkpoint_every_seconds), ``steps_per_epoch``, ``report`` (a callable),
  ``summaries`` (a ``train.summaries.SummaryWriter``), and the methods ``get_state() ->
  dict(epoch, step, best_metric, best_epoch, bad_epochs)``, ``set_state(**some)``,
  ``begin_epoch(e)``,
  ``epoch_steps(e)`` (yields (loss, w, step)), ``validate(split) -> dict``,
  ``save_best(epoch)``, ``save_checkpoint(history)``, ``checkpoint_info()`` ((epoch, step,
  path) of the last checkpoint or None), ``pause(seconds) -> dict``, ``progbar(steps) ->`` an
  object with ``update(n, values)``; optionally ``after_first_epoch()``.
  """

  def __init__(self, trainer, phases: Optional[Phases] = None, read_every: int = 10):
    self.trainer, self.phases = trainer, phases or Phases()
    self.read_every = max(1, int(read_every))
    self._first_step_done = False
    self._saved_at = time.monotonic()  # of the last full checkpoint (or of the loop's start)
    self._unsaved: Optional[tuple] = None  # (trainer, history) of an epoch not checkpointed

  def checkpoint_due(self) -> bool:
    """Whether the epoch just finished is checkpointed (module docstring)."""
    every = self.trainer.cfg.checkpoint_every_seconds
    return every <= 0 or self.done() or time.monotonic() - self._saved_at >= every

  def flush(self) -> None:
    """Writes the checkpoint of the last finished epoch if it was skipped (before a pause)."""
    if self._unsaved is not None:
      t, history = self._unsaved
      with self.phases("checkpoints"):
        t.save_checkpoint(history)
      self._saved_at, self._unsaved = time.monotonic(), None

  def done(self) -> bool:
    """True when the trainer has finished its epochs or stopped early."""
    state, cfg = self.trainer.get_state(), self.trainer.cfg
    return state["epoch"] >= cfg.epochs or state["bad_epochs"] >= cfg.early_stopping_patience

  def epoch(self, trainer, history: List[dict]) -> None:
    """One epoch of ``trainer`` (the loop's trainer, or a view of it whose ``epoch_steps``
    replays steps that ran elsewhere, `train.keras3.seeds`)."""
    self._epoch(trainer.get_state(), history, trainer)

  def run(self, history: List[dict], started: float) -> Optional[dict]:
    """Trains until early stopping or --epochs; returns the trainer's pause result when the
    time budget ends first, else None (the caller finishes)."""
    with interrupts_between_steps():
      return self._run(history, started)

  def _run(self, history: List[dict], started: float) -> Optional[dict]:
    t, cfg = self.trainer, self.trainer.cfg
    last_wall = None
    first_epoch = True
    while True:
      _stop_if_interrupted()
      state = t.get_state()
      if self.done():
        return None
      if (
        cfg.time_budget_minutes
        and last_wall is not None
        and time.time() + last_wall > started + 60.0 * cfg.time_budget_minutes
      ):
        self.flush()
        return t.pause(time.time() - started)
      epoch_start = time.time()
      compiling = self.phases.seconds["first_step"]
      self._epoch(state, history)
      if first_epoch and hasattr(t, "after_first_epoch"):
        t.after_first_epoch()
      first_epoch = False
      # The next epoch's length is estimated by this one's, less the process's first step if it
      # was in it (tracing and compilation: most of a first epoch on an accelerator).
      last_wall = time.time() - epoch_start - (self.phases.seconds["first_step"] - compiling)

  def _steps(self, e: int, t) -> Tuple[float, float, int, float]:
    """Runs epoch e's steps of trainer t; (loss sum, weight sum, steps, seconds)."""
    bar = t.progbar(t.steps_per_epoch)
    pending: List[tuple] = []
    totals = [0.0, 0.0, 0]
    start = time.time()

    def read():
      for loss, w, step in pending:
        loss, w = float(loss), float(w)
        if not math.isfinite(loss):
          raise NonFiniteError.at(int(step), e + 1, t.checkpoint_info())
        totals[0] += loss
        totals[1] += w
        totals[2] += 1
        bar.update(totals[2], [("loss", loss), ("w", w)])
        t.summaries.scalars(int(step), {"train/loss": loss, "train/mean_weight": w})
      pending.clear()

    tick = time.perf_counter()
    for item in t.epoch_steps(e):
      pending.append(item)
      _stop_if_interrupted()
      if not self._first_step_done:  # the first step: tracing and compilation
        read()
        now = time.perf_counter()
        self.phases.add("first_step", now - tick)
        tick, self._first_step_done = now, True
      elif len(pending) >= self.read_every:
        read()
    read()
    self.phases.add("steps", time.perf_counter() - tick)
    return totals[0], totals[1], totals[2], time.time() - start

  def _epoch(self, state: dict, history: List[dict], trainer=None) -> None:
    t = self.trainer if trainer is None else trainer
    cfg, e = t.cfg, state["epoch"]
    epoch_start = time.time()
    t.begin_epoch(e)
    loss_sum, weight_sum, n, seconds = self._steps(e, t)
    with self.phases("validation"):
      metrics = t.validate("val")
    improved = metrics["ndcg@10"] > state["best_metric"]
    if cfg.test_curve and improved:  # recorded only: selection stays on validation
      with self.phases("test"):
        metrics.update({f"test_{k}": v for k, v in t.validate("test").items()})
    step = t.get_state()["step"]
    if improved:
      t.set_state(best_metric=metrics["ndcg@10"], best_epoch=e + 1, bad_epochs=0)
      with self.phases("checkpoints"):
        t.save_best(e + 1)
    else:
      t.set_state(bad_epochs=state["bad_epochs"] + 1)
    record = epoch_record(
      e + 1, step, loss_sum, weight_sum, n, seconds, time.time() - epoch_start, metrics
    )
    history.append(record)
    t.set_state(epoch=e + 1)  # from here on the state is the end of epoch e + 1
    t.summaries.epoch(step, metrics, record["loss"])
    self._unsaved = (t, history)
    if self.checkpoint_due():
      self.flush()
    t.report(report_line(record, improved))
