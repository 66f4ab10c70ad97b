"""bench.analysis phases: a launch's runs, their wall-clock split by phase. The split adds up to
the wall; a run without ``phases`` (a checkout before train.epochs) is split from its epoch
history; runs without a wall (not run, a program's) and a pinned checkout are left out. The
phases of real runs: tests/bench/launch/test_launch.py (the arrangements' runs)."""

import json

import pytest

from bench.analysis import phases


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
  r = phases.summarise("old", metrics, wall=30.0)
  assert r["parts"]["steps"] == 19.0 and r["parts"]["validation"] == 3.5
  assert r["parts"]["start-up"] == 7.5
  assert r["to_best"] == 7.5 + 12.5
  assert abs(r["val_ckpt_share"] - 3.5 / 30.0) < 1e-12


def _run(folder, wall, metrics):
  folder.mkdir(parents=True)
  (folder / "run.json").write_text(json.dumps({"train_seconds": wall, "commands": ["py -m x"]}))
  (folder / "train_metrics.json").write_text(json.dumps(metrics))


def test_a_launch_folder_is_split_by_phase(tmp_path, capsys):
  split = dict(first_step=4.0, steps=20.0, validation=6.0, checkpoints=1.0, test=2.0, export=0.5)
  history = [dict(epoch=e, seconds=10.0, wall_seconds=13.0) for e in (1, 2)]
  metrics = dict(phases=split, history=history, best_epoch=1, global_step=40, epochs_done=2)
  metrics["test"] = {"recall@20": 0.3, "ndcg@20": 0.1}
  _run(tmp_path / "s" / "tf_keras_row" / "seed0", 40.0, metrics)
  _run(tmp_path / "s" / "keras3_row" / "seed0", 80.0, dict(metrics, phases=split))
  (tmp_path / "s" / "never_run" / "seed0").mkdir(parents=True)
  _run(tmp_path / "src_abc" / "s" / "row" / "seed0", 1.0, metrics)  # a checkout's files
  (tmp_path / "launch.json").write_text(json.dumps({"command": "python -m bench.launch e"}))
  assert phases.main([f"--runs={tmp_path}"]) == 0
  assert capsys.readouterr().out.strip().endswith(f"2 runs -> {tmp_path / 'phases.md'}")
  report = json.loads((tmp_path / "phases.json").read_text())
  assert [r["run"] for r in report["runs"]] == ["s/keras3_row/seed0", "s/tf_keras_row/seed0"]
  for r in report["runs"]:
    assert set(r["parts"]) == set(phases.PHASES)
    assert sum(r["parts"].values()) == pytest.approx(r["wall"])
    assert r["parts"]["start-up"] == pytest.approx(r["wall"] - 33.5)
    assert r["to_best"] == pytest.approx(r["parts"]["start-up"] + 13.0)
    assert r["ms_per_step"] == pytest.approx(1e3 * 24.0 / 40)
  md = (tmp_path / "phases.md").read_text()
  assert "from the runs of `python -m bench.launch e`" in md
  assert "- keras3_row / tf_keras_row: wall 2.00" in md
  assert (tmp_path / "phases.png").stat().st_size > 0


def test_a_folder_without_runs_is_one_error(tmp_path, capsys):
  with pytest.raises(SystemExit) as exit:
    phases.main([f"--runs={tmp_path}"])
  assert exit.value.code == 2 and "no run with a wall-clock" in capsys.readouterr().err
