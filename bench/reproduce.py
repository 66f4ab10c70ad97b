r"""Reproduces the rows of Table 1 of "Correcting the LogQ Correction" (RecSys '25).

Each run trains SASRec with one loss / negative sampler / logQ correction through the training
binary and evaluates the export through the evaluation binary (the paper's protocol: all
items scored, rated items filtered, Recall@20 / NDCG@20 over all test queries):

  python -m train <RunConfig.to_flags()>          # the run's whole configuration
  python -m eval.evaluate --export_dir=... --output_dir=...   # on the export's own data

and the table reports mean ± std over seeds beside the published numbers. Every command is built
from a `train.config.RunConfig` / `eval.config.EvalConfig`, never spelled by hand.

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
Budgets:
  --budget=cpu   fixed --cpu_epochs epochs of 48 steps per run (default 15 = 720 steps), no early
                 stopping, one seed by default: about 10-12 min per ML-1M row on 2 cores.
  --budget=full  the paper's protocol: early stopping on validation NDCG@10 with patience 200
                 epochs of 48 steps, 5 seeds (a GPU machine).
Selection: --rows=mixed_corrected,full_softmax --seeds=0,1 --settings=ml1m_loo; --dry_run prints
the commands. Finished runs (eval_results.json present) are reused unless --overwrite.

Writes <out>/reproduce_<budget>.md and .json, recall_by_popularity_<setting>.png (Recall@20
of each row by the target's popularity decile) and learning_curves_<setting>.png (validation
Recall@20 against training step); --out is relative to the working directory. The last printed
line is a one-line summary.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time
from typing import Dict, List

from absl import app
from absl import flags

from eval.config import EvalConfig
from train import config_flags
from train import data as data_lib
from train.config import RunConfig

FLAGS = flags.FLAGS
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
flags.DEFINE_bool("dry_run", False, "Print the commands without running them.")
flags.DEFINE_bool("overwrite", False, "Re-run runs whose results exist.")

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
                     dict(loss="sampled_softmax", negatives="in_batch", logq="none")),
    "inbatch_standard": ("In-batch, standard logQ",
                         dict(loss="sampled_softmax", negatives="in_batch",
                              logq="standard_no_positive")),
    "inbatch_corrected": ("In-batch, improved logQ",
                          dict(loss="sampled_softmax", negatives="in_batch", logq="corrected")),
    "mixed_none": ("Mixed, without logQ",
                   dict(loss="sampled_softmax", negatives="mixed", logq="none")),
    "mixed_standard": ("Mixed, standard logQ",
                       dict(loss="sampled_softmax", negatives="mixed",
                            logq="standard_no_positive")),
    "mixed_corrected": ("Mixed, improved logQ",
                        dict(loss="sampled_softmax", negatives="mixed", logq="corrected")),
    "full_softmax": ("Full softmax", dict(loss="full_softmax", logq="none")),
    # Not in the paper: the TFRS form of standard logQ (the positive's column corrected too).
    "mixed_standard_tfrs": ("Mixed, standard logQ as TFRS (positive corrected)",
                            dict(loss="sampled_softmax", negatives="mixed", logq="standard")),
}
# The rows run when --rows is empty (the paper's Table 1).
PAPER_ROWS = [r for r in ROWS if r != "mixed_standard_tfrs"]

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
  settings = dict(ROWS[row][1], **setting_data(setting), model="sasrec", seed=seed,
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


def mean_std(values: List[float]):
  n = len(values)
  if n == 0:
    return None, None
  mean = sum(values) / n
  std = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5 if n > 1 else None
  return mean, std  # one seed: no spread to report (None), not a zero std


def fmt(mean, std):
  if mean is None:
    return "—"
  return f"{mean:.4f}" if std is None else f"{mean:.4f} ± {std:.4f}"


def table(results: Dict, settings: List[str], rows: List[str]) -> str:
  lines = [f"# Table 1 reproduction (budget={FLAGS.budget})", "",
           "Mean ± sample std over seeds of exact-search metrics (rated items filtered). "
           "Paper columns: Table 1 of the paper (5 runs, early stopping).", ""]
  for setting in settings:
    paper = PAPER.get(setting, {})
    lines += [f"## {setting}", "",
              "| row | R@20 | NDCG@20 | paper R@20 | paper NDCG@20 | R@10 | R@100 | seeds | "
              "train min/run |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
      runs = results.get(setting, {}).get(row, [])
      cells = []
      for key in ("recall@20", "ndcg@20"):
        cells.append(fmt(*mean_std([r["metrics"][key] for r in runs])))
      p = paper.get(row)
      cells += [f"{p[0]:.4f}" if p else "—", f"{p[1]:.4f}" if p else "—"]
      for key in ("recall@10", "recall@100"):
        cells.append(fmt(*mean_std([r["metrics"][key] for r in runs])))
      minutes = mean_std([r["train_seconds"] / 60 for r in runs if r.get("train_seconds")])[0]
      cells += [str(len(runs)), "—" if minutes is None else f"{minutes:.1f}"]
      lines.append(f"| {ROWS[row][0]} | " + " | ".join(cells) + " |")
    lines.append("")
  return "\n".join(lines)


def plot_popularity(results: Dict, setting: str, path: pathlib.Path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(8, 4))
  for row, runs in results.get(setting, {}).items():
    curves = [r["popularity"]["recall@20"] for r in runs if "popularity" in r]
    if curves:
      mean = [sum(c[b] for c in curves) / len(curves) for b in range(len(curves[0]))]
      ax.plot(range(len(mean)), mean, "o-", label=ROWS[row][0], ms=3)
  ax.set_xlabel("target popularity decile (0 = most popular items)")
  ax.set_ylabel("Recall@20 (exact)")
  ax.set_title(setting)
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def plot_curves(out: pathlib.Path, setting: str, rows: List[str], seeds: List[int],
                path: pathlib.Path):
  """Validation Recall@20 against training step of every row (mean over seeds), from each run's
  model/history.json."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(8, 4))
  drawn = 0
  for row in rows:
    curves = []
    for seed in seeds:
      hist = out / FLAGS.budget / setting / row / f"seed{seed}" / "model" / "history.json"
      if hist.exists():
        curves.append([(h["step"], h["val_recall@20"]) for h in json.loads(hist.read_text())
                       if "val_recall@20" in h])
    if curves:
      n = min(len(c) for c in curves)
      steps = [curves[0][i][0] for i in range(n)]
      mean = [sum(c[i][1] for c in curves) / len(curves) for i in range(n)]
      ax.plot(steps, mean, "-", label=ROWS[row][0])
      drawn += 1
  if not drawn:
    plt.close(fig)
    return
  ax.set_xlabel("training step")
  ax.set_ylabel("validation Recall@20")
  ax.set_title(f"{setting}: learning curves (mean over seeds)")
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main(argv):
  del argv
  rows = FLAGS.rows or PAPER_ROWS
  unknown = [r for r in rows if r not in ROWS]
  if unknown:
    raise app.UsageError(f"unknown rows {unknown}; choose from {list(ROWS)}")
  seeds = [int(s) for s in FLAGS.seeds] or ([0] if FLAGS.budget == "cpu" else [0, 1, 2, 3, 4])
  settings = list(FLAGS.settings)
  base = base_config()
  out = pathlib.Path(FLAGS.out)
  results: Dict = {}
  failures = []
  total_start = time.perf_counter()
  for setting in settings:
    for row in rows:
      for seed in seeds:
        run_dir = out / FLAGS.budget / setting / row / f"seed{seed}"
        train_cmd, eval_cmd = run_commands(base, setting, row, seed, run_dir)
        result_path = run_dir / "eval" / "eval_results.json"
        if FLAGS.dry_run:
          print(" ".join(train_cmd))
          print(" ".join(eval_cmd))
          continue
        record = {}
        if FLAGS.overwrite or not result_path.exists():
          run_dir.mkdir(parents=True, exist_ok=True)
          start = time.perf_counter()
          ok = True
          for name, cmd in (("train", train_cmd), ("eval", eval_cmd)):
            t0 = time.perf_counter()
            with open(run_dir / f"{name}.log", "w") as log:
              proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT)
            record[f"{name}_seconds"] = time.perf_counter() - t0
            if proc.returncode != 0:
              failures.append(f"{setting}/{row}/seed{seed} ({name}: rc {proc.returncode}, "
                              f"see {run_dir / (name + '.log')})")
              ok = False
              break
          print(f"{setting} {row} seed {seed}: {'ok' if ok else 'FAILED'} in "
                f"{time.perf_counter() - start:.0f}s", flush=True)
          if not ok:
            continue
          (run_dir / "timing.json").write_text(json.dumps(record))
        elif (run_dir / "timing.json").exists():
          record = json.loads((run_dir / "timing.json").read_text())
        res = json.loads(result_path.read_text())
        record.update({"seed": seed, "metrics": res["metrics"]["exact"],
                       "scann_metrics": res["metrics"]["scann"],
                       "popularity": res["popularity"]})
        results.setdefault(setting, {}).setdefault(row, []).append(record)
  if FLAGS.dry_run:
    print(f"SUMMARY reproduce dry run: {len(settings)} settings x {len(rows)} rows x "
          f"{len(seeds)} seeds = {len(settings) * len(rows) * len(seeds)} runs (budget "
          f"{FLAGS.budget})")
    return
  out.mkdir(parents=True, exist_ok=True)
  md = table(results, settings, rows)
  if failures:
    md += "\nFailed runs:\n" + "\n".join(f"- {f}" for f in failures) + "\n"
  (out / f"reproduce_{FLAGS.budget}.md").write_text(md)
  (out / f"reproduce_{FLAGS.budget}.json").write_text(json.dumps(results, indent=2))
  for setting in settings:
    if results.get(setting):
      plot_popularity(results, setting, out / f"recall_by_popularity_{setting}.png")
      plot_curves(out, setting, rows, seeds, out / f"learning_curves_{setting}.png")
  print(md)
  done = sum(len(v) for s in results.values() for v in s.values())
  best = []
  for setting, by_row in results.items():
    ranked = sorted(by_row, key=lambda r: -mean_std([x["metrics"]["ndcg@20"]
                                                     for x in by_row[r]])[0])
    best.append(f"{setting}: best NDCG@20 {ranked[0]}")
  print(f"SUMMARY reproduce budget={FLAGS.budget}: {done} runs ok, {len(failures)} failed, "
        f"{time.perf_counter() - total_start:.0f}s; " + "; ".join(best)
        + f"; table in {out / f'reproduce_{FLAGS.budget}.md'}")


def run():
  """Console-script entry point (tfrs-logq-reproduce)."""
  config_flags.expose_in_help(__name__)
  app.run(main)


if __name__ == "__main__":
  run()
