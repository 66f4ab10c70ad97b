"""The Zipf popularity law of the synthetic benchmarks: Q(d) ∝ rank(d)^-exponent over ranks
1..n, item id = rank - 1."""

from __future__ import annotations

import numpy as np

__all__ = ["probabilities"]


def probabilities(n: int, exponent: float = 1.0) -> np.ndarray:
  """Q [n] float64, Q[i] = (i + 1)^-exponent / sum_r r^-exponent."""
  p = np.arange(1, n + 1, dtype=np.float64) ** -exponent
  return p / p.sum()
