"""The run configuration -> negatives mapping of both binaries, written once.

`train.objective` (tf-keras) and `train.keras3.objective` (Keras 3) build their front's library
objects from the same `NegativesPlan`, so one RunConfig gives the same blocks, sizes and log Q on
both. With k = --num_negatives:

    --loss=full_softmax                 no sampler (every other item is a negative)
    --loss=bce | gbce, --negatives=uniform
                                        k uniform draws, laid out per --uniform_negatives
    --negatives=in_batch                the global batch's positives, k_b = k distinct kept
    --negatives=mixed                   k_b = k // 2 in-batch + k_u = k - k // 2 uniform
    --negatives=midx                    k draws per query from the MIDX proposal
    --cross_batch=M (> 0)               + a memory of the last M pushes: each push is the global
                                        batch's B rows (SASRec: its B L positions, padding not
                                        valid), of which at most S = min(rows, --cross_batch_slots
                                        or k) distinct ids are kept; --cross_batch_mode

log Q of in-batch, mixed and memory slots: --log_q_convention. Plain Python (no TensorFlow, no
Keras): the Keras 3 binary reads it where TensorFlow is not installed.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

__all__ = ["MemoryPlan", "NegativesPlan", "negatives_plan", "push_rows"]


class MemoryPlan(NamedTuple):
  """The cross-batch memory: M pushes of ``batch_size`` rows, ``slots_per_batch`` kept each."""

  num_batches: int
  batch_size: int
  slots_per_batch: int
  mode: str


class NegativesPlan(NamedTuple):
  """What a step's negatives are (module docstring).

  ``source``: "full" | "uniform" | "in_batch" | "mixed" | "midx"; ``num_in_batch`` k_b and
  ``num_uniform`` k_u (0 where the source has none); ``num_midx`` the MIDX draws per query;
  ``memory``: a `MemoryPlan` or None."""

  source: str
  num_in_batch: int
  num_uniform: int
  num_midx: int
  uniform_per: str
  convention: str
  memory: Optional[MemoryPlan]

  @property
  def split(self):
    """(k_b, k_u)."""
    return self.num_in_batch, self.num_uniform


def push_rows(cfg: Any) -> int:
  """Rows of one push into the memory: the global batch's queries (SASRec: B L positions)."""
  return int(cfg.batch_size) * (int(cfg.max_len) if cfg.model == "sasrec" else 1)


def negatives_plan(cfg: Any) -> NegativesPlan:
  """The `NegativesPlan` of a `train.config.RunConfig` (or any object with its fields; one
  without ``cross_batch`` has no memory)."""
  k = int(cfg.num_negatives)
  k_b = k_u = k_midx = 0
  if cfg.loss == "full_softmax":
    source = "full"
  elif cfg.loss in ("bce", "gbce") or cfg.negatives == "uniform":
    source, k_u = "uniform", k
  elif cfg.negatives == "midx":
    source, k_midx = "midx", k
  elif cfg.negatives == "in_batch":
    source, k_b = "in_batch", k
  else:
    source, k_b, k_u = "mixed", k // 2, k - k // 2
  memory = None
  num_batches = int(getattr(cfg, "cross_batch", 0) or 0)
  if num_batches:
    rows = push_rows(cfg)
    slots = int(getattr(cfg, "cross_batch_slots", 0) or 0) or k
    memory = MemoryPlan(
      num_batches, rows, min(rows, slots), getattr(cfg, "cross_batch_mode", "ids")
    )
  return NegativesPlan(
    source=source,
    num_in_batch=k_b,
    num_uniform=k_u,
    num_midx=k_midx,
    uniform_per=cfg.uniform_negatives,
    convention=cfg.log_q_convention,
    memory=memory,
  )
