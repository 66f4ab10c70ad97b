"""An experiment as data: what `python -m bench.launch` runs, read from a TOML file whose keys are
the fields of `Experiment` (bench/README.md, section `launch/`; bench/experiments/*.toml).

The files are read with the standard library's tomllib: the launcher needs Python >= 3.11 (the
library and the binaries run on 3.10); on 3.10 it stops with one error line saying so.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Dict, List, Optional, Tuple

from bench.launch import rows as rows_lib
from bench.launch.rows import SETTINGS

__all__ = ["ARRANGEMENTS", "BINARIES", "EVALUATIONS", "SETTINGS", "Arm", "Experiment", "load"]

ARRANGEMENTS = ("row", "parallel", "program")
BINARIES = ("tf_keras", "keras3_jax", "keras3_tensorflow", "keras3_torch", "paper")
EVALUATIONS = ("eval", "own")
# The settings only the Keras 3 binary reads (RunConfig.keras3) that an experiment may set; its
# backend comes from the arm, its seeds and logqs from arrange = "program".
KERAS3_KEYS = ("shuffle_rng", "compilation_cache")
_BUDGET_KEYS = {"epochs", "patience", "max_epochs"}


@dataclasses.dataclass(frozen=True)
class Arm:
  """One row trained by one binary in one checkout (``code``: None for this tree). Its name is
  the row's, with "_keras3_<backend>", "_paper" (the paper's own script, `bench/paper_loop.py`)
  or "@<code>" appended for any other binary or checkout than tf-keras in this tree."""

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
  """The validated contents of an experiment file; a run is one (setting, arm, seed, repeat)."""

  settings: Tuple[str, ...]  # data settings (SETTINGS)
  rows: Tuple[str, ...]  # bench.launch.rows names
  seeds: Tuple[int, ...] = (0,)
  binaries: Tuple[str, ...] = ("tf_keras",)  # BINARIES, "<binary>@<code>" for a pinned checkout
  arrange: str = "row"  # ARRANGEMENTS (bench.launch.execute)
  jobs: int = 1  # runs at once (arrange = "parallel")
  evaluate: str = "eval"  # eval: eval.evaluate on the export; own: the binary's
  reference_model: bool = True  # the paper code's preset (bench.launch.rows.PAPER_CODE)
  repeats: int = 1  # every run this many times (timings), the order rotated
  # [budget]: epochs = N (fixed, no early stopping) or patience = P (early stopping on validation
  # NDCG@10), max_epochs = M
  budget: Dict[str, int] = dataclasses.field(default_factory=lambda: {"epochs": 15})
  # [base]: RunConfig settings of every run (flag names); [per_setting.<setting>]: of one
  # setting's runs
  base: Dict[str, Any] = dataclasses.field(default_factory=dict)
  per_setting: Dict[str, Dict[str, Any]] = dataclasses.field(default_factory=dict)
  paths: Dict[str, str] = dataclasses.field(default_factory=dict)  # data files (rows.DATA)
  keras3: Dict[str, str] = dataclasses.field(default_factory=dict)  # KERAS3_KEYS settings
  # [codes]: checkouts the binaries may name: a folder, or a commit of this repository
  codes: Dict[str, str] = dataclasses.field(default_factory=dict)
  paper_flags: Tuple[str, ...] = ()  # more flags of the paper arm (bench.paper_loop)
  description: str = ""

  def __post_init__(self) -> None:
    for key in ("settings", "rows", "binaries", "paper_flags"):
      object.__setattr__(self, key, tuple(str(v) for v in getattr(self, key)))
    object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
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
    budget = self.budget
    if set(budget) - _BUDGET_KEYS or ("epochs" in budget) == ("patience" in budget):
      raise ValueError(f"budget: epochs = N or patience = P (and max_epochs), got {budget}")
    if min(budget.values()) < 1:
      raise ValueError(f"budget: every value >= 1, got {budget}")
    bad = sorted(set(self.keras3) - set(KERAS3_KEYS))
    if bad:
      raise ValueError(f"keras3: {bad}; it may set {list(KERAS3_KEYS)}")
    bad = sorted(set(self.per_setting) - set(self.settings))
    if bad:
      raise ValueError(f"per_setting: {bad} not among settings {list(self.settings)}")

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
  known = {f.name for f in dataclasses.fields(Experiment)}
  if set(values) - known:
    raise ValueError(f"unknown keys {sorted(set(values) - known)} (known: {sorted(known)})")
  return Experiment(**values)


def load(path: "str | pathlib.Path") -> Experiment:
  """The experiment of a TOML file; a ValueError names the file and what is wrong."""
  try:
    import tomllib
  except ModuleNotFoundError:  # Python 3.10
    raise ValueError(
      "python -m bench.launch reads TOML with tomllib: it needs Python >= 3.11"
    ) from None
  try:
    return from_dict(tomllib.loads(pathlib.Path(path).read_text()))
  except (OSError, tomllib.TOMLDecodeError, ValueError, TypeError) as e:
    raise ValueError(f"{path}: {e}") from e
