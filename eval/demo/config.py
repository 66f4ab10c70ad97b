"""The demo's settings and rows (`eval.demo`): `DemoConfig`, the losses it compares (`RowSpec`,
`parse_row`, `default_rows`) and `validate_config`."""

from typing import List, NamedTuple, Tuple

import numpy as np

__all__ = [
  "NEGATIVES",
  "USER_TOWERS",
  "LABELS",
  "DemoConfig",
  "RowSpec",
  "parse_row",
  "default_rows",
  "validate_config",
]

NEGATIVES = ("in_batch", "mixed", "uniform")
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
  """One loss: full softmax, or a sampler + correction + log-Q convention."""

  negatives: str  # "full" or one of NEGATIVES
  correction: str = "none"
  convention: str = "unigram"

  @property
  def name(self) -> str:
    if self.negatives == "full":
      return "full"
    base = f"{self.negatives}:{self.correction}"
    return base if self.convention == "unigram" else f"{base}:{self.convention}"

  @property
  def label(self) -> str:
    if self.negatives == "full":
      return "full softmax"
    parts = [LABELS[self.negatives], self.correction]
    if self.convention != "unigram":
      parts.append(self.convention)
    return ", ".join(parts)


def _library_choices():
  from tfrs_logq.tf_keras import losses, negatives

  return losses.CORRECTIONS, tuple(negatives.CONVENTIONS)


def parse_row(text: str) -> RowSpec:
  """'full' | 'NEGATIVES:CORRECTION[:CONVENTION]' -> RowSpec (ValueError naming what is wrong)."""
  corrections, conventions = _library_choices()
  parts = text.strip().split(":")
  if parts == ["full"]:
    return RowSpec("full")
  if len(parts) not in (2, 3):
    raise ValueError(f"rows: {text!r} is not 'full' or NEGATIVES:CORRECTION[:CONVENTION]")
  negatives, correction = parts[0], parts[1]
  convention = parts[2] if len(parts) == 3 else "unigram"
  if negatives not in NEGATIVES:
    raise ValueError(f"rows: negatives must be one of {NEGATIVES}, got {negatives!r}")
  if correction not in corrections:
    raise ValueError(f"rows: correction must be one of {corrections}, got {correction!r}")
  if convention not in conventions:
    raise ValueError(f"rows: convention must be one of {conventions}, got {convention!r}")
  if negatives == "uniform" and convention != "unigram":
    raise ValueError(
      f"rows: {text!r}: uniform negatives have one log Q (-log |D|), a convention does not apply"
    )
  return RowSpec(negatives, correction, convention)


def default_rows() -> List[RowSpec]:
  """full, in-batch none / standard / corrected (+ the expected_count rows when available)."""
  _, conventions = _library_choices()
  rows = [RowSpec("full")] + [RowSpec("in_batch", c) for c in ("none", "standard", "corrected")]
  if "expected_count" in conventions:
    rows += [RowSpec("in_batch", c, "expected_count") for c in ("standard", "corrected")]
  return rows


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
