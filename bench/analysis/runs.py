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


def seed_folders(folder: pathlib.Path, under: str = "") -> List[int]:
  """The seeds of the run folders FOLDER/UNDERseed<s> (started, perhaps unfinished or failed)."""
  found = folder.glob(f"{under}seed*")
  return sorted(int(p.name[4:]) for p in found if p.name[4:].isdigit() and p.is_dir())


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
  """The record of one finished run (None without readable eval results): metrics, popularity,
  curve, timing and training flags (train_metrics.json's config as `python -m train` flags)."""
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
  train_metrics = read_json(folder / "train_metrics.json") or {}
  # python -m train writes model/history.json; train.keras3 the history in its metrics JSON only
  history = read_json(folder / "model" / "history.json") or train_metrics.get("history") or []
  _add_training(record, train_metrics, history)
  if "config" in train_metrics:
    try:
      config = RunConfig.from_dict(train_metrics["config"])
      record["train_flags"] = config.to_flags(only_changed=True)
    except (TypeError, ValueError, KeyError):
      pass  # a configuration of another version of the binary: the record goes without it
  return record


def collect(
  out: pathlib.Path,
  budget: str,
  settings: Sequence[str],
  rows: Sequence[str],
  seeds: Optional[Sequence[int]] = None,
) -> tuple:
  """The finished runs under `out`: {setting: {row: {seed: record}}}, and the missing runs: a
  row's seeds that ``seeds`` names, or without it that have a run folder in any of ``rows``."""
  results: Dict = {}
  missing = []
  for setting in settings:
    started = {s for row in rows for s in seed_folders(out / budget / setting / row)}
    wanted = started if seeds is None else set(seeds)
    for row in rows:
      for seed in sorted(wanted):
        record = load_run(out, budget, setting, row, seed)
        if record is not None:
          results.setdefault(setting, {}).setdefault(row, {})[seed] = record
          continue
        folder = run_dir(out, budget, setting, row, seed)
        reason = "no eval results yet (unfinished or failed)" if folder.exists() else "not run"
        missing.append(
          dict(setting=setting, row=row, seed=seed, run_dir=str(folder), reason=reason)
        )
  return results, missing


def write_binary_test_results(folder: pathlib.Path) -> dict:
  """The train_metrics.json ``test`` metrics of a binary that evaluates test itself (python -m
  train.keras3: its JAX export is a .keras file eval.evaluate does not read; the same protocol as
  eval.evaluate's exact search) written as eval/eval_results.json, read as any run's."""
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
  """{row: {seed: record}} of the finished `bench/paper_loop.py` runs under `out`,
  <out>/<logq>/seed<s>/metrics.json (`collect_seed_runs`)."""
  found = {
    row: collect_seed_runs(out / logq, row)
    for logq, row in PAPER_LOOP_ROWS.items()
    if rows is None or row in rows
  }
  return {row: runs for row, runs in found.items() if runs}


def collect_seed_runs(folder: pathlib.Path, row: str) -> Dict[int, dict]:
  """{seed: record} of the finished runs <folder>/seed<s>/metrics.json (of `bench/paper_loop.py`
  or `python -m train.keras3 --seeds`: ``test`` metrics, not stopped by --max_seconds), records
  as `load_run`'s (row ``row``)."""
  found: Dict[int, dict] = {}
  for run in sorted(folder.glob("seed*")):
    m = read_json(run / "metrics.json")
    if not run.name[4:].isdigit() or not isinstance(m, dict) or "test" not in m:
      continue
    if m.get("stopped_by_time"):  # paused by --max_seconds
      continue
    seed = int(run.name[4:])
    record = dict(row=row, seed=seed, run_dir=str(run), metrics=m["test"])
    _add_training(record, m, m.get("history") or [])
    found[seed] = record
  return found
