"""An experiment as data: what `python -m bench.launch` runs, read from a TOML file.

    description = "Table 1 at the CPU budget"
    settings = ["ml1m_loo"]               # data settings (SETTINGS)
    rows = ["mixed_none", "mixed_corrected"]   # bench.launch.rows names
    binaries = ["tf_keras"]               # BINARIES, "<binary>@<code>" for a pinned checkout
    seeds = [0, 1, 2]
    arrange = "row"                       # ARRANGEMENTS: row | parallel | program
    jobs = 2                              # runs at once (arrange = "parallel")
    evaluate = "eval"                     # eval: eval.evaluate on the export; own: the binary's
    reference_model = true                # the paper code's preset (bench.launch.rows.PAPER_CODE)
    repeats = 1                           # every run this many times (timings), order rotated
    paper_flags = ["--device=cpu"]        # more flags of the paper arm (bench.paper_loop)
    [budget]
    epochs = 15                           # fixed epochs, no early stopping; or
    # patience = 200                      # early stopping on validation NDCG@10
    # max_epochs = 100000
    [base]                                # RunConfig settings of every run (flag names)
    steps_per_epoch = 48
    [per_setting.amazon_sports_loo]       # RunConfig settings of one setting's runs
    val_users = 3000
    [paths]                               # data files other than <data root>'s
    gsasrec_dir = "/data/steam"
    [keras3]                              # Keras3Config settings of the Keras 3 runs
    shuffle_rng = "numpy"
    [codes]                               # checkouts the binaries may name: a path or a commit
    baseline = "e2e26cb"

An arm is a row trained by one binary: its name is the row's, with "_keras3_<backend>",
"_paper" (the paper's own script, `bench/paper_loop.py`) or "@<code>" appended for any other
binary or checkout than tf-keras in this tree. A run is one (setting, arm, seed, repeat).

The files are read with the standard library's tomllib: the launcher needs Python >= 3.11 (the
library and the binaries run on 3.10); on 3.10 it stops with one error line saying so.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Dict, List, Optional, Tuple

from bench.launch import rows as rows_lib

__all__ = [
  "ARRANGEMENTS",
  "BINARIES",
  "EVALUATIONS",
  "SETTINGS",
  "Arm",
  "Experiment",
  "load",
]

ARRANGEMENTS = ("row", "parallel", "program")
BINARIES = ("tf_keras", "keras3_jax", "keras3_tensorflow", "keras3_torch", "paper")
EVALUATIONS = ("eval", "own")
SETTINGS = (
  "ml1m_loo",
  "ml100k_temporal",
  "ml1m_temporal",
  "gsasrec_loo",
  "amazon_sports_loo",
  "synthetic",
)
_KEYS = {
  "description",
  "settings",
  "rows",
  "binaries",
  "seeds",
  "arrange",
  "jobs",
  "evaluate",
  "reference_model",
  "repeats",
  "budget",
  "base",
  "codes",
  "paths",
  "per_setting",
  "keras3",
  "paper_flags",
}
# The settings only the Keras 3 binary reads (RunConfig.keras3) that an experiment may set; its
# backend comes from the arm, its seeds and logqs from arrange = "program".
KERAS3_KEYS = ("shuffle_rng", "compilation_cache")
_BUDGET_KEYS = {"epochs", "patience", "max_epochs"}


@dataclasses.dataclass(frozen=True)
class Arm:
  """One row trained by one binary in one checkout (``code``: None for this tree)."""

  row: str
  binary: str = "tf_keras"
  code: Optional[str] = None

  @property
  def name(self) -> str:
    suffix = "" if self.binary == "tf_keras" else f"_{self.binary}"
    return f"{self.row}{suffix}" + (f"@{self.code}" if self.code else "")

  @property
  def keras3_backend(self) -> Optional[str]:
    return self.binary.split("_", 1)[1] if self.binary.startswith("keras3_") else None


@dataclasses.dataclass(frozen=True)
class Experiment:
  """The validated contents of an experiment file (module docstring)."""

  settings: Tuple[str, ...]
  rows: Tuple[str, ...]
  seeds: Tuple[int, ...] = (0,)
  binaries: Tuple[str, ...] = ("tf_keras",)
  arrange: str = "row"
  jobs: int = 1
  evaluate: str = "eval"
  reference_model: bool = True
  repeats: int = 1
  budget: Dict[str, int] = dataclasses.field(default_factory=lambda: {"epochs": 15})
  base: Dict[str, Any] = dataclasses.field(default_factory=dict)
  codes: Dict[str, str] = dataclasses.field(default_factory=dict)
  paths: Dict[str, str] = dataclasses.field(default_factory=dict)
  per_setting: Dict[str, Dict[str, Any]] = dataclasses.field(default_factory=dict)
  keras3: Dict[str, str] = dataclasses.field(default_factory=dict)
  paper_flags: Tuple[str, ...] = ()
  description: str = ""

  def __post_init__(self) -> None:
    bad = [s for s in self.settings if s not in SETTINGS]
    if bad or not self.settings:
      raise ValueError(f"settings: unknown {bad} (choose from {list(SETTINGS)})")
    rows = [r for r in self.rows if r not in rows_lib.ROWS]
    if rows or not self.rows:
      raise ValueError(f"rows: unknown {rows} (bench.launch.rows.ROWS)")
    if not self.seeds or len(set(self.seeds)) != len(self.seeds):
      raise ValueError(f"seeds: distinct integers, got {list(self.seeds)}")
    for b in self.binaries:
      binary, _, code = b.partition("@")
      if binary not in BINARIES:
        raise ValueError(f"binaries: unknown {binary!r} (choose from {list(BINARIES)})")
      if code and code not in self.codes:
        raise ValueError(f"binaries: {b!r} names code {code!r}, which [codes] does not define")
    if self.arrange not in ARRANGEMENTS:
      raise ValueError(f"arrange: {self.arrange!r} (choose from {list(ARRANGEMENTS)})")
    if self.arrange == "program" and any(not b.startswith("keras3_jax") for b in self.binaries):
      raise ValueError("arrange = 'program' trains with python -m train.keras3 --backend=jax only")
    if self.evaluate not in EVALUATIONS:
      raise ValueError(f"evaluate: {self.evaluate!r} (choose from {list(EVALUATIONS)})")
    if self.jobs < 1 or self.repeats < 1:
      raise ValueError(f"jobs and repeats must be >= 1, got {self.jobs}, {self.repeats}")
    unknown = set(self.budget) - _BUDGET_KEYS
    if unknown or ("epochs" in self.budget) == ("patience" in self.budget):
      raise ValueError(f"budget: epochs = N or patience = P (and max_epochs), got {self.budget}")
    bad_keras3 = set(self.keras3) - set(KERAS3_KEYS)
    if bad_keras3:
      raise ValueError(f"keras3: {sorted(bad_keras3)}; it may set {list(KERAS3_KEYS)}")
    extra = set(self.per_setting) - set(self.settings)
    if extra:
      raise ValueError(f"per_setting: {sorted(extra)} not among settings {list(self.settings)}")
    if any(int(v) < 1 for v in self.budget.values()):
      raise ValueError(f"budget: every value >= 1, got {self.budget}")

  @property
  def arms(self) -> List[Arm]:
    """Rows x binaries, row-major; a Keras 3 row of bench.launch.rows (``_keras3_<b>``) is that
    binary's arm whatever ``binaries`` says."""
    out: List[Arm] = []
    for row in self.rows:
      if row in rows_lib.KERAS3_ROWS:
        base, backend = rows_lib.KERAS3_ROWS[row]
        out.append(Arm(base, f"keras3_{backend}"))
        continue
      for b in self.binaries:
        binary, _, code = b.partition("@")
        out.append(Arm(row, binary, code or None))
    return out

  def replace(self, **changes: Any) -> "Experiment":
    return dataclasses.replace(self, **changes)


def from_dict(values: Dict[str, Any]) -> Experiment:
  """An Experiment from a parsed experiment file; unknown keys are refused."""
  unknown = set(values) - _KEYS
  if unknown:
    raise ValueError(f"unknown keys {sorted(unknown)} (known: {sorted(_KEYS)})")
  values = dict(values)
  for key in ("settings", "rows", "binaries", "paper_flags"):
    if key in values:
      values[key] = tuple(str(v) for v in values[key])
  if "seeds" in values:
    values["seeds"] = tuple(int(s) for s in values["seeds"])
  return Experiment(**values)


def load(path: "str | pathlib.Path") -> Experiment:
  """The experiment of a TOML file; a ValueError names the file and what is wrong."""
  path = pathlib.Path(path)
  try:
    import tomllib
  except ModuleNotFoundError:  # Python 3.10
    raise ValueError(
      "python -m bench.launch reads TOML with tomllib: it needs Python >= 3.11"
    ) from None
  try:
    return from_dict(tomllib.loads(path.read_text()))
  except (OSError, tomllib.TOMLDecodeError, ValueError, TypeError) as e:
    raise ValueError(f"{path}: {e}") from e
