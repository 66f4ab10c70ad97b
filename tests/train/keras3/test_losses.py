"""`python -m train.keras3` with --loss=full_softmax / bce / gbce and --table_optimizer=lazy_adam
on ML-100K (JAX): each trains 2 epochs with a decreasing loss and finite metrics; a lazy_adam run
killed mid-epoch 2 and rerun ends with the uninterrupted run's checkpoint (every variable,
LazyAdam's per-row counts included), history and test metrics, bit for bit; the item tables'
counts are those of a LazyAdam (rows absent from a step not counted, no more than the steps)."""

import keras3_binary_harness as harness
import numpy as np
import pytest

ARGS = harness.ML100K + ["--epochs=2", "--backend=jax"]
RUNS = {
  "full_softmax": ["--loss=full_softmax"],
  "bce": ["--loss=bce", "--negatives=uniform"],
  "gbce": ["--loss=gbce", "--negatives=uniform", "--gbce_t=0.75"],
  "lazy_adam": ["--table_optimizer=lazy_adam"],
}
_RUNS = {}


def _runs(data_dir, tmp_path_factory):
  """Every run, started together once per session (they share the 2 cores); once the lazy_adam
  run has ended, the same run is killed in the middle of epoch 2 (before global step 6 + 3) and
  rerun: its programs then come from the session's JAX compilation cache (tests/conftest.py)."""
  if _RUNS:
    return _RUNS
  assert data_dir.exists()
  base = tmp_path_factory.mktemp("keras3_losses")
  procs = {}
  for name, extra in RUNS.items():
    procs[name] = harness.start(ARGS + extra + [f"--model_dir={base / name}"])
  done = {"lazy_adam": harness.finish(procs.pop("lazy_adam"))}
  resumed = base / "lazy_adam_resumed"
  harness.killed(ARGS + RUNS["lazy_adam"] + [f"--model_dir={resumed}"], step=9)
  procs["lazy_adam_resumed"] = harness.start(ARGS + RUNS["lazy_adam"] + [f"--model_dir={resumed}"])
  done.update((name, harness.finish(proc)) for name, proc in procs.items())
  for name, (status, _, err) in done.items():
    assert status == 0, f"{name}: {err[-3000:]}"
    _RUNS[name] = base / name
  return _RUNS


@pytest.mark.parametrize("name", ["full_softmax", "bce", "gbce", "lazy_adam"])
def test_trains_two_epochs_with_a_decreasing_loss(name, data_dir, tmp_path_factory):
  m = harness.metrics(_runs(data_dir, tmp_path_factory)[name])
  assert m["config"]["loss"] == RUNS[name][0].split("=")[1] or name == "lazy_adam"
  losses = [h["loss"] for h in m["history"]]
  assert len(losses) == 2 and np.all(np.isfinite(losses)) and losses[1] < losses[0], losses
  for split in ("val", "test"):
    assert all(np.isfinite(v) for v in m[split].values()), m[split]
  assert m["test"]["ndcg@10"] > 0


def test_lazy_adam_resumes_bit_exactly(data_dir, tmp_path_factory):
  runs = _runs(data_dir, tmp_path_factory)
  harness.assert_same_run(runs["lazy_adam"], runs["lazy_adam_resumed"])
  _, paths, a = harness.last_checkpoint(runs["lazy_adam"])
  # the item tables' per-row counts: checkpointed, at most 12 steps, some rows never updated
  counts = [a[f"v{i}"] for i, p in enumerate(paths) if p.endswith("_row_count")]
  names = [p for p in paths if p.endswith("_row_count")]
  assert len(counts) == 2 and all("item_embedding" in p for p in names), names
  for k in counts:
    assert k.max() <= 12 and k.max() > 0 and (k == 0).any() and len(np.unique(k)) > 2
