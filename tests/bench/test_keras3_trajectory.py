"""bench/keras3_trajectory.py end to end on a small synthetic catalog: the Keras 3 run started
from the tf-keras run's initial weights scores validation exactly as it does at step 0 and
follows its loss step by step; the run from Keras 3's own weights starts elsewhere."""

import json
import subprocess
import sys

import numpy as np


def test_copied_start_follows_the_tf_keras_run_and_the_own_start_does_not(tmp_path):
  out = tmp_path / "out"
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "bench.keras3_trajectory",
      "--dataset=synthetic",
      "--synthetic_users=300",
      "--synthetic_items=80",
      "--synthetic_min_len=5",
      "--synthetic_max_len=20",
      "--max_len=20",
      "--embedding_dim=16",
      "--batch_size=32",
      "--eval_batch_size=128",
      "--steps=5",
      "--steps_per_epoch=2",
      f"--out={out}",
    ],
    capture_output=True,
    text=True,
    timeout=1200,
    check=False,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads((out / "trajectory.json").read_text())
  runs = result["runs"]
  assert [v["step"] for v in runs["tf_keras"]["val"]] == [0, 2, 4, 5]
  for name in ("tf_keras", "keras3_copied", "keras3_own"):
    assert len(runs[name]["loss"]) == 5 and np.all(np.isfinite(runs[name]["loss"]))
  # the same weights score validation the same way (one float32 top-k: equal up to ties)
  assert runs["keras3_copied"]["val"][0] == runs["tf_keras"]["val"][0]
  np.testing.assert_allclose(runs["keras3_copied"]["loss"], runs["tf_keras"]["loss"], rtol=1e-4)
  own = np.abs(np.asarray(runs["keras3_own"]["loss"]) - runs["tf_keras"]["loss"])
  copied = np.abs(np.asarray(runs["keras3_copied"]["loss"]) - runs["tf_keras"]["loss"])
  assert own[0] > 100 * max(copied[0], 1e-7)
  assert result["summary"]["keras3_copied"]["max_abs_loss_diff"] == copied.max()
  assert (out / "trajectory.png").stat().st_size > 0
  assert "| keras3_own |" in (out / "trajectory.md").read_text()
  assert not (out / "initial_weights.npz").exists()
