r"""Metrics of a model against the truth of the world, on held-out users, chunked over users.

numpy float64. With P = P(.|u) the truth, P̂ the model's softmax over the catalog, T_k(.) the
k items of largest value (ties: lower id first) and E_u the mean over the held-out users:

    KL             = E_u sum_d P(d|u) (log P(d|u) - log P̂(d|u))            (0 = the truth)
    recall@k       = E_u |T_k(P̂) ∩ T_k(P)| / k        (agreement with the oracle's top k)
    HR@k           = E_u sum_{d in T_k(P̂)} P(d|u)     (P(a held-out draw d ~ P(.|u) is
                                                       retrieved); the oracle's is the maximum)
    HR@k decile j  = E_u sum_{d in T_k(P̂), bin d = j} P / E_u sum_{bin d = j} P
    calibration j  = sum_{u, bin d = j} P (log P̂ - log P) / sum_{u, bin d = j} P
                     (the demo's: > 0, the model over-predicts decile j's items)
    mass j         = E_u sum_{bin d = j} P̂(d|u)  beside  E_u sum_{bin d = j} P(d|u)

Deciles (bins) rank the items by Q(d) = E_u P(d|u) (bin 0 = the most popular tenth;
`eval.synthetic_world.popularity_bins`). Every quantity is a sum over users divided at the end,
so any chunking gives the same result (up to rounding). A chunk of c users holds a few [c, |D|]
float64 arrays: 10^6 items fit in a few GB with c ~ 40.
"""

from __future__ import annotations

from typing import Callable, Dict, Mapping, Optional, Sequence

import numpy as np

from eval import synthetic_world as world_lib
from eval.demo.metrics import log_softmax, top_k

__all__ = [
  "recall_at",
  "hit_rate_at",
  "Accumulator",
  "evaluate",
  "model_log_probs",
]


def recall_at(model_top, oracle_top, ks: Sequence[int]) -> np.ndarray:
  """[c, len(ks)]: |model_top[:, :k] ∩ oracle_top[:, :k]| / k per row (each list distinct)."""
  model_top, oracle_top = np.asarray(model_top), np.asarray(oracle_top)
  out = np.empty((model_top.shape[0], len(ks)))
  for j, k in enumerate(ks):
    both = np.sort(np.concatenate([model_top[:, :k], oracle_top[:, :k]], axis=1), axis=1)
    out[:, j] = (both[:, 1:] == both[:, :-1]).sum(axis=1) / k
  return out


def hit_rate_at(p, model_top, ks: Sequence[int]) -> np.ndarray:
  """[c, len(ks)]: sum of P over the model's first k items, per row (model_top best first)."""
  got = np.cumsum(np.take_along_axis(np.asarray(p, np.float64), np.asarray(model_top), 1), 1)
  return got[:, [k - 1 for k in ks]]


class Accumulator:
  """Sums over users of every metric of one model (module docstring); ``result()`` divides."""

  def __init__(self, ks: Sequence[int], bins: np.ndarray, num_bins: int):
    self.ks, self.bins, self.num_bins = tuple(ks), np.asarray(bins), num_bins
    self.users = 0
    self.kl = 0.0
    self.recall = np.zeros(len(self.ks))
    self.hit = np.zeros(len(self.ks))
    self.hit_by_bin = np.zeros((len(self.ks), num_bins))
    self.mass_p = np.zeros(num_bins)
    self.mass_p_hat = np.zeros(num_bins)
    self.calibration = np.zeros(num_bins)

  def add(self, p, log_p_hat, oracle_top) -> None:
    """One chunk: P [c, D], log P̂ [c, D] (normalised), the oracle's top-k_max [c, >= k_max]."""
    p = np.asarray(p, np.float64)
    log_p_hat = np.asarray(log_p_hat, np.float64)
    positive = p > 0
    log_p = np.log(np.where(positive, p, 1.0))
    gap = np.where(positive, p * (log_p_hat - log_p), 0.0)  # [c, D]
    self.users += p.shape[0]
    self.kl -= float(gap.sum())
    self.calibration += np.bincount(self.bins, weights=gap.sum(axis=0), minlength=self.num_bins)
    self.mass_p += np.bincount(self.bins, weights=p.sum(axis=0), minlength=self.num_bins)
    self.mass_p_hat += np.bincount(
      self.bins, weights=np.exp(log_p_hat).sum(axis=0), minlength=self.num_bins
    )
    del gap, log_p
    model_top = top_k(log_p_hat, max(self.ks))
    self.recall += recall_at(model_top, oracle_top, self.ks).sum(axis=0)
    self.hit += hit_rate_at(p, model_top, self.ks).sum(axis=0)
    p_top = np.take_along_axis(p, model_top, 1)
    bin_top = self.bins[model_top]
    for j, k in enumerate(self.ks):
      self.hit_by_bin[j] += np.bincount(
        bin_top[:, :k].ravel(), weights=p_top[:, :k].ravel(), minlength=self.num_bins
      )

  def result(self) -> Dict:
    n, ks = max(self.users, 1), [str(k) for k in self.ks]
    mass = self.mass_p
    ratio = lambda a, b: np.divide(a, b, out=np.full(a.shape, np.nan), where=b > 0)
    return {
      "users": self.users,
      "kl": self.kl / n,
      "recall": dict(zip(ks, (self.recall / n).tolist())),
      "hit_rate": dict(zip(ks, (self.hit / n).tolist())),
      "hit_rate_by_decile": {k: ratio(h, mass).tolist() for k, h in zip(ks, self.hit_by_bin)},
      "calibration_by_decile": ratio(self.calibration, mass).tolist(),
      "mass_by_decile": {"model": (self.mass_p_hat / n).tolist(), "truth": (mass / n).tolist()},
    }


def evaluate(
  world: world_lib.World,
  users_x: np.ndarray,
  models: Mapping[str, Callable],
  bins: np.ndarray,
  ks: Sequence[int],
  num_bins: int,
  chunk: int,
  oracle_top: Optional[np.ndarray] = None,
) -> Dict[str, Dict]:
  """{name: metrics} of every model on the held-out users ``users_x`` [U, f], ``chunk`` users
  at a time. ``models[name](x [c, f], p [c, D]) -> log P̂ [c, D]`` (normalised; ``p`` is the
  truth, for reference models); ``oracle_top`` [U, >= max(ks)] (None: computed per chunk)."""
  if chunk < 1:
    raise ValueError(f"chunk must be >= 1, got {chunk}")
  acc = {name: Accumulator(ks, bins, num_bins) for name in models}
  x = np.asarray(users_x, np.float64)
  for a in range(0, x.shape[0], chunk):
    xc = x[a : a + chunk]
    p = world_lib.true_probabilities(world, xc)
    top = top_k(p, max(ks)) if oracle_top is None else oracle_top[a : a + chunk]
    for name, fn in models.items():
      acc[name].add(p, fn(xc, p), top)
  return {name: a.result() for name, a in acc.items()}


def model_log_probs(user_weights, item_table) -> Callable:
  """The two-tower's log P̂ for held-out x: log softmax_d <[x W, 1], c_d> (float64)."""
  w = np.asarray(user_weights, np.float64)
  c = np.asarray(item_table, np.float64)

  def fn(x, p=None):
    del p
    q = x @ w
    return log_softmax(q @ c[:, :-1].T + c[:, -1])

  return fn


def reference_models(popularity) -> Dict[str, Callable]:
  """``oracle`` (P̂ = P) and ``most popular`` (P̂ = Q, the same list for every user)."""
  log_q = np.log(np.asarray(popularity, np.float64))
  return {
    "oracle": lambda x, p: np.log(p),
    "most popular": lambda x, p: np.broadcast_to(log_q, p.shape),
  }
