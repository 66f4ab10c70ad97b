r"""Count-min sketch (Cormode & Muthukrishnan 2005): shape, argument checks, update and read.

Row j of a depth x width table C hashes ids with h_j; a step holds c_x occurrences of id x and
n ids in all; m = ``min_count``; with ``half_life`` h every count is weighted gamma^(age in
steps), gamma = 2^(-1/h) (gamma = 1 without decay), applied lazily to a cell from the step of
its last write::

    shape:         depth = ceil(ln(1/delta)),  width = ceil(e/epsilon)
    guarantees:    epsilon = e / width,  delta = exp(-depth)
    cells:         flat cell of id x in row j = j width + h_j(x),  h_j = bucket(x, seed + j, width)
    read at t:     C~[j, b] = C[j, b] gamma^(t - last[j, b])
    standard:      C[j, b] <- C~[j, b] + sum_{x: h_j(x) = b} c_x
    conservative:  C[j, b] <- max(C~[j, b], max_{x: h_j(x) = b} est(x) + c_x)
    est(x)       = min_j C~[j, h_j(x)]
    total:         N <- gamma N + n        (n > 0; an empty step changes nothing)
    log Q(d)     = min(log max(est(d), m) - log max(N, m), 0)

Without decay, true <= est <= true + epsilon N with probability >= 1 - delta per id, so
|Q^(d) - Q(d)| <= epsilon. The conservative rule is the batched, order-independent form of
Estan & Varghese's update (it keeps est(x) >= the true count, as the standard one does).
"""

import math
import numbers
from typing import Callable, Optional, Tuple

import numpy as np

from tfrs_logq.core.ops import Ops, Tensor

__all__ = [
  "DEFAULT_EPSILON",
  "DEFAULT_DELTA",
  "sketch_shape",
  "guarantees",
  "cells",
  "check_sketch",
  "decay",
  "decayed",
  "estimate",
  "standard_cells",
  "conservative_cells",
  "updated_total",
  "log_q",
]

DEFAULT_EPSILON = 1e-4
DEFAULT_DELTA = 0.01


def sketch_shape(epsilon: float, delta: float) -> Tuple[int, int]:
  """(depth, width) = (ceil(ln 1/delta), ceil(e/epsilon)); ValueError outside (0, 1)."""
  if not 0.0 < epsilon < 1.0:
    raise ValueError(f"epsilon must be in (0, 1), got {epsilon}")
  if not 0.0 < delta < 1.0:
    raise ValueError(f"delta must be in (0, 1), got {delta}")
  return max(1, math.ceil(math.log(1.0 / delta))), math.ceil(math.e / epsilon)


def guarantees(width: int, depth: int) -> Tuple[float, float]:
  """(epsilon, delta) = (e / width, exp(-depth)): the error bound and failure probability that a
  sketch of this shape guarantees."""
  return math.e / width, math.exp(-depth)


def cells(
  ops: Ops,
  bucket: Callable[[Tensor, int, int], Tensor],
  keys: Tensor,
  seed: int,
  width: int,
  depth: int,
) -> Tensor:
  """Flat cells j width + h_j(key), shape [depth] + keys.shape; ``bucket(keys, seed, width)`` is
  the front's hash of ids into [0, width) (``tfrs_logq.hashing`` / ``tfrs_logq.keras3`` twin)."""
  return ops.stack([bucket(keys, seed + j, width) + j * width for j in range(depth)])


def _integer(value: object, name: str, positive: bool) -> int:
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
    raise ValueError(f"{name} must be {'a positive' if positive else 'an'} integer, got {value!r}")
  if positive and int(value) < 1:
    raise ValueError(f"{name} must be a positive integer, got {value!r}")
  return int(value)


def check_sketch(
  epsilon: Optional[float] = None,
  delta: Optional[float] = None,
  width: Optional[int] = None,
  depth: Optional[int] = None,
  half_life: Optional[float] = None,
  min_count: float = 1.0,
  seed: int = 0,
) -> Tuple[int, int, Optional[float], float, int]:
  """CountMinSketch's checks (ValueError naming the argument).

  Returns:
    (width, depth, half_life or None, min_count, seed) as Python int / float.
  """
  if epsilon is not None and width is not None:
    raise ValueError("give epsilon or width, not both")
  if delta is not None and depth is not None:
    raise ValueError("give delta or depth, not both")
  if width is None:
    width = sketch_shape(DEFAULT_EPSILON if epsilon is None else epsilon, 0.5)[1]
  if depth is None:
    depth = sketch_shape(0.5, DEFAULT_DELTA if delta is None else delta)[0]
  width = _integer(width, "width", positive=True)
  depth = _integer(depth, "depth", positive=True)
  if width * depth >= 2**31:
    raise ValueError("width * depth must be < 2**31")
  if half_life is not None and not half_life > 0:
    raise ValueError(f"half_life must be > 0 steps, got {half_life}")
  if not min_count > 0:
    raise ValueError(f"min_count must be > 0, got {min_count}")
  return (
    width,
    depth,
    None if half_life is None else float(half_life),
    float(min_count),
    _integer(seed, "seed", positive=False),
  )


def decay(half_life: Optional[float]) -> float:
  """gamma = 2^(-1/half_life) per step (1 without decay)."""
  return 1.0 if half_life is None else 2.0 ** (-1.0 / half_life)


def decayed(ops: Ops, values: Tensor, age: Tensor, gamma: float) -> Tensor:
  """C gamma^age (float32 values, float32 age in steps); the values unchanged when gamma = 1."""
  if gamma == 1.0:
    return values
  return values * ops.power(gamma, age)


def estimate(ops: Ops, cell_values: Tensor) -> Tensor:
  """est(x) = min_j C~[j, h_j(x)] over the rows (axis 0 of ``cell_values`` [depth, ...])."""
  return ops.min(cell_values, axis=0)


def standard_cells(ops: Ops, read: Tensor, counts: Tensor) -> Tensor:
  """C~ + sum of the step's counts in the cell (float32 read, integer counts)."""
  return read + ops.cast(counts, "float32")


def conservative_cells(ops: Ops, read: Tensor, wanted: Tensor) -> Tensor:
  """max(C~, max_x est(x) + c_x) (``wanted``: the per-cell max of est(x) + c_x)."""
  return ops.maximum(read, wanted)


def updated_total(total: Tensor, num_ids: Tensor, gamma: float) -> Tensor:
  """N <- gamma N + n (float32 total and n)."""
  return gamma * total + num_ids


def log_q(ops: Ops, estimate: Tensor, total: Tensor, min_count: float) -> Tensor:
  """log Q(d) = min(log max(est, m) - log max(N, m), 0)."""
  return ops.minimum(
    ops.log(ops.maximum(estimate, min_count)) - ops.log(ops.maximum(total, min_count)), 0.0
  )
