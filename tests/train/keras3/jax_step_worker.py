"""Worker of test_jax_step.py (a fresh jax process): trains the same Trainer twice for a few
steps of two epochs, once through ``train_on_batch`` (jax_step disabled) and once through
`train.keras3.jax_step` with every likely token capacity precompiled, and prints JSON: each
path's per-step (loss, w, global step), its final variables' sums and names, and the jax step's
program counts; and, after 6 steps (mid-epoch), the validation and variable sums that
``Trainer.validate`` sees. argv: the binary's flags."""

import json
import sys

from train.keras3 import settings

settings.select_backend()

import numpy as np  # noqa: E402

from train import config_flags  # noqa: E402
from train.config import RunConfig  # noqa: E402
from train.keras3 import trainer as trainer_lib  # noqa: E402


def run(cfg, data, use_jax_step, validate_at=6):
  t = trainer_lib.Trainer(cfg, data=data, report=lambda line: None, shuffle_rng="numpy")
  if not use_jax_step:
    t.jax_step = None
  t.precompile_shapes = use_jax_step  # (off on a CPU by default: exercised here)
  steps, midway = [], None
  for epoch in range(2):
    t.begin_epoch(epoch)
    for loss, w, step in t.epoch_steps(epoch):
      steps.append([float(loss), float(w), int(step)])
      if len(steps) == validate_at:  # mid-epoch, as a loop that leaves early (budget, NaN)
        validation = t.validate("val")  # must see the steps taken
        midway = dict(
          step=len(steps),
          validation=validation,
          sums=[float(np.sum(np.asarray(v.value, np.float64))) for v in t.state_variables()],
        )
  values = [np.asarray(v.value, np.float64) for v in t.state_variables()]
  programs = (
    dict(compiled=t.jax_step.programs, late=t.jax_step.late) if t.jax_step is not None else None
  )
  return dict(
    steps=steps,
    midway=midway,
    sums=[float(np.sum(v)) for v in values],
    programs=programs,
    names=[v.path for v in t.state_variables()],
    kinds=[str(v.dtype) for v in t.state_variables()],
  )


def on_an_accelerator(cfg, data):
  """One epoch as on a GPU (``on_accelerator`` patched): every batch's token capacity and the
  step programs compiled."""
  from train.keras3 import jax_step

  jax_step.on_accelerator = lambda: True
  t = trainer_lib.Trainer(cfg, data=data, report=lambda line: None, shuffle_rng="numpy")
  capacities = [int(b["token_rows"].shape[0]) for b in t.epoch_batches(0)]
  t.begin_epoch(0)
  losses = [float(loss) for loss, _, _ in t.epoch_steps(0)]
  return dict(
    floor=t.token_floor,
    likely=[int(c) for c in t._likely_capacities()],
    capacities=capacities,
    losses=losses,
    programs=dict(compiled=t.jax_step.programs, late=t.jax_step.late),
  )


def main():
  cfg = config_flags.parse(RunConfig, sys.argv[1:])
  data = cfg.data.load()
  out = dict(train_on_batch=run(cfg, data, False), jax_step=run(cfg, data, True))
  out["accelerator"] = on_an_accelerator(cfg, data)
  print("RESULT " + json.dumps(out))


if __name__ == "__main__":
  main()
