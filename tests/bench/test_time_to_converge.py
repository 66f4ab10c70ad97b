"""bench/time_to_converge.py: whole runs of both binaries (and the same checkout as a baseline)
on a small synthetic catalog; the phase split adds up to the wall-clock, the report and plot are
written, and the split of a run without ``phases`` (a checkout before train.epochs) comes from
its epoch history."""

import json
import pathlib
import subprocess
import sys

from bench import time_to_converge as ttc

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_runs_both_binaries_and_a_baseline(tmp_path):
  proc = subprocess.run(
    [
      sys.executable,
      "bench/time_to_converge.py",
      "--setting=synthetic",
      "--sides=tf_keras",
      f"--baseline_dir={ROOT}",
      "--max_epochs=2",
      "--patience=1",
      f"--out={tmp_path}",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=900,
  )
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  report = json.loads((tmp_path / "time_to_converge.json").read_text())
  runs = report["runs"]
  assert [r["side"] for r in runs] == ["tf_keras", "tf_keras@baseline"]
  for r in runs:
    parts = r["parts"]
    assert set(parts) == set(ttc.PHASES)
    assert all(v >= 0 for v in parts.values())
    assert abs(sum(parts.values()) - r["wall"]) < 1e-6 * max(r["wall"], 1) + 1e-6
    assert parts["first step"] > 0 and parts["validation"] > 0 and parts["test"] > 0
    assert 1 <= r["epochs"] <= 2 and r["to_best"] <= r["wall"]
    assert 0 <= r["test_recall20"] <= 1
  assert (tmp_path / "time_to_converge.md").read_text().startswith("# Time to a converged")
  assert (tmp_path / "time_to_converge.png").stat().st_size > 0


def test_keras3_side_writes_phases(tmp_path):
  args = ttc.parse_args(
    ["--setting=synthetic", "--sides=keras3_jax", "--max_epochs=1", f"--out={tmp_path}"]
  )
  r = ttc.run_side(args, "keras3_jax", ROOT, tmp_path / "run")
  assert r["parts"]["first step"] > 0 and r["parts"]["validation"] > 0
  assert r["epochs"] == 1 and r["best_epoch"] == 1


def test_split_from_history_without_phases():
  metrics = dict(
    history=[
      dict(epoch=1, seconds=10.0, wall_seconds=12.5),
      dict(epoch=2, seconds=9.0, wall_seconds=10.0),
    ],
    best_epoch=1,
    global_step=20,
    test={"recall@20": 0.5, "ndcg@20": 0.2},
    epochs_done=2,
  )
  r = ttc.summarise("old", metrics, wall=30.0)
  assert r["parts"]["steps"] == 19.0 and r["parts"]["validation"] == 3.5
  assert r["parts"]["start-up"] == 7.5
  assert r["to_best"] == 7.5 + 12.5
  assert abs(r["val_ckpt_share"] - 3.5 / 30.0) < 1e-12


def test_bad_arguments_are_refused(capsys):
  for argv in (
    ["--sides=tf_keras,nope"],
    ["--patience=0"],
    ["--setting=synthetic", "--sides=paper"],
  ):
    try:
      ttc.parse_args(argv)
    except SystemExit as e:
      assert e.code == 2
    else:
      raise AssertionError(f"{argv} accepted")
  assert "unknown side" in capsys.readouterr().err
