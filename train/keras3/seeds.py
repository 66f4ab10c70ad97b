"""Several seeds of one run trained as one compiled program (`python -m train.keras3
--backend=jax --seeds=0,1,2`): S independent models, each exactly a separate run.

    run s            = `train.keras3.trainer.Trainer` of the flags with --seed=s and
                       --model_dir=<model_dir>/seed<s> (--export_dir likewise): its own
                       initialisation, data order, dropout, negatives, estimator, early
                       stopping, checkpoints, metrics.json, export
    one step         = jax.vmap of the jax step (`train.keras3.jax_step`) over the runs'
                       stacked states and batches: one program, S models
    epoch e          = the runs still training at epoch e step together; then each run's
                       validation, early stopping, history, checkpoint and report line
                       (`train.epochs.EpochLoop.epoch`); a run that stops leaves the stack
                       (the next step compiles for S - 1)
    finish           = each run's `Trainer.finish` (best model on validation and test)
    rows (--logqs)   = rows that differ only in --logq join the program: one run per
                       (logq, seed) in <model_dir>/<logq>/seed<s>; every run's model computes
                       the sampled softmax of each listed variant on its scores and keeps its
                       own (`train.keras3.objective.RetrievalModel`, logq_variants), so the
                       stack is still one traced step, R x S models

The program is traced once, so whatever is a Python constant in the step is shared: every batch
has one shape across the runs (the encoder runs padded, --sasrec_pack_tokens off: the packed
encoder's shape and dropout masks depend on each batch's token count), and the streaming
estimators' hash functions are those of --frequency_seed (default: the flags' --seed) in every
run. A run of these flags with --seed=s, --nosasrec_pack_tokens and that --frequency_seed alone
(and --logq=v for a row of --logqs) gives the same results up to float rounding
(tests/train/keras3/test_seeds.py); everything
else random (initialisation, data order, dropout, negatives) is the seed's own, held in the
runs' stacked state. Resuming: each run restores its own
checkpoint; runs at different epochs train in groups by epoch until they meet. Not with
--strategy=mirrored, --negatives=midx (its index refresh is per run, outside the step) or
--time_budget_minutes.
"""

from __future__ import annotations

import os
import time
from typing import Callable, List, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from train import epochs

__all__ = ["SeedRuns", "check_seeds", "seed_config", "variant_floors"]


def variant_floors(cfg, logqs) -> dict:
  """{logq: ratio floor} of a program's rows: the flags' --ratio_floor on the corrected row (the
  only correction it clamps), 0 on the others."""
  return {str(v): (cfg.ratio_floor if v == "corrected" else 0.0) for v in logqs}


def seed_config(cfg, seed: int, logq=None):
  """The configuration of run ``seed``: --seed, its own model_dir / export_dir / metrics_json
  folder (``seed<s>``; ``<logq>/seed<s>`` and --logq=logq when a logq is given, --logqs), the
  padded encoder, and the estimator's hash seed of the flags (--frequency_seed, default the
  flags' --seed: the hash functions are constants of the compiled step, so the runs of one
  program share them)."""
  folder = f"seed{seed}" if logq is None else os.path.join(str(logq), f"seed{seed}")
  sub = lambda path: None if not path else os.path.join(path, folder)
  return cfg.replace(
    logq=cfg.logq if logq is None else str(logq),
    ratio_floor=cfg.ratio_floor if logq is None else variant_floors(cfg, [logq])[str(logq)],
    seed=int(seed),
    model_dir=sub(cfg.model_dir),
    export_dir=sub(cfg.export_dir),
    metrics_json=(
      None
      if not cfg.metrics_json
      else os.path.join(
        os.path.dirname(cfg.metrics_json), folder, os.path.basename(cfg.metrics_json)
      )
    ),
    sasrec_pack_tokens=False,
    frequency_seed=(cfg.seed if cfg.frequency_seed is None else cfg.frequency_seed),
    seeds=(),
    logqs=(),
  )


def check_seeds(cfg, seeds: Sequence[int], backend: str, logqs=None) -> List[int]:
  """The distinct seeds, checked against the settings, and the --logqs if given (ValueError
  names the reason)."""
  if logqs is not None:
    from train.keras3 import objective

    objective.check_logq_variants(cfg.loss, logqs)
  seeds = [int(s) for s in seeds]
  if len(set(seeds)) != len(seeds) or not seeds:
    raise ValueError(f"--seeds needs distinct seeds, got {seeds}")
  if backend != "jax":
    raise ValueError(
      f"--seeds trains the runs as one jax program: needs --backend=jax, got --backend={backend}"
    )
  for name, value, why in (
    ("strategy", "mirrored", "data parallelism and the seeds' stack are not combined"),
    ("negatives", "midx", "the MIDX index is refreshed per run outside the step"),
  ):
    if getattr(cfg, name) == value:
      raise ValueError(f"--seeds: --{name}={value} is not supported ({why})")
  if cfg.cpu_replicas:
    raise ValueError("--seeds: --cpu_replicas is not supported (one device holds the stack)")
  if cfg.time_budget_minutes:
    raise ValueError(
      "--seeds: --time_budget_minutes is not supported; rerunning the command "
      "resumes every run from its checkpoint"
    )
  return seeds


class _Replay:
  """A run's trainer seen by its `EpochLoop` for one epoch whose steps already ran in the
  stack: ``epoch_steps`` yields the recorded (loss, w, step) device values."""

  def __init__(self, trainer, items):
    self._trainer, self._items = trainer, items

  def __getattr__(self, name):
    return getattr(self._trainer, name)

  def begin_epoch(self, epoch: int) -> None:
    del epoch  # done before the stacked steps

  def epoch_steps(self, epoch: int):
    del epoch
    yield from self._items


class SeedRuns:
  """The runs of ``seeds`` (module docstring): ``run() -> [result of each run]``.

  Args:
    cfg: the flags' `train.config.RunConfig` (its --seed is replaced by each seed).
    data: the loaded data (shared by the runs).
    seeds: distinct ints.
    make_trainer: (cfg, data, report, logq_variants) -> a `train.keras3.trainer.Trainer`
      (logq_variants: None, or `variant_floors` of ``logqs``:
      `train.keras3.objective.RetrievalModel`'s).
    report: a callable taking one line; each run's lines are prefixed "[seed s] " ("[logq
      seed s] " with logqs).
    logqs: None, or distinct --logq values: rows that differ only in the correction, in the
      same program (--logqs): one run per (logq, seed), logq-major, in <model_dir>/<logq>/seed<s>;
      each run's step keeps its own variant (``logq_index``, a carried variable), so the stack
      is still one traced step.
  """

  def __init__(
    self, cfg, data, seeds: Sequence[int], make_trainer: Callable, report=print, logqs=None
  ):
    self.seeds = [int(s) for s in seeds]
    self.logqs = None if logqs is None else [str(v) for v in logqs]
    variants = None if self.logqs is None else variant_floors(cfg, self.logqs)
    self.runs = [(v, s) for v in (self.logqs or [None]) for s in self.seeds]
    self.report = report
    self.trainers = []
    for v, s in self.runs:
      run_cfg = seed_config(cfg, s, v)
      os.makedirs(run_cfg.model_dir, exist_ok=True)
      prefix = f"[seed {s}] " if v is None else f"[{v} seed {s}] "
      t = make_trainer(run_cfg, data, lambda line, p=prefix: report(p + line), variants)
      if t.jax_step is None:
        raise ValueError("--seeds needs the jax step (--backend=jax, one device)")
      self.trainers.append(t)
    self.loops = [epochs.EpochLoop(t, t.phases) for t in self.trainers]
    self._stacked = None  # (seeds, jitted vmap step) of the current stack

  # ------------------------------------------------------------------------------- steps
  def _program(self, members: Sequence[int]):
    """The vmapped, compiled step of the stack ``members`` (indices into the runs)."""
    key = tuple(members)
    if self._stacked is None or self._stacked[0] != key:
      step = self.trainers[members[0]].jax_step
      self._stacked = (key, jax.jit(jax.vmap(step.step_function), donate_argnums=(0, 1, 2)))
    return self._stacked[1]

  def _epoch_steps(self, members: Sequence[int], epoch: int) -> List[list]:
    """Runs epoch ``epoch`` of the runs ``members`` in the stack; each run's (loss, w, step)."""
    runs = [self.trainers[i] for i in members]
    program = self._program(members)
    for t in runs:
      t.begin_epoch(epoch)
      t.jax_step.load()
    stack = lambda xs: jax.tree_util.tree_map(lambda *a: jnp.stack(a), *xs)
    state = stack([t.jax_step.carried_state() for t in runs])
    items: List[list] = [[] for _ in runs]
    first_step = not any(t.phases.seconds["first_step"] for t in runs)
    tick = time.perf_counter()
    streams = [epochs.prefetch(t.epoch_batches(epoch), depth=2) for t in runs]
    for batches in zip(*streams):
      for t, batch in zip(runs, batches):
        t.estimator_update(batch)
        t.step += 1
      outside = stack([t.jax_step.outside_values() for t in runs])
      batch = {k: np.stack([b[k] for b in batches]) for k in batches[0]}
      zeros = stack([t.jax_step.metrics_zero() for t in runs])
      logs, state = program(*state, outside, zeros, batch)
      loss = jnp.where(logs["finite"], logs["loss"], jnp.nan)
      for j, t in enumerate(runs):
        items[j].append((loss[j], logs["mean_weight"][j], t.step))
      if first_step:  # compilation: the first stacked step is waited for and counted apart
        float(loss[0])
        seconds = time.perf_counter() - tick
        for t in runs:
          t.phases.add("first_step", seconds)
        tick, first_step = time.perf_counter(), False
    seconds = time.perf_counter() - tick
    for j, t in enumerate(runs):
      t.jax_step.set_carried_state(jax.tree_util.tree_map(lambda x, j=j: x[j], state))
      t.sync_state()
      t.phases.add("steps", seconds)
    return items

  # --------------------------------------------------------------------------------- runs
  def run(self) -> List[dict]:
    """Restores each run, trains the runs to their own stops, finishes each; their results."""
    started = time.time()
    for t in self.trainers:
      t.restore()
    while True:
      active = [i for i, loop in enumerate(self.loops) if not loop.done()]
      if not active:
        break
      epoch = min(self.trainers[i].epoch for i in active)
      members = [i for i in active if self.trainers[i].epoch == epoch]
      tick = time.time()
      items = self._epoch_steps(members, epoch)
      seconds = time.time() - tick
      for i, run_items in zip(members, items):
        t = self.trainers[i]
        self.loops[i].epoch(_Replay(t, run_items), t.history)
        record = t.history[-1]  # the stack's training time, not the replay's
        record["wall_seconds"] += seconds - record["seconds"]
        record["seconds"] = seconds
        record["seconds_per_step"] = seconds / max(len(run_items), 1)
      self.report(
        f"epoch {epoch + 1}: {len(members)} runs in the stack, {time.time() - started:.1f}s so far"
      )
    return [t.finish() for t in self.trainers]
