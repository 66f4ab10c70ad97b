"""Our configurations of the SASRec step, by name (bench/train_speed.py's docstring: the
``+``-joined tokens, ``paper``, ``fastest``), and the step's model FLOPs."""

from __future__ import annotations

import dataclasses
import re

__all__ = ["PER_TOKENS", "ESTIMATORS", "NAMED", "YARDSTICK", "SideConfig", "parse_config",
           "step_flops"]

PER_TOKENS = {"batch": "batch", "shared": "batch", "sequence": "sequence", "query": "query",
              "per_position": "query"}
ESTIMATORS = ("exact", "hash_array", "count_min")
NAMED = {"paper": "query+reference+xla", "fastest": "batch+xla"}
YARDSTICK = "paper code (torch)"


@dataclasses.dataclass(frozen=True)
class SideConfig:
  """One of our configurations (bench/train_speed.py's docstring)."""
  name: str
  uniform: str = "batch"
  xla: bool = False
  block: str = "pre_ln"
  estimator: str = "exact"
  step_xla: bool = False
  pack: bool = True
  attention_blocks: int = 0                 # 0: the model's default
  allocator: str = "retain"                 # train.host_memory: the binary's default
  one_heap: bool = True                     # retain's M_ARENA_MAX = 1
  no_loss: bool = False                     # the bound: scoring + sampled loss removed
  xla_part: str = ""                        # "", "loss" or "objective": compiled separately

  @property
  def label(self) -> str:
    block = "reference" if self.block == "reference" else "pre-LN"
    xla = ", XLA step" if self.step_xla else (", XLA" if self.xla else "")
    execution = ("" if self.pack else ", no pack") + (
        f", {self.attention_blocks} attn blocks" if self.attention_blocks else "") + (
        ", glibc malloc" if self.allocator == "default" else "") + (
        ", malloc heap per thread" if not self.one_heap else "") + (
        ", bound: no scoring/loss" if self.no_loss else "") + (
        f", XLA {self.xla_part} on padded rows" if self.xla_part else "")
    return (f"ours: {self.uniform} uniform, {block}{xla}"
            f"{', ' + self.estimator if self.estimator != 'exact' else ''}{execution}")


def parse_config(name: str) -> SideConfig:
  """Tokens joined by ``+`` (``paper`` and ``fastest`` expand to theirs; bench/train_speed.py)."""
  tokens = [t for part in name.split("+") for t in NAMED.get(part, part).split("+")]
  uniform = [PER_TOKENS[t] for t in tokens if t in PER_TOKENS]
  estimator = [t for t in tokens if t in ESTIMATORS]
  blocks = [int(t[6:]) for t in tokens if re.fullmatch(r"blocks[1-9][0-9]*", t)]
  unknown = [t for t in tokens if t not in PER_TOKENS and t not in ESTIMATORS
             and t not in ("xla", "reference", "step", "nopack", "malloc_default",
                           "malloc_arenas", "noloss", "xla_loss", "xla_objective")
             and not re.fullmatch(r"blocks[1-9][0-9]*", t)]
  if unknown or len(uniform) > 1 or len(estimator) > 1 or len(blocks) > 1:
    raise ValueError(f"--configs entry {name!r}: expected paper, fastest or tokens "
                     f"{sorted(PER_TOKENS)} + xla + step + reference + nopack + blocks<k> + "
                     "malloc_default + malloc_arenas + noloss + xla_loss|xla_objective + "
                     f"{ESTIMATORS} (one of each kind)")
  return SideConfig(name=name, uniform=uniform[0] if uniform else "batch", xla="xla" in tokens,
                    block="reference" if "reference" in tokens else "pre_ln",
                    estimator=estimator[0] if estimator else "exact", step_xla="step" in tokens,
                    pack="nopack" not in tokens, attention_blocks=blocks[0] if blocks else 0,
                    allocator="default" if "malloc_default" in tokens else "retain",
                    one_heap="malloc_arenas" not in tokens, no_loss="noloss" in tokens,
                    xla_part="objective" if "xla_objective" in tokens else
                    "loss" if "xla_loss" in tokens else "")


def step_flops(num_queries: float, *, batch: int, length: int, dim: int, num_blocks: int,
               block: str, num_negatives: int, ffn_dim: int = None) -> float:
  """Model FLOPs of one training step (forward + backward; bench/train_speed.py's docstring)."""
  if block not in ("pre_ln", "reference"):
    raise ValueError(f"block must be pre_ln or reference, got {block!r}")
  f = dim if ffn_dim is None else ffn_dim
  projections = 3 if block == "reference" else 4
  encoder = 2 * batch * length * num_blocks * (projections * dim * dim + 2 * dim * f
                                               + 2 * length * dim)
  scoring = 2 * num_queries * (1 + num_negatives) * dim
  return 3.0 * (encoder + scoring)
