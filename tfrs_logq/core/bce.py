r"""BCE and gBCE (gSASRec, Petrov & Macdonald, RecSys 2023) over a row's valid negatives.

    BCE:   L = -log sigma(s_p) - sum_{i valid} log(1 - sigma(s_i))
             = softplus(-s_p) + sum_{i valid} softplus(s_i)
    gBCE:  L = -log(sigma(s_p)^beta) - sum_{i valid} log(1 - sigma(s_i))
             = beta softplus(-s_p) + sum_{i valid} softplus(s_i)
    beta  = alpha (t (1 - 1/alpha) + 1/alpha) = 1 - t (1 - alpha),   alpha = min(k / (|I| - 1), 1)

with alpha the uniform negative sampling rate (k negatives per positive, |I| items) and the
calibration t in [0, 1] (t = 0: BCE; t = 1: beta = alpha). A row's loss is the sum over its
logits (gSASRec averages over the 1 + k logits: a constant factor).
"""

import numbers
from typing import Tuple

from tfrs_logq.core.ops import Ops, Tensor

__all__ = ["gbce_beta", "check_beta", "gbce"]


def gbce_beta(num_negatives: int, num_items: int, t: float) -> float:
  """beta = 1 - t (1 - alpha), alpha = min(k / (|I| - 1), 1); TypeError / ValueError for
  non-int sizes, |I| < 2, k < 1 or t outside [0, 1]."""
  for name, v in (("num_negatives", num_negatives), ("num_items", num_items)):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
      raise TypeError(f"gBCE {name} must be an int, got {v!r}")
  if num_items < 2:
    raise ValueError(f"gBCE needs num_items >= 2, got {num_items}")
  if num_negatives < 1:
    raise ValueError(f"gBCE needs num_negatives >= 1, got {num_negatives}")
  if not 0.0 <= t <= 1.0:
    raise ValueError(f"gBCE t must be in [0, 1], got {t}")
  alpha = min(num_negatives / (num_items - 1), 1.0)
  return alpha * (t * (1.0 - 1.0 / alpha) + 1.0 / alpha)


def check_beta(beta: float) -> float:
  """beta as a float; ValueError outside (0, 1]."""
  if not 0.0 < beta <= 1.0:
    raise ValueError(f"beta must be in (0, 1], got {beta}")
  return float(beta)


def gbce(ops: Ops, s_p: Tensor, s_n: Tensor, valid: Tensor, beta: float) -> Tuple[Tensor, Tensor]:
  """(L [A], num_valid [A] int32) of gBCE (beta = 1: BCE); invalid negatives never reach
  softplus (no NaN / inf from masked entries)."""
  safe = ops.where(valid, s_n, ops.zeros_like(s_n))
  negatives = ops.sum(ops.where(valid, ops.softplus(safe), ops.zeros_like(safe)), axis=1)
  loss = float(beta) * ops.softplus(-s_p) + negatives
  return loss, ops.sum(ops.cast(valid, "int32"), axis=1)
