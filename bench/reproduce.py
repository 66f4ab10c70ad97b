r"""Reproduces the rows of Table 1 of "Correcting the LogQ Correction" (RecSys '25).

Each run trains SASRec with one loss / negative sampler / logQ correction through the training
binary and evaluates the export through the evaluation binary (the paper's protocol: all
items scored, rated items filtered, Recall@20 / NDCG@20 over all test queries):

  python -m train <RunConfig.to_flags()>          # the run's whole configuration
  python -m eval.evaluate --export_dir=... --output_dir=...   # on the export's own data

Every command is built from a `train.config.RunConfig` / `eval.config.EvalConfig`, never spelled
by hand.

Paired seeds. A seed fixes the initialisation and the order of the training data whatever the
row (the trainer keys both on the seed), so the rows of one seed form a pair and the runs go
setting -> seed -> row: a seed's rows finish together. The report takes every finished run
found under --out (several invocations with different --seeds accumulate into one report):

  per row, over its n seeds:   mean ± s.e.,  s.e. = s / sqrt(n)  (s: sample std, ddof 1)
  per pair (A, B) of rows, over the seeds present in both, d_s = metric_A(s) - metric_B(s):
    mean d ± s.e.(d),  95% CI = mean d ± t_{0.975, n-1} · s_d / sqrt(n)   (Student t, n >= 2)
    verdict: "ahead" (CI above 0), "behind" (CI below 0), "equivalent" (CI contains 0 and lies
    inside +-m, m = --equivalence_margin x mean_B over the paired seeds), "within noise" (CI
    contains 0, reaches past +-m); one common seed: no interval.

The pairs are X_corrected − X_standard, X_corrected − X_none and X_standard − X_none for X in
{mixed, inbatch}, where both rows are selected (PAIR_FAMILIES x PAIR_CONTRASTS). The statistics
(and Student's t quantile, without scipy) are `eval.paired_stats`'s.

Base configuration: every flag of `python -m train` that a run does not set itself is a flag
here too (--batch_size, --num_negatives, --max_len, --jit_compile, --frequency, ...; defaults as
the binary's, except --steps_per_epoch=48, the paper code's "epoch" on ML-1M, and
--noprogress). --reference_model (default) trains as the paper's code does: the original SASRec
block (--sasrec_block=reference), uniform negatives drawn per position (--uniform_negatives=query)
and, in the corrected rows, the corrected script's clamp of the ratio inside the log
(--ratio_floor=1e-10); a flag given explicitly wins over the preset.

Settings (--settings):
  ml1m_loo         ML-1M, gSASRec leave-one-out files (--ml1m_dir, default <data root>/ml1m)
  ml100k_temporal  ML-100K raw u.data, global temporal split (not in the paper: no published row)
  ml1m_temporal    ML-1M raw ratings.dat (user supplied: --ml1m_ratings), temporal split
  gsasrec_loo      any folder in the gSASRec layout (--gsasrec_dir: e.g. the paper's Steam or
                   Gowalla files), leave-one-out
  amazon_sports_loo  Amazon Sports and Outdoors sequences (--amazon_sports, default
                   <data root>/amazon-sports/sequences.txt), leave-one-out, every user validated;
                   max_len 50 and 100-step epochs unless those flags are given (SETTING_DEFAULTS)
Budgets:
  --budget=cpu   fixed --cpu_epochs epochs of 48 steps per run (default 15 = 720 steps), no early
                 stopping, one seed by default: about 10-12 min per ML-1M row on 2 cores.
  --budget=full  the paper's protocol: early stopping on validation NDCG@10 with patience 200
                 epochs of 48 steps (--patience), 5 seeds; the best checkpoint is evaluated on
                 test. Each run records its steps to the best epoch, its validation curve and its
                 wall-clock; the report shows them per row.
Selection: --rows=mixed_corrected,full_softmax --seeds=0,1 --settings=ml1m_loo; --dry_run prints
the commands. Finished runs (eval_results.json present) are reused unless --overwrite.
--report_only runs nothing: it reports the finished runs found under --out for the selected
settings and rows (every seed found, or only --seeds) and lists the missing ones.

Writes <out>/reproduce_<budget>.md (tables, how to read them, the command that wrote it) and
.json (every run's record and the statistics), recall_by_popularity_<setting>.png (Recall@20 by
the target's popularity decile, mean ± s.e. over seeds) and learning_curves_<setting>.png
(validation Recall@20 and NDCG@10 against training step, mean ± s.e. over seeds); --docs_dir
also copies the markdown and the plots there. --out is relative to the working directory. The
last printed line is a one-line summary.
"""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

from absl import app
from absl import flags
import numpy as np

from eval.config import EvalConfig
from eval.paired_stats import CONFIDENCE, mean_se, paired_difference
from train import config_flags
from train import data as data_lib
from train.config import RunConfig
from train.trainer import EXIT_PAUSED

FLAGS = flags.FLAGS
# Practical margin of the paired verdicts, relative to the second row's mean (--equivalence_margin).
EQUIVALENCE_MARGIN = 0.02
# --time_budget_minutes: no run is started (or resumed) with less time left than this.
MIN_CHUNK_MINUTES = 1.0
flags.DEFINE_enum("budget", "cpu", ["cpu", "full"], "cpu: fixed epochs; full: early stopping.")
flags.DEFINE_list("rows", [], "Rows to run (default: the paper's). See ROWS.")
flags.DEFINE_list("seeds", [], "Seeds (default: 0 for cpu, 0..4 for full).")
flags.DEFINE_list("settings", ["ml1m_loo", "ml100k_temporal"],
                  "ml1m_loo, ml100k_temporal, ml1m_temporal (needs --ml1m_ratings), gsasrec_loo "
                  "(needs --gsasrec_dir).")
flags.DEFINE_string("ml1m_dir", str(data_lib.default_data_root() / "ml1m"),
                    "gSASRec ML-1M folder.")
flags.DEFINE_string("ml100k_dir", str(data_lib.default_data_root() / "ml-100k"),
                    "Raw ML-100K folder (u.data).")
flags.DEFINE_string("ml1m_ratings", None, "Raw ML-1M ratings.dat for the temporal split.")
flags.DEFINE_string("gsasrec_dir", None, "A gSASRec-layout folder for --settings=gsasrec_loo.")
flags.DEFINE_string("amazon_sports",
                    str(data_lib.default_data_root() / "amazon-sports" / "sequences.txt"),
                    "Amazon Sports sequence file for --settings=amazon_sports_loo.")
flags.DEFINE_integer("cpu_epochs", 15, "Epochs per run with --budget=cpu (15 x 48 = 720 steps, the "
                     "point where the shared data README quotes the paper's code).")
flags.DEFINE_bool("reference_model", True,
                  "Train as the paper's code does (module docstring): --sasrec_block=reference, "
                  "--uniform_negatives=query and --ratio_floor=1e-10 in the corrected rows, "
                  "unless those flags are given. With --noreference_model the base flags' values "
                  "are used (the train binary's defaults unless given).")
flags.DEFINE_integer("full_max_epochs", 100_000, "Epoch cap with --budget=full.")
flags.DEFINE_integer("patience", 200, "Early-stopping patience (epochs) with --budget=full.")
flags.DEFINE_string("out", "bench/out/reproduce", "Output folder (runs, table, plots).")
flags.DEFINE_float("equivalence_margin", EQUIVALENCE_MARGIN,
                   "Practical margin of the paired verdicts, relative to the second row's mean on "
                   "the paired seeds: an interval that contains 0 and lies inside +-margin x mean "
                   "is reported 'equivalent' (0 = off).")
flags.DEFINE_bool("dry_run", False, "Print the commands without running them.")
flags.DEFINE_bool("overwrite", False, "Re-run runs whose results exist.")
flags.DEFINE_bool("report_only", False,
                  "Run nothing: report the finished runs found under --out for the selected "
                  "settings and rows (every seed found, or only --seeds); missing runs are listed.")
flags.DEFINE_string("docs_dir", None,
                    "Also copy the markdown report and the plots to this folder (e.g. "
                    "docs/results/evidence).")

# Settings that each run sets itself (rows, settings, seeds, budget, folders).
PER_RUN = ("dataset", "data_path", "split", "tfds_name", "synthetic_users", "synthetic_items",
           "synthetic_min_len", "synthetic_max_len", "synthetic_seed", "model", "loss",
           "negatives", "logq", "seed", "epochs", "early_stopping_patience", "model_dir",
           "export_dir", "metrics_json")
config_flags.define_flags(RunConfig, exclude=PER_RUN,
                          defaults=dict(steps_per_epoch=48, progress=False))

# The paper code's model and negatives (--reference_model), and the corrected script's clamp.
PAPER_CODE = dict(sasrec_block="reference", uniform_negatives="query")
PAPER_CORRECTED_RATIO_FLOOR = 1e-10
# The paper's rows correct the deduplicated in-batch negatives with the per-draw unigram Q,
# whatever the binary's default convention is.
PAPER_CONVENTION = "unigram"

# Row name -> (label, RunConfig settings). Mixed negatives: 128 uniform + 128 in-batch with
# unigram log Q (the paper's convention) is the train binary's `mixed` sampler. "Standard logQ" of
# the paper's Table 1 is what its code runs (train_mns_log_old.py): negatives corrected by
# log Q(d) = log(#d / N), the positive's score left uncorrected in the denominator, i.e. our
# `standard_no_positive`; `mixed_standard_tfrs` is the TFRS form for comparison.
ROWS: Dict[str, tuple] = {
    "bce": ("BCE (1 uniform negative)",
            dict(loss="bce", negatives="uniform", num_negatives=1, logq="none")),
    "gbce": ("gBCE", dict(loss="gbce", negatives="uniform", logq="none")),
    "ss_uniform": ("Sampled softmax, uniform negatives",
                   dict(loss="sampled_softmax", negatives="uniform", logq="none")),
    "inbatch_none": ("In-batch, without logQ",
                     dict(loss="sampled_softmax", negatives="in_batch", logq="none",
                          log_q_convention=PAPER_CONVENTION)),
    "inbatch_standard": ("In-batch, standard logQ",
                         dict(loss="sampled_softmax", negatives="in_batch",
                              logq="standard_no_positive", log_q_convention=PAPER_CONVENTION)),
    "inbatch_corrected": ("In-batch, improved logQ",
                          dict(loss="sampled_softmax", negatives="in_batch", logq="corrected",
                               log_q_convention=PAPER_CONVENTION)),
    "mixed_none": ("Mixed, without logQ",
                   dict(loss="sampled_softmax", negatives="mixed", logq="none",
                        log_q_convention=PAPER_CONVENTION)),
    "mixed_standard": ("Mixed, standard logQ",
                       dict(loss="sampled_softmax", negatives="mixed",
                            logq="standard_no_positive", log_q_convention=PAPER_CONVENTION)),
    "mixed_corrected": ("Mixed, improved logQ",
                        dict(loss="sampled_softmax", negatives="mixed", logq="corrected",
                             log_q_convention=PAPER_CONVENTION)),
    "full_softmax": ("Full softmax", dict(loss="full_softmax", logq="none")),
    # Not in the paper: the TFRS form of standard logQ (the positive's column corrected too).
    "mixed_standard_tfrs": ("Mixed, standard logQ as TFRS (positive corrected)",
                            dict(loss="sampled_softmax", negatives="mixed", logq="standard",
                                 log_q_convention=PAPER_CONVENTION)),
    # Not in the paper: the deduplicated in-batch half corrected with log of its expected count
    # (inclusion probability) instead of the per-draw unigram Q (--log_q_convention).
    "mixed_expected_count_standard": (
        "Mixed, standard logQ, expected-count log Q",
        dict(loss="sampled_softmax", negatives="mixed", logq="standard_no_positive",
             log_q_convention="expected_count")),
    "mixed_expected_count_corrected": (
        "Mixed, improved logQ, expected-count log Q",
        dict(loss="sampled_softmax", negatives="mixed", logq="corrected",
             log_q_convention="expected_count")),
}
# The rows run when --rows is empty (the paper's Table 1).
PAPER_ROWS = [r for r in ROWS
              if r != "mixed_standard_tfrs" and not r.startswith("mixed_expected_count")]

# Table 1 of the paper: (Recall@20, NDCG@20) on MovieLens-1M.
PAPER = {
    "ml1m_loo": {
        "bce": (0.3468, 0.1564), "gbce": (0.3949, 0.1964), "ss_uniform": (0.3889, 0.1921),
        "inbatch_none": (0.3838, 0.1868), "inbatch_standard": (0.3889, 0.1942),
        "inbatch_corrected": (0.3947, 0.1969), "mixed_none": (0.3853, 0.1882),
        "mixed_standard": (0.3893, 0.1952), "mixed_corrected": (0.3937, 0.1972),
        "full_softmax": (0.3911, 0.1937)},
    "ml1m_temporal": {
        "bce": (0.2318, 0.0997), "gbce": (0.2632, 0.1210), "ss_uniform": (0.2609, 0.1186),
        "inbatch_none": (0.2481, 0.1117), "inbatch_standard": (0.2762, 0.1270),
        "inbatch_corrected": (0.2766, 0.1269), "mixed_none": (0.2514, 0.1130),
        "mixed_standard": (0.2800, 0.1292), "mixed_corrected": (0.2792, 0.1281),
        "full_softmax": (0.2640, 0.1205)},
}


# Base settings a --settings entry changes unless the flag is given (the literature's protocol
# for that dataset): Amazon's sequences are short (median 6) and its epoch is the paper code's
# min(100, batches per pass).
SETTING_DEFAULTS = {"amazon_sports_loo": dict(max_len=50, steps_per_epoch=100)}


def setting_data(setting: str) -> dict:
  """The data settings (DataConfig flags) of a --settings entry."""
  if setting == "ml1m_loo":
    return dict(dataset="ml1m", data_path=FLAGS.ml1m_dir, split="leave_one_out")
  if setting == "ml100k_temporal":
    return dict(dataset="movielens_raw", data_path=FLAGS.ml100k_dir, split="temporal")
  if setting == "ml1m_temporal":
    if not FLAGS.ml1m_ratings:
      raise app.UsageError("ml1m_temporal needs --ml1m_ratings=<path to ratings.dat>")
    return dict(dataset="movielens_raw", data_path=FLAGS.ml1m_ratings, split="temporal")
  if setting == "gsasrec_loo":
    if not FLAGS.gsasrec_dir:
      raise app.UsageError("gsasrec_loo needs --gsasrec_dir=<folder in the gSASRec layout>")
    return dict(dataset="gsasrec", data_path=FLAGS.gsasrec_dir, split="leave_one_out")
  if setting == "amazon_sports_loo":
    return dict(dataset="sequences", data_path=FLAGS.amazon_sports, split="leave_one_out")
  raise app.UsageError(f"unknown setting {setting!r}")


def base_config() -> RunConfig:
  """The flags of this binary that are RunConfig settings, with the paper-code preset."""
  base = config_flags.from_flags(RunConfig)
  if FLAGS.reference_model:
    base = base.replace(**{k: v for k, v in PAPER_CODE.items() if not FLAGS[k].present})
  return base


def run_config(base: RunConfig, setting: str, row: str, seed: int,
               run_dir: pathlib.Path) -> RunConfig:
  """The whole configuration of one run."""
  settings = {k: v for k, v in SETTING_DEFAULTS.get(setting, {}).items() if not FLAGS[k].present}
  settings.update(ROWS[row][1], **setting_data(setting), model="sasrec", seed=seed,
                  model_dir=str(run_dir / "model"), export_dir=str(run_dir / "export"),
                  metrics_json=str(run_dir / "train_metrics.json"))
  if FLAGS.budget == "cpu":
    settings["epochs"] = FLAGS.cpu_epochs  # a few epochs: early stopping never triggers
  else:
    settings.update(epochs=FLAGS.full_max_epochs, early_stopping_patience=FLAGS.patience)
  if (FLAGS.reference_model and settings["logq"] == "corrected"
      and not FLAGS["ratio_floor"].present):
    settings["ratio_floor"] = PAPER_CORRECTED_RATIO_FLOOR
  return base.replace(**settings)


def run_commands(base: RunConfig, setting: str, row: str, seed: int,
                 run_dir: pathlib.Path) -> List[List[str]]:
  py = sys.executable
  train = [py, "-m", "train", *run_config(base, setting, row, seed, run_dir).to_flags()]
  evaluate = [py, "-m", "eval.evaluate",
              *EvalConfig(export_dir=str(run_dir / "export"), output_dir=str(run_dir / "eval"),
                          ks=(10, 20, 100), timing_repeats=1).to_flags(only_changed=True)]
  return [train, evaluate]


# ------------------------------------------------------------------------------------ statistics
# The metrics reported (those a run's eval_results.json holds), in table order, and their names.
METRICS = ("recall@10", "recall@20", "ndcg@10", "ndcg@20", "recall@100")
METRIC_NAMES = {"recall@10": "R@10", "recall@20": "R@20", "ndcg@10": "NDCG@10",
                "ndcg@20": "NDCG@20", "recall@100": "R@100"}
# The paired differences: (family_first − family_second) for every family, where both rows exist.
PAIR_FAMILIES = ("mixed", "inbatch", "mixed_expected_count")
PAIR_CONTRASTS = (("corrected", "standard"), ("corrected", "none"), ("standard", "none"))
# The log Q convention of the deduplicated in-batch half, at equal correction.
CONVENTION_PAIRS = tuple(
    (f"mixed_expected_count_{c}", f"mixed_{c}", f"{c}: expected-count − unigram log Q")
    for c in ("corrected", "standard"))
# The validation metrics drawn by the learning curves (keys of model/history.json).
CURVES = ("val_recall@20", "val_ndcg@10")


def paired_rows(rows: Sequence[str]) -> List[tuple]:
  """(first row, second row, label) of every pair of PAIR_FAMILIES x PAIR_CONTRASTS whose two
  rows are both in `rows`."""
  pairs = []
  for family in PAIR_FAMILIES:
    for first, second in PAIR_CONTRASTS:
      a, b = f"{family}_{first}", f"{family}_{second}"
      if a in rows and b in rows:
        pairs.append((a, b, f"{family}: {first} − {second}"))
  for a, b, label in CONVENTION_PAIRS:
    if a in rows and b in rows:
      pairs.append((a, b, label))
  return pairs


# ---------------------------------------------------------------------------------- the runs
def _run_dir(out: pathlib.Path, setting: str, row: str, seed: int) -> pathlib.Path:
  return out / FLAGS.budget / setting / row / f"seed{seed}"


def _seeds_found(out: pathlib.Path, setting: str, row: str, finished: bool = True) -> List[int]:
  """Seeds with a finished run (eval/eval_results.json) of one row; with finished=False, every
  seed with a run folder (started, perhaps unfinished or failed)."""
  row_dir = out / FLAGS.budget / setting / row
  if not row_dir.is_dir():
    return []
  return sorted(int(p.name[4:]) for p in row_dir.glob("seed*")
                if p.name[4:].isdigit()
                and (not finished or (p / "eval" / "eval_results.json").exists()))


def _read_json(path: pathlib.Path):
  """The JSON in `path`, or None when it is absent or unreadable (e.g. being written)."""
  try:
    return json.loads(path.read_text())
  except (OSError, ValueError):
    return None


def load_run(out: pathlib.Path, setting: str, row: str, seed: int) -> Optional[dict]:
  """The record of one finished run (None if its eval results are absent or unreadable):
  exact and ScaNN metrics, recall by popularity decile, the validation curve, timing, and the
  training flags (from train_metrics.json, as `python -m train` takes them)."""
  run_dir = _run_dir(out, setting, row, seed)
  result = _read_json(run_dir / "eval" / "eval_results.json")
  if not isinstance(result, dict) or "metrics" not in result:
    return None
  record = dict(setting=setting, row=row, seed=seed, run_dir=str(run_dir))
  record.update(_read_json(run_dir / "timing.json") or {})
  record.update(metrics=result["metrics"]["exact"], scann_metrics=result["metrics"].get("scann"),
                popularity=result.get("popularity"))
  history = _read_json(run_dir / "model" / "history.json") or []
  record["curve"] = [{k: h[k] for k in ("step", *CURVES) if k in h} for h in history
                     if isinstance(h, dict) and "step" in h]
  train_metrics = _read_json(run_dir / "train_metrics.json")
  if isinstance(train_metrics, dict):
    for key in ("best_step", "best_epoch", "global_step", "stopped_early", "train_wall_seconds"):
      if key in train_metrics:
        record[key] = train_metrics[key]
  if isinstance(train_metrics, dict) and "config" in train_metrics:
    try:
      record["train_flags"] = RunConfig.from_dict(train_metrics["config"]).to_flags(
          only_changed=True)
    except (TypeError, ValueError, KeyError):
      pass  # a configuration of another version of the binary: the record goes without it
  return record


def collect(out: pathlib.Path, settings: Sequence[str], rows: Sequence[str],
            seeds: Optional[Sequence[int]] = None, expected: Sequence[int] = ()):
  """The finished runs under `out`: {setting: {row: {seed: record}}}, and the missing runs.

  Every seed found is taken, or only `seeds` when given. A run is missing when its row lacks a
  finished run of a seed that `seeds` names, that `expected` names (the seeds this invocation
  ran), or, without `seeds`, that has a run folder in any selected row of the setting.
  """
  results: Dict = {}
  missing = []
  for setting in settings:
    found = {row: [s for s in _seeds_found(out, setting, row) if seeds is None or s in seeds]
             for row in rows}
    wanted = set(expected) | (set(seeds) if seeds is not None else
                              {s for row in rows
                               for s in _seeds_found(out, setting, row, finished=False)})
    for row in rows:
      for seed in sorted(wanted):
        record = load_run(out, setting, row, seed) if seed in found[row] else None
        if record is None:
          run_dir = _run_dir(out, setting, row, seed)
          missing.append(dict(setting=setting, row=row, seed=seed, run_dir=str(run_dir),
                              reason=("no eval results yet (unfinished or failed)"
                                      if run_dir.exists() else "not run")))
        else:
          results.setdefault(setting, {}).setdefault(row, {})[seed] = record
  return results, missing


# ---------------------------------------------------------------------------------- the report
def statistics(results: Dict, settings: Sequence[str], rows: Sequence[str],
               margin: float = EQUIVALENCE_MARGIN) -> Dict:
  """Per setting: every row's mean ± s.e. of each metric, and the paired differences."""
  stats = {}
  for setting in settings:
    by_row = results.get(setting, {})
    metrics = [m for m in METRICS
               if any(m in r["metrics"] for runs in by_row.values() for r in runs.values())]
    paper = PAPER.get(setting, {})
    row_stats = {}
    for row in rows:
      runs = by_row.get(row, {})
      row_stats[row] = dict(
          label=ROWS[row][0], seeds=sorted(runs),
          metrics={m: mean_se([r["metrics"][m] for r in runs.values() if m in r["metrics"]])
                   for m in metrics},
          train_minutes=mean_se([r["train_seconds"] / 60 for r in runs.values()
                                 if r.get("train_seconds")])["mean"],
          best_step=mean_se([r["best_step"] for r in runs.values()
                             if r.get("best_step") is not None]),
          steps=mean_se([r["global_step"] for r in runs.values()
                         if r.get("global_step") is not None]),
          paper=(dict(zip(("recall@20", "ndcg@20"), paper[row])) if row in paper else None))
    pair_stats = []
    for first, second, label in paired_rows(rows):
      a, b = by_row.get(first, {}), by_row.get(second, {})
      pair = dict(first=first, second=second, label=label,
                  unpaired={first: sorted(set(a) - set(b)), second: sorted(set(b) - set(a))},
                  metrics={})
      for m in metrics:
        av = {s: r["metrics"][m] for s, r in a.items() if m in r["metrics"]}
        bv = {s: r["metrics"][m] for s, r in b.items() if m in r["metrics"]}
        common = sorted(set(av) & set(bv))
        absolute = (margin * abs(float(np.mean([bv[s] for s in common])))
                    if margin > 0 and common else None)
        pair["metrics"][m] = paired_difference(av, bv, margin=absolute)
      pair_stats.append(pair)
    stats[setting] = dict(metrics=metrics, rows=row_stats, pairs=pair_stats)
  return stats


def _fmt(stats: dict) -> str:
  if stats["mean"] is None:
    return "—"
  if stats["se"] is None:
    return f"{stats['mean']:.4f}"
  return f"{stats['mean']:.4f} ± {stats['se']:.4f}"


def _command() -> str:
  """The command line of this invocation (as `python -m bench.reproduce`) and where it ran."""
  root = pathlib.Path(__file__).resolve().parents[1]
  cwd = pathlib.Path.cwd().resolve()
  where = ("the repository root" if cwd == root else f"`{cwd}`")
  return f"`python -m bench.reproduce {shlex.join(sys.argv[1:])}` (run from {where})"


def _commit() -> Optional[str]:
  """The repository's commit, and whether tracked files differ from it (best effort, read-only:
  GIT_OPTIONAL_LOCKS=0 keeps `git status` from refreshing the index)."""
  root = pathlib.Path(__file__).resolve().parents[1]
  env = dict(os.environ, GIT_OPTIONAL_LOCKS="0")
  try:
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], env=env,
                          capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                            "--untracked-files=no"], env=env, capture_output=True, text=True,
                           timeout=30, check=True).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return None
  return head + (" (with uncommitted changes)" if dirty else "")


HOW_TO_READ = """\
How to read: exact search over all items, rated items filtered. Each row shows the mean ± standard
error over its seeds (s.e. = sample standard deviation / √n; one seed: the value alone). A seed
fixes the initialisation and the order of the training data in every row, so rows are compared
seed by seed: for a pair A − B, d = metric(A) − metric(B) on each seed present in both rows (a
seed missing from either is left out of that pair), reported as mean ± s.e. of d with the 95%
confidence interval mean ± t(0.975, n − 1) · s.e. (Student t). "positive": seeds where A is
higher. Verdict: "ahead" when the interval lies above 0, "behind" when below, "equivalent" when
it contains 0 and lies inside ± {margin} of B's mean on the paired seeds (the data exclude a
difference that large either way), "within noise" when it contains 0 and reaches past that
margin. With few seeds the interval is wide (t(0.975, 2) = 4.30 for 3 seeds): "within
noise" means this experiment cannot tell, not that the rows are equal. Paper columns: Table 1 of
the paper (5 runs, early stopping); a fixed cpu budget is not comparable with them."""


def _steps(stats: dict) -> str:
  """Mean ± s.e. of a step count over seeds ("—" when unknown)."""
  if stats["mean"] is None:
    return "—"
  return f"{stats['mean']:.0f}" + ("" if stats["se"] is None else f" ± {stats['se']:.0f}")


def _signed(v: float) -> str:
  return f"{v:+.4f}"


def markdown(stats: Dict, results: Dict, settings: Sequence[str], rows: Sequence[str],
             missing: List[dict], failures: List[str], plots: Dict[str, List[str]],
             margin: float = 0.0) -> str:
  commit = _commit()
  lines = [f"# Table 1 reproduction (budget={FLAGS.budget})", "",
           f"Written by {_command()}" + (f" at commit {commit}" if commit else "") + ".", "",
           HOW_TO_READ.format(margin=f"{margin:.0%}" if margin > 0 else "0 (off)"), ""]
  for setting in settings:
    s = stats[setting]
    metrics = s["metrics"]
    lines += [f"## {setting}", ""]
    if not metrics:
      lines += ["No finished run.", ""]
      continue
    names = [METRIC_NAMES[m] for m in metrics]
    lines += ["| row | seeds | " + " | ".join(names) + " | paper R@20 | paper NDCG@20 | "
              "train min/run | steps to best | steps run |",
              "|---|---|" + "---|" * (len(names) + 5)]
    for row in rows:
      r = s["rows"][row]
      seeds = ",".join(str(x) for x in r["seeds"])
      cells = [f"{len(r['seeds'])} ({seeds})" if seeds else "0"]
      cells += [_fmt(r["metrics"][m]) for m in metrics]
      paper = r["paper"]
      cells += [f"{paper['recall@20']:.4f}" if paper else "—",
                f"{paper['ndcg@20']:.4f}" if paper else "—",
                "—" if r["train_minutes"] is None else f"{r['train_minutes']:.1f}",
                _steps(r["best_step"]), _steps(r["steps"])]
      lines.append(f"| {r['label']} | " + " | ".join(cells) + " |")
    lines.append("")
    if s["pairs"]:
      lines += [f"Paired differences (same seed), {CONFIDENCE:.0%} interval:", "",
                "| difference | metric | seeds | mean ± s.e. | 95% CI | positive | verdict |",
                "|---|---|---|---|---|---|---|"]
      notes = []
      for pair in s["pairs"]:
        for m in metrics:
          d = pair["metrics"][m]
          if d["n"] == 0:
            mean, ci = "—", "—"
          else:
            mean = _signed(d["mean"]) + ("" if d["se"] is None else f" ± {d['se']:.4f}")
            ci = "—" if d["ci"] is None else f"[{_signed(d['ci'][0])}, {_signed(d['ci'][1])}]"
          lines.append(f"| {pair['label']} | {METRIC_NAMES[m]} | {d['n']} | {mean} | {ci} | "
                       f"{d['positive']}/{d['n']} | {d['verdict']} |")
        for row, alone in pair["unpaired"].items():
          if alone:
            other = pair["second"] if row == pair["first"] else pair["first"]
            notes.append(f"- {pair['label']}: seed(s) {', '.join(map(str, alone))} of {row} "
                         f"have no run of {other}: left out of the pair.")
      lines.append("")
      if notes:
        lines += notes + [""]
    flag_lists = [r.get("train_flags") for runs in results.get(setting, {}).values()
                  for r in runs.values()]
    if flag_lists and all(flag_lists):
      shared = [f for f in flag_lists[0] if all(f in other for other in flag_lists[1:])]
      lines += ["Training flags shared by every run above (from each run's train_metrics.json; "
                "the row's loss, negatives, logq, seed and folders complete each command): "
                f"`python -m train {' '.join(shared)}`", ""]
    for name in plots.get(setting, []):
      lines += [f"![{name}]({name})", ""]
  if failures:
    lines += ["Failed runs:", ""] + [f"- {f}" for f in failures] + [""]
  if missing:
    lines += ["Missing runs (not in the tables):", ""]
    lines += [f"- {m['setting']}/{m['row']}/seed{m['seed']}: {m['reason']}" for m in missing]
    lines.append("")
  return "\n".join(lines)


# ------------------------------------------------------------------------------------- plots
def _pyplot():
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def plot_popularity(results: Dict, setting: str, rows: Sequence[str],
                    path: pathlib.Path) -> bool:
  """Recall@20 by the target's popularity decile: mean ± s.e. over seeds, one line per row."""
  series = []
  for row in rows:
    curves = [r["popularity"]["recall@20"] for r in results.get(setting, {}).get(row, {}).values()
              if (r.get("popularity") or {}).get("recall@20")]
    if curves:
      series.append((row, curves))
  if not series:
    return False
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(8, 4))
  width = 0.6 / max(len(series), 1)
  for i, (row, curves) in enumerate(series):
    bins = min(len(c) for c in curves)
    stats = [mean_se([c[b] for c in curves]) for b in range(bins)]
    x = [b + (i - (len(series) - 1) / 2) * width for b in range(bins)]
    ax.errorbar(x, [st["mean"] for st in stats], yerr=[st["se"] or 0.0 for st in stats],
                fmt="o-", ms=3, capsize=2, label=f"{ROWS[row][0]} (n={len(curves)})")
  ax.set_xlabel("target popularity decile (0 = most popular items)")
  ax.set_ylabel("Recall@20 (exact), mean ± s.e.")
  ax.set_title(f"{setting}: recall by popularity decile")
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return True


def plot_curves(results: Dict, setting: str, rows: Sequence[str], path: pathlib.Path) -> bool:
  """Validation Recall@20 and NDCG@10 against training step: at each step, mean ± s.e. over the
  seeds that reached it (a band), one line per row."""
  drawn = []
  for row in rows:
    runs = results.get(setting, {}).get(row, {})
    by_key = {}
    for key in CURVES:
      by_step: Dict[int, List[float]] = {}
      for r in runs.values():
        for h in r.get("curve", []):
          if key in h:
            by_step.setdefault(h["step"], []).append(h[key])
      if by_step:
        by_key[key] = sorted((step, mean_se(v)) for step, v in by_step.items())
    if by_key:
      drawn.append((row, len(runs), by_key))
  if not drawn:
    return False
  plt = _pyplot()
  fig, axes = plt.subplots(1, len(CURVES), figsize=(12, 4))
  for ax, key in zip(axes, CURVES):
    for row, n, by_key in drawn:
      points = by_key.get(key)
      if not points:
        continue
      steps = [p[0] for p in points]
      mean = [p[1]["mean"] for p in points]
      se = [p[1]["se"] or 0.0 for p in points]
      (line,) = ax.plot(steps, mean, "-", label=f"{ROWS[row][0]} (n={n})")
      ax.fill_between(steps, [m - e for m, e in zip(mean, se)],
                      [m + e for m, e in zip(mean, se)], color=line.get_color(), alpha=0.2)
    ax.set_xlabel("training step")
    ax.set_ylabel(f"validation {key[len('val_'):]}, mean ± s.e.")
    ax.set_title(f"{setting}: {key[len('val_'):]}")
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return True


# -------------------------------------------------------------------------------------- main
def _train_and_evaluate(base: RunConfig, out: pathlib.Path, settings: Sequence[str],
                        rows: Sequence[str], seeds: Sequence[int], failures: List[str]) -> tuple:
  """Runs every unfinished run, setting -> seed -> row (a seed's paired rows finish together);
  returns (the number run, whether the time budget paused this invocation). --dry_run prints
  the commands instead.

  --time_budget_minutes = T > 0 is this invocation's budget: each training process gets what
  is left of T (it pauses between epochs, `train.trainer.EXIT_PAUSED`), no run starts with less
  than MIN_CHUNK_MINUTES left, and the first pause ends the invocation; rerunning it continues
  the paused run from its checkpoint (its train log is appended to, its training time summed).
  The evaluation after a finished training is not counted against T."""
  ran = 0
  deadline = (time.perf_counter() + 60.0 * base.time_budget_minutes
              if base.time_budget_minutes else None)
  for setting in settings:
    for seed in seeds:
      for row in rows:
        run_dir = _run_dir(out, setting, row, seed)
        run_base = base
        if deadline is not None and not FLAGS.dry_run:
          left = (deadline - time.perf_counter()) / 60.0
          if left < MIN_CHUNK_MINUTES:
            return ran, True
          run_base = base.replace(time_budget_minutes=left)
        train_cmd, eval_cmd = run_commands(run_base, setting, row, seed, run_dir)
        if FLAGS.dry_run:
          print(" ".join(train_cmd))
          print(" ".join(eval_cmd))
          continue
        if not FLAGS.overwrite and (run_dir / "eval" / "eval_results.json").exists():
          continue
        run_dir.mkdir(parents=True, exist_ok=True)
        partial = run_dir / "timing_partial.json"       # training time of paused chunks
        record = {"train_seconds": (_read_json(partial) or {}).get("train_seconds", 0.0)}
        start = time.perf_counter()
        ok = True
        for name, cmd in (("train", train_cmd), ("eval", eval_cmd)):
          t0 = time.perf_counter()
          with open(run_dir / f"{name}.log", "a" if name == "train" else "w") as log:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False)
          record[f"{name}_seconds"] = (record.get(f"{name}_seconds", 0.0)
                                       + time.perf_counter() - t0)
          if name == "train" and proc.returncode == EXIT_PAUSED:
            partial.write_text(json.dumps({"train_seconds": record["train_seconds"]}))
            print(f"{setting} {row} seed {seed}: paused by the time budget after "
                  f"{time.perf_counter() - start:.0f}s (rerun to continue)", flush=True)
            return ran, True
          if proc.returncode != 0:
            failures.append(f"{setting}/{row}/seed{seed} ({name}: rc {proc.returncode}, "
                            f"see {run_dir / (name + '.log')})")
            ok = False
            break
        ran += 1
        print(f"{setting} {row} seed {seed}: {'ok' if ok else 'FAILED'} in "
              f"{time.perf_counter() - start:.0f}s", flush=True)
        if ok:
          (run_dir / "timing.json").write_text(json.dumps(record))
          partial.unlink(missing_ok=True)
  return ran, False


def _summary(stats: Dict, results: Dict) -> str:
  parts = []
  for setting, s in stats.items():
    by_row = results.get(setting, {})
    if not by_row:
      continue
    best = max(by_row, key=lambda row: s["rows"][row]["metrics"].get(
        "ndcg@20", {"mean": None})["mean"] or -1.0)
    part = f"{setting}: best NDCG@20 {best}"
    for pair in s["pairs"]:
      d = pair["metrics"].get("recall@20")
      if d and d["n"]:
        ci = "" if d["ci"] is None else f" [{_signed(d['ci'][0])}, {_signed(d['ci'][1])}]"
        part += f", {pair['label']} R@20 {_signed(d['mean'])}{ci} n={d['n']} {d['verdict']}"
    parts.append(part)
  return "; ".join(parts) or "no finished run"


def main(argv):
  del argv
  rows = FLAGS.rows or PAPER_ROWS
  unknown = [r for r in rows if r not in ROWS]
  if unknown:
    raise app.UsageError(f"unknown rows {unknown}; choose from {list(ROWS)}")
  if FLAGS.report_only and (FLAGS.dry_run or FLAGS.overwrite):
    raise app.UsageError("--report_only runs nothing: it takes neither --dry_run nor --overwrite")
  try:
    given = [int(s) for s in FLAGS.seeds]
  except ValueError as e:
    raise app.UsageError(f"--seeds must be integers, got {FLAGS.seeds}") from e
  settings = list(FLAGS.settings)
  out = pathlib.Path(FLAGS.out)
  failures: List[str] = []
  total_start = time.perf_counter()
  ran, paused = 0, False
  if FLAGS.report_only:
    results, missing = collect(out, settings, rows, seeds=given or None)
  else:
    seeds = given or ([0] if FLAGS.budget == "cpu" else [0, 1, 2, 3, 4])
    ran, paused = _train_and_evaluate(base_config(), out, settings, rows, seeds, failures)
    if FLAGS.dry_run:
      print(f"SUMMARY reproduce dry run: {len(settings)} settings x {len(rows)} rows x "
            f"{len(seeds)} seeds = {len(settings) * len(rows) * len(seeds)} runs (budget "
            f"{FLAGS.budget})")
      return
    results, missing = collect(out, settings, rows, expected=seeds)
  failed = {f.split(" ", 1)[0] for f in failures}
  missing = [m for m in missing if f"{m['setting']}/{m['row']}/seed{m['seed']}" not in failed]
  stats = statistics(results, settings, rows, margin=FLAGS.equivalence_margin)
  out.mkdir(parents=True, exist_ok=True)
  plots: Dict[str, List[str]] = {}
  for setting in settings:
    for name, plot in ((f"learning_curves_{setting}.png", plot_curves),
                       (f"recall_by_popularity_{setting}.png", plot_popularity)):
      if plot(results, setting, rows, out / name):
        plots.setdefault(setting, []).append(name)
  md = markdown(stats, results, settings, rows, missing, failures, plots,
                margin=FLAGS.equivalence_margin)
  md_path = out / f"reproduce_{FLAGS.budget}.md"
  md_path.write_text(md)
  runs = [r for s in settings for row in rows for r in results.get(s, {}).get(row, {}).values()]
  (out / f"reproduce_{FLAGS.budget}.json").write_text(json.dumps(
      dict(budget=FLAGS.budget, command=_command(), settings=settings, rows=rows,
           statistics=stats, runs=runs, missing=missing, failures=failures), indent=2))
  if FLAGS.docs_dir:
    docs = pathlib.Path(FLAGS.docs_dir)
    docs.mkdir(parents=True, exist_ok=True)
    for name in [md_path.name] + [n for names in plots.values() for n in names]:
      shutil.copy(out / name, docs / name)
  print(md)
  print(f"SUMMARY reproduce budget={FLAGS.budget}: {len(runs)} finished runs reported ({ran} run "
        f"now), {len(failures)} failed, {len(missing)} missing, "
        f"{time.perf_counter() - total_start:.0f}s; {_summary(stats, results)}; table in {md_path}"
        + ("; PAUSED by --time_budget_minutes: rerun the same command to continue" if paused
           else ""))
  if paused:
    sys.exit(EXIT_PAUSED)


def run():
  """Console-script entry point (tfrs-logq-reproduce)."""
  config_flags.expose_in_help(__name__)
  app.run(main)


if __name__ == "__main__":
  run()
