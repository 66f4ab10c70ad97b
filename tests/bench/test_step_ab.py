"""bench/step_ab.py: two trees (here the same one twice) on a tiny synthetic run."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
# A small model on the small synthetic world: the bench's work, not the step's size, is tested.
TINY = (
  '"synthetic_users": 200, "synthetic_items": 100, "max_len": 20, "embedding_dim": 16, '
  '"num_blocks": 1, "batch_size": 16, "num_negatives": 16'
)


def test_same_tree_twice_reports_ratios(tmp_path):
  proc = subprocess.run(
    [
      sys.executable,
      "bench/step_ab.py",
      f"--before={ROOT}",
      f"--after={ROOT}",
      "--rounds=2",
      "--steps=1",
      "--dataset=synthetic",
      "--no_jit_compile",
      f"--settings_before={{{TINY}}}",
      f"--settings_after={{{TINY}}}",
      f"--out={tmp_path}",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  lines = proc.stdout.strip().splitlines()
  assert "speed before/after: min" in lines[-2]
  assert lines[-1].startswith("summary: step_ab: speed before/after")
  assert (tmp_path / "step_ab.md").read_text().startswith("# Training step A/B")


def test_keras3_binary_with_settings(tmp_path):
  """--binary=keras3_jax with one setting changed on the after side (bfloat16): both workers
  start, the line names the binary and the settings."""
  proc = subprocess.run(
    [
      sys.executable,
      "bench/step_ab.py",
      f"--before={ROOT}",
      f"--after={ROOT}",
      "--rounds=2",
      "--steps=1",
      "--dataset=synthetic",
      "--binary=keras3_jax",
      f"--settings_before={{{TINY}}}",
      f'--settings_after={{{TINY}, "mixed_precision": "bfloat16"}}',
      f"--out={tmp_path}",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  lines = proc.stdout.strip().splitlines()
  assert '"mixed_precision": "bfloat16"})' in lines[-2] and "keras3_jax training step" in lines[-2]
  assert "speed before/after: min" in lines[-2]


def test_malformed_settings_fail_before_any_worker():
  proc = subprocess.run(
    [
      sys.executable,
      "bench/step_ab.py",
      f"--before={ROOT}",
      f"--after={ROOT}",
      "--settings_after={mixed",
      "--dataset=synthetic",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode != 0 and "JSON" in proc.stderr
