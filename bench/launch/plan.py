"""The runs of an experiment, each one's whole configuration (a `train.config.RunConfig`),
folder and commands, and the programs of ``arrange = "program"``: bench/README.md, section
`launch/` (their order, folders, configurations and commands)."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import pathlib
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from bench.common.timing import rotated
from bench.launch import rows as rows_lib
from bench.launch.experiment import Arm, Experiment
from eval.config import EvalConfig
from train.config import RunConfig

__all__ = ["Run", "Program", "plan", "programs", "setting_data", "folder_of"]

PAPER_LOGQ = {row: logq for logq, row in rows_lib.PAPER_LOOP_ROWS.items()}
# The settings a run's row, seed and budget fix, and its folders (never [base]'s).
PER_RUN = {"model", "loss", "negatives", "logq", "seed", "epochs", "early_stopping_patience"}
PER_RUN |= {"model_dir", "export_dir", "metrics_json"}


@dataclasses.dataclass
class Run:
  """One (setting, arm, seed, repeat): its folder, checkout (``code``, on PYTHONPATH), its
  configuration (None for the paper's script) and commands (argv lists)."""

  setting: str
  arm: Arm
  seed: int
  repeat: int
  folder: pathlib.Path
  code: pathlib.Path
  config: Optional[RunConfig] = None
  commands: List[List[str]] = dataclasses.field(default_factory=list)
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
  command: List[str]  # run in its runs' checkout
  links: Dict[pathlib.Path, pathlib.Path]  # run folder -> where the program writes it


def setting_data(setting: str, root: pathlib.Path, paths: Dict[str, str]) -> Dict[str, Any]:
  """The DataConfig settings of a setting (`bench.launch.rows.DATA`); ``paths`` (the
  experiment's [paths]) overrides its file under the data ``root``."""
  if setting == "synthetic":
    return dict(rows_lib.SYNTHETIC)
  dataset, key, default = rows_lib.DATA[setting]
  if key not in paths and default is None:
    raise ValueError(f"setting {setting!r} needs [paths] {key} = <path>")
  path = paths[key] if key in paths else root / str(default)
  split = "leave_one_out" if setting.endswith("_loo") else "temporal"
  return dict(dataset=dataset, data_path=str(path), split=split)


def _budget(experiment: Experiment) -> Dict[str, Any]:
  b = experiment.budget
  if "epochs" in b:
    return dict(epochs=int(b["epochs"]))  # a few epochs: no early stopping
  return dict(epochs=int(b.get("max_epochs", 100_000)), early_stopping_patience=int(b["patience"]))


def run_config(experiment: Experiment, run: Run, root: pathlib.Path) -> RunConfig:
  """The whole configuration of a run (module docstring)."""
  given, folder = experiment.base, run.folder
  per_setting = experiment.per_setting.get(run.setting, {})
  bad = sorted((set(given) | set(per_setting)) & PER_RUN)
  if bad:
    raise ValueError(f"[base] cannot set {bad}: rows, seeds and the budget set them")
  data = setting_data(run.setting, root, experiment.paths)
  settings: Dict[str, Any] = {
    "steps_per_epoch": 48,
    "progress": False,
    **rows_lib.SETTING_DEFAULTS.get(run.setting, {}),
    **(rows_lib.PAPER_CODE if experiment.reference_model else {}),
    **given,
    **rows_lib.ROWS[run.arm.row][1],
    **{k: v for k, v in data.items() if k not in given},  # [base] may size the synthetic world
    "model": "sasrec",
    "seed": run.seed,
    "model_dir": str(folder / "model"),
    "export_dir": str(folder / "export"),
    "metrics_json": str(folder / "train_metrics.json"),
    **_budget(experiment),
    **per_setting,  # with the data: it may name its split
  }
  if experiment.reference_model and settings["logq"] == "corrected":
    settings.setdefault("ratio_floor", rows_lib.PAPER_CORRECTED_RATIO_FLOOR)
  return RunConfig().replace(**settings)


def _paper_command(experiment: Experiment, run: Run, root: pathlib.Path, python: str) -> List[str]:
  if run.arm.row not in PAPER_LOGQ:
    raise ValueError(f"the paper's script trains {sorted(PAPER_LOGQ)}, not {run.arm.row!r}")
  data = setting_data(run.setting, root, experiment.paths)
  if data["dataset"] not in ("ml1m", "gsasrec", "sequences") or data["split"] != "leave_one_out":
    raise ValueError(f"the paper's script reads leave-one-out files, not {run.setting!r}")
  budget = _budget(experiment)
  flags: Dict[str, Any] = dict(
    dataset=data["dataset"],
    data_path=data["data_path"],
    patience=budget.get("early_stopping_patience", budget["epochs"]),
    max_epochs=budget["epochs"],
    seed=run.seed,
    logq=PAPER_LOGQ[run.arm.row],
    metrics_json=run.folder / "train_metrics.json",
    checkpoint_dir=run.folder / "model",
  )
  per_setting = experiment.per_setting.get(run.setting, {})
  if "val_users" in per_setting:
    flags["val_users"] = per_setting["val_users"]
  if run.setting == "amazon_sports_loo":
    flags["max_len"] = 50
  paper = [f"--{k}={v}" for k, v in flags.items()]
  return [python, "-m", "bench.paper_loop", *paper, *experiment.paper_flags]


def train_command(run: Run, python: str, config: Optional[RunConfig] = None) -> List[str]:
  """The training command of a binary's run (``config``: the run's, or one with a time budget)."""
  cfg = config or run.config
  assert cfg is not None
  flags = cfg.to_flags(only_changed=True)
  backend = run.arm.keras3_backend
  if backend:
    return [python, "-m", "train.keras3", f"--backend={backend}", *flags, *run.keras3_flags]
  return [python, "-m", "train", *flags]


def _last_command(run: Run, python: str, evaluate: bool) -> List[str]:
  """eval.evaluate on the export (``evaluate``), or the run's own test metrics as eval results."""
  if not evaluate:
    return [python, "-m", "bench.table1.results", str(run.folder)]
  cfg = EvalConfig(
    export_dir=str(run.folder / "export"),
    output_dir=str(run.folder / "eval"),
    ks=(10, 20, 100),
    timing_repeats=1,
  )
  return [python, "-m", "eval.evaluate", *cfg.to_flags(only_changed=True)]


def folder_of(out: pathlib.Path, setting: str, arm: Arm, seed: int, repeat: int) -> pathlib.Path:
  """<out>/<setting>/<arm>/seed<s>; repeat k > 0: <out>/r<k>/<setting>/<arm>/seed<s>."""
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
  """Every run of ``experiment``, repeat -> setting -> seed -> arm (a seed's paired arms finish
  together; a repeat rotates the arms). ``root``: the data root; ``codes``: the experiment's
  [codes] as checkouts; ``here``: this tree."""
  runs: List[Run] = []
  for repeat, setting, seed in itertools.product(
    range(experiment.repeats), experiment.settings, experiment.seeds
  ):
    for arm in rotated(experiment.arms, repeat):
      folder = folder_of(out, setting, arm, seed, repeat)
      run = Run(setting, arm, seed, repeat, folder, codes[arm.code] if arm.code else here)
      if arm.binary == "paper":
        train = _paper_command(experiment, run, root, python)
      else:
        run.config = run_config(experiment, run, root)
        run.keras3_flags = tuple(f"--{k}={v}" for k, v in experiment.keras3.items())
        train = train_command(run, python)
      evaluate = arm.binary == "tf_keras" and experiment.evaluate == "eval"
      run.commands = [train, _last_command(run, python, evaluate)]
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
  logq (and its ratio floor) and folders share one, in the row's folder (its runs at
  <row>/seed<s>) or, for several rows (--logqs), in <setting>/program_<key> (at <logq>/seed<s>)."""
  groups: Dict[str, List[Run]] = {}
  for run in runs:
    if run.arm.binary != "keras3_jax":
      raise ValueError(f"{run.key}: a program trains python -m train.keras3 --backend=jax runs")
    groups.setdefault(_program_key(run), []).append(run)
  out: List[Program] = []
  for key, members in groups.items():
    configs = [r.config for r in members if r.config is not None]  # all: _program_key's assert
    seeds = sorted({r.seed for r in members})
    logqs = list(dict.fromkeys(c.logq for c in configs))
    rows = list(dict.fromkeys(r.arm.name for r in members))
    if len(rows) != len(logqs):
      raise ValueError(f"rows {rows} of one program must differ in logq, got {logqs}")
    folder = members[0].folder.parent.parent / (rows[0] if len(rows) == 1 else f"program_{key}")
    # The corrected row's clamp (train.keras3.seeds.variant_floors reads it off --ratio_floor).
    floors = [c.ratio_floor for c in configs if c.logq == "corrected"]
    clamp = dict(logq="corrected", ratio_floor=floors[0]) if floors else {}
    cfg = configs[0].replace(
      **clamp,
      seed=seeds[0],
      model_dir=str(folder),
      export_dir=str(folder / "export"),
      metrics_json=str(folder / "train_metrics.json"),
    )
    several = len(rows) > 1
    flags = cfg.to_flags(only_changed=True, exclude=("logq",) if several else ())
    extra = [f"--seeds={','.join(map(str, seeds))}"]
    extra += [f"--logqs={','.join(logqs)}"] if several else []
    command = [python, "-m", "train.keras3", "--backend=jax", *flags, *members[0].keras3_flags]
    links = (
      {r.folder: folder / c.logq / f"seed{r.seed}" for r, c in zip(members, configs)}
      if several
      else {}
    )
    out.append(Program(members, folder, command + extra, links))
  return out
