"""bench.analysis compare: two reproduce trees compared row by row on paired seeds.

Oracle: numpy on the values written into the fake run folders, with Student's t quantiles from a
table (t_{0.975, 2} = 4.302652729911275, t_{0.975, 4} = 2.776445105197799); the runs are
written in the layout `bench.analysis.runs` reads (eval/eval_results.json, train_metrics.json,
model/history.json, timing.json)."""

import json

import numpy as np
import pytest

from bench.analysis import compare as tf1

T_975 = {2: 4.302652729911275, 4: 2.776445105197799}


def _run(root, budget, row, seed, recall, ndcg, best_epoch=3, epochs=6, finished=True):
  d = (
    root / budget / "ml1m_loo" / row / f"seed{seed}"
    if budget
    else root / "ml1m_loo" / row / f"seed{seed}"
  )
  (d / "model").mkdir(parents=True)
  if finished:
    (d / "eval").mkdir()
    (d / "eval" / "eval_results.json").write_text(
      json.dumps({"metrics": {"exact": {"recall@20": recall, "ndcg@20": ndcg}}})
    )
  (d / "train_metrics.json").write_text(
    json.dumps(
      dict(
        best_epoch=best_epoch,
        best_step=48 * best_epoch,
        global_step=48 * epochs,
        epochs_done=epochs,
      )
    )
  )
  (d / "timing.json").write_text(json.dumps(dict(train_seconds=100.0 + seed)))
  history = [
    {"epoch": e, "step": 48 * e, "val_ndcg@10": 0.01 * e, "val_recall@20": 0.02 * e}
    for e in range(1, epochs + 1)
  ]
  (d / "model" / "history.json").write_text(json.dumps(history))


A = {"mixed_none": [0.36, 0.37, 0.362], "mixed_corrected": [0.38, 0.39, 0.37]}
B = {"mixed_none": [0.359, 0.368, 0.3615], "mixed_corrected": [0.385, 0.38, 0.372]}


def _trees(tmp_path, budget="full"):
  for arm, values in (("a", A), ("b", B)):
    for row, recalls in values.items():
      for seed, r in enumerate(recalls):
        _run(tmp_path / arm, budget, row, seed, r, r / 2)
  return tmp_path / "a", tmp_path / "b"


def _interval(a, b, t):
  d = np.asarray(a) - np.asarray(b)
  half = t * d.std(ddof=1) / np.sqrt(len(d))
  return d.mean(), d.mean() - half, d.mean() + half


@pytest.mark.parametrize("budget", ["full", ""])
def test_rows_and_pooled_intervals_match_numpy(tmp_path, budget):
  a, b = _trees(tmp_path, budget)
  data = tf1.load([a, b], budget, "ml1m_loo")
  assert sorted(data) == ["mixed_corrected", "mixed_none"]
  stats = tf1.statistics(data, "ml1m_loo", margin=0.02)
  for row in A:
    for metric, scale in (("recall@20", 1.0), ("ndcg@20", 0.5)):
      d = stats["rows"][row]["metrics"][metric]["difference"]
      mean, low, high = _interval(np.multiply(A[row], scale), np.multiply(B[row], scale), T_975[2])
      assert d["n"] == 3
      np.testing.assert_allclose([d["mean"], *d["ci"]], [mean, low, high], rtol=1e-9, atol=1e-12)
  none = stats["rows"]["mixed_none"]["metrics"]["recall@20"]
  assert none["difference"]["positive"] == 3
  np.testing.assert_allclose(none["a"]["mean"], np.mean(A["mixed_none"]))
  np.testing.assert_allclose(
    none["b"]["se"], np.std(B["mixed_none"], ddof=1) / np.sqrt(3), rtol=1e-9
  )
  # Paper's Table 1 beside the row (ML-1M, mixed none: R@20 0.3853).
  assert stats["rows"]["mixed_none"]["paper"]["recall@20"] == pytest.approx(0.3853)
  # All rows: 6 pairs, 5 degrees of freedom -> t_{0.975, 5} = 2.570581835636314.
  pooled = stats["all_rows"]["recall@20"]
  a_all = A["mixed_corrected"] + A["mixed_none"]
  b_all = B["mixed_corrected"] + B["mixed_none"]
  mean, low, high = _interval(a_all, b_all, 2.570581835636314)
  assert pooled["n"] == 6
  np.testing.assert_allclose([pooled["mean"], *pooled["ci"]], [mean, low, high], rtol=1e-9)
  lines = tf1.report(data, stats, ["x", "y"], budget)
  row = next(line for line in lines if line.startswith("| Mixed, without logQ | recall@20 |"))
  assert f"[{low:+.4f}" not in row  # the row's own interval, not the pooled one
  m, lo, hi = _interval(A["mixed_none"], B["mixed_none"], T_975[2])
  assert f"| {m:+.4f} [{lo:+.4f}, {hi:+.4f}] | 3/3 |" in row


def test_unfinished_run_is_left_out_of_its_pair_and_shown(tmp_path):
  a, b = _trees(tmp_path)
  _run(a, "full", "mixed_none", 3, 0.5, 0.25)  # no twin in B: not paired
  _run(b, "full", "mixed_none", 3, 0.4, 0.2, finished=False)  # started, not finished
  data = tf1.load([a, b], "full", "ml1m_loo", ["mixed_none"])
  assert sorted(data["mixed_none"][0]) == [0, 1, 2, 3]
  assert sorted(data["mixed_none"][1]) == [0, 1, 2]
  stats = tf1.statistics(data, "ml1m_loo", margin=0.02)
  d = stats["rows"]["mixed_none"]["metrics"]["recall@20"]
  assert d["difference"]["n"] == 3 and d["a"]["n"] == 4
  lines = tf1.report(data, stats, ["x", "y"], "full")
  assert any(
    line.startswith("| Mixed, without logQ | 3 |") and "not finished" in line for line in lines
  )
  # Per-run cells: best epoch / epochs run (train_metrics.json), steps to best, wall-clock.
  assert any(
    "| Mixed, without logQ | 0 | 3 / 6, 144, 0.3600, 0.1800, 100 |" in line for line in lines
  )
  # A run without timing.json (a run continued by the binary itself): its train_wall_seconds.
  d = a / "full" / "ml1m_loo" / "mixed_none" / "seed1"
  (d / "timing.json").unlink()
  metrics = json.loads((d / "train_metrics.json").read_text())
  (d / "train_metrics.json").write_text(json.dumps(dict(metrics, train_wall_seconds=777.0)))
  data = tf1.load([a, b], "full", "ml1m_loo", ["mixed_none"])
  lines = tf1.report(data, tf1.statistics(data, "ml1m_loo", margin=0.02), ["x", "y"], "full")
  assert any(
    line.startswith("| Mixed, without logQ | 1 | 3 / 6, 144, 0.3700, 0.1850, 777 |")
    for line in lines
  )


def test_two_pairs_and_one_pair(tmp_path):
  for arm in ("a", "b"):
    for seed in (0, 1):
      _run(
        tmp_path / arm,
        "full",
        "mixed_none",
        seed,
        0.3 + 0.01 * seed + (arm == "a") * 0.002 * (seed + 1),
        0.1,
      )
  _run(tmp_path / "a", "full", "mixed_corrected", 0, 0.4, 0.2)
  _run(tmp_path / "b", "full", "mixed_corrected", 0, 0.39, 0.2)
  data = tf1.load([tmp_path / "a", tmp_path / "b"], "full", "ml1m_loo")
  stats = tf1.statistics(data, "ml1m_loo", margin=0.02)
  one = stats["rows"]["mixed_corrected"]["metrics"]["recall@20"]["difference"]
  assert one["n"] == 1 and one["ci"] is None
  lines = tf1.report(data, stats, ["x", "y"], "full")
  assert any("(no interval: 1 pair)" in line for line in lines)
  one_seed = next(line for line in lines if line.startswith("| Mixed, improved logQ | recall@20 |"))
  assert "| 0.4000 (1) | 0.3900 (1) |" in one_seed  # one value: no spread shown
  assert stats["all_rows"]["recall@20"]["n"] == 3


def test_main_writes_report_json_and_curves(tmp_path, capsys):
  a, b = _trees(tmp_path)
  out = tmp_path / "out"
  assert tf1.main([f"--a={a}", f"--b={b}", "--names=p,q", f"--out={out}"]) == 0
  printed = capsys.readouterr().out
  assert printed.splitlines()[-1].startswith("summary: p − q, R@20 over 6 pairs of 2 rows:")
  text = (out / "factor.md").read_text()
  assert text.startswith(
    f"Written by `python -m bench.analysis compare --a={a} --b={b} --names=p,q"
  )
  assert "\np (A) against q (B)" in text
  saved = json.loads((out / "factor.json").read_text())
  assert saved["names"] == ["p", "q"] and saved["all_rows"]["recall@20"]["n"] == 6
  assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_arguments_are_refused(tmp_path, capsys):
  a, b = _trees(tmp_path)
  assert tf1.main([f"--a={a}", f"--b={tmp_path / 'nowhere'}"]) == 2
  assert "no such folder" in capsys.readouterr().err
  assert tf1.main([f"--a={a}", f"--b={b}", "--rows=mixed_nonsense"]) == 2
  assert "unknown rows" in capsys.readouterr().err
  assert tf1.main([f"--a={a}", f"--b={b}", "--budget=cpu"]) == 2
  assert "no row folder" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    tf1.main([f"--a={a}", f"--b={b}", "--names=one"])
  with pytest.raises(SystemExit):
    tf1.main([f"--a={a}", f"--b={b}", "--margin=0"])


def _paper_run(root, logq, seed, recall, epochs=5, best=3, stopped_by_time=False):
  """A bench/paper_loop.py metrics JSON, where the paper-code queue keeps it."""
  d = root / logq / f"seed{seed}"
  d.mkdir(parents=True)
  history = [
    {"epoch": e, "step": 48 * e, "val_ndcg@10": 0.01 * e, "wall_seconds": 100.0}
    for e in range(1, epochs + 1)
  ]
  m = dict(
    test={"recall@20": recall, "ndcg@20": recall / 2},
    history=history,
    best_epoch=best,
    best_step=48 * best,
    epochs_done=epochs,
    global_step=48 * epochs,
    stopped_early=True,
    stopped_by_time=stopped_by_time,
    train_wall_seconds=100.0 * epochs,
  )
  (d / "metrics.json").write_text(json.dumps(m))


def test_paper_code_arm_unpaired_welch_and_prediction_interval(tmp_path):
  from scipy import stats as st

  _, ours = _trees(tmp_path, budget="")
  paper = tmp_path / "paper"
  for seed, r in enumerate([0.39, 0.395]):
    _paper_run(paper, "none", seed, r)
  _paper_run(paper, "corrected", 0, 0.40)
  _paper_run(paper, "corrected", 1, 0.30, stopped_by_time=True)  # paused: not finished
  data = tf1.load([paper, ours], "", "ml1m_loo")
  assert sorted(data) == ["mixed_corrected", "mixed_none"]
  assert sorted(data["mixed_corrected"][0]) == [0]
  stats = tf1.statistics(data, "ml1m_loo", margin=0.02, unpaired=True)
  assert stats["all_rows"] == {}
  d = stats["rows"]["mixed_none"]["metrics"]["recall@20"]["difference"]
  ref = st.ttest_ind([0.39, 0.395], B["mixed_none"], equal_var=False)
  assert d["ci"] == pytest.approx(list(ref.confidence_interval(0.95)), rel=1e-9)
  assert d["verdict"] == "ahead" and (d["n_a"], d["n_b"]) == (2, 3)
  # One paper run: placed against our prediction interval of one more run.
  one = stats["rows"]["mixed_corrected"]["metrics"]["recall@20"]["difference"]
  b = np.asarray(B["mixed_corrected"])
  half = st.t.ppf(0.975, 2) * b.std(ddof=1) * np.sqrt(1 + 1 / 3)
  assert one["b_prediction_interval"] == pytest.approx([b.mean() - half, b.mean() + half])
  assert one["verdict"] == "inside B's prediction interval" and one["ci"] is None
  lines = tf1.report(data, stats, ["paper code", "ours"], "")
  assert "independent runs" in lines[0] and not any(line.startswith("All rows") for line in lines)
  assert any("| Mixed, without logQ | 0 | 3 / 5, 144, 0.3900, 0.1950, 500 |" in x for x in lines)
  assert tf1.main([f"--a={paper}", f"--b={ours}", "--budget=", "--unpaired"]) == 0


# Arms that are folders of seed<s>/metrics.json (python -m train.keras3 --seeds=...): one row.


def _seed_arm(root, name, recalls, best_epoch=5):
  for seed, r in enumerate(recalls):
    d = root / name / f"seed{seed}"
    d.mkdir(parents=True)
    test = {"recall@20": r, "ndcg@20": r / 2, "recall@10": r * 0.6, "ndcg@10": r / 3}
    run = dict(
      test=test,
      best_epoch=best_epoch,
      epochs_done=best_epoch + 5,
      best_step=48 * best_epoch,
      train_wall_seconds=100.0 + seed,
      history=[
        {"epoch": e, "step": 48 * e, "val_ndcg@10": 0.01 * e} for e in range(1, best_epoch + 6)
      ],
    )
    (d / "metrics.json").write_text(json.dumps(run))
  return root / name


def _seed_row(lines, metric):
  return next(line for line in lines if line.startswith(f"| seeds | {metric} |"))


def test_seed_arms_every_metric_and_verdicts_match_numpy(tmp_path):
  b = [0.300, 0.310, 0.305]
  near = [0.301, 0.3105, 0.3052]  # differences 1e-3, 5e-4, 2e-4
  arms = {n: _seed_arm(tmp_path, n, v) for n, v in (("near", near), ("ref", b))}
  far = _seed_arm(tmp_path, "far", [0.330, 0.342, 0.333])  # clearly ahead
  data = tf1.load([arms["near"], arms["ref"]], "full", "ml1m_loo")
  assert list(data) == ["seeds"]
  stats = tf1.statistics(data, "ml1m_loo", margin=0.02)
  assert list(stats["rows"]["seeds"]["metrics"]) == ["recall@20", "ndcg@20", "recall@10", "ndcg@10"]
  for metric, scale in (("recall@20", 1.0), ("recall@10", 0.6), ("ndcg@10", 1 / 3)):
    d = stats["rows"]["seeds"]["metrics"][metric]["difference"]
    mean, low, high = _interval(np.multiply(near, scale), np.multiply(b, scale), T_975[2])
    np.testing.assert_allclose([d["mean"], *d["ci"]], [mean, low, high], rtol=1e-9, atol=1e-12)
  lines = tf1.report(data, stats, ["x", "y"], "full")
  mean, low, high = _interval(near, b, T_975[2])
  row = _seed_row(lines, "recall@20")
  assert f"| {mean:+.4f} [{low:+.4f}, {high:+.4f}] | 3/3 | equivalent |" in row  # ± 0.0061
  assert any(line.startswith("| seeds | 2 | 5 / 10, 240, 0.3052") for line in lines)
  ahead = tf1.load([far, arms["ref"]], "full", "ml1m_loo")
  lines = tf1.report(ahead, tf1.statistics(ahead, "ml1m_loo", 0.02), ["x", "y"], "full")
  assert _seed_row(lines, "recall@20").endswith("| 3/3 | ahead |")
  # a margin too small for the same interval (it contains 0): within noise
  lines = tf1.report(data, tf1.statistics(data, "ml1m_loo", 1e-4), ["x", "y"], "full")
  assert _seed_row(lines, "recall@20").endswith("| 3/3 | within noise |")
  out = tmp_path / "out"
  assert tf1.main([f"--a={arms['near']}", f"--b={arms['ref']}", f"--out={out}"]) == 0
  assert (out / "factor.md").is_file() and (out / "curves.png").stat().st_size > 0


def test_a_seed_arm_against_a_tree_is_refused(tmp_path, capsys):
  seeds = _seed_arm(tmp_path, "seeds", [0.3, 0.31])
  a, _ = _trees(tmp_path / "trees")
  assert tf1.main([f"--a={seeds}", f"--b={a}"]) == 2
  assert "one arm is a folder of seed<s>/metrics.json" in capsys.readouterr().err


def test_unpaired_summary_names_a_row_without_a_metric_of_both_arms(tmp_path, capsys):
  _, ours = _trees(tmp_path, budget="")
  paper = tmp_path / "paper"
  _paper_run(paper, "none", 0, 0.39)
  _paper_run(paper, "corrected", 0, 0.30, stopped_by_time=True)  # paused: no finished run
  assert tf1.main([f"--a={paper}", f"--b={ours}", "--budget=", "--unpaired"]) == 0
  printed = capsys.readouterr().out.splitlines()
  assert "summary: A − B, mixed_corrected R@20: not held by both arms" in printed
  assert any(line.startswith("summary: A − B, mixed_none R@20: ") for line in printed)
