r"""A synthetic recommendation world that knows the true next-item distribution P(d | u).

Users carry observed features x_u ~ N(0, I_f); items carry hidden vectors v_d ~ N(0, I_f / f)
and a popularity bias that follows Zipf's law in the item id (id = popularity rank of the bias):

    true logit  t(u, d) = tau * <x_u, v_d> + b_d,      b_d = -zipf * log(d + 1)
    P(d | u)    = exp(t(u, d)) / sum_d' exp(t(u, d'))

``tau`` sets how peaked each user's preferences are (at tau = 4, 2,000 items and Zipf 1.1 the
positive a user draws has P(p | u) of about 0.27 on average and 0.4 among the most popular items:
the regime where standard logQ's bias P(p|u) / (1 - P(p|u)) is large). The marginal popularity
Q(d) = E_u P(d | u) is skewed (the top tenth of the catalog gets about 70% of the draws).

The world is realisable by a two-tower model whose query tower is linear in x_u and whose item
tower is an embedding table with a bias column: q_u = [x_u W, 1], c_d = [e_d, beta_d] with
W = tau * I, e_d = v_d, beta_d = b_d gives <q_u, c_d> = t(u, d). So full softmax can reach the
truth, and the distance of a trained model to the truth measures the bias of its loss (plus
what training did not finish), not a lack of capacity. Held-out users are fresh draws of x_u.

Everything here is numpy (float64) and deterministic given the seeds.
"""

from typing import NamedTuple, Optional

import numpy as np

__all__ = [
  "World",
  "TrainingStream",
  "make_world",
  "true_logits",
  "true_probabilities",
  "sample_users",
  "held_out_users",
  "sample_items",
  "training_stream",
  "popularity_bins",
]


class World(NamedTuple):
  """The hidden parameters of the world (see the module docstring)."""

  item_vectors: np.ndarray  # [D, f] v_d
  item_bias: np.ndarray  # [D] b_d
  tau: float

  @property
  def num_items(self) -> int:
    return self.item_vectors.shape[0]

  @property
  def feature_dim(self) -> int:
    return self.item_vectors.shape[1]


class TrainingStream(NamedTuple):
  """Training draws of one seed: a pool of users and the (user, item) pair of every batch row."""

  user_features: np.ndarray  # [U, f] the training users' x_u
  users: np.ndarray  # int32 [steps, batch] row -> index into user_features
  items: np.ndarray  # int32 [steps, batch] the drawn next item d ~ P(. | u)


def _check_positive_int(value, name):
  if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
    raise ValueError(f"{name} must be a positive int, got {value!r}")


def make_world(
  num_items: int = 2000, feature_dim: int = 16, zipf: float = 1.1, tau: float = 4.0, seed: int = 0
) -> World:
  """Draws the item vectors v_d ~ N(0, I_f / f) and sets b_d = -zipf * log(d + 1)."""
  _check_positive_int(num_items, "num_items")
  _check_positive_int(feature_dim, "feature_dim")
  if not zipf >= 0:
    raise ValueError(f"zipf must be >= 0, got {zipf!r}")
  if not tau >= 0:
    raise ValueError(f"tau must be >= 0, got {tau!r}")
  rng = np.random.default_rng([seed, 0])
  vectors = rng.normal(size=(num_items, feature_dim)) / np.sqrt(feature_dim)
  bias = -float(zipf) * np.log(np.arange(1, num_items + 1, dtype=np.float64))
  return World(vectors, bias, float(tau))


def sample_users(world: World, num_users: int, rng: np.random.Generator) -> np.ndarray:
  """x_u ~ N(0, I_f): [num_users, f]."""
  _check_positive_int(num_users, "num_users")
  return rng.normal(size=(num_users, world.feature_dim))


def held_out_users(world: World, num_users: int, world_seed: int) -> np.ndarray:
  """The held-out users of a world: x_u ~ N(0, I_f) from ``default_rng([world_seed, 3])``."""
  return sample_users(world, num_users, np.random.default_rng([world_seed, 3]))


def true_logits(world: World, user_features) -> np.ndarray:
  """t(u, d) = tau <x_u, v_d> + b_d: [U, D] float64."""
  x = np.asarray(user_features, np.float64)
  if x.ndim != 2 or x.shape[1] != world.feature_dim:
    raise ValueError(f"user_features must be [U, {world.feature_dim}], got shape {x.shape}")
  return world.tau * x @ world.item_vectors.T + world.item_bias


def true_probabilities(world: World, user_features) -> np.ndarray:
  """P(d | u) = softmax_d t(u, d): [U, D] float64, rows sum to 1."""
  t = true_logits(world, user_features)
  t = t - t.max(axis=1, keepdims=True)
  p = np.exp(t)
  return p / p.sum(axis=1, keepdims=True)


def sample_items(
  probabilities: np.ndarray, rows: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
  """One draw d ~ P(. | u) for each entry of ``rows`` (indices into ``probabilities``' rows).

  Inverse-CDF sampling in one vectorised search: row r's CDF is shifted by r, so the CDFs of all
  rows form one increasing sequence and ``searchsorted(cdf + r, r + uniform)`` lands in row r.
  """
  p = np.asarray(probabilities, np.float64)
  rows = np.asarray(rows)
  num_rows, num_items = p.shape
  cdf = np.cumsum(p, axis=1)
  cdf /= cdf[:, -1:]
  shifted = (cdf + np.arange(num_rows)[:, None]).ravel()
  flat = rows.ravel()
  u = rng.random(flat.shape[0])
  pos = np.searchsorted(shifted, flat + u, side="right")
  items = np.minimum(pos - flat * num_items, num_items - 1)
  return items.reshape(rows.shape).astype(np.int32)


def training_stream(
  world: World,
  num_users: int,
  steps: int,
  batch_size: int,
  seed: int,
  chunk: Optional[int] = None,
) -> TrainingStream:
  """A pool of ``num_users`` training users and ``steps`` batches of (user, next item) draws.

  Every batch row picks a user of the pool uniformly and draws a fresh next item from P(. | u),
  so batch rows are i.i.d. draws of the joint distribution and an item appears in a row with
  probability Q(d) = mean_u P(d | u) over the pool. ``chunk``: draw the items ``chunk`` users at
  a time (P(.|u) of a chunk in memory, not of the pool), the rows in the order of their users:
  the same distribution and the same users, not the same items (bench/world_scale.py's stream).
  """
  for value, name in ((steps, "steps"), (batch_size, "batch_size")):
    _check_positive_int(value, name)
  rng = np.random.default_rng([seed, 1])
  x = sample_users(world, num_users, rng)
  users = rng.integers(0, num_users, size=(steps, batch_size)).astype(np.int32)
  if chunk is None:
    return TrainingStream(x, users, sample_items(true_probabilities(world, x), users, rng))
  flat = users.ravel()
  order = np.argsort(flat, kind="stable")
  starts = np.searchsorted(flat[order], np.arange(num_users + 1))
  items = np.empty(flat.shape, np.int32)
  for a in range(0, num_users, chunk):
    b = min(a + chunk, num_users)
    rows = order[starts[a] : starts[b]]
    if rows.size:
      p = true_probabilities(world, x[a:b])
      items[rows] = sample_items(p, flat[rows] - a, rng)
  return TrainingStream(x, users, items.reshape(users.shape))


def popularity_bins(popularity, num_bins: int = 10) -> np.ndarray:
  """Bin of every item: 0 = the most popular tenth of the catalog (ties: lower id first).

  Items are sorted by ``popularity`` (descending); the item at sorted position r gets bin
  floor(r * num_bins / D), so every bin holds D / num_bins items.
  """
  pop = np.asarray(popularity, np.float64)
  if pop.ndim != 1 or pop.size < num_bins:
    raise ValueError(f"popularity must be 1-D with at least num_bins entries, got {pop.shape}")
  _check_positive_int(num_bins, "num_bins")
  ids = np.arange(pop.size)
  order = np.lexsort((ids, -pop))
  bins = np.empty(pop.size, np.int64)
  bins[order] = (np.arange(pop.size) * num_bins) // pop.size
  return bins
