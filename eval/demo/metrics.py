"""The demo's metrics, in numpy (float64): a model's log P̂(.|u) against the true P(.|u) of held-out
users (KL, R@k against the oracle top-k, HR@k, by popularity bin, calibration; their formulas are
in `eval.demo`'s docstring, Metrics). `Accumulator` holds them for several k as sums over users
(per item where a bin is to come), binned and divided at the end, so any chunking of the users
gives the same result up to rounding: `evaluate_model` is one chunk; bench/world_scale.py feeds
it chunk by chunk at 10^5-10^6 items."""

from typing import Callable, Dict, Sequence

import numpy as np

__all__ = [
  "RANK_EDGES",
  "log_softmax",
  "top_k",
  "kl_divergence",
  "recall_at",
  "hit_rate_at",
  "Accumulator",
  "rank_bins",
  "evaluate_model",
  "reference_models",
]

RANK_EDGES = (1, 2, 4, 11, 31, 101, 301, 1001, 3001, 10001, 30001, 100001)


def log_softmax(logits) -> np.ndarray:
  """log P̂ = logits - LSE over the last axis, float64."""
  x = np.asarray(logits, np.float64)
  x = x - x.max(axis=-1, keepdims=True)
  return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def top_k(scores, k: int) -> np.ndarray:
  """Indices of the k largest entries of every row, best first (ties: lower index first)."""
  scores = np.asarray(scores)
  if not 0 < k <= scores.shape[-1]:
    raise ValueError(f"k must be in [1, {scores.shape[-1]}], got {k}")
  part = np.argpartition(-scores, k - 1, axis=-1)[:, :k]
  vals = np.take_along_axis(scores, part, -1)
  order = np.lexsort((part, -vals), axis=-1)
  return np.take_along_axis(part, order, -1)


def _log_ratio(p, log_p_hat) -> np.ndarray:
  """P (log P̂ - log P) per entry (0 where P = 0): minus KL's terms, calibration's numerator."""
  p = np.asarray(p, np.float64)
  log_p = np.log(np.where(p > 0, p, 1.0))
  return np.where(p > 0, p * (np.asarray(log_p_hat, np.float64) - log_p), 0.0)


def kl_divergence(p, log_p_hat) -> np.ndarray:
  """KL(P || P̂) per row: sum_d P (log P - log P̂) (terms with P = 0 contribute 0)."""
  return -_log_ratio(p, log_p_hat).sum(axis=-1)


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
  """Sums over users of one model's metrics at the cut-offs ``ks``: KL, recall@k, HR@k, and per
  item d the P mass retrieved in the top k, sum P (log P̂ - log P), sum P and sum P̂ (`binned`)."""

  def __init__(self, num_items: int, ks: Sequence[int]):
    self.ks = tuple(ks)
    self.users = 0
    self.kl = 0.0
    self.recall = np.zeros(len(self.ks))
    self.hit = np.zeros(len(self.ks))
    self.hit_items = np.zeros((len(self.ks), num_items))
    self.log_ratio = np.zeros(num_items)
    self.mass = np.zeros(num_items)
    self.mass_hat = np.zeros(num_items)

  def add(self, p, log_p_hat, oracle_top=None) -> None:
    """One chunk: P [c, D], log P̂ [c, D] (normalised), the oracle's top-k_max [c, >= k_max]
    (None: top_k(P))."""
    p = np.asarray(p, np.float64)
    log_p_hat = np.asarray(log_p_hat, np.float64)
    ratio = _log_ratio(p, log_p_hat)
    self.users += p.shape[0]
    self.kl -= float(ratio.sum())
    self.log_ratio += ratio.sum(axis=0)
    del ratio
    self.mass += p.sum(axis=0)
    self.mass_hat += np.exp(log_p_hat).sum(axis=0)
    k_max = max(self.ks)
    model_top = top_k(log_p_hat, k_max)
    oracle_top = top_k(p, k_max) if oracle_top is None else oracle_top
    self.recall += recall_at(model_top, oracle_top, self.ks).sum(axis=0)
    self.hit += hit_rate_at(p, model_top, self.ks).sum(axis=0)
    p_top = np.take_along_axis(p, model_top, 1)
    for j, k in enumerate(self.ks):
      self.hit_items[j] += np.bincount(
        model_top[:, :k].ravel(), weights=p_top[:, :k].ravel(), minlength=self.mass.size
      )

  def binned(self, bins, num_bins: int) -> Dict[str, np.ndarray]:
    """By bin j of ``bins`` [D]: ``hit_rate`` [len(ks), num_bins] (HR@k of the draws of bin j),
    ``calibration`` (nan: a bin without P mass) and each side's ``mass`` / ``mass_hat`` per user."""
    total = lambda w: np.bincount(np.asarray(bins), weights=w, minlength=num_bins)
    mass = total(self.mass)
    ratio = lambda a: np.divide(a, mass, out=np.full(a.shape, np.nan), where=mass > 0)
    n = max(self.users, 1)
    return {
      "hit_rate": ratio(np.stack([total(h) for h in self.hit_items])),
      "calibration": ratio(total(self.log_ratio)),
      "mass": mass / n,
      "mass_hat": total(self.mass_hat) / n,
    }


def rank_bins(popularity, edges: Sequence[int] = RANK_EDGES) -> tuple:
  """(bin of every item by its popularity rank, labels): ranks 1, 2-3, 4-10, 11-30, ... .

  ``edges`` are the first ranks of the bins (1-based, increasing, starting at 1); the last bin
  ends at the catalog size. Ties in popularity: lower id first.
  """
  pop = np.asarray(popularity, np.float64)
  edges = [e for e in edges if e <= pop.size]
  if not edges or edges[0] != 1 or any(b <= a for a, b in zip(edges, edges[1:])):
    raise ValueError(f"edges must be increasing first ranks starting at 1, got {edges}")
  ids = np.arange(pop.size)
  rank = np.empty(pop.size, np.int64)
  rank[np.lexsort((ids, -pop))] = np.arange(1, pop.size + 1)
  bins = np.searchsorted(np.asarray(edges), rank, side="right") - 1
  ends = list(edges[1:]) + [pop.size + 1]
  labels = [str(a) if b - a == 1 else f"{a}–{b - 1}" for a, b in zip(edges, ends)]
  return bins, labels


def evaluate_model(
  p, log_p_hat, bins, k: int, num_bins: int, oracle_top=None, ranks=None, head=None
) -> Dict:
  """Every metric of one model on held-out users (`eval.demo`'s docstring, Metrics).

  ``ranks`` (`rank_bins`) adds ``calibration_by_rank``; ``head`` (bool [D], e.g. the most popular
  1% of the items) adds ``calibration_head``, the calibration over those items.
  """
  acc = Accumulator(np.shape(p)[1], (k,))
  acc.add(p, log_p_hat, oracle_top)
  n, by_bin = acc.users, acc.binned(bins, num_bins)
  out = {
    "kl": acc.kl / n,
    "recall_vs_oracle": float(acc.recall[0] / n),
    "hit_rate": float(acc.hit[0] / n),
    "hit_rate_tail": float(acc.binned(np.minimum(bins, 1), 2)["hit_rate"][0, 1]),
    "hit_rate_by_bin": by_bin["hit_rate"][0].tolist(),
    "calibration_by_bin": by_bin["calibration"].tolist(),
  }
  if head is not None:
    out["calibration_head"] = float(acc.binned(np.where(head, 0, 1), 2)["calibration"][0])
  if ranks is not None:
    out["calibration_by_rank"] = acc.binned(ranks[0], len(ranks[1]))["calibration"].tolist()
  return out


def reference_models(popularity) -> Dict[str, Callable]:
  """``oracle`` (P̂ = P) and ``most popular`` (P̂ = Q, the same list for every user), as
  ``fn(x, p) -> log P̂``."""
  log_q = np.log(np.asarray(popularity, np.float64))
  return {
    "oracle": lambda x, p: np.log(p),
    "most popular": lambda x, p: np.broadcast_to(log_q, np.shape(p)),
  }
