"""`python -m train.keras3 --backend=jax --seeds=0,1`: two seeds as one program give, run by run,
what two separate runs (--seed=s --nosasrec_pack_tokens --frequency_seed=0, the same other
flags) write: the same per-epoch losses, validation metrics, best epoch, early stop and test metrics
within float tolerance (vmap changes the summation order), each in its own <model_dir>/seed<s> with
metrics.json and a checkpoint; different seeds really differ. Rerunning the same --seeds command
after it finished trains nothing more. Flags that cannot be stacked are refused."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import keras3_binary_harness as harness

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]

# The harness's synthetic run (hash-array estimator) with corrected logQ, dropout, early stopping
# and 3 steps per epoch (a repeated flag: the last value counts).
TINY = [
  *harness.SYNTHETIC,
  "--logq=corrected",
  "--steps_per_epoch=3",
  "--epochs=4",
  "--early_stopping_patience=2",
  "--dropout=0.2",
  "--shuffle_rng=numpy",
]

SEEDS = (0, 1)


def _binary(*args):
  """The binary run to its end: a CompletedProcess."""
  return _finish(_start(*args))


def _metrics(folder):
  return json.loads((pathlib.Path(folder) / "metrics.json").read_text())


def _start(*args):
  return subprocess.Popen(
    [sys.executable, "-m", "train.keras3", "--backend=jax", *TINY, *args],
    cwd=ROOT,
    env=harness.env("jax"),
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )


def _finish(proc):
  stdout, stderr = proc.communicate(timeout=900)
  return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """The stacked run and the two separate runs; two seeds, the fewest that stack. The stacked run
  and seed 0's run start together; seed 1's starts once seed 0's has ended, so its programs (the
  same as seed 0's) come from the session's JAX compilation cache (tests/conftest.py)."""
  root = tmp_path_factory.mktemp("seeds")

  def run_separately(seed):
    return _start(
      f"--seed={seed}",
      "--nosasrec_pack_tokens",
      "--frequency_seed=0",
      f"--model_dir={root / 'separate' / str(seed)}",
    )

  stacked = _start("--seeds=0,1", f"--model_dir={root / 'stacked'}")
  done = {SEEDS[0]: _finish(run_separately(SEEDS[0]))}
  done[SEEDS[1]] = _finish(run_separately(SEEDS[1]))
  done["stacked"] = _finish(stacked)
  for name, proc in done.items():
    assert proc.returncode == 0, f"{name}: {proc.stderr[-3000:]}"
  separate = {seed: _metrics(root / "separate" / str(seed)) for seed in SEEDS}
  return root, done["stacked"], separate


def test_each_seed_equals_its_separate_run(runs):
  root, stacked, separate = runs
  assert stacked.stderr.count("done: seed") == len(SEEDS)
  tests = []
  for seed in SEEDS:
    got, want = _metrics(root / "stacked" / f"seed{seed}"), separate[seed]
    assert got["config"]["seed"] == seed and not got["config"]["sasrec_pack_tokens"]
    assert (got["best_epoch"], got["epochs_done"], got["global_step"], got["stopped_early"]) == (
      want["best_epoch"],
      want["epochs_done"],
      want["global_step"],
      want["stopped_early"],
    )
    for key in ("loss", "val_ndcg@10", "val_recall@20"):
      np.testing.assert_allclose(
        [h[key] for h in got["history"]],
        [h[key] for h in want["history"]],
        rtol=1e-4,
        atol=1e-5,
        err_msg=f"seed {seed} {key}",
      )
    for split in ("val", "test"):
      for k in ("ndcg@10", "recall@20"):
        np.testing.assert_allclose(got[split][k], want[split][k], rtol=1e-4, atol=1e-5)
    assert (root / "stacked" / f"seed{seed}" / "ckpt").is_dir()
    tests.append([h["loss"] for h in got["history"]])
  assert not np.allclose(tests[0], tests[1])


def test_rerun_after_the_end_trains_nothing(runs):
  root, _, _ = runs
  before = {s: _metrics(root / "stacked" / f"seed{s}")["global_step"] for s in SEEDS}
  again = _binary("--seeds=0,1", f"--model_dir={root / 'stacked'}")
  assert again.returncode == 0, again.stderr[-3000:]
  assert "resumed from" in again.stdout
  assert {s: _metrics(root / "stacked" / f"seed{s}")["global_step"] for s in SEEDS} == before


@pytest.mark.parametrize(
  "flags,message",
  [
    (["--seeds=0,0"], "distinct seeds"),
    (["--seeds=0,1", "--negatives=midx"], "negatives=midx"),
    (["--seeds=0,1", "--time_budget_minutes=5"], "time_budget_minutes"),
  ],
)
def test_refused(flags, message, tmp_path):
  proc = _binary(*flags, f"--model_dir={tmp_path}")
  assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]
