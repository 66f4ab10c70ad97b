"""The finished runs of a folder on disk (layout `run_dir`), read back as records: the runs of
`python -m bench.launch`, of `bench/paper_loop.py` and of `python -m train.keras3 --seeds`."""

from __future__ import annotations

import json
import pathlib
from typing import Dict, List, Optional, Sequence

from bench.launch.rows import PAPER_LOOP_ROWS
from train.config import RunConfig


def run_dir(out: pathlib.Path, budget: str, setting: str, row: str, seed: int) -> pathlib.Path:
  """Where one run lives: <out>/<setting>/<row>/seed<seed> (budget ""), as `python -m
  bench.launch` writes it, or <out>/<budget>/<setting>/<row>/seed<seed> in an older tree."""
  return out / budget / setting / row / f"seed{seed}"


def seeds_found(
  out: pathlib.Path, budget: str, setting: str, row: str, finished: bool = True
) -> List[int]:
  """Seeds with a finished run (eval/eval_results.json) of one row; with finished=False, every
  seed with a run folder (started, perhaps unfinished or failed)."""
  row_dir = out / budget / setting / row
  if not row_dir.is_dir():
    return []
  return sorted(
    int(p.name[4:])
    for p in row_dir.glob("seed*")
    if p.name[4:].isdigit() and (not finished or (p / "eval" / "eval_results.json").exists())
  )


def subfolders(path: pathlib.Path) -> List[str]:
  """The names of the folders in ``path``, sorted (none when it is not a folder)."""
  return sorted(p.name for p in path.iterdir() if p.is_dir()) if path.is_dir() else []


def read_json(path: pathlib.Path):
  """The JSON in `path`, or None when it is absent or unreadable (e.g. being written)."""
  try:
    return json.loads(path.read_text())
  except (OSError, ValueError):
    return None


# The validation metrics of a run's curve (keys of model/history.json).
CURVES = ("val_recall@20", "val_ndcg@10")
# What a run's metrics JSON says of its training, copied into its record.
TRAINING_KEYS = (
  "best_step",
  "best_epoch",
  "epochs_done",
  "global_step",
  "stopped_early",
  "train_wall_seconds",
)


def _add_training(record: dict, metrics, history) -> None:
  """Adds to ``record`` the validation curve of ``history`` (its CURVES keys by step) and the
  TRAINING_KEYS that ``metrics`` (a run's metrics JSON, or None) holds."""
  record["curve"] = [
    {k: h[k] for k in ("step", *CURVES) if k in h}
    for h in history
    if isinstance(h, dict) and "step" in h
  ]
  if isinstance(metrics, dict):
    record.update({key: metrics[key] for key in TRAINING_KEYS if key in metrics})


def load_run(out: pathlib.Path, budget: str, setting: str, row: str, seed: int) -> Optional[dict]:
  """The record of one finished run (None if its eval results are absent or unreadable):
  exact and ScaNN metrics, recall by popularity decile, the validation curve, timing, and the
  training flags (from train_metrics.json, as `python -m train` takes them)."""
  folder = run_dir(out, budget, setting, row, seed)
  result = read_json(folder / "eval" / "eval_results.json")
  if not isinstance(result, dict) or "metrics" not in result:
    return None
  record = dict(setting=setting, row=row, seed=seed, run_dir=str(folder))
  launched = read_json(folder / "run.json") or {}  # python -m bench.launch's record of the run
  record.update({k: launched[k] for k in ("train_seconds", "eval_seconds") if k in launched})
  record.update(read_json(folder / "timing.json") or {})  # an older tree's timing
  record.update(
    metrics=result["metrics"]["exact"],
    scann_metrics=result["metrics"].get("scann"),
    popularity=result.get("popularity"),
  )
  train_metrics = read_json(folder / "train_metrics.json")
  history = (
    read_json(folder / "model" / "history.json")  # python -m train; train.keras3:
    or (train_metrics or {}).get("history")
    or []
  )  # in its metrics JSON only
  _add_training(record, train_metrics, history)
  if isinstance(train_metrics, dict) and "config" in train_metrics:
    try:
      record["train_flags"] = RunConfig.from_dict(train_metrics["config"]).to_flags(
        only_changed=True
      )
    except (TypeError, ValueError, KeyError):
      pass  # a configuration of another version of the binary: the record goes without it
  return record


def collect(
  out: pathlib.Path,
  budget: str,
  settings: Sequence[str],
  rows: Sequence[str],
  seeds: Optional[Sequence[int]] = None,
):
  """The finished runs under `out`: {setting: {row: {seed: record}}}, and the missing runs.

  Every seed found is taken, or only `seeds` when given. A run is missing when its row lacks a
  finished run of a seed that `seeds` names, or, without `seeds`, that has a run folder in any
  selected row of the setting.
  """
  results: Dict = {}
  missing = []
  for setting in settings:
    found = {
      row: [s for s in seeds_found(out, budget, setting, row) if seeds is None or s in seeds]
      for row in rows
    }
    wanted = (
      set(seeds)
      if seeds is not None
      else {s for row in rows for s in seeds_found(out, budget, setting, row, finished=False)}
    )
    for row in rows:
      for seed in sorted(wanted):
        record = load_run(out, budget, setting, row, seed) if seed in found[row] else None
        if record is None:
          folder = run_dir(out, budget, setting, row, seed)
          missing.append(
            dict(
              setting=setting,
              row=row,
              seed=seed,
              run_dir=str(folder),
              reason=(
                "no eval results yet (unfinished or failed)" if folder.exists() else "not run"
              ),
            )
          )
        else:
          results.setdefault(setting, {}).setdefault(row, {})[seed] = record
  return results, missing


def write_binary_test_results(folder: pathlib.Path) -> dict:
  """A run of a binary that evaluates test itself (python -m train.keras3, whose export on JAX
  is a .keras file that eval.evaluate does not read): its train_metrics.json ``test`` metrics
  (train.validation: every item scored, rated items filtered, as eval.evaluate's exact search)
  written as eval/eval_results.json, so the report reads it as any run."""
  train_metrics = read_json(folder / "train_metrics.json")
  if not isinstance(train_metrics, dict) or not isinstance(train_metrics.get("test"), dict):
    raise ValueError(f"{folder / 'train_metrics.json'} has no test metrics")
  test = {k: v for k, v in train_metrics["test"].items() if k != "num_queries"}
  result = dict(
    num_queries=train_metrics["test"].get("num_queries"),
    metrics=dict(exact=test),
    source="train_metrics.json test (the training binary's own evaluation)",
  )
  (folder / "eval").mkdir(parents=True, exist_ok=True)
  (folder / "eval" / "eval_results.json").write_text(json.dumps(result, indent=2))
  return result


def is_paper_loop_tree(out: pathlib.Path) -> bool:
  """Whether `out` holds runs of the paper's own scripts: <out>/<logq>/seed<s>/metrics.json."""
  return any(out.glob("*/seed*/metrics.json")) and all(
    p.parent.parent.name in PAPER_LOOP_ROWS for p in out.glob("*/seed*/metrics.json")
  )


def collect_paper_loop(
  out: pathlib.Path, rows: Optional[Sequence[str]] = None
) -> Dict[str, Dict[int, dict]]:
  """{row: {seed: record}} of the finished `bench/paper_loop.py` runs under `out`, laid out as
  <out>/<logq>/seed<s>/metrics.json (a run is finished when its JSON is there and it was not
  stopped by --max_seconds); records as `load_run`'s: test metrics, the validation curve and
  the TRAINING_KEYS (best epoch, epochs, steps to the best epoch, training wall-clock)."""
  found: Dict[str, Dict[int, dict]] = {}
  for logq, row in PAPER_LOOP_ROWS.items():
    runs = collect_seed_runs(out / logq, row) if rows is None or row in rows else {}
    if runs:
      found[row] = runs
  return found


def collect_seed_runs(folder: pathlib.Path, row: str) -> Dict[int, dict]:
  """{seed: record} of the finished runs <folder>/seed<s>/metrics.json: the JSON is there,
  holds ``test`` metrics and was not stopped by --max_seconds (a `bench/paper_loop.py` run, or
  what `python -m train.keras3 --seeds=...` writes); records as `load_run`'s (row ``row``)."""
  found: Dict[int, dict] = {}
  for run in sorted(folder.glob("seed*")):
    m = read_json(run / "metrics.json")
    if not run.name[4:].isdigit() or not isinstance(m, dict) or "test" not in m:
      continue
    if m.get("stopped_by_time"):
      continue
    seed = int(run.name[4:])
    record = dict(row=row, seed=seed, run_dir=str(run), metrics=m["test"])
    _add_training(record, m, m.get("history") or [])
    found[seed] = record
  return found
