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
the commands. Rows ending in _keras3_jax (mixed_none, mixed_corrected) train the same settings
with `python -m train.keras3 --backend=jax` and take its own test metrics; they pair with their
tf-keras row ("none: Keras 3 JAX − tf-keras"). Finished runs (eval_results.json present) are
reused unless --overwrite.
--report_only runs nothing: it reports the finished runs found under --out for the selected
settings and rows (every seed found, or only --seeds) and lists the missing ones.

Writes <out>/reproduce_<budget>.md (tables, how to read them, the command that wrote it) and
.json (every run's record and the statistics), recall_by_popularity_<setting>.png (Recall@20 by
the target's popularity decile, mean ± s.e. over seeds) and learning_curves_<setting>.png
(validation Recall@20 and NDCG@10 against training step, mean ± s.e. over seeds); --docs_dir
also copies the markdown and the plots there. --out is relative to the working directory. The
last printed line is a one-line summary.

This file runs things (flags, the runs' configurations and commands, the loop over runs); the
rows, the results on disk, the report and the plots are `bench/table1/`.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Sequence

from absl import app
from absl import flags

from bench.table1.plots import plot_curves, plot_popularity
from bench.table1.report import EQUIVALENCE_MARGIN, command, markdown, statistics, summary
from bench.table1.results import collect, read_json, run_dir as run_folder

# paired_rows, PAPER and PAPER_CONVENTION: re-exported (bench.reproduce's public names).
from bench.table1.rows import (  # noqa: F401
  PAPER,
  PAPER_CODE,
  PAPER_CONVENTION,
  PAPER_CORRECTED_RATIO_FLOOR,
  PAPER_ROWS,
  ROWS,
  SETTING_DEFAULTS,
  KERAS3_ROWS,
  paired_rows,
  train_binary,
)
from eval.config import EvalConfig
from train import config_flags
from train import data as data_lib
from train.config import RunConfig
from train.epochs import EXIT_PAUSED

FLAGS = flags.FLAGS
# --time_budget_minutes: no run is started (or resumed) with less time left than this.
MIN_CHUNK_MINUTES = 1.0
flags.DEFINE_enum("budget", "cpu", ["cpu", "full"], "cpu: fixed epochs; full: early stopping.")
flags.DEFINE_list("rows", [], "Rows to run (default: the paper's). See ROWS.")
flags.DEFINE_list("seeds", [], "Seeds (default: 0 for cpu, 0..4 for full).")
flags.DEFINE_list(
  "settings",
  ["ml1m_loo", "ml100k_temporal"],
  "ml1m_loo, ml100k_temporal, ml1m_temporal (needs --ml1m_ratings), gsasrec_loo "
  "(needs --gsasrec_dir).",
)
flags.DEFINE_string("ml1m_dir", str(data_lib.default_data_root() / "ml1m"), "gSASRec ML-1M folder.")
flags.DEFINE_string(
  "ml100k_dir", str(data_lib.default_data_root() / "ml-100k"), "Raw ML-100K folder (u.data)."
)
flags.DEFINE_string("ml1m_ratings", None, "Raw ML-1M ratings.dat for the temporal split.")
flags.DEFINE_string("gsasrec_dir", None, "A gSASRec-layout folder for --settings=gsasrec_loo.")
flags.DEFINE_string(
  "amazon_sports",
  str(data_lib.default_data_root() / "amazon-sports" / "sequences.txt"),
  "Amazon Sports sequence file for --settings=amazon_sports_loo.",
)
flags.DEFINE_integer(
  "cpu_epochs",
  15,
  "Epochs per run with --budget=cpu (15 x 48 = 720 steps, the "
  "point where the shared data README quotes the paper's code).",
)
flags.DEFINE_bool(
  "reference_model",
  True,
  "Train as the paper's code does (module docstring): --sasrec_block=reference, "
  "--uniform_negatives=query and --ratio_floor=1e-10 in the corrected rows, "
  "unless those flags are given. With --noreference_model the base flags' values "
  "are used (the train binary's defaults unless given).",
)
flags.DEFINE_integer("full_max_epochs", 100_000, "Epoch cap with --budget=full.")
flags.DEFINE_integer("patience", 200, "Early-stopping patience (epochs) with --budget=full.")
flags.DEFINE_string("out", "bench/out/reproduce", "Output folder (runs, table, plots).")
flags.DEFINE_float(
  "equivalence_margin",
  EQUIVALENCE_MARGIN,
  "Practical margin of the paired verdicts, relative to the second row's mean on "
  "the paired seeds: an interval that contains 0 and lies inside +-margin x mean "
  "is reported 'equivalent' (0 = off).",
)
flags.DEFINE_bool("dry_run", False, "Print the commands without running them.")
flags.DEFINE_bool("overwrite", False, "Re-run runs whose results exist.")
flags.DEFINE_bool(
  "report_only",
  False,
  "Run nothing: report the finished runs found under --out for the selected "
  "settings and rows (every seed found, or only --seeds); missing runs are listed.",
)
flags.DEFINE_string(
  "docs_dir",
  None,
  "Also copy the markdown report and the plots to this folder (e.g. docs/results/evidence).",
)

# Settings that each run sets itself (rows, settings, seeds, budget, folders).
PER_RUN = (
  "dataset",
  "data_path",
  "split",
  "tfds_name",
  "synthetic_users",
  "synthetic_items",
  "synthetic_min_len",
  "synthetic_max_len",
  "synthetic_seed",
  "model",
  "loss",
  "negatives",
  "logq",
  "seed",
  "epochs",
  "early_stopping_patience",
  "model_dir",
  "export_dir",
  "metrics_json",
)
config_flags.define_flags(
  RunConfig, exclude=PER_RUN, defaults=dict(steps_per_epoch=48, progress=False)
)


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


def run_config(
  base: RunConfig, setting: str, row: str, seed: int, run_dir: pathlib.Path
) -> RunConfig:
  """The whole configuration of one run."""
  settings = {k: v for k, v in SETTING_DEFAULTS.get(setting, {}).items() if not FLAGS[k].present}
  settings.update(
    ROWS[row][1],
    **setting_data(setting),
    model="sasrec",
    seed=seed,
    model_dir=str(run_dir / "model"),
    export_dir=str(run_dir / "export"),
    metrics_json=str(run_dir / "train_metrics.json"),
  )
  if FLAGS.budget == "cpu":
    settings["epochs"] = FLAGS.cpu_epochs  # a few epochs: early stopping never triggers
  else:
    settings.update(epochs=FLAGS.full_max_epochs, early_stopping_patience=FLAGS.patience)
  if FLAGS.reference_model and settings["logq"] == "corrected" and not FLAGS["ratio_floor"].present:
    settings["ratio_floor"] = PAPER_CORRECTED_RATIO_FLOOR
  return base.replace(**settings)


def run_commands(
  base: RunConfig, setting: str, row: str, seed: int, run_dir: pathlib.Path
) -> List[List[str]]:
  py = sys.executable
  flags = run_config(base, setting, row, seed, run_dir).to_flags()
  train = [py, *train_binary(row), *flags]
  if row in KERAS3_ROWS:  # the Keras 3 binary; test metrics: its own (bench.table1.results)
    return [train, [py, "-m", "bench.table1.results", str(run_dir)]]
  evaluate = [
    py,
    "-m",
    "eval.evaluate",
    *EvalConfig(
      export_dir=str(run_dir / "export"),
      output_dir=str(run_dir / "eval"),
      ks=(10, 20, 100),
      timing_repeats=1,
    ).to_flags(only_changed=True),
  ]
  return [train, evaluate]


# -------------------------------------------------------------------------------------- main
def _train_and_evaluate(
  base: RunConfig,
  out: pathlib.Path,
  settings: Sequence[str],
  rows: Sequence[str],
  seeds: Sequence[int],
  failures: List[str],
) -> tuple:
  """Runs every unfinished run, setting -> seed -> row (a seed's paired rows finish together);
  returns (the number run, whether the time budget paused this invocation). --dry_run prints
  the commands instead.

  --time_budget_minutes = T > 0 is this invocation's budget: each training process gets what
  is left of T (it pauses between epochs, `train.epochs.EXIT_PAUSED`), no run starts with less
  than MIN_CHUNK_MINUTES left, and the first pause ends the invocation; rerunning it continues
  the paused run from its checkpoint (its train log is appended to, its training time summed).
  The evaluation after a finished training is not counted against T."""
  ran = 0
  deadline = (
    time.perf_counter() + 60.0 * base.time_budget_minutes if base.time_budget_minutes else None
  )
  for setting in settings:
    for seed in seeds:
      for row in rows:
        run_dir = run_folder(out, FLAGS.budget, setting, row, seed)
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
        partial = run_dir / "timing_partial.json"  # training time of paused chunks
        record = {"train_seconds": (read_json(partial) or {}).get("train_seconds", 0.0)}
        start = time.perf_counter()
        ok = True
        for name, cmd in (("train", train_cmd), ("eval", eval_cmd)):
          t0 = time.perf_counter()
          with open(run_dir / f"{name}.log", "a" if name == "train" else "w") as log:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False)
          record[f"{name}_seconds"] = record.get(f"{name}_seconds", 0.0) + time.perf_counter() - t0
          if name == "train" and proc.returncode == EXIT_PAUSED:
            partial.write_text(json.dumps({"train_seconds": record["train_seconds"]}))
            print(
              f"{setting} {row} seed {seed}: paused by the time budget after "
              f"{time.perf_counter() - start:.0f}s (rerun to continue)",
              flush=True,
            )
            return ran, True
          if proc.returncode != 0:
            failures.append(
              f"{setting}/{row}/seed{seed} ({name}: rc {proc.returncode}, "
              f"see {run_dir / (name + '.log')})"
            )
            ok = False
            break
        ran += 1
        print(
          f"{setting} {row} seed {seed}: {'ok' if ok else 'FAILED'} in "
          f"{time.perf_counter() - start:.0f}s",
          flush=True,
        )
        if ok:
          (run_dir / "timing.json").write_text(json.dumps(record))
          partial.unlink(missing_ok=True)
  return ran, False


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
    results, missing = collect(out, FLAGS.budget, settings, rows, seeds=given or None)
  else:
    seeds = given or ([0] if FLAGS.budget == "cpu" else [0, 1, 2, 3, 4])
    ran, paused = _train_and_evaluate(base_config(), out, settings, rows, seeds, failures)
    if FLAGS.dry_run:
      print(
        f"SUMMARY reproduce dry run: {len(settings)} settings x {len(rows)} rows x "
        f"{len(seeds)} seeds = {len(settings) * len(rows) * len(seeds)} runs (budget "
        f"{FLAGS.budget})"
      )
      return
    results, missing = collect(out, FLAGS.budget, settings, rows, expected=seeds)
  failed = {f.split(" ", 1)[0] for f in failures}
  missing = [m for m in missing if f"{m['setting']}/{m['row']}/seed{m['seed']}" not in failed]
  stats = statistics(results, settings, rows, margin=FLAGS.equivalence_margin)
  out.mkdir(parents=True, exist_ok=True)
  plots: Dict[str, List[str]] = {}
  for setting in settings:
    for name, plot in (
      (f"learning_curves_{setting}.png", plot_curves),
      (f"recall_by_popularity_{setting}.png", plot_popularity),
    ):
      if plot(results, setting, rows, out / name):
        plots.setdefault(setting, []).append(name)
  md = markdown(
    FLAGS.budget,
    stats,
    results,
    settings,
    rows,
    missing,
    failures,
    plots,
    margin=FLAGS.equivalence_margin,
  )
  md_path = out / f"reproduce_{FLAGS.budget}.md"
  md_path.write_text(md)
  runs = [r for s in settings for row in rows for r in results.get(s, {}).get(row, {}).values()]
  (out / f"reproduce_{FLAGS.budget}.json").write_text(
    json.dumps(
      dict(
        budget=FLAGS.budget,
        command=command(),
        settings=settings,
        rows=rows,
        statistics=stats,
        runs=runs,
        missing=missing,
        failures=failures,
      ),
      indent=2,
    )
  )
  if FLAGS.docs_dir:
    docs = pathlib.Path(FLAGS.docs_dir)
    docs.mkdir(parents=True, exist_ok=True)
    for name in [md_path.name] + [n for names in plots.values() for n in names]:
      shutil.copy(out / name, docs / name)
  print(md)
  print(
    f"SUMMARY reproduce budget={FLAGS.budget}: {len(runs)} finished runs reported ({ran} run "
    f"now), {len(failures)} failed, {len(missing)} missing, "
    f"{time.perf_counter() - total_start:.0f}s; {summary(stats, results)}; table in {md_path}"
    + ("; PAUSED by --time_budget_minutes: rerun the same command to continue" if paused else "")
  )
  if paused:
    sys.exit(EXIT_PAUSED)


def run():
  """Console-script entry point (tfrs-logq-reproduce)."""
  config_flags.expose_in_help(__name__)
  app.run(main)


if __name__ == "__main__":
  run()
