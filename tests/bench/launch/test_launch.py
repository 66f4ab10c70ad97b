"""python -m bench.launch: every experiment file plans; the commands are whole RunConfigs in the
planned order; programs group the rows that differ only in --logq; runs in a row, in parallel and
as programs go through a stand-in interpreter (it writes what the binaries write), finished runs
are skipped, a paused run (exit 3) stops a row and the rerun goes on; bad experiments get one
error line (exit 2)."""

import json
import os
import pathlib
import stat
import subprocess
import sys

import pytest

from bench.analysis import phases
from bench.launch import cli, experiment, plan
from train import config_flags
from train.config import RunConfig

ROOT = pathlib.Path(__file__).resolve().parents[3]

# Stands in for python: `-m bench.table1.results DIR` runs for real; a training command writes
# its metrics JSON (test metrics from its seed; a --seeds program one per seed) unless
# $PAUSE_ONCE names a file that does not exist yet (then it creates it and exits 3).
STAND_IN = f"""#!{sys.executable}
import json, os, pathlib, subprocess, sys
args = sys.argv[1:]
with open(os.environ["LOG"], "a") as log:
  log.write(json.dumps(args) + "\\n")
if args[:2] == ["-m", "bench.table1.results"]:
  sys.exit(subprocess.call([{sys.executable!r}, *args]))
flags = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
pause = os.environ.get("PAUSE_ONCE")
if pause and not os.path.exists(pause):
  open(pause, "w").close()
  sys.exit(3)
def write(path, seed):
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  test = {{"recall@20": 0.1 + seed / 100, "ndcg@10": 0.05 + seed / 100, "num_queries": 10}}
  path.write_text(json.dumps({{"test": test, "epochs_done": 2, "best_epoch": 1}}))
metrics = pathlib.Path(flags["metrics_json"])
if "seeds" in flags:
  for logq in flags.get("logqs", "").split(",") if "logqs" in flags else [None]:
    for s in flags["seeds"].split(","):
      sub = pathlib.Path(logq or "") / f"seed{{s}}"
      write(metrics.parent / sub / metrics.name, int(s))
else:
  write(metrics, int(flags.get("seed", 0)))
"""


@pytest.fixture
def stand_in(tmp_path):
  path = tmp_path / "python"
  path.write_text(STAND_IN)
  path.chmod(path.stat().st_mode | stat.S_IXUSR)
  return path


def _launch(args, log, **env):
  full = dict(os.environ, LOG=str(log), TF_CPP_MIN_LOG_LEVEL="3", **env)
  return subprocess.run(
    [sys.executable, "-m", "bench.launch", *args],
    cwd=ROOT,
    env=full,
    capture_output=True,
    text=True,
    timeout=300,
  )


def _write(tmp_path, name, text):
  path = tmp_path / f"{name}.toml"
  path.write_text(text)
  return path


@pytest.mark.parametrize("name", sorted(p.stem for p in cli.EXPERIMENTS.glob("*.toml")))
def test_every_experiment_file_plans(name, capsys):
  assert cli.main([name, "--dry_run", "--data_root=/data"]) == 0
  out = capsys.readouterr().out.splitlines()
  assert out[-1].startswith(f"SUMMARY launch {name} dry run")
  assert all("/data" in line for line in out[:-1] if "--data_path=" in line)


def test_dry_run_is_setting_seed_arm_ordered_whole_configs(tmp_path, capsys):
  exp = _write(
    tmp_path,
    "e",
    'settings = ["ml1m_loo", "synthetic"]\nrows = ["bce", "mixed_corrected", "mixed_none"]\n'
    "seeds = [0, 1]\n[budget]\nepochs = 3\n[base]\nmax_len = 20\n",
  )
  assert cli.main([str(exp), "--dry_run", f"--out={tmp_path / 'o'}", "--data_root=/d"]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert "2 settings x 3 arms x 2 seeds x 1 repeats = 12 runs" in lines[-1]
  train = [
    config_flags.parse(RunConfig, l.split(" -m train ", 1)[1].split())
    for l in lines
    if " -m train " in l
  ]
  evals = [l for l in lines if "-m eval.evaluate" in l]
  assert len(train) == len(evals) == 12
  order = [(c.data.dataset, c.seed, c.loss, c.logq) for c in train]
  assert order[:3] == [
    ("ml1m", 0, "bce", "none"),
    ("ml1m", 0, "sampled_softmax", "corrected"),
    ("ml1m", 0, "sampled_softmax", "none"),
  ]
  assert [o[:2] for o in order[3:6]] == [("ml1m", 1)] * 3 and order[6][0] == "synthetic"
  assert all(c.epochs == 3 and c.max_len == 20 and c.steps_per_epoch in (48, 5) for c in train)
  # the paper code's preset, and the corrected script's clamp on the corrected row only
  assert all(c.sasrec_block == "reference" and c.uniform_negatives == "query" for c in train)
  assert all(c.ratio_floor == (1e-10 if c.logq == "corrected" else 0.0) for c in train)
  assert train[0].data.data_path == "/d/ml1m" and not (tmp_path / "o").exists()


def test_programs_join_the_rows_that_differ_only_in_logq(tmp_path):
  exp = experiment.from_dict(
    dict(
      settings=["synthetic"],
      rows=["mixed_none", "mixed_corrected", "full_softmax"],
      binaries=["keras3_jax"],
      seeds=[0, 2],
      arrange="program",
      budget={"patience": 4},
    )
  )
  runs = plan.plan(exp, tmp_path, tmp_path, {}, ROOT, "py")
  progs = plan.programs(runs, "py")
  assert [len(p.runs) for p in progs] == [4, 2]
  mixed, full = (p.command for p in progs)
  assert "--seeds=0,2" in mixed and "--logqs=none,corrected" in mixed
  assert "--ratio_floor=1e-10" in mixed and not any(a.startswith("--logq=") for a in mixed)
  assert "--seeds=0,2" in full and not any(a.startswith("--logqs") for a in full)
  assert set(progs[0].links) == {r.folder for r in progs[0].runs}
  with pytest.raises(ValueError, match="keras3"):
    experiment.from_dict(dict(settings=["synthetic"], rows=["bce"], arrange="program"))


@pytest.mark.parametrize("arrange", ["row", "parallel", "program"])
def test_runs_finish_skip_and_report(arrange, tmp_path, stand_in):
  binary = "keras3_jax" if arrange == "program" else "tf_keras"
  exp = _write(
    tmp_path,
    "e",
    f'settings = ["synthetic"]\nrows = ["mixed_none", "mixed_corrected"]\nseeds = [0, 1]\n'
    f'binaries = ["{binary}"]\narrange = "{arrange}"\njobs = 2\nevaluate = "own"\n'
    "[budget]\nepochs = 2\n",
  )
  out, log = tmp_path / "out", tmp_path / "log"
  args = [str(exp), f"--out={out}", f"--python={stand_in}"]
  proc = _launch(args, log)
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert "4 of 4 runs finished" in proc.stdout.splitlines()[-1]
  rows = json.loads((out / "launch.json").read_text())["runs"]
  assert {(r["arm"].split("_keras3")[0], r["seed"], r["status"]) for r in rows} == {
    (a, s, "finished") for a in ("mixed_none", "mixed_corrected") for s in (0, 1)
  }
  for r in rows:  # each run's own test metrics, read back as eval results
    result = json.loads((pathlib.Path(r["folder"]) / "eval" / "eval_results.json").read_text())
    assert result["metrics"]["exact"]["recall@20"] == pytest.approx(0.1 + r["seed"] / 100)
  trained = [json.loads(l) for l in log.read_text().splitlines() if "bench.table1.results" not in l]
  assert len(trained) == (1 if arrange == "program" else 4)  # one --seeds --logqs program
  proc = _launch(args, log)  # everything finished: nothing trains again
  assert proc.returncode == 0 and "(0 run now" in proc.stdout.splitlines()[-1]
  assert len([l for l in log.read_text().splitlines() if "bench.table1.results" not in l]) == len(
    trained
  )


def test_a_paused_run_ends_the_row_and_the_rerun_goes_on(tmp_path, stand_in):
  exp = _write(
    tmp_path,
    "e",
    'settings = ["synthetic"]\nrows = ["mixed_none"]\nseeds = [0, 1]\n'
    'evaluate = "own"\n[budget]\nepochs = 2\n',
  )
  out, log, flag = tmp_path / "out", tmp_path / "log", tmp_path / "paused"
  args = [str(exp), f"--out={out}", f"--python={stand_in}", "--time_budget_minutes=30"]
  proc = _launch(args, log, PAUSE_ONCE=str(flag))
  assert proc.returncode == 3, proc.stdout + proc.stderr
  assert "0 of 2 runs finished" in proc.stdout.splitlines()[-1]
  first = json.loads(log.read_text().splitlines()[0])
  assert any(a.startswith("--time_budget_minutes=") for a in first)
  proc = _launch(args, log, PAUSE_ONCE=str(flag))
  assert proc.returncode == 0 and "2 of 2 runs finished" in proc.stdout.splitlines()[-1]


def test_the_command_line_overrides_the_files_arrangement(tmp_path):
  path = _write(tmp_path, "e", 'settings = ["synthetic"]\nrows = ["bce"]\narrange = "row"\n')
  exp = cli.resolve(cli.parse_args([str(path), "--arrange=parallel", "--jobs=3"]))
  assert (exp.arrange, exp.jobs) == ("parallel", 3)
  assert cli.resolve(cli.parse_args([str(path)])).arrange == "row"
  with pytest.raises(SystemExit):
    cli.parse_args([str(path), "--jobs=0"])


@pytest.mark.parametrize(
  "text, message",
  [
    ('settings = ["mars"]\nrows = ["bce"]\n', "settings"),
    ('settings = ["synthetic"]\nrows = ["nope"]\n', "rows"),
    ('settings = ["synthetic"]\nrows = ["bce"]\ncolour = 1\n', "unknown keys"),
    ('settings = ["synthetic"]\nrows = ["bce"]\n[budget]\nepochs = 2\npatience = 3\n', "budget"),
    ('settings = ["synthetic"]\nrows = ["bce"]\n[base]\nseed = 3\n', "cannot set"),
    ('settings = ["synthetic"]\nrows = ["bce"]\nbinaries = ["tf_keras@old"]\n', "codes"),
  ],
)
def test_bad_experiments_get_one_error_line(text, message, tmp_path, capsys):
  assert cli.main([str(_write(tmp_path, "bad", text)), "--dry_run"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error:") and message in err and err.count("\n") == 1


def test_arrangements_train_the_same_models(tmp_path):
  """--arrangements=program,parallel on two rows that differ only in --logq (1 seed, the Keras 3
  binary on JAX, a tiny synthetic world, for real): the --logqs program and the two processes
  at once train the same two models (test NDCG@10 equal up to float rounding; each program run's
  equality to its separate run is tests/train/keras3/test_seeds.py's), and the report has the
  ratio."""
  exp = _write(
    tmp_path,
    "arr",
    'settings = ["synthetic"]\nrows = ["mixed_none", "mixed_corrected"]\n'
    'binaries = ["keras3_jax"]\nseeds = [0]\nreference_model = false\n[budget]\nepochs = 2\n'
    "[base]\nsynthetic_users = 40\nsynthetic_items = 30\nsynthetic_min_len = 4\n"
    "synthetic_max_len = 10\nmax_len = 10\nembedding_dim = 8\nnum_negatives = 4\n"
    'batch_size = 8\neval_batch_size = 40\nsteps_per_epoch = 2\nfrequency = "hash_array"\n'
    '[keras3]\nshuffle_rng = "numpy"\n',
  )
  out = tmp_path / "out"
  env = {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS", "KERAS_BACKEND")}
  proc = subprocess.run(
    [sys.executable, "-m", "bench.launch", str(exp), f"--out={out}"]
    + ["--arrangements=program,parallel"],
    cwd=ROOT,
    env=dict(env, JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3"),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert proc.stdout.splitlines()[-1].startswith("SUMMARY launch arrangements: parallel/program")
  result = json.loads((out / "arrangements.json").read_text())
  assert set(result["ratios"]) == {"parallel"} and len(result["seconds"]["program"]) == 1
  assert result["test_ndcg10"]["program"] == pytest.approx(
    result["test_ndcg10"]["parallel"], abs=1e-4
  )
  program = out / "arrangements" / "program_r0" / "synthetic"
  assert (program / "mixed_corrected_keras3_jax" / "seed0" / "train_metrics.json").is_file()
  assert len(list(program.glob("program_*/corrected/seed0"))) == 1
  assert (out / "arrangements.md").read_text().startswith("# 1 seeds x 2 arms")
  # The real runs' walls split by phase (bench.analysis phases): the parts add up to the wall.
  assert phases.main([f"--runs={out / 'arrangements' / 'parallel_r0'}", "--no_plot"]) == 0
  split = json.loads((out / "arrangements" / "parallel_r0" / "phases.json").read_text())["runs"]
  assert len(split) == 2
  for r in split:
    assert sum(r["parts"].values()) == pytest.approx(r["wall"]) and r["epochs"] == 2
    assert min(r["parts"][k] for k in ("first step", "steps", "validation", "test")) > 0
