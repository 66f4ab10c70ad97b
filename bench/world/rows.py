"""The arms (rows) of bench/world_scale.py and the settings of one world: names, parsing, checks.

A row is ``full`` or ``SOURCE:CORRECTION[:CONVENTION]`` (the grammar: bench/README.md, section
`world_scale.py`). Plain Python (no Keras): the CLI checks its arguments before JAX loads.
"""

from __future__ import annotations

from typing import List, NamedTuple, Sequence, Tuple

from eval.demo import config as demo_config
from eval.demo.config import RowSpec

SOURCES = ("in_batch", "mixed", "xbatch4", "xbatch16", "xbatch64", "midx")  # the default grid
DEFAULT_CORRECTIONS = ("none", "standard", "corrected")
REFERENCE_ROW = "mixed:corrected"  # the step-cost baseline (bench/README.md: ratios to it)


class Settings(NamedTuple):
  """One world and its training budget (the same for every row and seed of a folder)."""

  num_items: int = 100_000
  batch_size: int = 512
  steps: int = 10000
  num_negatives: int = 0  # k; 0: the batch size
  midx_negatives: int = 128  # k' per query (0: k; its cost on JAX grows as A k' K^2)
  learning_rate: float = 0.02
  embedding_dim: int = 16
  feature_dim: int = 16
  zipf: float = 1.1
  tau: float = 4.0
  world_seed: int = 0
  train_users: int = 4096
  eval_users: int = 2000
  ks: Tuple[int, ...] = (10, 100, 1000)
  num_bins: int = 10
  midx_codewords: int = 32
  midx_refresh: int = 500
  full_max_logits: int = 450_000_000

  @property
  def k(self) -> int:
    return self.num_negatives or self.batch_size

  @property
  def k_midx(self) -> int:
    return self.midx_negatives or self.k

  def world_fields(self) -> dict:
    """The fields that fix the world and its held-out users (the oracle's cache key)."""
    names = ("num_items", "feature_dim", "zipf", "tau", "world_seed", "eval_users", "num_bins")
    return {n: getattr(self, n) for n in names} | {"k_max": max(self.ks)}

  def as_dict(self) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self._asdict().items()}


# the settings that must be > 0 (in the order they are checked); the others: `check_settings`
_OTHERS = ("num_negatives", "midx_negatives", "zipf", "tau", "world_seed", "ks")
_POSITIVE = tuple(f for f in Settings._fields if f not in _OTHERS)


def parse_row(text: str, convention: str = "unigram") -> RowSpec:
  """'full' | 'SOURCE:CORRECTION[:CONVENTION]' -> RowSpec: the demo's grammar over this grid's
  sources (`eval.demo.config.parse_row`); ``convention`` is the default of a row that names none."""
  return demo_config.parse_row(text, ("in_batch", "mixed", "xbatch", "midx"), convention)


def parse_rows(texts: Sequence[str], convention: str = "unigram") -> List[RowSpec]:
  rows = [parse_row(t, convention) for t in texts if t.strip()]
  names = [r.name for r in rows]
  if not rows:
    raise ValueError("--rows: no rows given")
  if len(set(names)) != len(names):
    raise ValueError(f"--rows: duplicate rows in {names}")
  return rows


def default_rows(settings: Settings, convention: str = "unigram") -> List[RowSpec]:
  """The grid: every SOURCE x none / standard / corrected, and full softmax where it fits."""
  rows = [parse_row(f"{s}:{c}", convention) for s in SOURCES for c in DEFAULT_CORRECTIONS]
  return rows + [RowSpec("full")] if full_fits(settings) else rows


def full_fits(settings: Settings) -> bool:
  """Full softmax's [B, |D|] float32 logits (and their gradient) fit: B |D| <= full_max_logits."""
  return settings.batch_size * settings.num_items <= settings.full_max_logits


def check(*checks: Tuple[bool, str]) -> None:
  """ValueError with the message of the first (ok, message) that is not ok."""
  for ok, message in checks:
    if not ok:
      raise ValueError(message)


def check_settings(settings: Settings, rows: Sequence[RowSpec]) -> Settings:
  """ValueError naming the first bad setting (a row that does not fit included)."""
  s = settings
  for name in _POSITIVE:
    if not getattr(s, name) > 0:
      kind = "> 0" if name == "learning_rate" else "a positive int"
      raise ValueError(f"--{name} must be {kind}, got {getattr(s, name)!r}")
  for name in ("num_negatives", "midx_negatives"):
    if getattr(s, name) < 0:
      raise ValueError(f"--{name} must be an int >= 0 (0: the default), got {getattr(s, name)!r}")
  full = any(row.source == "full" for row in rows)
  check(
    (s.zipf >= 0 and s.tau >= 0, f"--zipf and --tau must be >= 0, got {s.zipf}, {s.tau}"),
    (min(s.ks) > 0, f"--ks must be positive ints, got {list(s.ks)}"),
    (list(s.ks) == sorted(set(s.ks)), f"--ks must be increasing, got {list(s.ks)}"),
    (
      max(s.ks) <= s.num_items and s.num_bins <= s.num_items,
      f"--ks ({max(s.ks)}) and --num_bins ({s.num_bins}) must be <= --num_items ({s.num_items})",
    ),
    (s.num_items < 2**31 - 1, f"--num_items must be < 2**31 - 1 (int32 ids), got {s.num_items}"),
    (
      s.train_users <= 65535,
      f"--train_users must be <= 65535 (uint16 stream), got {s.train_users}",
    ),
    (
      s.midx_codewords <= s.num_items,
      f"--midx_codewords ({s.midx_codewords}) must be <= --num_items ({s.num_items})",
    ),
    (
      not full or full_fits(s),
      f"--rows: full softmax does not fit at batch {s.batch_size} x {s.num_items} items "
      f"(B |D| > --full_max_logits = {s.full_max_logits})",
    ),
  )
  return s


def settings_tag(settings: Settings) -> str:
  """The folder of one point under --out: itemsN_batchB, then _stepsS, _tauT, _zipfZ for those
  that are not the defaults (items1000_batch64_steps2000_tau2)."""
  tag = f"items{settings.num_items}_batch{settings.batch_size}"
  for name in ("steps", "tau", "zipf"):
    value = getattr(settings, name)
    if value != getattr(Settings(), name):
      tag += f"_{name}{value:g}"
  return tag
