"""`train.keras3.jax_step`: the jax trainer's step with its state kept on the device (no host
synchronisation per step; every likely token capacity compiled at the start, none late) gives,
step by step, the losses and mean weights of ``train_on_batch`` and, after two epochs (a sync and a
reload between them), the same value of every variable the run changes (model, estimator, samplers'
and dropouts' seeds, optimizer), with a streaming estimator and the corrected loss (fresh jax
process, jax_step_worker.py); a validation mid-epoch sees the steps taken."""

import json
import pathlib
import re
import subprocess
import sys

import keras3_binary_harness as harness
import numpy as np
import pytest
import xla_flags

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]

# The harness's synthetic run (hash-array estimator), with mixed negatives, corrected logQ and
# 4 steps per epoch (a repeated flag: the last value counts).
FLAGS = [*harness.SYNTHETIC, "--logq=corrected", "--negatives=mixed", "--steps_per_epoch=4"]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
  """The worker's runs (one process), with XLA's fusion emitters: the bit-for-bit claims
  between two programs hold for the code generation users get (tests/xla_flags.py)."""
  model_dir = tmp_path_factory.mktemp("jax_step")
  proc = subprocess.run(
    [sys.executable, str(HERE / "jax_step_worker.py"), *FLAGS, f"--model_dir={model_dir}"],
    cwd=ROOT,
    env=xla_flags.fusion_emitters(harness.env("jax")),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
  return json.loads(line[len("RESULT ") :])


def test_jax_step_equals_train_on_batch(out):
  reference, lean = out["train_on_batch"], out["jax_step"]
  assert len(reference["steps"]) == 8
  np.testing.assert_array_equal(np.array(lean["steps"]), np.array(reference["steps"]))
  # the second model in the process numbers its seed generators on
  strip = lambda names: [re.sub(r"_\d+/", "/", n) for n in names]
  assert strip(lean["names"]) == strip(reference["names"])
  # every changing variable moved (the check can fail) and ends equal on both paths
  assert any("frequency/" in n for n in lean["names"])
  assert any("seed_generator" in n for n in lean["names"])
  np.testing.assert_allclose(lean["sums"], reference["sums"], rtol=0, atol=0)
  assert lean["programs"]["compiled"] >= 2 and lean["programs"]["late"] == 0


def test_validation_mid_epoch_sees_the_steps_taken(out):
  """Validating mid-epoch (what a loop that leaves early does, then saves) writes the device
  state into the variables first: after 6 steps the jax path's variables and validation equal
  train_on_batch's; and training on after that sync ends bit-equal too (the first test)."""
  reference, lean = out["train_on_batch"]["midway"], out["jax_step"]["midway"]
  assert lean["step"] == reference["step"] == 6
  np.testing.assert_allclose(lean["sums"], reference["sums"], rtol=0, atol=0)
  assert lean["validation"] == reference["validation"]


def test_on_an_accelerator_every_batch_takes_the_largest_likely_capacity(out):
  """One step program on a GPU: the token floor is the largest likely capacity, every batch
  of the epoch is packed to it (none of these small batches exceeds it), one program compiled
  at the start and none late; the steps train (finite losses)."""
  acc = out["accelerator"]
  assert acc["floor"] == max(acc["likely"]) and len(acc["likely"]) >= 2  # there was a choice
  assert acc["capacities"] == [acc["floor"]] * 4
  assert acc["programs"] == dict(compiled=1, late=0)
  assert len(acc["losses"]) == 4 and all(np.isfinite(acc["losses"]))
