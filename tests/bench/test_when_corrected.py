"""bench/when_corrected.py: the sweep's points, verdicts and a quick end-to-end run."""

import json
import pathlib
import subprocess
import sys

import pytest

from bench import when_corrected

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_points_start_with_the_default_and_move_one_factor_at_a_time():
  pts = when_corrected.points(["batch_size", "tau"])
  assert pts[0] == ("default", None)
  assert pts[1:] == [("batch_size", 64), ("batch_size", 1024), ("tau", 2.0), ("tau", 8.0)]
  with pytest.raises(ValueError, match="unknown factor"):
    when_corrected.points(["temperature"])


@pytest.mark.parametrize(
  "mean,half,sign,expected",
  [
    (-0.05, 0.01, -1, "corrected ahead"),  # lower KL for corrected
    (+0.05, 0.01, -1, "standard ahead"),
    (+0.02, 0.01, +1, "corrected ahead"),  # higher hit rate for corrected
    (-0.005, 0.01, -1, "within noise"),
    (-0.05, float("nan"), -1, "within noise"),
  ],
)
def test_verdict(mean, half, sign, expected):
  assert when_corrected.verdict(mean, half, sign) == expected


def test_quick_sweep_writes_paired_differences_table_and_plot(tmp_path):
  out = tmp_path / "wc"
  proc = subprocess.run(
    [
      sys.executable,
      "bench/when_corrected.py",
      "--quick",
      "--factors=tau",
      "--seeds=0,1",
      f"--out={out}",
    ],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  results = json.loads((out / "when_corrected.json").read_text())
  assert [r["point"] for r in results] == ["default", "tau=2.0"]
  for r in results:
    assert set(r["differences"]) == {"unigram", "expected_count"}
    for conv in ("unigram", "expected_count"):
      suffix = "" if conv == "unigram" else ":expected_count"
      kl = {c: r["rows"][f"in_batch:{c}{suffix}"]["kl"] for c in ("standard", "corrected")}
      d = r["differences"][conv]["kl"]
      # the paired mean difference is the difference of the row means (same seeds)
      assert d["mean"] == pytest.approx(kl["corrected"] - kl["standard"], abs=1e-9)
      assert d["ci95"] > 0
  assert "| tau=2.0 | unigram |" in (out / "when_corrected.md").read_text()
  assert (out / "when_corrected.png").stat().st_size > 0
  (out / "when_corrected.md").unlink()
  proc = subprocess.run(
    [sys.executable, "bench/when_corrected.py", "--report_only", f"--out={out}"],
    capture_output=True,
    text=True,
    cwd=ROOT,
    timeout=300,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "| tau=2.0 | expected_count |" in (out / "when_corrected.md").read_text()
