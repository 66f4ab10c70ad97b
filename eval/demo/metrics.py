"""The demo's metrics, in numpy (float64): a model's log P̂(.|u) against the true P(.|u) of held-out
users (KL, R@k against the oracle top-k, HR@k, by popularity bin, calibration; their formulas are
in `eval.demo`'s docstring, Metrics)."""

from typing import Dict, Sequence

import numpy as np

__all__ = [
  "RANK_EDGES",
  "log_softmax",
  "top_k",
  "kl_divergence",
  "recall_vs_oracle",
  "hit_rate",
  "hit_rate_by_bin",
  "calibration_by_bin",
  "rank_bins",
  "evaluate_model",
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


def kl_divergence(p, log_p_hat) -> np.ndarray:
  """KL(P || P̂) per row: sum_d P (log P - log P̂) (terms with P = 0 contribute 0)."""
  p = np.asarray(p, np.float64)
  log_p = np.log(np.where(p > 0, p, 1.0))
  return np.sum(np.where(p > 0, p * (log_p - log_p_hat), 0.0), axis=-1)


def recall_vs_oracle(model_top, oracle_top) -> np.ndarray:
  """|model top-k ∩ oracle top-k| / k per row."""
  model_top, oracle_top = np.asarray(model_top), np.asarray(oracle_top)
  k = oracle_top.shape[1]
  hits = (model_top[:, :, None] == oracle_top[:, None, :]).any(axis=2)
  return hits.sum(axis=1) / k


def hit_rate(p, model_top) -> np.ndarray:
  """sum_{d in top-k} P(d|u) per row: the probability that a held-out draw is retrieved."""
  return np.take_along_axis(np.asarray(p, np.float64), np.asarray(model_top), 1).sum(axis=1)


def hit_rate_by_bin(p, model_top, bins, num_bins: int) -> np.ndarray:
  """[num_bins]: E_u sum_{d in top-k, bin d = j} P / E_u sum_{bin d = j} P (nan: empty bin)."""
  p = np.asarray(p, np.float64)
  bins = np.asarray(bins)
  retrieved = np.zeros_like(p, dtype=bool)
  np.put_along_axis(retrieved, np.asarray(model_top), True, 1)
  hit = np.bincount(bins, weights=(p * retrieved).sum(axis=0), minlength=num_bins)
  mass = np.bincount(bins, weights=p.sum(axis=0), minlength=num_bins)
  return np.divide(hit, mass, out=np.full(num_bins, np.nan), where=mass > 0)


def calibration_by_bin(p, log_p_hat, bins, num_bins: int) -> np.ndarray:
  """[num_bins]: P-weighted mean of log P̂ - log P over (u, d) with bin d = j (nan: empty bin)."""
  p = np.asarray(p, np.float64)
  log_p = np.log(np.where(p > 0, p, 1.0))
  diff = np.where(p > 0, p * (np.asarray(log_p_hat) - log_p), 0.0).sum(axis=0)
  mass = p.sum(axis=0)
  num = np.bincount(bins, weights=diff, minlength=num_bins)
  den = np.bincount(bins, weights=mass, minlength=num_bins)
  return np.divide(num, den, out=np.full(num_bins, np.nan), where=den > 0)


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
  log_p_hat = np.asarray(log_p_hat, np.float64)
  extra = {}
  if head is not None:
    extra["calibration_head"] = float(
      calibration_by_bin(p, log_p_hat, np.where(np.asarray(head), 0, 1), 2)[0]
    )
  if ranks is not None:
    extra["calibration_by_rank"] = calibration_by_bin(
      p, log_p_hat, ranks[0], len(ranks[1])
    ).tolist()
  model_top = top_k(log_p_hat, k)
  oracle_top = top_k(p, k) if oracle_top is None else oracle_top
  return {
    "kl": float(kl_divergence(p, log_p_hat).mean()),
    "recall_vs_oracle": float(recall_vs_oracle(model_top, oracle_top).mean()),
    "hit_rate": float(hit_rate(p, model_top).mean()),
    "hit_rate_tail": float(hit_rate_by_bin(p, model_top, np.minimum(bins, 1), 2)[1]),
    "hit_rate_by_bin": hit_rate_by_bin(p, model_top, bins, num_bins).tolist(),
    "calibration_by_bin": calibration_by_bin(p, log_p_hat, bins, num_bins).tolist(),
    **extra,
  }
