"""bench/reproduce.py: the commands it would run, and its report of finished runs (no training).

The report: per row, mean ± s.e. = sample std / sqrt(n) over seeds; per pair of rows, over the
seeds present in both, the differences d_s, mean ± s.e. and the 95% interval
mean ± t_{0.975, n-1} · sd(d) / sqrt(n), checked against numpy oracles and scipy's t quantile
(the statistics themselves, eval.paired_stats, are tested in tests/eval/test_paired_stats.py)."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from train import config_flags
from train.config import RunConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run(args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.run(
    [sys.executable, "-m", "bench.reproduce", *args],
    cwd=ROOT,
    capture_output=True,
    text=True,
    env=env,
    timeout=240,
  )


def _config(line):
  """The RunConfig a printed `python -m train ...` command builds."""
  argv = line.split(" -m train ", 1)[1].split()
  return config_flags.parse(RunConfig, argv)


def _pair_labels_and_paper_rows(rows: str):
  """(the labels of reproduce.paired_rows(rows), reproduce.PAPER_ROWS), in a subprocess:
  bench.reproduce defines absl flags that clash with other binaries' flags."""
  code = (
    f"import json; from bench import reproduce as r; print(json.dumps([[p[2] for p in "
    f"r.paired_rows({rows.split(',')!r})], r.PAPER_ROWS]))"
  )
  proc = subprocess.run(
    [sys.executable, "-c", code],
    cwd=ROOT,
    capture_output=True,
    text=True,
    env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    timeout=240,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_dry_run_lists_train_and_eval_commands(tmp_path):
  rows = "bce,mixed_corrected,mixed_standard,mixed_standard_tfrs"
  proc = _run(
    [
      "--dry_run",
      f"--rows={rows}",
      "--seeds=0,1",
      "--settings=ml1m_loo,ml100k_temporal,gsasrec_loo",
      f"--gsasrec_dir={tmp_path / 'steam'}",
      f"--out={tmp_path}",
      "--max_len=50",
    ]
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  lines = proc.stdout.strip().splitlines()
  assert lines[-1].startswith("SUMMARY") and "24 runs" in lines[-1]
  train = [_config(l) for l in lines if "-m train " in l]
  evals = [l for l in lines if "-m eval.evaluate" in l]
  assert len(train) == 24 and len(evals) == 24
  # Setting -> seed -> row: the 4 rows of one seed of one setting run one after the other.
  for i in range(0, 24, 4):
    block = train[i : i + 4]
    assert len({(c.data.dataset, c.data.data_path, c.seed) for c in block}) == 1
    assert len({(c.loss, c.logq) for c in block}) == 4
  # Every command is a whole RunConfig: the row, the setting, the seed, the base flags.
  bce = [c for c in train if c.loss == "bce"]
  assert len(bce) == 6 and all(c.num_negatives == 1 and c.negatives == "uniform" for c in bce)
  mixed = [c for c in train if c.loss != "bce"]
  assert all(c.negatives == "mixed" and c.num_negatives == 256 for c in mixed)
  # The paper's "standard logQ" is its code's: the positive's score is not corrected.
  assert sorted({c.logq for c in mixed}) == ["corrected", "standard", "standard_no_positive"]
  assert {c.seed for c in train} == {0, 1} and all(c.max_len == 50 for c in train)
  assert all(c.steps_per_epoch == 48 and c.epochs == 15 and not c.progress for c in train)
  by_dataset = {}
  for c in train:
    by_dataset.setdefault((c.data.dataset, c.data.split), []).append(c.data.data_path)
  assert sorted(by_dataset) == [
    ("gsasrec", "leave_one_out"),
    ("ml1m", "leave_one_out"),
    ("movielens_raw", "temporal"),
  ]
  assert all("ml-100k" in p for p in by_dataset[("movielens_raw", "temporal")])
  assert all(p.endswith("steam") for p in by_dataset[("gsasrec", "leave_one_out")])
  # Evaluation takes the export's own data: no data flag, only where to read and write.
  assert all("--dataset" not in l and "--export_dir=" in l for l in evals)
  # The paper code's model and negatives by default, and its corrected script's clamp.
  assert all(c.sasrec_block == "reference" and c.uniform_negatives == "query" for c in train)
  assert all(c.ratio_floor == (1e-10 if c.logq == "corrected" else 0.0) for c in train)
  # --noreference_model leaves the train binary's defaults; explicit flags win over the preset.
  proc = _run(
    [
      "--dry_run",
      "--rows=mixed_corrected",
      "--seeds=0",
      "--settings=ml1m_loo",
      "--noreference_model",
      "--cpu_epochs=3",
      f"--out={tmp_path}",
    ]
  )
  (c,) = [_config(l) for l in proc.stdout.splitlines() if "-m train " in l]
  defaults = RunConfig()
  assert c.epochs == 3 and c.ratio_floor == 0.0
  assert (c.sasrec_block, c.uniform_negatives) == (
    defaults.sasrec_block,
    defaults.uniform_negatives,
  )
  proc = _run(
    [
      "--dry_run",
      "--rows=mixed_corrected",
      "--seeds=0",
      "--settings=ml1m_loo",
      "--uniform_negatives=sequence",
      f"--out={tmp_path}",
    ]
  )
  (c,) = [_config(l) for l in proc.stdout.splitlines() if "-m train " in l]
  assert (c.sasrec_block, c.uniform_negatives, c.ratio_floor) == ("reference", "sequence", 1e-10)
  assert not list(tmp_path.iterdir())  # a dry run writes nothing


METRICS = ("recall@10", "recall@20", "ndcg@10", "ndcg@20", "recall@100")


def _fake_run(out, setting, row, seed, metrics, decile, curve, train_seconds=None):
  """A finished run's files as the train and eval binaries leave them."""
  run = out / "cpu" / setting / row / f"seed{seed}"
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


def test_report_only_statistics_match_the_paired_oracle(tmp_path):
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
  (tmp_path / "cpu" / "ml1m_loo" / "mixed_standard" / "seed9" / "model").mkdir(parents=True)
  before = _files(tmp_path)
  docs = tmp_path.parent / f"{tmp_path.name}_docs"
  proc = _run(
    [
      "--report_only",
      "--settings=" + ",".join(settings),
      "--rows=" + ",".join(rows),
      f"--out={tmp_path}",
      f"--docs_dir={docs}",
      "--ml1m_dir=/nonexistent",
      "--ml100k_dir=/nonexistent",
    ]
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  # Nothing ran: the run folders are untouched, only the report was written.
  after = _files(tmp_path)
  assert {p: t for p, t in after.items() if p in before} == before
  assert sorted(str(p) for p in set(after) - set(before)) == sorted(
    ["reproduce_cpu.md", "reproduce_cpu.json"]
    + [f"{kind}_{s}.png" for s in settings for kind in ("learning_curves", "recall_by_popularity")]
  )
  assert sorted(p.name for p in docs.iterdir()) == sorted(
    ["reproduce_cpu.md"]
    + [f"{kind}_{s}.png" for s in settings for kind in ("learning_curves", "recall_by_popularity")]
  )

  report = json.loads((tmp_path / "reproduce_cpu.json").read_text())
  assert len(report["runs"]) == 2 * 3 * 3 + 1
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

  md = (tmp_path / "reproduce_cpu.md").read_text()
  assert "--report_only" in md and "How to read" in md
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


def test_a_run_reports_every_finished_seed_found(tmp_path):
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
    (
      tmp_path / "cpu" / "ml1m_loo" / "mixed_corrected" / f"seed{seed}" / "train_metrics.json"
    ).write_text(
      json.dumps({"config": config.to_dict(), "best_step": 100 * (seed + 1), "global_step": 500})
    )
  # Seed 0 is finished (reused, nothing trained); seeds 1 and 2 come from earlier invocations.
  proc = _run(["--rows=mixed_corrected", "--seeds=0", "--settings=ml1m_loo", f"--out={tmp_path}"])
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert not list(tmp_path.rglob("*.log"))
  md = (tmp_path / "reproduce_cpu.md").read_text()
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
  assert proc.stdout.strip().splitlines()[-1].startswith("SUMMARY reproduce")


def test_single_seed_reports_no_spread_and_no_interval(tmp_path):
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
  proc = _run(
    [
      "--report_only",
      "--rows=mixed_none,mixed_standard",
      "--settings=ml1m_loo",
      f"--out={tmp_path}",
    ]
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  md = (tmp_path / "reproduce_cpu.md").read_text()
  row = [l for l in md.splitlines() if l.startswith("| Mixed, without logQ")][0]
  assert "| 0.3000 | 0.1000 | 0.1500 |" in row and "±" not in row  # no fake zero std
  line = [l for l in md.splitlines() if l.startswith("| mixed: standard − none | R@20 |")][0]
  assert line == (
    "| mixed: standard − none | R@20 | 1 | +0.0500 | — | 1/1 | one seed: no interval |"
  )


def test_expected_count_rows_set_the_convention_and_pair_with_the_unigram_rows(tmp_path):
  rows = (
    "mixed_corrected,mixed_standard,mixed_expected_count_corrected,mixed_expected_count_standard"
  )
  proc = _run(
    ["--dry_run", f"--rows={rows}", "--seeds=0", "--settings=ml1m_loo", f"--out={tmp_path}"]
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  train = [_config(l) for l in proc.stdout.splitlines() if " -m train " in l]
  got = sorted((c.logq, c.log_q_convention) for c in train)
  assert got == [
    ("corrected", "expected_count"),
    ("corrected", "unigram"),
    ("standard_no_positive", "expected_count"),
    ("standard_no_positive", "unigram"),
  ]
  labels, paper_rows = _pair_labels_and_paper_rows(rows)
  assert "mixed_expected_count: corrected − standard" in labels
  assert "corrected: expected-count − unigram log Q" in labels
  assert "standard: expected-count − unigram log Q" in labels
  assert not any(r.startswith("mixed_expected_count") for r in paper_rows)


# Runs in a process of its own: bench.reproduce defines absl flags at import, and other tests
# import modules (eval.evaluate) whose flags share names with it.
_TIME_BUDGET_SCENARIO = r"""
import json, pathlib, sys
from bench import reproduce
from train.config import RunConfig
from train.trainer import EXIT_PAUSED
tmp_path = pathlib.Path(sys.argv[1])
reproduce.FLAGS(["reproduce", f"--out={tmp_path}"])
budgets = []

def commands(base, setting, row, seed, run_dir):   # the first chunk of each run pauses
  budgets.append((row, base.time_budget_minutes))
  train = ("import pathlib, sys, time; p = pathlib.Path(sys.argv[1]) / 'chunks'; "
           "n = int(p.read_text()) if p.exists() else 0; p.write_text(str(n + 1)); "
           f"print('chunk', n); time.sleep(0.2); sys.exit({EXIT_PAUSED} if n == 0 else 0)")
  evaluate = ("import pathlib, sys; d = pathlib.Path(sys.argv[1]) / 'eval'; "
              "d.mkdir(); (d / 'eval_results.json').write_text('{}')")
  return [[sys.executable, "-c", train, str(run_dir)],
          [sys.executable, "-c", evaluate, str(run_dir)]]

reproduce.run_commands = commands
rows = ["mixed_corrected", "mixed_standard"]
go = lambda minutes: reproduce._train_and_evaluate(
    RunConfig.create(time_budget_minutes=minutes), tmp_path, ["ml1m_loo"], rows, [0], [])
first, second = (tmp_path / "cpu" / "ml1m_loo" / r / "seed0" for r in rows)
assert go(reproduce.MIN_CHUNK_MINUTES / 2) == (0, True) and budgets == []  # too little left
assert go(10.0) == (0, True)                       # run 1's first chunk paused
assert len(budgets) == 1 and 9.9 < budgets[0][1] <= 10.0, budgets
chunk1 = json.loads((first / "timing_partial.json").read_text())["train_seconds"]
assert chunk1 >= 0.2 and not (first / "timing.json").exists()
assert go(10.0) == (1, True)                       # run 1 finished, run 2 paused
timing = json.loads((first / "timing.json").read_text())
assert timing["train_seconds"] >= chunk1 + 0.2 and not (first / "timing_partial.json").exists()
log = (first / "train.log").read_text()
assert "chunk 0" in log and "chunk 1" in log        # appended, not overwritten
assert go(10.0) == (1, False)                      # run 2 finished: nothing paused
assert go(10.0) == (0, False)                      # all done: nothing started
assert (second / "eval" / "eval_results.json").exists()
assert reproduce._train_and_evaluate(              # no budget: the command carries none
    RunConfig.create(), tmp_path, ["ml1m_loo"], rows, [0], []) == (0, False)
assert budgets[-1] == ("mixed_standard", 0.0), budgets
print("SCENARIO OK")
"""


def test_time_budget_pauses_the_invocation_and_a_rerun_continues(tmp_path):
  """--time_budget_minutes: training gets what is left of the budget; a paused training
  (EXIT_PAUSED) ends the invocation with its time kept; the next invocation resumes that run
  (train log appended, training time summed) before starting the next; no run starts with
  less than MIN_CHUNK_MINUTES left. Training and evaluation are stand-in scripts here."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  proc = subprocess.run(
    [sys.executable, "-c", _TIME_BUDGET_SCENARIO, str(tmp_path)],
    cwd=ROOT,
    capture_output=True,
    text=True,
    env=env,
    timeout=240,
  )
  assert proc.returncode == 0 and "SCENARIO OK" in proc.stdout, proc.stderr[-3000:]


def test_lazy_adam_and_memory_rows_set_their_settings_and_pair_with_mixed(tmp_path):
  rows = "mixed_corrected,mixed_corrected_lazy_adam,xbatch16_corrected"
  proc = _run(
    ["--dry_run", f"--rows={rows}", "--seeds=0", "--settings=ml1m_loo", f"--out={tmp_path}"]
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  train = [_config(l) for l in proc.stdout.splitlines() if " -m train " in l]
  got = sorted(
    (c.logq, c.log_q_convention, c.table_optimizer, c.negatives, c.cross_batch) for c in train
  )
  assert got == [
    ("corrected", "unigram", "adam", "mixed", 0),
    ("corrected", "unigram", "adam", "mixed", 16),
    ("corrected", "unigram", "lazy_adam", "mixed", 0),
  ]
  labels, paper_rows = _pair_labels_and_paper_rows(rows)
  assert labels == [
    "corrected: LazyAdam − Adam tables",
    "corrected: mixed + memory of 16 batches − mixed",
  ]
  assert not {"mixed_corrected_lazy_adam", "xbatch16_corrected"} & set(paper_rows)


def test_keras3_rows_run_the_keras3_binary_and_pair_with_their_tf_keras_row(tmp_path):
  """mixed_{none,corrected}_keras3_jax: the same run settings through python -m train.keras3
  --backend=jax, test metrics from its own train_metrics.json; paired with the tf-keras row."""
  rows = "mixed_none,mixed_none_keras3_jax,mixed_corrected,mixed_corrected_keras3_jax"
  proc = _run(
    ["--dry_run", f"--rows={rows}", "--seeds=0", "--settings=ml1m_loo", f"--out={tmp_path}"]
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  lines = proc.stdout.splitlines()
  k3 = [l for l in lines if " -m train.keras3 --backend=jax " in l]
  tf = [l for l in lines if " -m train " in l]
  assert len(k3) == 2 and len(tf) == 2
  # identical run settings but the folders
  strip = lambda l: sorted(
    f
    for f in l.split()[1:]
    if f.startswith("--") and "_dir=" not in f and not f.startswith(("--metrics_json", "--backend"))
  )
  assert sorted(map(str, map(strip, k3))) == sorted(map(str, map(strip, tf)))
  assert sum(" -m bench.table1.results " in l for l in lines) == 2
  assert sum(" -m eval.evaluate " in l for l in lines) == 2
  labels, paper_rows = _pair_labels_and_paper_rows(rows)
  assert "none: Keras 3 JAX − tf-keras" in labels and "corrected: Keras 3 JAX − tf-keras" in labels
  assert not any(r.endswith("_keras3_jax") for r in paper_rows)
  # Keras 3 rows pair with each other as the tf-keras rows do; across binaries only row to row
  labels, _ = _pair_labels_and_paper_rows(
    "mixed_none_keras3_jax,mixed_standard_keras3_jax,mixed_corrected_keras3_jax,"
    "mixed_expected_count_corrected_keras3_jax,mixed_standard,full_softmax_keras3_jax"
  )
  assert labels == [
    "mixed: corrected − standard (Keras 3 JAX)",
    "mixed: corrected − none (Keras 3 JAX)",
    "mixed: standard − none (Keras 3 JAX)",
    "corrected: expected-count − unigram log Q (Keras 3 JAX)",
    "standard: Keras 3 JAX − tf-keras",
  ]


def test_binary_test_metrics_become_the_runs_eval_results(tmp_path):
  from bench.table1 import results

  run = tmp_path / "cpu" / "ml1m_loo" / "mixed_none_keras3_jax" / "seed0"
  run.mkdir(parents=True)
  test = {"recall@10": 0.2, "ndcg@10": 0.1, "recall@20": 0.3, "ndcg@20": 0.12, "num_queries": 7}
  history = [{"epoch": 1, "step": 48, "val_recall@20": 0.25, "val_ndcg@10": 0.09}]
  (run / "train_metrics.json").write_text(
    json.dumps(dict(test=test, history=history, best_step=48))
  )
  results.write_binary_test_results(run)
  record = results.load_run(tmp_path, "cpu", "ml1m_loo", "mixed_none_keras3_jax", 0)
  assert record["metrics"] == {k: v for k, v in test.items() if k != "num_queries"}
  assert record["curve"] == [{"step": 48, "val_recall@20": 0.25, "val_ndcg@10": 0.09}]
  (run / "train_metrics.json").write_text(json.dumps(dict(history=history)))
  with pytest.raises(ValueError, match="no test metrics"):
    results.write_binary_test_results(run)


def test_shared_flags_line_names_the_binary_of_each_row(tmp_path):
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
    (tmp_path / "cpu" / "ml1m_loo" / row / "seed0" / "train_metrics.json").write_text(
      json.dumps({"config": config.to_dict(), "best_step": 48, "global_step": 48})
    )
  proc = _run(
    [
      "--report_only",
      "--rows=mixed_none,mixed_none_keras3_jax",
      "--settings=ml1m_loo",
      f"--out={tmp_path}",
    ]
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  md = (tmp_path / "reproduce_cpu.md").read_text()
  shared = [l for l in md.splitlines() if l.startswith("Training flags shared")][0]
  assert "`python -m train --" in shared and "(mixed_none)" in shared
  assert "`python -m train.keras3 --backend=jax --" in shared
  assert shared.endswith("(mixed_none_keras3_jax)")
  assert shared.count("--max_len=50") == 2
