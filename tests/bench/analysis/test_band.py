"""bench.analysis band: one run's curve against a band of runs' prediction interval, by epoch."""

import json
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from bench.analysis import band as curve_band


def _history(values, key="val_ndcg@10", start=1):
  return [
    dict(epoch=start + i, step=10 * (start + i), **{key: float(v)}) for i, v in enumerate(values)
  ]


def _oracle(band, probe):
  """From the description: at each probe epoch with >= 2 band values, mean ± t(0.975, n - 1)
  · s (ddof 1) · sqrt(1 + 1 / n); the probe inside, above or below it."""
  out = []
  for e, a in enumerate(probe):
    x = np.array([b[e] for b in band if e < len(b)])
    if x.size < 2:
      continue
    half = stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) * np.sqrt(1 + 1 / x.size)
    lo, hi = x.mean() - half, x.mean() + half
    out.append(
      (
        e + 1,
        x.size,
        x.mean(),
        lo,
        hi,
        "inside" if lo <= a <= hi else "above" if a > hi else "below",
      )
    )
  return out


def test_band_statistics_match_the_oracle():
  rng = np.random.default_rng(0)
  for _ in range(50):
    band = [rng.normal(0.1, 0.02, rng.integers(1, 12)) for _ in range(rng.integers(2, 6))]
    probe = rng.normal(0.1, 0.04, rng.integers(1, 14))
    rows = curve_band.band_statistics([_history(b) for b in band], _history(probe), "val_ndcg@10")
    want = _oracle(band, probe)
    assert [(r["epoch"], r["n"], r["where"]) for r in rows] == [(w[0], w[1], w[5]) for w in want]
    for r, w in zip(rows, want):
      np.testing.assert_allclose([r["mean"], r["low"], r["high"]], w[2:5], rtol=1e-9)
      assert r["d"] == pytest.approx(r["probe"] - w[2])
    s = curve_band.summarise(rows)
    assert s["inside"] + s["above"] + s["below"] == s["epochs"] == len(want)
    if want:
      assert s["mean_d"] == pytest.approx(np.mean([r["probe"] - w[2] for r, w in zip(rows, want)]))


def test_probe_far_outside_is_counted_above_and_epochs_pair_by_number():
  band = [_history([1.0, 2.0, 3.0]), _history([1.1, 2.1, 3.1]), _history([0.9, 1.9, 2.9])]
  probe = _history([5.0, 2.0], start=2)  # epochs 2 and 3
  rows = curve_band.band_statistics(band, probe, "val_ndcg@10")
  assert [(r["epoch"], r["where"]) for r in rows] == [(2, "above"), (3, "below")]
  assert rows[0]["mean"] == pytest.approx(2.0) and rows[1]["mean"] == pytest.approx(3.0)


def test_load_history_reads_every_kind_of_run(tmp_path):
  import torch

  h = _history([0.1, 0.2])
  (tmp_path / "a").mkdir()
  (tmp_path / "a" / "train_metrics.json").write_text(json.dumps(dict(history=h, test={})))
  (tmp_path / "b" / "model").mkdir(parents=True)
  (tmp_path / "b" / "model" / "history.json").write_text(json.dumps(h))
  (tmp_path / "c").mkdir()
  torch.save(
    dict(step={}, best_state={}, loop=json.dumps(dict(history=h))), tmp_path / "c" / "paper_loop.pt"
  )
  (tmp_path / "d.json").write_text(json.dumps(dict(history=h)))
  for run in ("a", "b", "c", "c/paper_loop.pt", "d.json"):
    assert curve_band.load_history(str(tmp_path / run)) == h, run
  (tmp_path / "empty").mkdir()
  (tmp_path / "bad.json").write_text(json.dumps(dict(test={})))
  with pytest.raises(ValueError, match="no run here"):
    curve_band.load_history(str(tmp_path / "empty"))
  with pytest.raises(ValueError, match="no history"):
    curve_band.load_history(str(tmp_path / "bad.json"))
  torch.save(dict(step={}), tmp_path / "other.pt")
  with pytest.raises(ValueError, match="not a bench.paper_loop checkpoint"):
    curve_band.load_history(str(tmp_path / "other.pt"))
  with pytest.raises(ValueError, match="no such file"):
    curve_band.load_history(str(tmp_path / "missing"))


def _cli(*args):
  return subprocess.run(
    [sys.executable, "-m", "bench.analysis", "band", *args], capture_output=True, text=True
  )


def test_cli_writes_the_report_and_refuses_a_band_of_one(tmp_path):
  runs = []
  for i, shift in enumerate((0.0, 0.01, -0.01)):
    (tmp_path / f"s{i}").mkdir()
    hist = [
      dict(epoch=e, step=e, loss=10.0 - e + shift, **{"val_ndcg@10": 0.01 * e + shift})
      for e in range(1, 8)
    ]
    (tmp_path / f"s{i}" / "train_metrics.json").write_text(json.dumps(dict(history=hist)))
    runs.append(str(tmp_path / f"s{i}"))
  probe = tmp_path / "probe.json"
  probe.write_text(
    json.dumps([dict(epoch=e, loss=10.0 - e, **{"val_ndcg@10": 0.5}) for e in range(1, 6)])
  )
  out = tmp_path / "out"
  res = _cli(f"--band={','.join(runs)}", f"--probe={probe}", "--names=ours,paper", f"--out={out}")
  assert res.returncode == 0, res.stderr
  last = res.stdout.strip().splitlines()[-1]
  assert last.startswith(
    "SUMMARY curve_band: loss 5/5 epochs inside"
  )  # the probe's loss is the band's mean
  assert "val_ndcg@10 0/5 epochs inside" in last  # 0.5 is far above every epoch's band
  assert "val_recall@20" not in last  # a key the runs do not hold is left out
  report = (out / "curve_band.md").read_text()
  assert report.startswith("# One run's curve") and f"--out={out}" in report
  saved = json.loads((out / "curve_band.json").read_text())
  assert saved["results"]["val_ndcg@10"]["summary"]["above"] == 5
  assert (out / "curve_band.png").stat().st_size > 0
  res = _cli(f"--band={runs[0]}", f"--probe={probe}")
  assert res.returncode != 0 and "at least 2 runs" in res.stderr
  res = _cli(f"--band={','.join(runs)}", f"--probe={probe}", "--keys=val_recall@20")
  assert res.returncode != 0 and "no epoch where" in res.stderr
