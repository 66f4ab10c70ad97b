"""The runs of an experiment: each one's whole configuration (a `train.config.RunConfig`), its
folder and its commands; and the programs of ``arrange = "program"``.

    order        repeat -> setting -> seed -> arm: a seed's paired arms finish together
    folder       <out>/<setting>/<arm>/seed<s>   (repeat k > 0: <out>/r<k>/<setting>/...)
    config       RunConfig() with steps_per_epoch 48 and no progress bar, the experiment's
                 [base] (and [per_setting.<setting>]), the paper code's preset unless [base]
                 sets its keys (reference_model), the setting's defaults unless [base] sets
                 them, then the row, the data, the seed, the budget and the folders
    commands     tf_keras   python -m train FLAGS, then (evaluate = "eval") python -m
                            eval.evaluate on the export
                 keras3_B   python -m train.keras3 --backend=B FLAGS (its own test metrics)
                 paper      python -m bench.paper_loop (the paper's script, mixed rows only)
                 each followed, for its own test metrics, by python -m bench.table1.results
                 RUN_DIR (eval/eval_results.json from train_metrics.json)
    finished     <run>/eval/eval_results.json exists

The flags are those that differ from RunConfig's defaults (a pinned older checkout need not know
newer settings).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench.launch import rows as rows_lib
from bench.launch.experiment import Arm, Experiment
from eval.config import EvalConfig
from train.config import RunConfig

__all__ = ["Run", "Program", "plan", "programs", "setting_data", "base_config"]

# A small generated catalog (no download), for tests and a quick look: its data and model size.
SYNTHETIC = dict(
  dataset="synthetic",
  synthetic_users=300,
  synthetic_items=120,
  synthetic_min_len=5,
  synthetic_max_len=25,
)
SYNTHETIC_MODEL = dict(
  max_len=20, steps_per_epoch=5, embedding_dim=16, num_blocks=1, batch_size=32, num_negatives=16
)
PAPER_LOGQ = {row: logq for logq, row in rows_lib.PAPER_LOOP_ROWS.items()}
# The settings a run's folder, seed and budget fix (never [base]'s).
PER_RUN = (
  "seed",
  "epochs",
  "early_stopping_patience",
  "model_dir",
  "export_dir",
  "metrics_json",
  "model",
  "loss",
  "negatives",
  "logq",
)


@dataclasses.dataclass
class Run:
  """One (setting, arm, seed, repeat): its configuration (None for the paper's script), folder
  and commands (argv lists, run in ``code`` with it on PYTHONPATH)."""

  setting: str
  arm: Arm
  seed: int
  repeat: int
  folder: pathlib.Path
  config: Optional[RunConfig]
  commands: List[List[str]]
  code: pathlib.Path
  keras3_flags: Tuple[str, ...] = ()

  @property
  def key(self) -> str:
    tail = f" r{self.repeat}" if self.repeat else ""
    return f"{self.setting}/{self.arm.name}/seed{self.seed}{tail}"

  @property
  def finished(self) -> bool:
    return (self.folder / "eval" / "eval_results.json").exists()


@dataclasses.dataclass
class Program:
  """Runs trained as one `python -m train.keras3 --backend=jax --seeds=... [--logqs=...]`
  program (`train.keras3.seeds`): the command, its folder, and the runs' folders in it."""

  runs: List[Run]
  folder: pathlib.Path
  command: List[str]
  code: pathlib.Path
  links: Dict[pathlib.Path, pathlib.Path]  # run folder -> where the program writes it


def setting_data(setting: str, root: pathlib.Path, paths: Dict[str, str]) -> Dict[str, Any]:
  """The DataConfig settings of a setting; ``paths`` (the experiment's [paths]) overrides the
  files under the data ``root``: ml1m_dir, ml100k_dir, ml1m_ratings, gsasrec_dir, amazon_sports."""

  def path(key: str, default: Optional[pathlib.Path]) -> str:
    if key in paths:
      return str(paths[key])
    if default is None:
      raise ValueError(f"setting {setting!r} needs [paths] {key} = <path>")
    return str(default)

  if setting == "ml1m_loo":
    return dict(dataset="ml1m", data_path=path("ml1m_dir", root / "ml1m"), split="leave_one_out")
  if setting == "ml100k_temporal":
    return dict(
      dataset="movielens_raw", data_path=path("ml100k_dir", root / "ml-100k"), split="temporal"
    )
  if setting == "ml1m_temporal":
    return dict(dataset="movielens_raw", data_path=path("ml1m_ratings", None), split="temporal")
  if setting == "gsasrec_loo":
    return dict(dataset="gsasrec", data_path=path("gsasrec_dir", None), split="leave_one_out")
  if setting == "amazon_sports_loo":
    default = root / "amazon-sports" / "sequences.txt"
    return dict(
      dataset="sequences", data_path=path("amazon_sports", default), split="leave_one_out"
    )
  if setting == "synthetic":
    return dict(SYNTHETIC)
  raise ValueError(f"unknown setting {setting!r}")


def setting_defaults(setting: str) -> Dict[str, Any]:
  """Base settings a setting changes unless [base] gives them."""
  if setting == "synthetic":
    return dict(SYNTHETIC_MODEL)
  return dict(rows_lib.SETTING_DEFAULTS.get(setting, {}))


def base_config(experiment: Experiment, setting: str) -> Tuple[RunConfig, set]:
  """The configuration every run of ``setting`` starts from, and the names [base] set."""
  given = dict(experiment.base)
  per_setting = experiment.per_setting.get(setting, {})
  bad = sorted((set(given) | set(per_setting)) & set(PER_RUN))
  if bad:
    raise ValueError(f"[base] cannot set {bad}: rows, seeds and the budget set them")
  settings: Dict[str, Any] = dict(steps_per_epoch=48, progress=False)
  settings.update({k: v for k, v in setting_defaults(setting).items() if k not in given})
  if experiment.reference_model:
    settings.update({k: v for k, v in rows_lib.PAPER_CODE.items() if k not in given})
  settings.update(given)
  return RunConfig().replace(**settings), set(given) | set(per_setting)


def _budget(experiment: Experiment) -> Dict[str, Any]:
  b = experiment.budget
  if "epochs" in b:
    return dict(epochs=int(b["epochs"]))  # a few epochs: no early stopping
  return dict(epochs=int(b.get("max_epochs", 100_000)), early_stopping_patience=int(b["patience"]))


def run_config(
  experiment: Experiment,
  setting: str,
  arm: Arm,
  seed: int,
  folder: pathlib.Path,
  root: pathlib.Path,
) -> RunConfig:
  """The whole configuration of one run (module docstring)."""
  base, given = base_config(experiment, setting)
  settings: Dict[str, Any] = dict(rows_lib.ROWS[arm.row][1])
  data = setting_data(setting, root, experiment.paths)
  settings.update(
    {k: v for k, v in data.items() if k not in given},  # [base] may size the synthetic world
    model="sasrec",
    seed=seed,
    model_dir=str(folder / "model"),
    export_dir=str(folder / "export"),
    metrics_json=str(folder / "train_metrics.json"),
    **_budget(experiment),
  )
  settings.update(experiment.per_setting.get(setting, {}))  # with the data: it may name its split
  if experiment.reference_model and settings["logq"] == "corrected" and "ratio_floor" not in given:
    settings["ratio_floor"] = rows_lib.PAPER_CORRECTED_RATIO_FLOOR
  return base.replace(**settings)


def _paper_command(experiment: Experiment, run: Run, root: pathlib.Path, python: str) -> List[str]:
  if run.arm.row not in PAPER_LOGQ:
    raise ValueError(f"the paper's script trains {sorted(PAPER_LOGQ)}, not {run.arm.row!r}")
  data = setting_data(run.setting, root, experiment.paths)
  dataset = {"ml1m": "ml1m", "gsasrec": "gsasrec", "sequences": "sequences"}.get(data["dataset"])
  if dataset is None or data.get("split") != "leave_one_out":
    raise ValueError(f"the paper's script reads leave-one-out files, not {run.setting!r}")
  budget = _budget(experiment)
  flags = [
    f"--dataset={dataset}",
    f"--data_path={data['data_path']}",
    f"--patience={budget.get('early_stopping_patience', budget['epochs'])}",
    f"--max_epochs={budget['epochs']}",
    f"--seed={run.seed}",
    f"--logq={PAPER_LOGQ[run.arm.row]}",
    f"--metrics_json={run.folder / 'train_metrics.json'}",
    f"--checkpoint_dir={run.folder / 'model'}",
  ]
  per_setting = experiment.per_setting.get(run.setting, {})
  if "val_users" in per_setting:
    flags.append(f"--val_users={per_setting['val_users']}")
  if run.setting == "amazon_sports_loo":
    flags.append("--max_len=50")
  return [python, "-m", "bench.paper_loop", *flags, *experiment.paper_flags]


def train_command(run: Run, python: str, config: Optional[RunConfig] = None) -> List[str]:
  """The training command of a binary's run (``config``: the run's, or one changed by the
  launcher, e.g. its time budget)."""
  cfg = config or run.config
  assert cfg is not None
  flags = cfg.to_flags(only_changed=True)
  backend = run.arm.keras3_backend
  if backend:
    return [python, "-m", "train.keras3", f"--backend={backend}", *flags, *run.keras3_flags]
  return [python, "-m", "train", *flags]


def _own_results(run: Run, python: str) -> List[str]:
  return [python, "-m", "bench.table1.results", str(run.folder)]


def _eval_command(run: Run, python: str) -> List[str]:
  cfg = EvalConfig(
    export_dir=str(run.folder / "export"),
    output_dir=str(run.folder / "eval"),
    ks=(10, 20, 100),
    timing_repeats=1,
  )
  return [python, "-m", "eval.evaluate", *cfg.to_flags(only_changed=True)]


def folder_of(out: pathlib.Path, setting: str, arm: Arm, seed: int, repeat: int) -> pathlib.Path:
  top = out / f"r{repeat}" if repeat else out
  return top / setting / arm.name / f"seed{seed}"


def plan(
  experiment: Experiment,
  out: pathlib.Path,
  root: pathlib.Path,
  codes: Dict[str, pathlib.Path],
  here: pathlib.Path,
  python: str = sys.executable,
) -> List[Run]:
  """Every run of ``experiment`` in order (module docstring). ``root``: the data root;
  ``codes``: the experiment's [codes] as checkouts; ``here``: this tree."""
  runs: List[Run] = []
  for repeat in range(experiment.repeats):
    for setting in experiment.settings:
      for seed in experiment.seeds:
        arms = experiment.arms
        k = repeat % len(arms)
        for arm in arms[k:] + arms[:k]:  # a repeat rotates the order of the arms
          folder = folder_of(out, setting, arm, seed, repeat)
          code = codes[arm.code] if arm.code else here
          if arm.binary == "paper":
            run = Run(setting, arm, seed, repeat, folder, None, [], code)
            run.commands = [
              _paper_command(experiment, run, root, python),
              _own_results(run, python),
            ]
          else:
            cfg = run_config(experiment, setting, arm, seed, folder, root)
            keras3 = tuple(f"--{k}={v}" for k, v in experiment.keras3.items())
            run = Run(setting, arm, seed, repeat, folder, cfg, [], code, keras3)
            last = (
              _eval_command(run, python)
              if arm.binary == "tf_keras" and experiment.evaluate == "eval"
              else _own_results(run, python)
            )
            run.commands = [train_command(run, python), last]
          runs.append(run)
  return runs


def _program_key(run: Run) -> str:
  assert run.config is not None
  cfg = run.config.replace(
    seed=0, logq="none", ratio_floor=0.0, model_dir="-", export_dir="-", metrics_json="-"
  )
  text = json.dumps([run.setting, run.repeat, str(run.code), cfg.to_dict()], sort_keys=True)
  return hashlib.sha1(text.encode()).hexdigest()[:10]


def programs(runs: Sequence[Run], python: str = sys.executable) -> List[Program]:
  """The runs grouped into `--seeds` programs: runs whose configurations differ only in seed,
  logq (and its ratio floor) and folders share one. One row: the program's folder is the row's
  (its runs at <row>/seed<s>); several rows (--logqs): <setting>/program_<key>, the runs at
  <logq>/seed<s> in it, linked from each row's folder."""
  groups: Dict[str, List[Run]] = {}
  for run in runs:
    if run.arm.binary != "keras3_jax":
      raise ValueError(f"{run.key}: a program trains python -m train.keras3 --backend=jax runs")
    groups.setdefault(_program_key(run), []).append(run)
  out: List[Program] = []
  for key, members in groups.items():
    first = members[0]
    assert first.config is not None
    seeds = sorted({r.seed for r in members})
    logqs = list(dict.fromkeys(r.config.logq for r in members if r.config is not None))
    rows = list(dict.fromkeys(r.arm.name for r in members))
    if len(rows) != len(logqs):
      raise ValueError(f"rows {rows} of one program must differ in logq, got {logqs}")
    setting_dir = first.folder.parent.parent
    folder = setting_dir / (rows[0] if len(rows) == 1 else f"program_{key}")
    floors = [r.config.ratio_floor for r in members if r.config and r.config.logq == "corrected"]
    # The corrected row's clamp (train.keras3.seeds.variant_floors reads it off --ratio_floor).
    clamp = dict(logq="corrected", ratio_floor=floors[0]) if floors else {}
    cfg = first.config.replace(
      **clamp,
      seed=seeds[0],
      model_dir=str(folder),
      export_dir=str(folder / "export"),
      metrics_json=str(folder / "train_metrics.json"),
    )
    extra = [f"--seeds={','.join(map(str, seeds))}"]
    links: Dict[pathlib.Path, pathlib.Path] = {}
    if len(rows) > 1:
      extra.append(f"--logqs={','.join(logqs)}")
      links = {r.folder: folder / r.config.logq / f"seed{r.seed}" for r in members if r.config}
    command = [
      python,
      "-m",
      "train.keras3",
      "--backend=jax",
      *cfg.to_flags(only_changed=True, exclude=("logq",) if len(rows) > 1 else ()),
      *first.keras3_flags,
      *extra,
    ]
    out.append(Program(members, folder, command, first.code, links))
  return out
