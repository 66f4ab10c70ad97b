"""bench/seed_runs_compare.py: two arms of seed<s>/metrics.json, paired by seed; the interval
and the verdict against a relative margin, checked with numpy and Student's t_{0.975, 2}
= 4.302652729911275 (a table value); bad arms are refused."""

import json

import numpy as np
import pytest

from bench import seed_runs_compare as src

T_975_2 = 4.302652729911275


def _arm(root, name, recalls, best_epoch=5):
  for seed, r in enumerate(recalls):
    d = root / name / f"seed{seed}"
    d.mkdir(parents=True)
    test = {"recall@20": r, "ndcg@20": r / 2, "recall@10": r * 0.6, "ndcg@10": r / 3}
    (d / "metrics.json").write_text(
      json.dumps(
        dict(
          test=test,
          best_epoch=best_epoch,
          epochs_done=best_epoch + 5,
          best_step=48 * best_epoch,
          train_wall_seconds=100.0 + seed,
        )
      )
    )
  return str(root / name)


def _row(lines, metric):
  return next(line for line in lines if line.startswith(f"| {metric} |"))


def test_interval_and_verdicts_match_numpy(tmp_path):
  b = [0.300, 0.310, 0.305]
  near = _arm(tmp_path, "near", [0.301, 0.3105, 0.3052])  # differences 1e-3, 5e-4, 2e-4
  far = _arm(tmp_path, "far", [0.330, 0.342, 0.333])  # clearly ahead
  ref = _arm(tmp_path, "ref", b)
  lines = src.compare(src.load_arm(near), src.load_arm(ref), ["x", "y"], margin=0.02)
  d = np.array([0.301, 0.3105, 0.3052]) - np.array(b)
  half = T_975_2 * d.std(ddof=1) / np.sqrt(3)
  row = _row(lines, "recall@20")
  assert f"| {d.mean():+.4f} [{d.mean() - half:+.4f}, {d.mean() + half:+.4f}] |" in row
  assert row.endswith("| 3/3 | equivalent |")  # inside ± 2 % of 0.305 = ± 0.0061
  lines = src.compare(src.load_arm(far), src.load_arm(ref), ["x", "y"], margin=0.02)
  assert _row(lines, "recall@20").endswith("| 3/3 | ahead |")
  # a margin too small for the same interval (it contains 0): within noise
  lines = src.compare(src.load_arm(near), src.load_arm(ref), ["x", "y"], margin=1e-4)
  assert _row(lines, "recall@20").endswith("| 3/3 | within noise |")
  assert any(line.startswith("| 2 | 5 / 10, 240, 0.3052") for line in lines)


def test_within_noise_when_the_interval_is_wide(tmp_path):
  ref = _arm(tmp_path, "ref", [0.30, 0.31, 0.305])
  noisy = _arm(tmp_path, "noisy", [0.32, 0.29, 0.31])
  lines = src.compare(src.load_arm(noisy), src.load_arm(ref), ["x", "y"], margin=0.02)
  assert _row(lines, "recall@20").endswith("| within noise |")


def test_bad_arms_are_refused(tmp_path, capsys):
  ref = _arm(tmp_path, "ref", [0.3, 0.31])
  one = _arm(tmp_path, "one", [0.3])
  with pytest.raises(ValueError, match="at least 2 seeds"):
    src.compare(src.load_arm(one), src.load_arm(ref), ["x", "y"], 0.02)
  assert src.main([f"--a={tmp_path / 'missing'}", f"--b={ref}"]) == 2
  assert "no seed<s>/metrics.json" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    src.main([f"--a={ref}", f"--b={ref}", "--names=one"])
