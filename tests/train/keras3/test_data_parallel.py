"""`python -m train.keras3 --strategy=mirrored --cpu_replicas=2` (JAX): keras.distribution's
DataParallel over two host CPU devices (XLA_FLAGS set by the binary before jax is imported).
On ML-100K with mixed negatives (the in-batch pool gathered across the devices) the weights live
on 2 devices and the first epoch's loss, mean weight and validation metrics equal the
single-device run's (padded: token packing is off under data parallelism) within float tolerance; a
data-parallel run killed mid-epoch 2 and rerun ends with the uninterrupted data-parallel run's
checkpoint, history and metrics, bit for bit. Other backends and a batch that does not split evenly
are one `error:` line (status 2); the host device flag is added to (or replaced in) XLA_FLAGS only
for jax."""

import os

import keras3_binary_harness as harness
import numpy as np

from train.keras3 import settings

ARGS = harness.ML100K + ["--epochs=2", "--backend=jax", "--negatives=mixed"]
PARALLEL = ["--strategy=mirrored", "--cpu_replicas=2"]
ENV = harness.env(drop=("XLA_FLAGS",))  # the binary sets the host device count itself
_RUNS = {}


def _start(args, script=None):
  return harness.start(args, script, ENV)


def _runs(data_dir, tmp_path_factory):
  """One device, two devices, two devices killed in the middle of epoch 2 (before global step
  6 + 3) + resumed (once per session)."""
  if _RUNS:
    return _RUNS
  assert data_dir.exists()
  base = tmp_path_factory.mktemp("keras3_data_parallel")
  # the single-device run padded, as the data-parallel runs are (their batch is split by rows)
  procs = {"one": _start(ARGS + ["--sasrec_pack_tokens=false", f"--model_dir={base / 'one'}"])}
  harness.killed(ARGS + PARALLEL + [f"--model_dir={base / 'resumed'}"], step=9, environment=ENV)
  procs["two"] = _start(ARGS + PARALLEL + [f"--model_dir={base / 'two'}"])
  procs["resumed"] = _start(ARGS + PARALLEL + [f"--model_dir={base / 'resumed'}"])
  for name, proc in procs.items():
    status, out, err = harness.finish(proc)
    assert status == 0, f"{name}: {err[-3000:]}"
    _RUNS[name] = base / name
    _RUNS[f"{name}_stdout"] = out
  return _RUNS


def test_two_devices_give_the_single_device_first_epoch(data_dir, tmp_path_factory):
  runs = _runs(data_dir, tmp_path_factory)
  one, two = harness.metrics(runs["one"]), harness.metrics(runs["two"])
  assert one["devices"] == 1 and two["devices"] == 2
  assert "over 2 devices, 16 sequences each" in runs["two_stdout"]
  assert "--sasrec_pack_tokens: off under --strategy=mirrored" in runs["two_stdout"]
  first_one, first_two = one["history"][0], two["history"][0]
  keys = [k for k in first_one if k.startswith("val_") or k in ("loss", "mean_weight")]
  assert "val_ndcg@10" in keys and "loss" in keys
  for key in keys:
    np.testing.assert_allclose(first_two[key], first_one[key], rtol=1e-4, atol=1e-6, err_msg=key)
  losses = [h["loss"] for h in two["history"]]
  assert len(losses) == 2 and np.all(np.isfinite(losses)) and losses[1] < losses[0], losses
  assert all(np.isfinite(v) for v in two["test"].values())


def test_data_parallel_run_resumes_bit_exactly(data_dir, tmp_path_factory):
  runs = _runs(data_dir, tmp_path_factory)
  assert "resumed from" in runs["resumed_stdout"]
  harness.assert_same_run(runs["two"], runs["resumed"])
  assert harness.metrics(runs["resumed"])["devices"] == 2


BAD_INPUT = [
  (["--backend=tensorflow"] + PARALLEL, "needs --backend=jax"),
  (["--backend=torch", "--strategy=mirrored"], "needs --backend=jax"),
  (["--batch_size=33"] + PARALLEL, "multiple of the 2"),
  (["--strategy=multi_worker"], "--strategy=multi_worker is not available"),
]


def test_bad_input_is_one_error_line(data_dir, tmp_path):
  procs = [_start(ARGS + args + [f"--model_dir={tmp_path}"]) for args, _ in BAD_INPUT]
  for (args, needle), proc in zip(BAD_INPUT, procs):
    _, err = proc.communicate(timeout=600)
    lines = err.strip().splitlines()
    assert proc.returncode == 2, (args, err[-2000:])
    assert lines and lines[-1].startswith("error: ") and needle in lines[-1], (args, err[-2000:])


def test_host_device_count_is_set_for_jax_only(monkeypatch):
  monkeypatch.setenv("XLA_FLAGS", "--xla_foo=1 --xla_force_host_platform_device_count=8")
  monkeypatch.setenv("KERAS_BACKEND", "jax")
  assert settings.select_backend(["prog", "--backend=jax", "--cpu_replicas", "3"]) == "jax"
  assert os.environ["XLA_FLAGS"] == "--xla_foo=1 --xla_force_host_platform_device_count=3"
  monkeypatch.setenv("XLA_FLAGS", "")
  settings.select_backend(["prog", "--backend=torch", "--cpu_replicas=3"])
  assert os.environ["XLA_FLAGS"] == "" and os.environ["KERAS_BACKEND"] == "torch"
  settings.select_backend(["prog", "--cpu_replicas=0"])
  assert os.environ["XLA_FLAGS"] == "" and os.environ["KERAS_BACKEND"] == "jax"
