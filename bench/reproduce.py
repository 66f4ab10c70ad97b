r"""Reproduces the rows of Table 1 of "Correcting the LogQ Correction" (RecSys '25).

Each run trains SASRec with one loss / negative sampler / logQ correction through the training
binary and evaluates the export through the evaluation binary (the paper's protocol: all
items scored, rated items filtered, Recall@20 / NDCG@20 over all test queries):

  python -m train --dataset=... --loss=... --negatives=... --logq=... --seed=s \
      --epochs=E --steps_per_epoch=48 [--early_stopping_patience=P] --model_dir=... --export_dir=...
  python -m eval.evaluate --export_dir=... --dataset=... --output_dir=...

and the table reports mean ± std over seeds beside the published numbers.

Settings (--settings):
  ml1m_loo         ML-1M, gSASRec leave-one-out files (--ml1m_dir, default ../shared/data/ml1m)
  ml100k_temporal  ML-100K raw u.data, global temporal split (not in the paper: no published row)
  ml1m_temporal    ML-1M raw ratings.dat (user supplied: --ml1m_ratings), temporal split
Budgets:
  --budget=cpu   fixed --cpu_epochs epochs of 48 steps per run (default 15 = 720 steps), no early
                 stopping, one seed by default: about 10-12 min per ML-1M row on 2 cores.
  --budget=full  the paper's protocol: early stopping on validation NDCG@10 with patience 200
                 epochs of 48 steps, 5 seeds (a GPU machine).
Selection: --rows=mixed_corrected,full_softmax --seeds=0,1 --settings=ml1m_loo; --dry_run prints
the commands. Finished runs (eval_results.json present) are reused unless --overwrite.

Writes <out>/reproduce_<budget>.md and .json, recall_by_popularity_<setting>.png (Recall@20
of each row by the target's popularity decile) and learning_curves_<setting>.png (validation
Recall@20 against training step). The last printed line is a one-line summary.
"""

import json
import pathlib
import subprocess
import sys
import time
from typing import Dict, List

from absl import app
from absl import flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"

FLAGS = flags.FLAGS
flags.DEFINE_enum("budget", "cpu", ["cpu", "full"], "cpu: fixed epochs; full: early stopping.")
flags.DEFINE_list("rows", [], "Rows to run (default: all). See ROWS.")
flags.DEFINE_list("seeds", [], "Seeds (default: 0 for cpu, 0..4 for full).")
flags.DEFINE_list("settings", ["ml1m_loo", "ml100k_temporal"],
                  "ml1m_loo, ml100k_temporal, ml1m_temporal (needs --ml1m_ratings).")
flags.DEFINE_string("ml1m_dir", str(DATA / "ml1m"), "gSASRec ML-1M folder.")
flags.DEFINE_string("ml100k_dir", str(DATA / "ml-100k"), "Raw ML-100K folder (u.data).")
flags.DEFINE_string("ml1m_ratings", None, "Raw ML-1M ratings.dat for the temporal split.")
flags.DEFINE_integer("cpu_epochs", 15, "Epochs per run with --budget=cpu (15 x 48 = 720 steps, the "
                     "point where the shared data README quotes the paper's code).")
flags.DEFINE_bool("reference_model", True,
                  "Train as the paper's code does: the original SASRec block "
                  "(--sasrec_block=reference) and fresh uniform negatives per position "
                  "(--uniform_negatives_per_position). With --noreference_model the train "
                  "binary's defaults (pre-LN block, uniform negatives shared by the batch) are "
                  "used; they learn more slowly under logQ (see README).")
flags.DEFINE_integer("steps_per_epoch", 48, "Steps per epoch (the paper's code: 48 on ML-1M).")
flags.DEFINE_integer("full_max_epochs", 100_000, "Epoch cap with --budget=full.")
flags.DEFINE_integer("patience", 200, "Early-stopping patience (epochs) with --budget=full.")
flags.DEFINE_integer("batch_size", 128, "Training batch size (gSASRec default).")
flags.DEFINE_integer("num_negatives", 256, "Negatives for gBCE / sampled softmax (paper: 256).")
flags.DEFINE_list("train_args", [], "Extra flags passed to train (e.g. --max_len=200).")
flags.DEFINE_string("out", "bench/out/reproduce", "Output folder (runs, table, plots).")
flags.DEFINE_bool("dry_run", False, "Print the commands without running them.")
flags.DEFINE_bool("overwrite", False, "Re-run runs whose results exist.")

# Row name -> (label, train.train flags). Mixed negatives: 128 uniform + 128 in-batch with
# unigram log Q (the paper's convention) is the train binary's `mixed` sampler. "Standard logQ" of
# the paper's Table 1 is what its code runs (train_mns_log_old.py): negatives corrected by
# log Q(d) = log(#d / N), the positive's score left uncorrected in the denominator, i.e. our
# `standard_no_positive`; `mixed_standard_tfrs` is the TFRS form for comparison.
ROWS: Dict[str, tuple] = {
    "bce": ("BCE (1 uniform negative)", ["--loss=bce", "--negatives=uniform",
                                         "--num_negatives=1", "--logq=none"]),
    "gbce": ("gBCE", ["--loss=gbce", "--negatives=uniform", "--logq=none"]),
    "ss_uniform": ("Sampled softmax, uniform negatives",
                   ["--loss=sampled_softmax", "--negatives=uniform", "--logq=none"]),
    "inbatch_none": ("In-batch, without logQ",
                     ["--loss=sampled_softmax", "--negatives=in_batch", "--logq=none"]),
    "inbatch_standard": ("In-batch, standard logQ",
                         ["--loss=sampled_softmax", "--negatives=in_batch",
                          "--logq=standard_no_positive"]),
    "inbatch_corrected": ("In-batch, improved logQ",
                          ["--loss=sampled_softmax", "--negatives=in_batch", "--logq=corrected"]),
    "mixed_none": ("Mixed, without logQ",
                   ["--loss=sampled_softmax", "--negatives=mixed", "--logq=none"]),
    "mixed_standard": ("Mixed, standard logQ",
                       ["--loss=sampled_softmax", "--negatives=mixed",
                        "--logq=standard_no_positive"]),
    "mixed_corrected": ("Mixed, improved logQ",
                        ["--loss=sampled_softmax", "--negatives=mixed", "--logq=corrected"]),
    "full_softmax": ("Full softmax", ["--loss=full_softmax", "--logq=none"]),
    # Not in the paper: the TFRS form of standard logQ (the positive's column corrected too).
    "mixed_standard_tfrs": ("Mixed, standard logQ as TFRS (positive corrected)",
                            ["--loss=sampled_softmax", "--negatives=mixed", "--logq=standard"]),
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


def setting_args(setting: str) -> List[str]:
  """Dataset flags shared by `python -m train` and eval.evaluate."""
  if setting == "ml1m_loo":
    return ["--dataset=ml1m", f"--data_path={FLAGS.ml1m_dir}", "--split=leave_one_out"]
  if setting == "ml100k_temporal":
    return ["--dataset=movielens_raw", f"--data_path={FLAGS.ml100k_dir}", "--split=temporal"]
  if setting == "ml1m_temporal":
    if not FLAGS.ml1m_ratings:
      raise app.UsageError("ml1m_temporal needs --ml1m_ratings=<path to ratings.dat>")
    return ["--dataset=movielens_raw", f"--data_path={FLAGS.ml1m_ratings}", "--split=temporal"]
  raise app.UsageError(f"unknown setting {setting!r}")


REFERENCE_FLAGS = ["--sasrec_block=reference", "--uniform_negatives_per_position"]


def reference_flags() -> List[str]:
  """The paper code's model and negatives (``--reference_model``), else nothing."""
  return list(REFERENCE_FLAGS) if FLAGS.reference_model else []


def run_commands(setting: str, row: str, seed: int, run_dir: pathlib.Path) -> List[List[str]]:
  py = sys.executable
  if FLAGS.budget == "cpu":
    budget = [f"--epochs={FLAGS.cpu_epochs}"]  # a few epochs: early stopping never triggers
  else:
    budget = [f"--epochs={FLAGS.full_max_epochs}", f"--early_stopping_patience={FLAGS.patience}"]
  row_flags = ROWS[row][1]
  negatives = ([] if any(a.startswith("--num_negatives") for a in row_flags)
               else [f"--num_negatives={FLAGS.num_negatives}"])
  train = ([py, "-m", "train", "--model=sasrec", *setting_args(setting), *row_flags,
            *negatives, f"--seed={seed}", f"--batch_size={FLAGS.batch_size}",
            f"--steps_per_epoch={FLAGS.steps_per_epoch}", *budget, *reference_flags(),
            f"--model_dir={run_dir / 'model'}", f"--export_dir={run_dir / 'export'}",
            f"--metrics_json={run_dir / 'train_metrics.json'}", *FLAGS.train_args])
  evaluate = [py, "-m", "eval.evaluate", f"--export_dir={run_dir / 'export'}",
              *setting_args(setting), f"--output_dir={run_dir / 'eval'}", "--ks=10,20,100",
              "--timing_repeats=1"]
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
  out = pathlib.Path(FLAGS.out)
  if not out.is_absolute():
    out = ROOT / out
  results: Dict = {}
  failures = []
  total_start = time.perf_counter()
  for setting in settings:
    for row in rows:
      for seed in seeds:
        run_dir = out / FLAGS.budget / setting / row / f"seed{seed}"
        train_cmd, eval_cmd = run_commands(setting, row, seed, run_dir)
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
              proc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
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


if __name__ == "__main__":
  app.run(main)
