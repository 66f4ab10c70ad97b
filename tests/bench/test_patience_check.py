"""bench/patience_check.py: the epoch a shorter patience selects, from one run's curves."""

import json
import subprocess
import sys

import numpy as np

from bench import patience_check


def _oracle(val, patience):
  """From the description: training stops at the first epoch e with
  e - (first argmax of val[:e + 1]) == patience; it selects the first argmax up to there."""
  for e in range(len(val)):
    if e - int(np.argmax(val[: e + 1])) == patience:
      return int(np.argmax(val[: e + 1])), e
  return int(np.argmax(val)), len(val) - 1


def test_selected_epoch_matches_the_oracle():
  rng = np.random.default_rng(0)
  for _ in range(300):
    val = list(np.round(rng.random(rng.integers(1, 25)), 1))  # ties included
    for p in (1, 2, 3, 5, 10):
      assert patience_check.selected_epoch(val, p) == _oracle(val, p), (val, p)


def test_cli_reports_the_test_metric_of_each_patience(tmp_path):
  val = [0.1, 0.3, 0.2, 0.25, 0.35, 0.3, 0.3, 0.3, 0.3]
  history = [
    dict(
      epoch=e + 1,
      step=10 * (e + 1),
      **{"val_ndcg@10": v},
      **{f"test_{m}": v + 0.01 * e for m in patience_check.METRICS},
    )
    for e, v in enumerate(val)
  ]
  run = tmp_path / "mixed_corrected" / "seed0"
  (run / "model").mkdir(parents=True)
  (run / "model" / "history.json").write_text(json.dumps(history))
  out = subprocess.run(
    [
      sys.executable,
      "-m",
      "bench.patience_check",
      f"--runs={run}",
      "--patiences=1,2,4",
      f"--out={tmp_path}",
    ],
    capture_output=True,
    text=True,
    check=True,
  ).stdout
  rows = [l for l in out.splitlines() if l.startswith("| mixed_corrected/seed0")]
  # patience 1 stops at epoch 3, patience 2 at epoch 4: both select epoch 2; patience 4 sees the
  # later rise and selects epoch 5.
  assert "| 1 | 2 (20) | yes |" in rows[0] and "0.3100 (-0.0800)" in rows[0]  # 0.31 vs 0.35 + 0.04
  assert "| 2 | 2 (20) | yes |" in rows[1] and "| 4 | 5 (50) | yes | 0.3900 (+0.0000)" in rows[2]
  assert out.strip().splitlines()[-1].startswith("SUMMARY patience_check")
  assert (tmp_path / "patience_check.md").read_text().startswith("# Patience check")


def test_run_without_test_curve_uses_its_own_evaluation(tmp_path):
  """A resumed longer-patience run has no test curve: the shorter patience that selects the same
  epoch gets Δ = 0 exactly; one that selects another epoch is not given a number."""
  val = [0.1, 0.3, 0.2, 0.25, 0.35, 0.3, 0.3, 0.3, 0.3, 0.3]
  history = [dict(epoch=e + 1, step=10 * (e + 1), **{"val_ndcg@10": v}) for e, v in enumerate(val)]
  run = tmp_path / "mixed_none" / "seed1"
  (run / "model").mkdir(parents=True)
  (run / "model" / "history.json").write_text(json.dumps(history))
  test = {m: 0.2 + i / 100 for i, m in enumerate(patience_check.METRICS)}
  (run / "train_metrics.json").write_text(json.dumps(dict(best_epoch=5, test=test)))
  res = subprocess.run(
    [sys.executable, "-m", "bench.patience_check", f"--runs={run}", "--patiences=2,3,5"],
    capture_output=True,
    text=True,
    check=True,
  )
  rows = [l for l in res.stdout.splitlines() if l.startswith("| mixed_none/seed1")]
  assert "| 2 | 2 (20) | yes | other epoch: needs --test_curve" in rows[0]  # stops at epoch 4
  assert "| 3 | 5 (50) | yes | 0.2000 (+0.0000)" in rows[1]
  assert "| 5 | 5 (50) | yes | 0.2000 (+0.0000)" in rows[2]
  (run / "train_metrics.json").write_text(json.dumps(dict(best_epoch=2, test=test)))
  bad = subprocess.run(
    [sys.executable, "-m", "bench.patience_check", f"--runs={run}", "--patiences=2,5"],
    capture_output=True,
    text=True,
  )
  assert bad.returncode != 0 and "no test value" in bad.stderr
