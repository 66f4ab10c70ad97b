"""`python -m train.keras3` (SASRec on Keras 3): it trains (the loss goes down) on ML-100K on
JAX and on synthetic data on TensorFlow; a run killed mid-epoch and rerun with the same command
ends with the same checkpoint (every variable: weights, Adam moments, estimator, seed states, the
--cross_batch memory of the last 2 batches),
history and test metrics as an uninterrupted run (the TensorFlow run's checkpoint holds the
hash-array estimator's state, updated every step); the exported query encoder reloads in
a fresh process (jax and tensorflow) and gives the same validation metrics; --help lists the
run settings and --backend; bad input is one `error:` line with exit status 2."""

import json
import pathlib
import subprocess
import sys

import keras3_binary_harness as harness
import numpy as np
import pytest
import without_tensorflow

HERE = pathlib.Path(__file__).resolve().parent

ML100K = harness.ML100K
TINY = harness.SYNTHETIC


def _env(backend=None):
  # The session's JAX compilation cache (tests/conftest.py): the resumed run reuses the first
  # runs' step.
  return harness.env(backend)


def _start(args, script=None, backend=None):
  return harness.start(args, script, _env(backend))


_RUNS = {}


def _runs(tmp_path_factory):
  """The ML-100K runs on JAX (uninterrupted; killed + resumed) and the synthetic TensorFlow run,
  started together once per session."""
  if _RUNS:
    return _RUNS
  base = tmp_path_factory.mktemp("keras3_binary")
  full, killed, tf_dir = base / "full", base / "killed", base / "tf"
  common = ML100K + ["--backend=jax", "--epochs=3", "--cross_batch=2"]
  procs = {
    "full": _start(common + [f"--model_dir={full}", f"--export_dir={full / 'export'}"]),
    # SIGKILL (nothing cleaned up) in the middle of epoch 3, before global step 2 * 6 + 3,
    # once epoch 2's checkpoint is on disk
    "killed": _start(common + [f"--model_dir={killed}"], script=harness.kill_at_step(15)),
    "tf": _start(TINY + ["--backend=tensorflow", "--epochs=2", f"--model_dir={tf_dir}"]),
  }
  for name, proc in procs.items():
    _RUNS[name] = harness.finish(proc, timeout=600)
  _RUNS["resumed"] = harness.finish(_start(common + [f"--model_dir={killed}"]), timeout=600)
  _RUNS["dirs"] = dict(full=full, killed=killed, tf=tf_dir)
  return _RUNS


def test_trains_on_ml100k_with_jax_and_the_loss_decreases(data_dir, tmp_path_factory):
  runs = _runs(tmp_path_factory)
  code, out, err = runs["full"]
  assert code == 0, err[-3000:]
  m = harness.metrics(runs["dirs"]["full"])
  assert m["backend"] == "jax" and m["global_step"] == 18 and m["epochs_done"] == 3
  losses = [h["loss"] for h in m["history"]]
  assert losses[-1] < losses[0], losses
  ndcg = [h["val_ndcg@10"] for h in m["history"]]
  assert ndcg[-1] > ndcg[0], ndcg
  assert len([line for line in out.splitlines() if line.startswith("epoch ")]) == 3
  assert err.strip().splitlines()[-1].startswith("done: jax, step 18")
  # no serving SavedModel off the tensorflow backend: one line says so, the .keras is written
  assert len([line for line in out.splitlines() if "needs --backend=tensorflow" in line]) == 1
  export = runs["dirs"]["full"] / "export"
  assert (export / "query_encoder.keras").is_file() and not (export / "query_encoder").exists()
  assert m["test"]["num_queries"] > 900 and 0 <= m["test"]["ndcg@10"] <= 1


def test_killed_and_resumed_run_equals_the_uninterrupted_run(data_dir, tmp_path_factory):
  runs = _runs(tmp_path_factory)
  code, _, _ = runs["killed"]
  assert code == -9  # SIGKILL in epoch 3
  code, out, err = runs["resumed"]
  assert code == 0, err[-3000:]
  assert "resumed from" in out and "epoch 2, step 12" in out
  name, paths, values = harness.last_checkpoint(runs["dirs"]["full"])
  assert name == "ckpt-18.npz" and len(values) > 20
  pushed = [i for i, p in enumerate(paths) if p == "cross_batch/num_pushed"]
  assert len(pushed) == 1 and int(values[f"v{pushed[0]}"]) == 18  # one push per step
  harness.assert_same_run(runs["dirs"]["full"], runs["dirs"]["killed"])


@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
def test_export_reloads_in_a_fresh_process(backend, data_dir, tmp_path_factory):
  runs = _runs(tmp_path_factory)
  assert runs["full"][0] == 0
  export = runs["dirs"]["full"] / "export"
  out = export.parent / f"reloaded_{backend}.npz"
  proc = subprocess.run(
    [sys.executable, str(HERE / "export_worker.py"), str(export), str(out)],
    env=dict(_env(backend), TF_CPP_MIN_LOG_LEVEL="3"),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  got = np.load(out)
  assert str(got["backend"]) == backend
  metrics = json.loads(str(got["metrics"]))
  want = harness.metrics(runs["dirs"]["full"])["val"]  # the best model, evaluated in training
  assert metrics["num_queries"] == want["num_queries"]
  for k in ("recall@10", "ndcg@10", "recall@20", "ndcg@20"):
    assert metrics[k] == pytest.approx(want[k], abs=2e-3), k
  if backend == "tensorflow":  # same embeddings on both backends
    other = np.load(export.parent / "reloaded_jax.npz")["queries"]
    np.testing.assert_allclose(got["queries"], other, rtol=1e-4, atol=1e-5)


def test_trains_on_the_tensorflow_backend(tmp_path_factory):
  code, out, err = _runs(tmp_path_factory)["tf"]
  assert code == 0, err[-3000:]
  m = harness.metrics(_runs(tmp_path_factory)["dirs"]["tf"])
  assert m["backend"] == "tensorflow" and m["global_step"] == 10
  losses = [h["loss"] for h in m["history"]]
  assert all(np.isfinite(losses)), losses
  _, _, state = harness.last_checkpoint(_runs(tmp_path_factory)["dirs"]["tf"])
  # the hash-array estimator's step counter (a scalar int variable equal to the 10 updates)
  assert any(v.shape == () and v.dtype.kind == "i" and int(v) == 10 for v in state.values())
  assert err.strip().splitlines()[-1].startswith("done: tensorflow, step 10")


def test_help_lists_the_run_settings_and_the_backend():
  code, out, err = harness.finish(_start(["--help"]))
  assert code in (0, 1), err  # absl's --help exits 1 after printing
  for flag in (
    "--backend",
    "--logq",
    "--negatives",
    "--num_negatives",
    "--model_dir",
    "--dataset",
    "--early_stopping_patience",
  ):
    assert flag in out, flag


BAD_INPUT = [
  (["--no_such_flag=1"], "no_such_flag"),
  (["--backend=mxnet"], "backend"),
  (["--model=two_tower"], "--model=two_tower is not available"),
  (["--strategy=parameter_server"], "--strategy=parameter_server is not available"),
]


def test_bad_input_is_one_error_line_and_status_2(tmp_path):
  # data are read before Keras and its backend are imported (here they cannot be): a missing
  # file, sequences too short for leave-one-out (a CSV of two items per user, a sequence file of
  # one item per line)
  two_each = tmp_path / "two_each.csv"
  two_each.write_text("user,item\n1,10\n1,11\n2,10\n2,12\n")
  one_each = tmp_path / "one_each.txt"
  one_each.write_text("u1 7\nu2 8\n")
  loo = "no training sequence with >= 2 items under --split=leave_one_out: a user needs >= 4 "
  no_keras = without_tensorflow.hide(_env("jax"), also=("jax", "keras", "torch"))
  bad_data = [
    (["--dataset=sequences", f"--data_path={tmp_path / 'none.txt'}"], "data file not found: "),
    (["--dataset=interactions", f"--data_path={two_each}"], f"two_each.csv: {loo}"),
    (["--dataset=sequences", f"--data_path={one_each}"], f"one_each.txt: {loo}"),
  ]
  procs = [_start(args + [f"--model_dir={tmp_path / 'run'}"]) for args, _ in BAD_INPUT]
  procs += [
    harness.start(args + [f"--model_dir={tmp_path / 'run'}"], None, no_keras)
    for args, _ in bad_data
  ]
  for (args, needle), proc in zip(BAD_INPUT + bad_data, procs):
    code, _, err = harness.finish(proc)
    assert code == 2, (args, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], (args, err)
  assert not (tmp_path / "run").exists()
