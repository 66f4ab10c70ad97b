"""The binaries speak plainly (train/cli.py, train/__main__.py): by default a progress bar and one
line per epoch, no TensorFlow logs; bad input ends with one line and exit status 2 (the traceback
too at --verbosity=debug); a non-finite gradient stops training at its step and keeps the last
finished epoch's checkpoint (status 1); Ctrl-C keeps that checkpoint and prints the command that
resumes (status 130). The binaries run on the embedded synthetic data with tiny settings."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf
import without_tensorflow
from absl import flags

from train import cli
from train.data import DataFormatError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = [
  "--dataset=synthetic",
  "--synthetic_users=60",
  "--synthetic_items=50",
  "--synthetic_min_len=5",
  "--synthetic_max_len=20",
  "--max_len=20",
  "--embedding_dim=16",
  "--num_blocks=1",
  "--num_negatives=8",
  "--batch_size=16",
  "--eval_batch_size=60",
]
# TensorFlow's C++ log lines, absl's Python log lines, Python's tensorflow logger, the saver's.
NOISE = re.compile(
  r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] |[IWEF]\d{4} "
  r"|(INFO|WARNING):tensorflow:)|Sharding callback",
  re.M,
)
# A gradient that is NaN from the third step on (global step 2), with a finite loss.
NAN_GRADIENT = """
import runpy
import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
import tensorflow as tf
from train import objective

call = objective.Objective.__call__

@tf.custom_gradient
def poison(x):
  return tf.identity(x), lambda dy: dy * float("nan")

def patched(self, batch, step, training=True):
  terms = dict(call(self, batch, step, training=training))
  terms["loss"] = tf.cond(step >= 2, lambda: poison(terms["loss"]), lambda: terms["loss"])
  return terms

objective.Objective.__call__ = patched
runpy.run_module("train", run_name="__main__", alter_sys=True)
"""


def _env(**extra):
  env = dict(os.environ, CUDA_VISIBLE_DEVICES="", **extra)
  if "TF_CPP_MIN_LOG_LEVEL" not in extra:
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the binary's own default
  return env


def _train(args, *, code=None, env=None, timeout=240):
  head = ["-m", "train"] if code is None else ["-c", code]
  return subprocess.run(
    [sys.executable, *head, *args],
    cwd=ROOT,
    env=env or _env(),
    capture_output=True,
    text=True,
    timeout=timeout,
  )


def _lines(text):
  return [line for line in text.splitlines() if line.strip()]


# ------------------------------------------------------------------------------ train/cli.py


def test_verbosity_is_read_from_the_command_line_before_flags_are_parsed():
  assert cli.verbosity_from_argv(["prog"]) == "quiet"
  assert cli.verbosity_from_argv(["prog", "--verbosity=debug"]) == "debug"
  assert cli.verbosity_from_argv(["prog", "--verbosity", "info"]) == "info"
  assert cli.verbosity_from_argv(["prog", "-v", "1"]) == "debug"
  assert cli.verbosity_from_argv(["prog", "-v=0"]) == "info"
  assert cli.verbosity_from_argv(["prog", "--verbosity=info", "--verbosity=quiet"]) == "quiet"
  assert cli.verbosity_from_argv(["prog", "--verbosity=loud"]) == "quiet"  # the parser says
  assert cli.verbosity_from_argv(["prog", "--", "--verbosity=debug"]) == "quiet"


def test_quiet_tensorflow_leaves_a_level_the_user_set(monkeypatch):
  monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
  cli.quiet_tensorflow(["prog"])
  assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "3"
  monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL")
  cli.quiet_tensorflow(["prog", "--verbosity=debug"])
  assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0"
  monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")
  cli.quiet_tensorflow(["prog"])
  assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"


def test_verbosity_flag_takes_names_and_absl_integers():
  for argv, name, level in (
    (["p"], "quiet", None),
    (["p", "--verbosity=info"], "info", 0),
    (["p", "--verbosity=debug"], "debug", 1),
    (["p", "--verbosity=-1"], "quiet", -1),
    (["p", "-v", "2"], "debug", 2),
  ):
    values = flags.FlagValues()
    flags.DEFINE_integer("verbosity", -1, "absl's", short_name="v", flag_values=values)
    cli.declare_verbosity_flag(values)
    values(argv)
    assert cli.verbosity(values) == name
    if level is not None:
      assert values.verbosity == level
  with pytest.raises(flags.IllegalFlagValueError, match="quiet, info, debug"):
    values(["p", "--verbosity=loud"])


def test_errors_are_one_line():
  assert cli.one_line(DataFormatError("f.txt", 3, "bad\n  thing")) == "f.txt, line 3: bad thing"
  assert (
    cli.one_line(FileNotFoundError(2, "No such file or directory", "/x"))
    == "/x: No such file or directory"
  )
  assert cli.one_line(ValueError()) == "ValueError"


# ------------------------------------------------------------------------- python -m train


def test_default_output_is_progress_and_one_line_per_epoch(tmp_path):
  out = _train(
    TINY
    + [
      "--epochs=2",
      "--steps_per_epoch=2",
      f"--model_dir={tmp_path / 'run'}",
      f"--export_dir={tmp_path / 'export'}",
    ]
  )
  assert out.returncode == 0, out.stderr[-3000:]
  assert re.findall(r"^epoch (\d+) step (\d+) loss", out.stdout, re.M) == [("1", "2"), ("2", "4")]
  assert "2/2 [" in out.stdout  # the progress bar
  assert not NOISE.search(out.stderr) and "tensorflow" not in out.stderr.lower(), out.stderr
  assert _lines(out.stderr)[-1].startswith("done: step 4, best epoch"), out.stderr
  assert (tmp_path / "export" / "export_meta.json").exists()


def test_bad_data_file_is_one_line_and_status_2(tmp_path):
  bad = tmp_path / "sequences.txt"
  bad.write_text("u1 1 2 3 4\nu2 2 3 4 5\nu1 5 6 7\n")
  args = ["--dataset=sequences", f"--data_path={bad}", f"--model_dir={tmp_path / 'run'}"]
  out = _train(args)
  assert out.returncode == cli.EXIT_BAD_INPUT, out.stderr[-3000:]
  assert _lines(out.stderr) == [
    f"error: {bad}, line 3: user 'u1' already has a line (line 1): "
    "a sequence file holds one line per user"
  ], out.stderr
  debug = _train(args + ["--verbosity=debug"])
  assert debug.returncode == cli.EXIT_BAD_INPUT
  assert "Traceback (most recent call last)" in debug.stderr and "DataFormatError" in debug.stderr
  assert _lines(debug.stderr)[-1] == _lines(out.stderr)[0]
  # read before TensorFlow is imported (here it cannot be): a missing file, sequences too short
  # for leave-one-out (a CSV of two items per user, a sequence file of one item per line)
  no_tf = without_tensorflow.hide(_env())
  two_each = tmp_path / "two_each.csv"
  two_each.write_text("user,item\n1,10\n1,11\n2,10\n2,12\n")
  one_each = tmp_path / "one_each.txt"
  one_each.write_text("u1 7\nu2 8\n")
  loo = "no training sequence with >= 2 items under --split=leave_one_out: a user needs >= 4 "
  for data, want in [
    (["--dataset=sequences", f"--data_path={tmp_path / 'none.txt'}"], "data file not found: "),
    (["--dataset=interactions", f"--data_path={two_each}"], f"two_each.csv: {loo}"),
    (["--dataset=sequences", f"--data_path={one_each}"], f"one_each.txt: {loo}"),
  ]:
    out = _train(data + [f"--model_dir={tmp_path / 'run'}"], env=no_tf)
    assert out.returncode == cli.EXIT_BAD_INPUT, out.stderr[-3000:]
    lines = _lines(out.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: ") and want in lines[0], out.stderr
  assert "longest training sequence has 1 item" in lines[0]
  assert not (tmp_path / "run").exists()


def test_non_finite_gradient_stops_at_its_step_and_keeps_the_last_checkpoint(tmp_path):
  model_dir = tmp_path / "run"
  out = _train(
    TINY + ["--epochs=3", "--steps_per_epoch=2", "--noprogress", f"--model_dir={model_dir}"],
    code=NAN_GRADIENT,
    env=_env(TF_CPP_MIN_LOG_LEVEL="3"),
  )
  assert out.returncode == cli.EXIT_ERROR, out.stderr[-3000:]
  assert "Traceback" not in out.stderr
  last = _lines(out.stderr)[-1]
  assert last.startswith("error: non-finite loss or gradient at step 3 (epoch 2)"), out.stderr
  assert f"the checkpoint of epoch 1 (step 2) in {model_dir / 'ckpt'} is kept" in last
  assert re.findall(r"^epoch (\d+)", out.stdout, re.M) == ["1"]
  # Nothing newer than epoch 1 was written; its checkpoint is whole and finite.
  assert sorted(p.name for p in (model_dir / "ckpt").glob("*.index")) == ["ckpt-2.index"]
  assert tf.train.latest_checkpoint(str(model_dir / "ckpt")).endswith("ckpt-2")
  assert [h["epoch"] for h in json.loads((model_dir / "history.json").read_text())] == [1]
  assert not (model_dir / "metrics.json").exists()
  reader = tf.train.load_checkpoint(str(model_dir / "ckpt" / "ckpt-2"))
  names = [n for n in reader.get_variable_to_shape_map() if not n.startswith("_CHECKPOINTABLE")]
  assert any(n.startswith("model/") for n in names)
  for n in names:
    value = reader.get_tensor(n)
    if np.issubdtype(np.asarray(value).dtype, np.floating):
      assert np.all(np.isfinite(value)), n


def test_ctrl_c_keeps_the_last_epoch_and_prints_the_command_that_resumes(tmp_path):
  model_dir = tmp_path / "run"
  steps = 200
  args = TINY + [
    "--epochs=50",
    f"--steps_per_epoch={steps}",
    "--noprogress",
    f"--model_dir={model_dir}",
  ]
  # A shell that starts jobs in the background ignores SIGINT in them: restore the default.
  proc = subprocess.Popen(
    [sys.executable, "-m", "train", *args],
    cwd=ROOT,
    env=_env(),
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
  )
  try:
    deadline = time.time() + 200
    while not (model_dir / "ckpt" / "checkpoint").exists():  # epoch 1 is checkpointed
      assert proc.poll() is None, proc.stderr.read()[-3000:]
      assert time.time() < deadline, "no checkpoint within 200 s"
      time.sleep(0.05)
    time.sleep(0.2)  # inside epoch 2
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait(timeout=30)
  assert proc.returncode == cli.EXIT_INTERRUPTED, stderr[-3000:]
  assert "Traceback" not in stderr and not NOISE.search(stderr), stderr
  latest = tf.train.latest_checkpoint(str(model_dir / "ckpt"))
  step = int(latest.rsplit("-", 1)[1])
  epochs = len(json.loads((model_dir / "history.json").read_text()))
  assert step == epochs * steps and epochs >= 1  # an epoch's end, never mid-epoch
  assert (
    f"the checkpoint of epoch {epochs} (step {step}) is saved in {model_dir / 'ckpt'}" in stderr
  ), stderr
  assert "to resume, rerun the same command:" in stderr
  command = _lines(stderr)[-1]
  assert "-m train" in command and f"--model_dir={model_dir}" in command
  assert not (model_dir / "metrics.json").exists()
  assert len(re.findall(r"^epoch \d+ step", stdout, re.M)) == epochs
