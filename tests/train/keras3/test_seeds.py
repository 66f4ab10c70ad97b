"""`python -m train.keras3 --backend=jax --seeds=0,1`: two seeds as one program give, run by run,
what two separate runs (--seed=s --nosasrec_pack_tokens --frequency_seed=0, the same other
flags) write: the same per-epoch losses, validation metrics, best epoch, early stop and test metrics
within float tolerance (vmap changes the summation order), each in its own <model_dir>/seed<s> with
metrics.json and a checkpoint; different seeds really differ. Rerunning the same --seeds command
after it finished trains nothing more. Rows that differ only in --logq (--logqs) in the same
program give, run by run, what --logq=v alone gives. Flags that cannot be stacked are refused."""

import json
import pathlib
import subprocess
import sys

import keras3_binary_harness as harness
import numpy as np
import pytest

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


def _assert_same_run(got, want, keys, label):
  """Two runs' metrics.json agree: stops, every epoch's ``keys``, val and test metrics."""
  assert (got["best_epoch"], got["epochs_done"], got["global_step"], got["stopped_early"]) == (
    want["best_epoch"],
    want["epochs_done"],
    want["global_step"],
    want["stopped_early"],
  ), label
  for key in keys:
    np.testing.assert_allclose(
      [h[key] for h in got["history"]],
      [h[key] for h in want["history"]],
      rtol=1e-4,
      atol=1e-5,
      err_msg=f"{label} {key}",
    )
  for split in ("val", "test"):
    for k in ("ndcg@10", "recall@20"):
      np.testing.assert_allclose(
        got[split][k], want[split][k], rtol=1e-4, atol=1e-5, err_msg=f"{label} {split} {k}"
      )


def test_each_seed_equals_its_separate_run(runs):
  root, stacked, separate = runs
  assert stacked.stderr.count("done: seed") == len(SEEDS)
  tests = []
  for seed in SEEDS:
    got, want = _metrics(root / "stacked" / f"seed{seed}"), separate[seed]
    assert got["config"]["seed"] == seed and not got["config"]["sasrec_pack_tokens"]
    _assert_same_run(got, want, ("loss", "val_ndcg@10", "val_recall@20"), f"seed {seed}")
    assert (root / "stacked" / f"seed{seed}" / "ckpt").is_dir()
    tests.append([h["loss"] for h in got["history"]])
  assert not np.allclose(tests[0], tests[1])


@pytest.fixture(scope="module")
def rows(runs):
  """Rows that differ only in --logq as one program (`--seeds=0 --logqs=none,corrected`) and
  the separate run of the none row; the corrected row's separate run is `runs`'s seed 0."""
  root = runs[0]
  stacked = _start("--seeds=0", "--logqs=none,corrected", f"--model_dir={root / 'rows'}")
  alone = _finish(
    _start(
      "--seed=0",
      "--logq=none",
      "--nosasrec_pack_tokens",
      "--frequency_seed=0",
      f"--model_dir={root / 'none_alone'}",
    )
  )
  stacked = _finish(stacked)
  for name, proc in (("rows", stacked), ("none alone", alone)):
    assert proc.returncode == 0, f"{name}: {proc.stderr[-3000:]}"
  separate = {"none": _metrics(root / "none_alone"), "corrected": runs[2][0]}
  return root, stacked, separate


def test_each_row_equals_its_separate_run(rows):
  """Each (logq, seed 0) run of the program trains what --logq=v --seed=0 alone trains: the same
  losses, weights, validation curve, best epoch and test metrics (so the gradient is the chosen
  variant's), in <model_dir>/<logq>/seed0; and the two rows really differ."""
  root, stacked, separate = rows
  assert stacked.stderr.count("done: none seed 0") == 1
  assert stacked.stderr.count("done: corrected seed 0") == 1
  losses = []
  for logq in ("none", "corrected"):
    got, want = _metrics(root / "rows" / logq / "seed0"), separate[logq]
    assert got["config"]["logq"] == logq and got["config"]["seed"] == 0
    _assert_same_run(got, want, ("loss", "mean_weight", "val_ndcg@10", "val_recall@20"), logq)
    losses.append([h["loss"] for h in got["history"]])
  assert not np.allclose(losses[0], losses[1])
  # corrected's weight w = 1 − P̂(p|u) < 1; none's is 1: each run kept its own variant's.
  weights = {
    logq: [h["mean_weight"] for h in _metrics(root / "rows" / logq / "seed0")["history"]]
    for logq in ("none", "corrected")
  }
  assert np.allclose(weights["none"], 1.0) and max(weights["corrected"]) < 1.0


def test_ratio_floor_goes_to_the_corrected_row_only(tmp_path):
  """--ratio_floor clamps the corrected loss only (a none run with it is refused): in a
  --logqs program the corrected row keeps it and the others run with 0, as their separate runs
  must."""
  proc = _binary(
    "--seeds=0",
    "--logqs=none,corrected",
    "--ratio_floor=1e-10",
    "--epochs=1",
    f"--model_dir={tmp_path}",
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  floors = {
    v: _metrics(tmp_path / v / "seed0")["config"]["ratio_floor"] for v in ("none", "corrected")
  }
  assert floors == {"none": 0.0, "corrected": 1e-10}


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
    (["--seeds=0", "--logqs=none,none"], "distinct values"),
    (
      ["--seeds=0", "--logqs=none,corrected", "--loss=gbce", "--negatives=uniform"],
      "--loss=sampled_softmax",
    ),
    (["--logqs=none,corrected"], "give --seeds"),
  ],
)
def test_refused(flags, message, tmp_path):
  proc = _binary(*flags, f"--model_dir={tmp_path}")
  assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]
