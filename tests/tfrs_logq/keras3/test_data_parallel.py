"""Cross-replica in-batch negatives on the Keras 3 path: keras.distribution.DataParallel on JAX
over two host CPU devices (``data_parallel_worker.py`` in its own process with
XLA_FLAGS=--xla_force_host_platform_device_count=2).

The in-batch pool of a data-parallel step is the global batch: model.fit with mixed negatives
(expected_count log Q), a CountMinSketch updated in the step and the corrected loss gives the
same losses, weights and estimator state on two devices as on one; a pool built from a batch
sharded over the devices is laid out on every device and is the deduplicated global batch.
"""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def res(tmp_path_factory):
  out = tmp_path_factory.mktemp("data_parallel") / "out.npz"
  env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
  env.update(
    KERAS_BACKEND="jax",
    JAX_PLATFORMS="cpu",
    CUDA_VISIBLE_DEVICES="",
    XLA_FLAGS="--xla_force_host_platform_device_count=2",
    PYTHONPATH=str(HERE.parents[2]),
  )
  proc = subprocess.run(
    [sys.executable, str(HERE / "data_parallel_worker.py"), str(out)],
    env=env,
    capture_output=True,
    text=True,
    timeout=900,
    cwd=str(HERE),
  )
  assert proc.returncode == 0, proc.stderr[-4000:]
  return dict(np.load(out))


def test_two_devices(res):
  assert int(res["num_devices"]) == 2
  assert int(res["single/sharding_devices"]) == 1 and int(res["parallel/sharding_devices"]) == 2


def test_data_parallel_fit_equals_single_device_fit(res):
  assert np.isfinite(res["parallel/loss"]).all()
  for key in ("loss", "users", "items", "table", "total"):
    np.testing.assert_allclose(
      res[f"parallel/{key}"], res[f"single/{key}"], rtol=1e-5, atol=1e-7, err_msg=key
    )
  assert float(res["parallel/total"]) == 2 * 64  # the global batches were counted


def test_cross_batch_memory_holds_the_global_batch_under_data_parallel(res):
  """The memory's slots, per-push statistics and the training are those of one device: every
  push holds the 16 rows of the global batch (not one device's 8), and its state is replicated."""
  assert np.isfinite(res["memory_parallel/loss"]).all()
  keys = ("loss", "users", "items", "table", "total")
  keys += ("memory_ids", "memory_filled", "memory_push_draws", "memory_push_distinct")
  keys += ("memory_push_kept", "memory_num_pushed")
  for key in keys:
    np.testing.assert_allclose(
      res[f"memory_parallel/{key}"], res[f"memory_single/{key}"], rtol=1e-5, atol=1e-7, err_msg=key
    )
  assert int(res["memory_parallel/memory_num_pushed"]) == 2 * 4  # 2 epochs of 4 batches
  np.testing.assert_array_equal(res["memory_parallel/memory_push_draws"], [16, 16, 16])
  assert bool(res["memory_parallel/memory_replicated"])
  # the last push (step 8: slot block (8 - 1) mod 3 = 1) holds the last global batch's ids
  rng = np.random.default_rng(0)
  rng.integers(0, 16, 64)
  items = rng.integers(0, 20, 64).astype(np.int32)
  last = res["memory_parallel/memory_ids"][16:32]
  filled = res["memory_parallel/memory_filled"][16:32].astype(bool)
  assert set(last[filled]) == set(items[48:64])


def test_pool_of_a_sharded_batch_is_the_global_batch_on_every_device(res):
  assert bool(res["layout/input_sharded"])
  assert res["layout/pool_replicated"].all()
  ids = np.array([3, 5, 3, 7, 1, 5, 9, 2])
  np.testing.assert_array_equal(res["layout/pool_ids"], ids)
  np.testing.assert_array_equal(
    res["layout/pool_valid"], [True, True, False, True, True, False, True, True]
  )
  b, u = 8, 6  # expected_count over the global pool: log pi - log U
  want = np.log(1 - (1 - np.exp(-2.0)) ** b) - np.log(u)
  np.testing.assert_allclose(res["layout/pool_log_q"], want, rtol=1e-5)
