"""python -m bench.analysis table1: the Table 1 report of finished runs (no training), read from
a folder of <setting>/<row>/seed<s> runs as python -m bench.launch writes them.

The report: per row, mean ± s.e. = sample std / sqrt(n) over seeds; per pair of rows, over the
seeds present in both, the differences d_s, mean ± s.e. and the 95% interval
mean ± t_{0.975, n-1} · sd(d) / sqrt(n), checked against numpy oracles and scipy's t quantile
(the statistics themselves, eval.paired_stats, are tested in tests/eval/test_paired_stats.py).
The rows' settings (bench.launch.rows) as the launcher plans them, and their pairs."""

import json

import numpy as np
import pytest
from scipy import stats

from bench.analysis import runs, table1
from bench.launch import experiment, plan
from bench.launch.rows import PAPER_ROWS
from train.config import RunConfig


def _run(args, capsys):
  """The command in this process: (exit status, its printed lines)."""
  code = table1.main(args)
  return code, capsys.readouterr().out.strip().splitlines()


def _configs(rows, tmp_path):
  """The RunConfig of each row's seed-0 run on ML-1M, as python -m bench.launch plans it."""
  exp = experiment.from_dict(dict(settings=["ml1m_loo"], rows=list(rows), seeds=[0]))
  return [r.config for r in plan.plan(exp, tmp_path, tmp_path, {}, tmp_path, "py")]


METRICS = ("recall@10", "recall@20", "ndcg@10", "ndcg@20", "recall@100")


def _fake_run(out, setting, row, seed, metrics, decile, curve, train_seconds=None):
  """A finished run's files as the train and eval binaries leave them."""
  run = out / setting / row / f"seed{seed}"
  (run / "eval").mkdir(parents=True)
  (run / "eval" / "eval_results.json").write_text(
    json.dumps(
      {
        "metrics": {"exact": metrics, "scann": metrics},
        "popularity": {"recall@20": list(decile), "num_targets": [1] * len(decile)},
      }
    )
  )
  (run / "model").mkdir()
  (run / "model" / "history.json").write_text(
    json.dumps(
      [
        {"epoch": e + 1, "step": 48 * (e + 1), "val_recall@20": r, "val_ndcg@10": n}
        for e, (r, n) in enumerate(curve)
      ]
    )
  )
  if train_seconds is not None:
    (run / "timing.json").write_text(json.dumps({"train_seconds": train_seconds}))


def _files(root):
  return {p.relative_to(root): p.stat().st_mtime_ns for p in root.rglob("*")}


def _oracle_pair(first, second, relative_margin=0.02):
  """Mean, s.e., 95% t interval and positive count of first − second over the common seeds;
  "equivalent" when the interval holds 0 and lies inside ± relative_margin · mean(second)."""
  seeds = sorted(set(first) & set(second))
  d = np.array([first[s] - second[s] for s in seeds])
  n = len(d)
  se = d.std(ddof=1) / np.sqrt(n)
  t = stats.t.ppf(0.975, n - 1)
  low, high = d.mean() - t * se, d.mean() + t * se
  m = relative_margin * abs(np.mean([second[s] for s in seeds]))
  verdict = (
    "ahead"
    if low > 0
    else "behind"
    if high < 0
    else "equivalent"
    if -m < low and high < m
    else "within noise"
  )
  return dict(
    n=n, mean=d.mean(), se=se, ci=(low, high), positive=int((d > 0).sum()), verdict=verdict
  )


def test_statistics_match_the_paired_oracle(tmp_path, capsys):
  rng = np.random.default_rng(12)
  settings = ("ml1m_loo", "ml100k_temporal")
  rows = ("mixed_corrected", "mixed_standard", "mixed_none")
  # corrected − standard: +0.03 on ml1m_loo (ahead), −0.03 on ml100k_temporal (behind);
  # standard − none: seed noise only.
  shift = {
    "ml1m_loo": {"mixed_corrected": 0.03, "mixed_standard": 0.0, "mixed_none": 0.0},
    "ml100k_temporal": {"mixed_corrected": -0.03, "mixed_standard": 0.0, "mixed_none": 0.0},
  }
  values = {}  # (setting, row, metric) -> {seed: value}
  deciles = {}
  for setting in settings:
    for seed in (0, 1, 2):
      base = rng.uniform(0.1, 0.4, size=len(METRICS))
      for row in rows:
        m = base + shift[setting][row] + rng.normal(0, 0.004, size=len(METRICS))
        if row == "mixed_none":
          m = m + rng.normal(0, 0.02, size=len(METRICS))
        metrics = dict(zip(METRICS, m.tolist()))
        for k, v in metrics.items():
          values.setdefault((setting, row, k), {})[seed] = v
        decile = rng.uniform(0, 0.5, size=10)
        deciles.setdefault((setting, row), {})[seed] = decile
        _fake_run(
          tmp_path,
          setting,
          row,
          seed,
          metrics,
          decile,
          rng.uniform(0, 0.3, size=(3, 2)).tolist(),
          train_seconds=60.0 * (seed + 1),
        )
  # A seed only mixed_corrected of ml1m_loo has: in its row's mean, in no pair.
  extra = dict(zip(METRICS, rng.uniform(0.1, 0.4, size=len(METRICS)).tolist()))
  for k, v in extra.items():
    values[("ml1m_loo", "mixed_corrected", k)][7] = v
  _fake_run(tmp_path, "ml1m_loo", "mixed_corrected", 7, extra, [0.1] * 10, [(0.1, 0.05)])
  # An unfinished run (folder, no eval results) is not read.
  (tmp_path / "ml1m_loo" / "mixed_standard" / "seed9" / "model").mkdir(parents=True)
  before = _files(tmp_path)
  docs = tmp_path.parent / f"{tmp_path.name}_docs"
  code, _ = _run([f"--runs={tmp_path}", "--rows=" + ",".join(rows), f"--docs_dir={docs}"], capsys)
  assert code == 0
  # Nothing ran: the run folders are untouched, only the report was written.
  after = _files(tmp_path)
  assert {p: t for p, t in after.items() if p in before} == before
  assert sorted(str(p) for p in set(after) - set(before)) == sorted(
    ["table1.md", "table1.json"]
    + [f"{kind}_{s}.png" for s in settings for kind in ("learning_curves", "recall_by_popularity")]
  )
  assert sorted(p.name for p in docs.iterdir()) == sorted(
    ["table1.md"]
    + [f"{kind}_{s}.png" for s in settings for kind in ("learning_curves", "recall_by_popularity")]
  )

  report = json.loads((tmp_path / "table1.json").read_text())
  assert len(report["records"]) == 2 * 3 * 3 + 1
  assert sorted(report["settings"]) == sorted(settings)  # every setting found
  missing = {(m["setting"], m["row"], m["seed"]) for m in report["missing"]}
  assert missing == {
    ("ml1m_loo", "mixed_standard", 7),
    ("ml1m_loo", "mixed_none", 7),
    ("ml1m_loo", "mixed_standard", 9),
    ("ml1m_loo", "mixed_none", 9),
    ("ml1m_loo", "mixed_corrected", 9),
  }
  verdicts = set()
  for setting in settings:
    st = report["statistics"][setting]
    assert st["metrics"] == list(METRICS)
    for row in rows:
      for k in METRICS:
        v = np.array(list(values[(setting, row, k)].values()))
        got = st["rows"][row]["metrics"][k]
        assert got["n"] == len(v)
        np.testing.assert_allclose(got["mean"], v.mean(), rtol=1e-12)
        np.testing.assert_allclose(got["se"], v.std(ddof=1) / np.sqrt(len(v)), rtol=1e-9)
    pairs = {(p["first"], p["second"]): p for p in st["pairs"]}
    assert sorted(pairs) == [
      ("mixed_corrected", "mixed_none"),
      ("mixed_corrected", "mixed_standard"),
      ("mixed_standard", "mixed_none"),
    ]
    for (first, second), pair in pairs.items():
      for k in METRICS:
        want = _oracle_pair(values[(setting, first, k)], values[(setting, second, k)])
        got = pair["metrics"][k]
        assert got["seeds"] == [0, 1, 2]  # seed 7 has no partner
        assert (got["n"], got["positive"], got["verdict"]) == (
          want["n"],
          want["positive"],
          want["verdict"],
        )
        np.testing.assert_allclose(got["mean"], want["mean"], rtol=1e-9)
        np.testing.assert_allclose(got["se"], want["se"], rtol=1e-9)
        np.testing.assert_allclose(got["ci"], want["ci"], rtol=1e-9)
        verdicts.add(got["verdict"])
    cs = pairs[("mixed_corrected", "mixed_standard")]["metrics"]["recall@20"]["verdict"]
    assert cs == ("ahead" if setting == "ml1m_loo" else "behind")
  assert verdicts == {"ahead", "behind", "within noise"}
  assert report["statistics"]["ml1m_loo"]["pairs"][0]["unpaired"] == {
    "mixed_corrected": [7],
    "mixed_standard": [],
  }

  md = (tmp_path / "table1.md").read_text()
  assert f"`python -m bench.analysis table1 --runs={tmp_path}" in md and "How to read" in md
  v = np.array(list(values[("ml100k_temporal", "mixed_none", "recall@20")].values()))
  section = md.split("## ml100k_temporal")[1]
  row = [l for l in section.splitlines() if l.startswith("| Mixed, without logQ")][0]
  assert "| 3 (0,1,2) |" in row and f"{v.mean():.4f} ± {v.std(ddof=1) / np.sqrt(3):.4f}" in row
  want = _oracle_pair(
    values[("ml100k_temporal", "mixed_corrected", "recall@20")],
    values[("ml100k_temporal", "mixed_standard", "recall@20")],
  )
  line = [
    l for l in section.splitlines() if l.startswith("| mixed: corrected − standard | R@20 |")
  ][0]
  assert (
    f"| 3 | {want['mean']:+.4f} ± {want['se']:.4f} | [{want['ci'][0]:+.4f}, "
    f"{want['ci'][1]:+.4f}] | {want['positive']}/3 | behind |"
  ) in line
  assert "seed(s) 7 of mixed_corrected have no run of mixed_standard" in md
  assert "ml1m_loo/mixed_standard/seed9: no eval results yet" in md


def test_every_finished_seed_found_is_reported(tmp_path, capsys):
  values = {0: (0.40, 0.20), 1: (0.38, 0.19), 2: (0.42, 0.18)}
  for seed, (r20, n20) in values.items():
    m = {
      "recall@10": r20 / 2,
      "recall@20": r20,
      "recall@100": 0.7,
      "ndcg@10": n20 / 2,
      "ndcg@20": n20,
      "ndcg@100": 0.3,
    }
    _fake_run(
      tmp_path,
      "ml1m_loo",
      "mixed_corrected",
      seed,
      m,
      [r20] * 10,
      [(r20 / 2, n20 / 2), (r20, n20)],
      train_seconds=120.0,
    )
    config = RunConfig().replace(max_len=50, seed=seed, model_dir=f"/runs/seed{seed}/model")
    (tmp_path / "ml1m_loo" / "mixed_corrected" / f"seed{seed}" / "train_metrics.json").write_text(
      json.dumps({"config": config.to_dict(), "best_step": 100 * (seed + 1), "global_step": 500})
    )
  out = tmp_path / "report"
  code, printed = _run([f"--runs={tmp_path}", "--settings=ml1m_loo", f"--out={out}"], capsys)
  assert code == 0 and not list(tmp_path.rglob("*.log"))
  tmp_path = out
  md = (tmp_path / "table1.md").read_text()
  r = np.array([v[0] for v in values.values()])
  n = np.array([v[1] for v in values.values()])
  row = [l for l in md.splitlines() if l.startswith("| Mixed, improved logQ")][0]
  assert f"{r.mean():.4f} ± {r.std(ddof=1) / np.sqrt(3):.4f}" in row
  assert f"{n.mean():.4f} ± {n.std(ddof=1) / np.sqrt(3):.4f}" in row
  assert "| 3 (0,1,2) |" in row
  assert "0.3937" in row and "0.1972" in row  # the paper's numbers beside ours
  # train minutes per run; steps to the best epoch (100, 200, 300: mean ± s.e.); steps run
  assert row.endswith("| 2.0 | 200 ± 58 | 500 ± 0 |")
  # The training flags all runs share, read back from their train_metrics.json.
  shared = [l for l in md.splitlines() if l.startswith("Training flags shared")][0]
  assert "--max_len=50" in shared and "--seed=" not in shared and "--model_dir" not in shared
  assert (tmp_path / "recall_by_popularity_ml1m_loo.png").exists()
  assert (tmp_path / "learning_curves_ml1m_loo.png").exists()
  assert printed[-1].startswith("SUMMARY table1: 3 finished runs, 0 missing")


def test_single_seed_reports_no_spread_and_no_interval(tmp_path, capsys):
  for row, r20 in (("mixed_none", 0.3), ("mixed_standard", 0.35)):
    m = {
      "recall@10": 0.2,
      "recall@20": r20,
      "recall@100": 0.6,
      "ndcg@10": 0.1,
      "ndcg@20": 0.15,
      "ndcg@100": 0.2,
    }
    _fake_run(tmp_path, "ml1m_loo", row, 0, m, [r20] * 10, [(0.1, 0.05)])
  assert _run([f"--runs={tmp_path}"], capsys)[0] == 0
  md = (tmp_path / "table1.md").read_text()
  row = [l for l in md.splitlines() if l.startswith("| Mixed, without logQ")][0]
  assert "| 0.3000 | 0.1000 | 0.1500 |" in row and "±" not in row  # no fake zero std
  line = [l for l in md.splitlines() if l.startswith("| mixed: standard − none | R@20 |")][0]
  assert line == (
    "| mixed: standard − none | R@20 | 1 | +0.0500 | — | 1/1 | one seed: no interval |"
  )


def test_binary_test_metrics_become_the_runs_eval_results(tmp_path):
  run = tmp_path / "ml1m_loo" / "mixed_none_keras3_jax" / "seed0"
  run.mkdir(parents=True)
  test = {"recall@10": 0.2, "ndcg@10": 0.1, "recall@20": 0.3, "ndcg@20": 0.12, "num_queries": 7}
  history = [{"epoch": 1, "step": 48, "val_recall@20": 0.25, "val_ndcg@10": 0.09}]
  (run / "train_metrics.json").write_text(
    json.dumps(dict(test=test, history=history, best_step=48))
  )
  runs.write_binary_test_results(run)
  record = runs.load_run(tmp_path, "", "ml1m_loo", "mixed_none_keras3_jax", 0)
  assert record["metrics"] == {k: v for k, v in test.items() if k != "num_queries"}
  assert record["curve"] == [{"step": 48, "val_recall@20": 0.25, "val_ndcg@10": 0.09}]
  (run / "train_metrics.json").write_text(json.dumps(dict(history=history)))
  with pytest.raises(ValueError, match="no test metrics"):
    runs.write_binary_test_results(run)


def test_shared_flags_line_names_the_binary_of_each_row(tmp_path, capsys):
  """With Keras 3 rows in a setting, the shared-flags line gives python -m train for the tf-keras
  rows and python -m train.keras3 --backend=jax for the others (not python -m train for all)."""
  m = {
    "recall@10": 0.2,
    "recall@20": 0.3,
    "recall@100": 0.6,
    "ndcg@10": 0.1,
    "ndcg@20": 0.15,
    "ndcg@100": 0.2,
  }
  for row in ("mixed_none", "mixed_none_keras3_jax"):
    _fake_run(tmp_path, "ml1m_loo", row, 0, m, [0.3] * 10, [(0.1, 0.05)])
    config = RunConfig().replace(max_len=50, seed=0, model_dir="/runs/seed0/model")
    (tmp_path / "ml1m_loo" / row / "seed0" / "train_metrics.json").write_text(
      json.dumps({"config": config.to_dict(), "best_step": 48, "global_step": 48})
    )
  assert _run([f"--runs={tmp_path}"], capsys)[0] == 0
  md = (tmp_path / "table1.md").read_text()
  shared = [l for l in md.splitlines() if l.startswith("Training flags shared")][0]
  assert "`python -m train --" in shared and "(mixed_none)" in shared
  assert "`python -m train.keras3 --backend=jax --" in shared
  assert shared.endswith("(mixed_none_keras3_jax)")
  assert shared.count("--max_len=50") == 2


def test_pinned_arms_are_reported_as_their_rows_and_pair(tmp_path, capsys):
  """Arms launched at one pinned code (<row>@<code>) are their rows (the memory pairs with mixed);
  arms at two codes keep their names; a checkout folder is no setting; the launcher's run.json
  gives the training seconds."""
  m = {"recall@20": 0.3, "ndcg@10": 0.1, "recall@100": 0.6}
  for arm, shift in (("mixed_corrected@pinned", 0.0), ("xbatch16_corrected@pinned", 0.01)):
    for seed in (0, 1, 2):
      metrics = {k: v + shift + seed / 1000 * (shift > 0) for k, v in m.items()}
      _fake_run(tmp_path, "ml1m_loo", arm, seed, metrics, [0.3] * 10, [(0.1, 0.05)])
      run = tmp_path / "ml1m_loo" / arm / f"seed{seed}"
      (run / "run.json").write_text(json.dumps({"status": "finished", "train_seconds": 90.0}))
  (tmp_path / "src_eab8918" / "bench").mkdir(parents=True)  # the pinned checkout
  code, printed = _run([f"--runs={tmp_path}"], capsys)
  report = json.loads((tmp_path / "table1.json").read_text())
  assert code == 0 and report["settings"] == ["ml1m_loo"]
  assert report["rows"] == ["mixed_corrected", "xbatch16_corrected"]
  st = report["statistics"]["ml1m_loo"]
  assert st["rows"]["mixed_corrected"]["train_minutes"] == pytest.approx(1.5)
  (pair,) = st["pairs"]
  assert pair["label"] == "corrected: mixed + memory of 16 batches − mixed"
  d = pair["metrics"]["recall@20"]
  assert d["n"] == 3 and d["verdict"] == "ahead" and d["mean"] == pytest.approx(0.011)
  assert any("mixed + memory of 16 batches − mixed | R@20 | 3 |" in line for line in printed)
  # two code versions: never paired as rows
  assert table1.arms_as_rows(["mixed_corrected@a", "mixed_corrected@b"]) == {
    "mixed_corrected@a": "mixed_corrected@a",
    "mixed_corrected@b": "mixed_corrected@b",
  }
  assert table1.arms_as_rows(["mixed_corrected", "mixed_none"]) == {
    "mixed_corrected": "mixed_corrected",
    "mixed_none": "mixed_none",
  }


def test_a_missing_runs_folder_is_one_error(tmp_path, capsys):
  with pytest.raises(SystemExit) as exit:
    table1.main([f"--runs={tmp_path / 'none'}"])
  assert exit.value.code == 2 and "--runs: no folder" in capsys.readouterr().err


def test_expected_count_rows_set_the_convention_and_pair_with_the_unigram_rows(tmp_path):
  rows = (
    "mixed_corrected",
    "mixed_standard",
    "mixed_expected_count_corrected",
    "mixed_expected_count_standard",
  )
  got = sorted((c.logq, c.log_q_convention) for c in _configs(rows, tmp_path))
  assert got == [
    ("corrected", "expected_count"),
    ("corrected", "unigram"),
    ("standard_no_positive", "expected_count"),
    ("standard_no_positive", "unigram"),
  ]
  labels = [p[2] for p in table1.paired_rows(rows)]
  assert "mixed_expected_count: corrected − standard" in labels
  assert "corrected: expected-count − unigram log Q" in labels
  assert "standard: expected-count − unigram log Q" in labels
  assert not any(r.startswith("mixed_expected_count") for r in PAPER_ROWS)


def test_lazy_adam_and_memory_rows_set_their_settings_and_pair_with_mixed(tmp_path):
  rows = ("mixed_corrected", "mixed_corrected_lazy_adam", "xbatch16_corrected")
  got = sorted(
    (c.logq, c.log_q_convention, c.table_optimizer, c.negatives, c.cross_batch)
    for c in _configs(rows, tmp_path)
  )
  assert got == [
    ("corrected", "unigram", "adam", "mixed", 0),
    ("corrected", "unigram", "adam", "mixed", 16),
    ("corrected", "unigram", "lazy_adam", "mixed", 0),
  ]
  assert [p[2] for p in table1.paired_rows(rows)] == [
    "corrected: LazyAdam − Adam tables",
    "corrected: mixed + memory of 16 batches − mixed",
  ]
  assert not {"mixed_corrected_lazy_adam", "xbatch16_corrected"} & set(PAPER_ROWS)


def test_keras3_rows_pair_with_their_tf_keras_row():
  """Keras 3 rows pair with each other as the tf-keras rows do; across binaries only row to row
  (the binaries' commands: tests/bench/launch)."""
  rows = ("mixed_none", "mixed_none_keras3_jax", "mixed_corrected", "mixed_corrected_keras3_jax")
  labels = [p[2] for p in table1.paired_rows(rows)]
  assert "none: Keras 3 JAX − tf-keras" in labels and "corrected: Keras 3 JAX − tf-keras" in labels
  assert not any(r.endswith("_keras3_jax") for r in PAPER_ROWS)
  rows = (
    "mixed_none_keras3_jax",
    "mixed_standard_keras3_jax",
    "mixed_corrected_keras3_jax",
    "mixed_expected_count_corrected_keras3_jax",
    "mixed_standard",
    "full_softmax_keras3_jax",
  )
  assert [p[2] for p in table1.paired_rows(rows)] == [
    "mixed: corrected − standard (Keras 3 JAX)",
    "mixed: corrected − none (Keras 3 JAX)",
    "mixed: standard − none (Keras 3 JAX)",
    "corrected: expected-count − unigram log Q (Keras 3 JAX)",
    "standard: Keras 3 JAX − tf-keras",
  ]
