"""`python -m train.keras3 --negatives=midx` on ML-100K (JAX): the library's Keras 3 MIDX sampler
in the binary trains 2 epochs with a decreasing loss and finite metrics, its index is refreshed
at the start of every epoch (the tf-keras trainer's schedule: refresh count 2 after 2 epochs)
and checkpointed (codebooks, cells, refresh count, seed state); a run killed mid-epoch 2 and
rerun ends with the uninterrupted run's checkpoint (every variable, the index included),
history and metrics, bit for bit."""

import keras3_binary_harness as harness
import numpy as np

ARGS = harness.ML100K + ["--epochs=2", "--backend=jax", "--negatives=midx", "--midx_codewords=8"]
_RUNS = {}


def _runs(data_dir, tmp_path_factory):
  """The uninterrupted run and the killed + resumed one (once per session); the kill comes in
  the middle of epoch 2 (before global step 6 + 3), epoch 1's checkpoint on disk."""
  if _RUNS:
    return _RUNS
  assert data_dir.exists()
  base = tmp_path_factory.mktemp("keras3_midx")
  full = harness.start(ARGS + [f"--model_dir={base / 'full'}"])
  harness.killed(ARGS + [f"--model_dir={base / 'resumed'}"], step=9)
  resumed = harness.start(ARGS + [f"--model_dir={base / 'resumed'}"])
  for name, proc in (("full", full), ("resumed", resumed)):
    status, out, err = harness.finish(proc)
    assert status == 0, f"{name}: {err[-3000:]}"
    _RUNS[name] = base / name
  _RUNS["resumed_stdout"] = out
  return _RUNS


def test_midx_trains_two_epochs_with_a_decreasing_loss(data_dir, tmp_path_factory):
  m = harness.metrics(_runs(data_dir, tmp_path_factory)["full"])
  assert m["config"]["negatives"] == "midx" and m["config"]["midx_codewords"] == 8
  losses = [h["loss"] for h in m["history"]]
  assert len(losses) == 2 and np.all(np.isfinite(losses)) and losses[1] < losses[0], losses
  for split in ("val", "test"):
    assert all(np.isfinite(v) for v in m[split].values()), m[split]
  assert m["test"]["ndcg@10"] > 0


def test_midx_index_is_refreshed_every_epoch_and_checkpointed(data_dir, tmp_path_factory):
  run = _runs(data_dir, tmp_path_factory)["full"]
  _, paths, values = harness.last_checkpoint(run)
  n = harness.metrics(run)["num_items"]
  midx = {p.split("midx/")[-1]: values[f"v{i}"] for i, p in enumerate(paths) if "midx/" in p}
  assert int(midx["num_refreshes"]) == 2, sorted(midx)  # epochs 1 and 2 started with one
  counts = midx["cell_counts"]
  assert counts.shape == (64,) and counts.sum() == midx["item_codes"].shape[0] == n
  assert np.isfinite(midx["codebook_1"]).all() and np.abs(midx["codebook_1"]).sum() > 0
  assert np.array_equal(np.sort(midx["sorted_items"]), np.arange(n))


def test_midx_run_resumes_bit_exactly(data_dir, tmp_path_factory):
  runs = _runs(data_dir, tmp_path_factory)
  assert "resumed from" in runs["resumed_stdout"]
  harness.assert_same_run(runs["full"], runs["resumed"])
