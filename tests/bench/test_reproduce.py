"""bench/reproduce.py: the commands it would run and its mean ± std table (no training)."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np

from train import config_flags
from train.config import RunConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _run(args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.run([sys.executable, "-m", "bench.reproduce", *args], cwd=ROOT,
                        capture_output=True, text=True, env=env, timeout=240)


def _config(line):
  """The RunConfig a printed `python -m train ...` command builds."""
  argv = line.split(" -m train ", 1)[1].split()
  return config_flags.parse(RunConfig, argv)


def test_dry_run_lists_train_and_eval_commands(tmp_path):
  rows = "bce,mixed_corrected,mixed_standard,mixed_standard_tfrs"
  proc = _run(["--dry_run", f"--rows={rows}", "--seeds=0,1",
               "--settings=ml1m_loo,ml100k_temporal,gsasrec_loo",
               f"--gsasrec_dir={tmp_path / 'steam'}", f"--out={tmp_path}", "--max_len=50"])
  assert proc.returncode == 0, proc.stderr[-2000:]
  lines = proc.stdout.strip().splitlines()
  assert lines[-1].startswith("SUMMARY") and "24 runs" in lines[-1]
  train = [_config(l) for l in lines if "-m train " in l]
  evals = [l for l in lines if "-m eval.evaluate" in l]
  assert len(train) == 24 and len(evals) == 24
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
  assert sorted(by_dataset) == [("gsasrec", "leave_one_out"), ("ml1m", "leave_one_out"),
                                ("movielens_raw", "temporal")]
  assert all("ml-100k" in p for p in by_dataset[("movielens_raw", "temporal")])
  assert all(p.endswith("steam") for p in by_dataset[("gsasrec", "leave_one_out")])
  # Evaluation takes the export's own data: no data flag, only where to read and write.
  assert all("--dataset" not in l and "--export_dir=" in l for l in evals)
  # The paper code's model and negatives by default, and its corrected script's clamp.
  assert all(c.sasrec_block == "reference" and c.uniform_negatives == "query" for c in train)
  assert all(c.ratio_floor == (1e-10 if c.logq == "corrected" else 0.0) for c in train)
  # --noreference_model leaves the train binary's defaults; explicit flags win over the preset.
  proc = _run(["--dry_run", "--rows=mixed_corrected", "--seeds=0", "--settings=ml1m_loo",
               "--noreference_model", "--cpu_epochs=3", f"--out={tmp_path}"])
  (c,) = [_config(l) for l in proc.stdout.splitlines() if "-m train " in l]
  defaults = RunConfig()
  assert c.epochs == 3 and c.ratio_floor == 0.0
  assert (c.sasrec_block, c.uniform_negatives) == (defaults.sasrec_block,
                                                   defaults.uniform_negatives)
  proc = _run(["--dry_run", "--rows=mixed_corrected", "--seeds=0", "--settings=ml1m_loo",
               "--uniform_negatives=sequence", f"--out={tmp_path}"])
  (c,) = [_config(l) for l in proc.stdout.splitlines() if "-m train " in l]
  assert (c.sasrec_block, c.uniform_negatives, c.ratio_floor) == ("reference", "sequence", 1e-10)
  assert not list(tmp_path.iterdir())  # a dry run writes nothing


def test_table_aggregates_finished_runs(tmp_path):
  values = {0: (0.40, 0.20), 1: (0.38, 0.19), 2: (0.42, 0.18)}
  for seed, (r20, n20) in values.items():
    run = tmp_path / "cpu" / "ml1m_loo" / "mixed_corrected" / f"seed{seed}"
    (run / "eval").mkdir(parents=True)
    m = {"recall@10": r20 / 2, "recall@20": r20, "recall@100": 0.7, "ndcg@10": n20 / 2,
         "ndcg@20": n20, "ndcg@100": 0.3}
    (run / "eval" / "eval_results.json").write_text(json.dumps(
        {"metrics": {"exact": m, "scann": m},
         "popularity": {"recall@20": [r20] * 10, "num_targets": [1] * 10}}))
    (run / "timing.json").write_text(json.dumps({"train_seconds": 120.0}))
    (run / "model").mkdir()
    (run / "model" / "history.json").write_text(json.dumps(
        [{"epoch": e, "step": 48 * e, "val_recall@20": r20 * e / 2} for e in (1, 2)]))
  proc = _run(["--rows=mixed_corrected", "--seeds=0,1,2", "--settings=ml1m_loo",
               f"--out={tmp_path}"])
  assert proc.returncode == 0, proc.stderr[-2000:]
  md = (tmp_path / "reproduce_cpu.md").read_text()
  r = np.array([v[0] for v in values.values()])
  n = np.array([v[1] for v in values.values()])
  row = [l for l in md.splitlines() if l.startswith("| Mixed, improved logQ")][0]
  assert f"{r.mean():.4f} ± {r.std(ddof=1):.4f}" in row
  assert f"{n.mean():.4f} ± {n.std(ddof=1):.4f}" in row
  assert "0.3937" in row and "0.1972" in row  # the paper's numbers beside ours
  assert "| 3 | 2.0 |" in row
  assert (tmp_path / "recall_by_popularity_ml1m_loo.png").exists()
  assert (tmp_path / "learning_curves_ml1m_loo.png").exists()
  assert proc.stdout.strip().splitlines()[-1].startswith("SUMMARY reproduce")


def test_single_seed_reports_no_spread(tmp_path):
  run = tmp_path / "cpu" / "ml1m_loo" / "mixed_none" / "seed0"
  (run / "eval").mkdir(parents=True)
  m = {"recall@10": 0.2, "recall@20": 0.3, "recall@100": 0.6, "ndcg@10": 0.1, "ndcg@20": 0.15,
       "ndcg@100": 0.2}
  (run / "eval" / "eval_results.json").write_text(json.dumps(
      {"metrics": {"exact": m, "scann": m},
       "popularity": {"recall@20": [0.3] * 10, "num_targets": [1] * 10}}))
  proc = _run(["--rows=mixed_none", "--seeds=0", "--settings=ml1m_loo", f"--out={tmp_path}"])
  assert proc.returncode == 0, proc.stderr[-2000:]
  row = [l for l in (tmp_path / "reproduce_cpu.md").read_text().splitlines()
         if l.startswith("| Mixed, without logQ")][0]
  assert "| 0.3000 | 0.1500 |" in row and "±" not in row  # one seed: no fake zero std
