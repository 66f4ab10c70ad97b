r"""Metrics of a model against the truth of the world, on held-out users, chunked over users: the
demo's `eval.demo.metrics.Accumulator` (numpy float64; the definitions: bench/README.md, section
`world_scale.py`) fed a chunk of users at a time, so [c, |D|] arrays fit at 10^6 items.
"""

from __future__ import annotations

from typing import Callable, Dict

import numpy as np

from eval import synthetic_world as world_lib
from eval.demo.metrics import Accumulator, log_softmax, reference_models, top_k

__all__ = ["evaluate", "model_log_probs", "reference_models"]


def evaluate(world, users_x, models, bins, ks, num_bins, chunk, oracle_top=None) -> Dict[str, Dict]:
  """{name: metrics} of every model of ``models`` (a mapping) on the world's held-out users
  ``users_x`` [U, f], ``chunk`` users at a time, k in ``ks``, popularity ``bins`` [D] (of
  ``num_bins``). ``models[name](x [c, f], p [c, D]) -> log P̂ [c, D]`` (normalised; ``p`` is the
  truth, for reference models); ``oracle_top`` [U, >= max(ks)] (None: computed per chunk)."""
  if chunk < 1:
    raise ValueError(f"chunk must be >= 1, got {chunk}")
  acc = {name: Accumulator(world.num_items, ks) for name in models}
  x = np.asarray(users_x, np.float64)
  for a in range(0, x.shape[0], chunk):
    xc = x[a : a + chunk]
    p = world_lib.true_probabilities(world, xc)
    top = top_k(p, max(ks)) if oracle_top is None else oracle_top[a : a + chunk]
    for name, fn in models.items():
      acc[name].add(p, fn(xc, p), top)
  return {name: _result(a, bins, num_bins) for name, a in acc.items()}


def _result(acc: Accumulator, bins, num_bins: int) -> Dict:
  """The run JSON's metrics: the sums of ``acc``, binned by ``bins`` and divided."""
  n, ks = max(acc.users, 1), [str(k) for k in acc.ks]
  b = acc.binned(bins, num_bins)
  return {
    "users": acc.users,
    "kl": acc.kl / n,
    "recall": dict(zip(ks, (acc.recall / n).tolist())),
    "hit_rate": dict(zip(ks, (acc.hit / n).tolist())),
    "hit_rate_by_decile": dict(zip(ks, b["hit_rate"].tolist())),
    "calibration_by_decile": b["calibration"].tolist(),
    "mass_by_decile": {"model": b["mass_hat"].tolist(), "truth": b["mass"].tolist()},
  }


def model_log_probs(user_weights, item_table) -> Callable:
  """The two-tower's log P̂ for held-out x: log softmax_d <[x W, 1], c_d> (float64)."""
  w = np.asarray(user_weights, np.float64)
  c = np.asarray(item_table, np.float64)

  def fn(x, p=None):
    del p
    return log_softmax((x @ w) @ c[:, :-1].T + c[:, -1])

  return fn
