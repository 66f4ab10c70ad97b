"""--mixed_precision=bfloat16 in `python -m train.keras3`: the encoder's layers compute in
bfloat16 with float32 weights, the training queries and item embeddings (so the scores, log Q and
the loss) are float32, the global policy is restored after the build, and a few training steps
give finite losses close to float32's but not equal to them (bfloat16 is really used), on jax and
torch (fresh process each, mixed_precision_worker.py)."""

import json
import pathlib
import subprocess
import sys

import keras3_binary_harness as harness
import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]

# The harness's synthetic run with the exact estimator, corrected logQ, 3 steps per epoch (a
# repeated flag: the last value counts).
FLAGS = [*harness.SYNTHETIC, "--frequency=exact", "--logq=corrected", "--steps_per_epoch=3"]


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_bfloat16_encoder_float32_scores(backend, tmp_path):
  proc = subprocess.run(
    [sys.executable, str(HERE / "mixed_precision_worker.py"), *FLAGS, f"--model_dir={tmp_path}"],
    cwd=ROOT,
    env=harness.env(backend),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
  out = json.loads(line[len("RESULT ") :])
  f32, bf16 = out["float32"], out["bfloat16"]
  assert (f32["compute"], f32["weights"]) == ("float32", "float32")
  assert (bf16["compute"], bf16["weights"]) == ("bfloat16", "float32")
  for run in (f32, bf16):
    assert (run["queries"], run["items"]) == ("float32", "float32")
    assert run["policy_after"] == "float32"
    assert len(run["losses"]) == 3 and np.all(np.isfinite(run["losses"]))
  # bfloat16 is used (the queries move by more than float32 rounding) and stays close
  q32, q16 = np.array(f32["query_values"]), np.array(bf16["query_values"])
  assert np.max(np.abs(q16 - q32)) > 1e-4
  np.testing.assert_allclose(q16, q32, atol=0.1)
  np.testing.assert_allclose(bf16["losses"], f32["losses"], rtol=2e-2)
