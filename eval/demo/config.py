"""The demo's settings and rows (`eval.demo`): `DemoConfig`, the losses it compares (`RowSpec`,
`parse_row`, `default_rows`) and `validate_config`."""

import re
from typing import List, NamedTuple, Sequence, Tuple

import numpy as np

from tfrs_logq.core import checks as core_checks

__all__ = [
  "NEGATIVES",
  "CORRECTIONS",
  "CONVENTIONS",
  "USER_TOWERS",
  "LABELS",
  "DemoConfig",
  "RowSpec",
  "parse_row",
  "default_rows",
  "validate_config",
]

NEGATIVES = ("in_batch", "mixed", "uniform")
OWN_LOG_Q = ("uniform", "midx")  # samplers whose log Q is their own: no convention
CORRECTIONS = tuple(core_checks.CORRECTIONS)
CONVENTIONS = tuple(core_checks.LOG_Q_CONVENTIONS)
USER_TOWERS = ("features", "id")
LABELS = {"in_batch": "in-batch", "mixed": "mixed", "uniform": "uniform"}


class DemoConfig(NamedTuple):
  """Settings of one demo run (the flags of ``python -m eval.demo`` carry the same names)."""

  rows: Tuple["RowSpec", ...] = ()  # () = default_rows()
  seeds: Tuple[int, ...] = (0, 1, 2)
  steps: int = 2000
  batch_size: int = 256
  num_negatives: int = 256
  learning_rate: float = 0.02
  embedding_dim: int = 16
  user_tower: str = "features"
  num_items: int = 2000
  feature_dim: int = 16
  zipf: float = 1.1
  tau: float = 4.0
  world_seed: int = 0
  train_users: int = 4096
  eval_users: int = 2000
  k: int = 10
  num_bins: int = 10
  curve_points: int = 5
  curve_users: int = 500


class RowSpec(NamedTuple):
  """One loss: full softmax, or a sampler of the negatives + correction + log-Q convention
  (``memory``: the M of bench/world_scale.py's cross-batch memory rows, ``xbatchM``)."""

  source: str  # "full" or a sampler: one of NEGATIVES (bench/world_scale.py: xbatch, midx too)
  correction: str = "none"
  convention: str = "unigram"
  memory: int = 0

  @property
  def name(self) -> str:
    if self.source == "full":
      return "full"
    src = f"xbatch{self.memory}" if self.source == "xbatch" else self.source
    base = f"{src}:{self.correction}"
    return base if self.convention == "unigram" else f"{base}:{self.convention}"

  @property
  def label(self) -> str:
    if self.source == "full":
      return "full softmax"
    parts = [LABELS.get(self.source, self.name.split(":")[0]), self.correction]
    if self.convention != "unigram":
      parts.append(self.convention)
    return ", ".join(parts)

  @property
  def file_name(self) -> str:
    """The row's name as a file name (':' -> '-')."""
    return self.name.replace(":", "-")


def parse_row(text: str, sources: Sequence[str] = NEGATIVES, convention="unigram") -> RowSpec:
  """'full' | 'SOURCE:CORRECTION[:CONVENTION]' -> RowSpec (ValueError naming what is wrong).

  SOURCE is one of ``sources`` ('xbatch': xbatchM, M >= 1); CORRECTION and CONVENTION are the
  library's; ``convention`` is the default of a row that names none. uniform and midx negatives
  have their own log Q (-log |D|, the MIDX proposal's): they take no convention.
  """
  parts = text.strip().split(":")
  if parts == ["full"]:
    return RowSpec("full")
  if len(parts) not in (2, 3) or not all(parts):
    raise ValueError(f"--rows: {text!r} is not 'full' or SOURCE:CORRECTION[:CONVENTION]")
  source, correction, memory = parts[0], parts[1], 0
  xbatch = re.fullmatch(r"xbatch([1-9][0-9]*)", source)
  if xbatch and "xbatch" in sources:
    source, memory = "xbatch", int(xbatch.group(1))
  elif source not in sources or source == "xbatch":
    names = ["xbatchM (M >= 1)" if s == "xbatch" else s for s in sources]
    raise ValueError(f"--rows: {text!r}: the source must be one of {names}")
  if correction not in CORRECTIONS:
    raise ValueError(f"--rows: {text!r}: the correction must be one of {list(CORRECTIONS)}")
  if len(parts) == 3:
    convention = parts[2]
    if source in OWN_LOG_Q:
      raise ValueError(f"--rows: {text!r}: {source} negatives take no convention (own log Q)")
  if convention not in CONVENTIONS:
    raise ValueError(f"--rows: {text!r}: the convention must be one of {list(CONVENTIONS)}")
  return RowSpec(source, correction, "unigram" if source in OWN_LOG_Q else convention, memory)


def default_rows() -> List[RowSpec]:
  """full, in-batch none / standard / corrected, in-batch standard / corrected expected_count."""
  rows = [RowSpec("full")] + [RowSpec("in_batch", c) for c in ("none", "standard", "corrected")]
  return rows + [RowSpec("in_batch", c, "expected_count") for c in ("standard", "corrected")]


def validate_config(cfg: DemoConfig) -> DemoConfig:
  """Checks every setting (ValueError naming it); returns cfg with the default rows filled in."""
  rows = tuple(cfg.rows) or tuple(default_rows())
  if not all(isinstance(r, RowSpec) for r in rows):
    raise TypeError("rows must be RowSpec values (see parse_row)")
  names = [r.name for r in rows]
  if len(set(names)) != len(names):
    raise ValueError(f"rows: duplicate rows in {names}")
  seeds = tuple(cfg.seeds)
  if (
    not seeds
    or len(set(seeds)) != len(seeds)
    or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in seeds)
  ):
    raise ValueError(f"seeds must be distinct integers, got {cfg.seeds}")
  for name in (
    "steps",
    "batch_size",
    "num_negatives",
    "embedding_dim",
    "num_items",
    "feature_dim",
    "train_users",
    "eval_users",
    "k",
    "num_bins",
    "curve_users",
  ):
    value = getattr(cfg, name)
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
      raise ValueError(f"{name} must be a positive int, got {value!r}")
  if cfg.curve_points < 0:
    raise ValueError(f"curve_points must be >= 0, got {cfg.curve_points}")
  if cfg.k > cfg.num_items or cfg.num_bins > cfg.num_items:
    raise ValueError(
      f"k and num_bins must be <= num_items ({cfg.num_items}), got {cfg.k}, {cfg.num_bins}"
    )
  if not cfg.learning_rate > 0:
    raise ValueError(f"learning_rate must be > 0, got {cfg.learning_rate}")
  if cfg.user_tower not in USER_TOWERS:
    raise ValueError(f"user_tower must be one of {USER_TOWERS}, got {cfg.user_tower!r}")
  if cfg.user_tower == "id" and cfg.eval_users > cfg.train_users:
    raise ValueError(
      "user_tower='id' evaluates the training users: eval_users must be <= "
      f"train_users ({cfg.train_users}), got {cfg.eval_users}"
    )
  return cfg._replace(rows=rows, seeds=tuple(int(x) for x in seeds))
