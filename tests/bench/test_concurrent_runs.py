"""bench/concurrent_runs.py: the commands it starts, the environment they share and how a run's
exit is read (the runs themselves are the binary's, tested with it; no process is started)."""

import json
import sys

from bench import concurrent_runs

EPOCHS_LOG = """compiling the step for 2 token capacities [800, 1600] at the start
epoch 1 step 100 loss 15.1843 w 0.9998 val R@10 0.0140 N@10 0.0079 (65.1s) *best*
epoch 2 step 200 loss 14.0000 w 0.9990 val R@10 0.0150 N@10 0.0081 (1.1s) *best*
paused: step 200, epoch 2 (time budget 2 min); rerun the same command to continue
"""


def test_each_run_is_the_binary_with_its_seed_and_the_budget(tmp_path):
  args = concurrent_runs.parse_args(
    [
      "--runs=3",
      "--setting=synthetic",
      "--max_epochs=2",
      "--budget_minutes=1.5",
      "--extra_flags=--shuffle_rng=numpy",
      f"--out={tmp_path}",
    ]
  )
  cmd = concurrent_runs.run_command(args, 2, tmp_path / "seed2")
  assert cmd[:4] == [sys.executable, "-m", "train.keras3", "--backend=jax"]
  assert "--seed=2" in cmd and "--epochs=2" in cmd and "--early_stopping_patience=20" in cmd
  assert "--time_budget_minutes=1.5" in cmd and "--shuffle_rng=numpy" in cmd
  assert f"--model_dir={tmp_path / 'seed2' / 'model'}" in cmd
  assert "--seed=0" not in concurrent_runs.run_command(args, 0, tmp_path)  # 0: the default
  no_budget = concurrent_runs.parse_args(["--setting=synthetic", f"--out={tmp_path}"])
  assert not any("time_budget" in f for f in concurrent_runs.run_command(no_budget, 1, tmp_path))


def test_jax_runs_split_the_device_memory(monkeypatch, tmp_path):
  monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
  args = concurrent_runs.parse_args(["--runs=8", f"--out={tmp_path}"])
  env = concurrent_runs.run_env(args)
  assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.113" and env["KERAS_BACKEND"] == "jax"
  assert str(concurrent_runs.ROOT) in env["PYTHONPATH"].split(":")
  torch_env = concurrent_runs.run_env(concurrent_runs.parse_args(["--backend=torch"]))
  assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in torch_env


def test_a_paused_run_counts_its_epochs_and_a_finished_one_reads_its_metrics(tmp_path):
  paused = concurrent_runs.summarise_run(4, 3, 91.5, EPOCHS_LOG, tmp_path)
  assert paused["paused"] and not paused["finished"]
  assert (paused["epochs"], paused["steps"]) == (2, 200) and "test" not in paused
  (tmp_path / "metrics.json").write_text(
    json.dumps(dict(epochs_done=31, best_epoch=11, test={"recall@20": 0.05, "ndcg@20": 0.03}))
  )
  done = concurrent_runs.summarise_run(0, 0, 126.2, EPOCHS_LOG, tmp_path)
  assert done["finished"] and (done["epochs"], done["best_epoch"]) == (31, 11)
  failed = concurrent_runs.summarise_run(1, 1, 3.0, "Traceback ...", tmp_path)
  assert not failed["finished"] and not failed["paused"] and failed["epochs"] == 0
  text = concurrent_runs.report(
    dict(
      setting="s",
      row="r",
      patience=20,
      backend="jax",
      command="c",
      wall=126.2,
      runs=[done, paused, failed],
    )
  )
  assert "1 of 3 finished" in text and "paused (budget)" in text and "| 1 | 1 |" in text
