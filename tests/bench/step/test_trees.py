"""bench.step --before/--after: two trees (here the same one twice) on a tiny synthetic run, one
side on each binary."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
# A small model on the small synthetic world: the bench's work, not the step's size, is tested.
TINY = (
  '"synthetic_users": 200, "synthetic_items": 100, "max_len": 20, "embedding_dim": 16, '
  '"num_blocks": 1, "batch_size": 16, "num_negatives": 16'
)


def _run(*flags, timeout=600):
  return subprocess.run(
    [sys.executable, "-m", "bench.step", f"--before={ROOT}", f"--after={ROOT}", *flags],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=timeout,
  )


def test_tf_keras_tree_against_keras3_tree_with_settings(tmp_path):
  """The before side on python -m train's step, the after side on python -m train.keras3's (jax)
  with one setting changed (bfloat16): both workers start, the line names both binaries and the
  settings, and the report file is written."""
  proc = _run(
    "--rounds=2",
    "--steps=1",
    "--dataset=synthetic",
    "--no_jit_compile",
    "--binary_after=keras3_jax",
    f"--settings_before={{{TINY}}}",
    f'--settings_after={{{TINY}, "mixed_precision": "bfloat16"}}',
    f"--out={tmp_path}",
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  lines = proc.stdout.strip().splitlines()
  assert "tf_keras vs keras3_jax training step" in lines[-2], lines[-2]
  assert '"mixed_precision": "bfloat16"})' in lines[-2]
  assert "speed before/after: min" in lines[-2]
  assert lines[-1].startswith("summary: step_ab: speed before/after")
  assert (tmp_path / "step_ab.md").read_text().startswith("# Training step A/B")


def test_malformed_settings_fail_before_any_worker():
  proc = _run("--settings_after={mixed", "--dataset=synthetic", timeout=120)
  assert proc.returncode != 0 and "JSON" in proc.stderr
