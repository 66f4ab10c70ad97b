"""Our configurations of the SASRec step, by name (bench/README.md, section `step/`: the
``+``-joined tokens, ``paper``, ``fastest``, ``defaults``; ``jax`` / ``keras3_tf``: the Keras 3
binary's step on that backend), and the step's model FLOPs."""

from __future__ import annotations

import dataclasses
import re

__all__ = ["NAMED", "TOKENS", "YARDSTICK", "SideConfig", "parse_config", "step_flops"]

# SideConfig field -> {token: value}; ``blocks<k>``: attention_blocks = k
_FIELDS = {
  "uniform": dict(
    batch="batch", shared="batch", sequence="sequence", query="query", per_position="query"
  ),
  "estimator": dict(exact="exact", hash_array="hash_array", count_min="count_min"),
  "framework": dict(
    jax="keras3_jax",
    keras3_jax="keras3_jax",
    keras3_tf="keras3_tensorflow",
    keras3_tensorflow="keras3_tensorflow",
  ),
  "xla": dict(xla=True),
  "block": dict(reference="reference"),
  "step_xla": dict(step=True),
  "pack": dict(nopack=False),
  "allocator": dict(malloc_default="default"),
  "one_heap": dict(malloc_arenas=False),
  "no_loss": dict(noloss=True),
  "xla_part": dict(xla_loss="loss", xla_objective="objective"),
}
TOKENS = {token: (field, v) for field, values in _FIELDS.items() for token, v in values.items()}
# ``defaults``: the binaries' default run settings (RunConfig: per-sequence uniform, reference
# block, no XLA)
NAMED = {"paper": "query+reference+xla", "fastest": "batch+xla", "defaults": "sequence+reference"}
YARDSTICK = "paper code (torch)"
_TF_KERAS_ONLY = "step noloss xla_loss xla_objective hash_array count_min".split()


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
  """Tokens joined by ``+`` (``paper``, ``fastest`` and ``defaults`` expand to theirs); at most
  one value per field (one uniform, estimator, blocks<k>, framework, xla_* each)."""
  tokens = [t for part in name.split("+") for t in NAMED.get(part, part).split("+")]
  fields: dict = {}
  for t in tokens:
    blocks = re.fullmatch(r"blocks([1-9][0-9]*)", t)
    field, value = ("attention_blocks", int(blocks[1])) if blocks else TOKENS.get(t, (None, None))
    if field is None or fields.setdefault(field, value) != value:
      raise ValueError(
        f"--configs entry {name!r}: expected paper, fastest, defaults or tokens "
        "batch|shared|sequence|query|per_position + xla + step + reference + nopack + blocks<k> + "
        "malloc_default + malloc_arenas + noloss + xla_loss|xla_objective + "
        "exact|hash_array|count_min + jax|keras3_tf (one of each kind)"
      )
  tf_keras_only = [t for t in tokens if t in _TF_KERAS_ONLY]
  if "framework" in fields and tf_keras_only:
    raise ValueError(
      f"--configs entry {name!r}: {', '.join(tf_keras_only)} are tf-keras settings; a Keras 3 "
      f"side ({fields['framework']}) takes uniform, reference, xla (keras3_tf: jit_compile), "
      "nopack, blocks<k>, malloc_*"
    )
  return SideConfig(name=name, **fields)


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
