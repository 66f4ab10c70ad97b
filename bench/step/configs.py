"""Our configurations of the SASRec step, by name (bench/README.md, section `step/`: the
``+``-joined tokens, ``paper``, ``fastest``, ``defaults``; ``jax`` / ``keras3_tf``: the Keras 3
binary's step on that backend), and the step's model FLOPs."""

from __future__ import annotations

import dataclasses
import re

__all__ = [
  "PER_TOKENS",
  "ESTIMATORS",
  "FRAMEWORK_TOKENS",
  "NAMED",
  "YARDSTICK",
  "SideConfig",
  "parse_config",
  "step_flops",
]

PER_TOKENS = {
  "batch": "batch",
  "shared": "batch",
  "sequence": "sequence",
  "query": "query",
  "per_position": "query",
}
ESTIMATORS = ("exact", "hash_array", "count_min")
# the step's framework: tf-keras (`python -m train`, no token) or Keras 3 (`python -m train.keras3`)
FRAMEWORK_TOKENS = {
  "jax": "keras3_jax",
  "keras3_jax": "keras3_jax",
  "keras3_tf": "keras3_tensorflow",
  "keras3_tensorflow": "keras3_tensorflow",
}
# ``defaults``: the binaries' default run settings (RunConfig: per-sequence uniform, reference
# block, no XLA)
NAMED = {"paper": "query+reference+xla", "fastest": "batch+xla", "defaults": "sequence+reference"}
_KERAS3_ONLY_WITH = "uniform, reference, xla (keras3_tf: jit_compile), nopack, blocks<k>, malloc_*"
YARDSTICK = "paper code (torch)"
_TF_KERAS_ONLY = "step noloss xla_loss xla_objective hash_array count_min"
_SWITCHES = "xla reference step nopack malloc_default malloc_arenas noloss xla_loss xla_objective"


@dataclasses.dataclass(frozen=True)
class SideConfig:
  """One of our configurations (bench/README.md, section `step/`)."""

  name: str
  uniform: str = "batch"
  xla: bool = False
  block: str = "pre_ln"
  estimator: str = "exact"
  step_xla: bool = False
  pack: bool = True
  attention_blocks: int = 0  # 0: the model's default
  allocator: str = "retain"  # train.host_memory: the binary's default
  one_heap: bool = True  # retain's M_ARENA_MAX = 1
  no_loss: bool = False  # the bound: scoring + sampled loss removed
  xla_part: str = ""  # "", "loss" or "objective": compiled separately
  framework: str = "tf_keras"  # tf_keras | keras3_jax | keras3_tensorflow

  @property
  def keras3(self) -> bool:
    return self.framework != "tf_keras"

  @property
  def peak_framework(self) -> str:
    """The framework of the side's matmul peak: jax or tensorflow."""
    return "jax" if self.framework == "keras3_jax" else "tensorflow"

  @property
  def label(self) -> str:
    block = "reference" if self.block == "reference" else "pre-LN"
    execution = (
      ("" if self.pack else ", no pack")
      + (f", {self.attention_blocks} attn blocks" if self.attention_blocks else "")
      + (", glibc malloc" if self.allocator == "default" else "")
      + (", malloc heap per thread" if not self.one_heap else "")
    )
    if self.keras3:
      backend = "JAX" if self.framework == "keras3_jax" else "TF"
      xla = ", jit" if self.framework == "keras3_jax" else ", XLA" if self.xla else ""
      return f"Keras 3 {backend}: {self.uniform} uniform, {block}{xla}{execution}"
    xla = ", XLA step" if self.step_xla else (", XLA" if self.xla else "")
    return (
      f"ours: {self.uniform} uniform, {block}{xla}"
      f"{', ' + self.estimator if self.estimator != 'exact' else ''}{execution}"
      + (", bound: no scoring/loss" if self.no_loss else "")
      + (f", XLA {self.xla_part} on padded rows" if self.xla_part else "")
    )


def parse_config(name: str) -> SideConfig:
  """Tokens joined by ``+`` (``paper`` and ``fastest`` expand to theirs; bench.step.cli)."""
  tokens = [t for part in name.split("+") for t in NAMED.get(part, part).split("+")]
  uniform = [PER_TOKENS[t] for t in tokens if t in PER_TOKENS]
  estimator = [t for t in tokens if t in ESTIMATORS]
  blocks = [int(t[6:]) for t in tokens if re.fullmatch(r"blocks[1-9][0-9]*", t)]
  frameworks = [FRAMEWORK_TOKENS[t] for t in tokens if t in FRAMEWORK_TOKENS]
  known = {*PER_TOKENS, *ESTIMATORS, *FRAMEWORK_TOKENS, *_SWITCHES.split()}
  unknown = [t for t in tokens if t not in known and not re.fullmatch(r"blocks[1-9][0-9]*", t)]
  if (
    unknown or len(uniform) > 1 or len(estimator) > 1 or len(blocks) > 1 or len(set(frameworks)) > 1
  ):
    raise ValueError(
      f"--configs entry {name!r}: expected paper, fastest, defaults or tokens "
      f"{sorted(PER_TOKENS)} + xla + step + reference + nopack + blocks<k> + "
      "malloc_default + malloc_arenas + noloss + xla_loss|xla_objective + "
      f"{ESTIMATORS} + jax|keras3_tf (one of each kind)"
    )
  tf_keras_only = [t for t in tokens if t in _TF_KERAS_ONLY.split()]
  if frameworks and tf_keras_only:
    raise ValueError(
      f"--configs entry {name!r}: {', '.join(tf_keras_only)} are tf-keras "
      f"settings; a Keras 3 side ({frameworks[0]}) takes {_KERAS3_ONLY_WITH}"
    )
  return SideConfig(
    name=name,
    uniform=uniform[0] if uniform else "batch",
    xla="xla" in tokens,
    block="reference" if "reference" in tokens else "pre_ln",
    estimator=estimator[0] if estimator else "exact",
    step_xla="step" in tokens,
    pack="nopack" not in tokens,
    attention_blocks=blocks[0] if blocks else 0,
    allocator="default" if "malloc_default" in tokens else "retain",
    one_heap="malloc_arenas" not in tokens,
    no_loss="noloss" in tokens,
    xla_part="objective" if "xla_objective" in tokens else "loss" if "xla_loss" in tokens else "",
    framework=frameworks[0] if frameworks else "tf_keras",
  )


def step_flops(
  num_queries: float,
  *,
  batch: int,
  length: int,
  dim: int,
  num_blocks: int,
  block: str,
  num_negatives: int,
  ffn_dim: int = None,
) -> float:
  """Model FLOPs of one training step (forward + backward; bench/README.md, section `step/`)."""
  if block not in ("pre_ln", "reference"):
    raise ValueError(f"block must be pre_ln or reference, got {block!r}")
  f = dim if ffn_dim is None else ffn_dim
  projections = 3 if block == "reference" else 4
  encoder = (
    2 * batch * length * num_blocks * (projections * dim * dim + 2 * dim * f + 2 * length * dim)
  )
  scoring = 2 * num_queries * (1 + num_negatives) * dim
  return 3.0 * (encoder + scoring)
