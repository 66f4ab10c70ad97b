"""`python -m train.keras3 --backend=torch`: a run of 2 epochs, resumed by the same command with
--epochs=3, ends with the checkpoint (every variable: weights, Adam moments, the hash-array
estimator's state, the seed states), history and val/test metrics of an uninterrupted 3-epoch
run, bit for bit (as the JAX run in test_binary.py); its query_encoder.keras export reloads in a
fresh torch process and gives the run's validation metrics."""

import json
import pathlib

import keras3_binary_harness as harness
import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
TINY = harness.SYNTHETIC + ["--early_stopping_patience=10", "--backend=torch"]


# One thread for torch's OpenMP and MKL: on several threads (MKL_DYNAMIC on by default) a matmul
# or reduction may split its work differently from one process to the next, which moves the last
# bit of a float (seen once on a CI machine: 7e-8 in an embedding after the resume). The claim
# here is about the state a checkpoint holds, so the arithmetic is pinned to one order.
ONE_THREAD = dict(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MKL_DYNAMIC="FALSE")


def _env():
  return dict(harness.env(drop=("KERAS_BACKEND",)), TF_CPP_MIN_LOG_LEVEL="3", **ONE_THREAD)


def _start(args, head=None, env=None):
  return harness.start(args, environment=env or _env(), head=head)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  base = tmp_path_factory.mktemp("keras3_torch")
  full, resumed = base / "full", base / "resumed"
  procs = {
    "full": _start(TINY + ["--epochs=3", f"--model_dir={full}", f"--export_dir={full / 'export'}"]),
    "first": _start(TINY + ["--epochs=2", f"--model_dir={resumed}"]),
  }
  result = {name: harness.finish(proc) for name, proc in procs.items()}
  result["resumed"] = harness.finish(_start(TINY + ["--epochs=3", f"--model_dir={resumed}"]))
  result["dirs"] = dict(full=full, resumed=resumed)
  return result


def test_resumed_third_epoch_equals_the_uninterrupted_run(runs):
  for name in ("full", "first", "resumed"):
    assert runs[name][0] == 0, (name, runs[name][2][-3000:])
  assert "resumed from" in runs["resumed"][1] and "epoch 2, step 10" in runs["resumed"][1]
  full, resumed = harness.metrics(runs["dirs"]["full"]), harness.metrics(runs["dirs"]["resumed"])
  assert full["backend"] == resumed["backend"] == "torch"
  assert full["global_step"] == resumed["global_step"] == 15
  name, _, values = harness.last_checkpoint(runs["dirs"]["full"])
  assert name == "ckpt-15.npz" and len(values) > 20
  harness.assert_same_run(runs["dirs"]["full"], runs["dirs"]["resumed"])
  losses = [h["loss"] for h in full["history"]]
  assert all(np.isfinite(losses)) and losses[-1] < losses[0], losses


def test_export_reloads_in_a_fresh_torch_process(runs):
  assert runs["full"][0] == 0, runs["full"][2][-3000:]
  assert "needs --backend=tensorflow" in runs["full"][1]
  export = runs["dirs"]["full"] / "export"
  out = export.parent / "reloaded_torch.npz"
  worker = _start(
    [str(export), str(out)],
    head=[str(HERE / "export_worker.py")],
    env=dict(_env(), KERAS_BACKEND="torch"),
  )
  code, _, err = harness.finish(worker)
  assert code == 0, err[-3000:]
  got = np.load(out)
  assert str(got["backend"]) == "torch"
  metrics = json.loads(str(got["metrics"]))
  want = harness.metrics(runs["dirs"]["full"])["val"]  # the best model, evaluated in training
  assert metrics["num_queries"] == want["num_queries"]
  for k in ("recall@10", "ndcg@10", "recall@20", "ndcg@20"):
    assert metrics[k] == pytest.approx(want[k], abs=1e-6), k
