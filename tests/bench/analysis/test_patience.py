"""bench.analysis patience: the epoch a shorter patience selects, from one run's curves."""

import json
import subprocess
import sys

import numpy as np

from bench.analysis import patience as patience_check


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
      "bench.analysis",
      "patience",
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
  report = (tmp_path / "patience_check.md").read_text()
  assert report.startswith("# Patience check")
  assert f"--patiences=1,2,4 --out={tmp_path}`" in report  # the command, --out included


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
    [sys.executable, "-m", "bench.analysis", "patience", f"--runs={run}", "--patiences=2,3,5"],
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
    [sys.executable, "-m", "bench.analysis", "patience", f"--runs={run}", "--patiences=2,5"],
    capture_output=True,
    text=True,
  )
  assert bad.returncode != 0 and "no test value" in bad.stderr


def _curve_history(n, seed=0):
  rng = np.random.default_rng(seed)
  return [
    dict(
      epoch=e + 1,
      step=7 * (e + 1),
      **{"val_ndcg@10": float(rng.random())},
      **{f"test_{m}": float(rng.random()) for m in patience_check.METRICS},
    )
    for e in range(n)
  ]


def test_window_levels_are_the_means_of_consecutive_windows():
  history = _curve_history(23)
  levels = patience_check.window_levels(history, 5)
  # From the description: epochs 1-5, 6-10, ..., 21-23; each value the plain mean over its window.
  val = np.array([h["val_ndcg@10"] for h in history])
  assert [(lv["first"], lv["last"]) for lv in levels] == [
    (1, 5),
    (6, 10),
    (11, 15),
    (16, 20),
    (21, 23),
  ]
  for i, lv in enumerate(levels):
    np.testing.assert_allclose(lv["val_ndcg@10"], val[5 * i : 5 * i + 5].mean(), rtol=1e-12)
    for m in patience_check.METRICS:
      test = np.array([h[f"test_{m}"] for h in history])
      np.testing.assert_allclose(lv[m], test[5 * i : 5 * i + 5].mean(), rtol=1e-12)


def test_window_needs_a_test_value_at_every_epoch(tmp_path):
  history = _curve_history(6)
  del history[3]["test_recall@20"]
  try:
    patience_check.window_levels(history, 2)
  except ValueError as e:
    assert "epochs [4]" in str(e)
  else:
    raise AssertionError("a missing test value was not reported")
  run = tmp_path / "mixed_none" / "seed0"
  (run / "model").mkdir(parents=True)
  (run / "model" / "history.json").write_text(json.dumps(history))
  base = [sys.executable, "-m", "bench.analysis", "patience", f"--runs={run}", "--patiences=1,5"]
  bad = subprocess.run(base + ["--window=2"], capture_output=True, text=True)
  assert bad.returncode != 0 and "needs a test curve at every epoch" in bad.stderr
  history[3]["test_recall@20"] = 0.5
  (run / "model" / "history.json").write_text(json.dumps(history))
  out = subprocess.run(base + ["--window=4"], capture_output=True, text=True, check=True).stdout
  rows = [l for l in out.splitlines() if l.startswith("| mixed_none/seed0 | ")]
  window_rows = [l for l in rows if "–" in l.split("|")[2]]
  assert [l.split("|")[2].strip() for l in window_rows] == ["1–4", "5–6"]
  selected = {r["patience"]: r["epoch"] for r in patience_check.check_run(history, [1, 5])}
  for p, e in selected.items():
    row = window_rows[0] if e <= 4 else window_rows[1]
    assert f"P={p}: {e}" in row
