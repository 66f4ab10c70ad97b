"""Synthetic catalog with a KNOWN next-item distribution (the embedded default dataset).

Generative model (all quantities exposed on `SyntheticCatalog`):
* popularity prior (Zipf): item i has rank r_i (a random permutation of 1..I) and
      pi_i = r_i^(-a) / sum_j r_j^(-a)                      (a = `zipf_exponent`)
* latent factors: x_u, y_i ~ N(0, d^(-1/2) I_d), so <x_u, y_i> has unit variance.
* next-item logits for user u whose previous item is p (none for the first event):
      z_i(u, p) = (<x_u, y_i> + beta * <y_p, y_i>) / tau + log pi_i
  (tau = `temperature`, beta = `transition_weight`, default 0: events depend on the user only.)
* the next item is drawn from the softmax of z over the items the user has not consumed yet
  (`allow_repeats=False`, the default, so held-out targets never sit in the input history):
      P(i | u, history h) = exp(z_i) [i not in h] / sum_{j not in h} exp(z_j).
  With `allow_repeats=True` there is no mask.
* sequence lengths ~ Uniform{min_len..max_len}; optional timestamps: each user starts at a
  uniform time within `time_span` seconds and gaps are exponential with mean `mean_gap`.

Defaults (2000 users, 1000 items, 30..70 events: ~100k interactions) train SASRec in a couple
of minutes on 2 CPU cores. Larger: e.g. `load("synthetic", num_users=50000, num_items=20000,
min_len=50, max_len=200)`; generation works in user chunks of about 4M logits, so memory
stays bounded.

Because of the user factors and the no-repeat mask, the empirical item frequency of the data is
NOT exactly pi (pi is the prior); `next_item_probs` gives the exact per-user distribution.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from train.data.records import SequenceData
from train.data.splits import build_sequence_data


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
  """Parameters of the generator (see module docstring)."""

  num_users: int = 2000
  num_items: int = 1000
  min_len: int = 30
  max_len: int = 70
  zipf_exponent: float = 1.0
  dim: int = 16
  temperature: float = 0.5
  transition_weight: float = 0.0
  allow_repeats: bool = False
  timestamps: bool = True
  time_span: int = 365 * 86400
  mean_gap: float = 86400.0
  seed: int = 0

  def validate(self) -> None:
    if self.num_users < 1 or self.num_items < 2:
      raise ValueError(
        f"need num_users >= 1 and num_items >= 2, got {self.num_users}, {self.num_items}"
      )
    if not 1 <= self.min_len <= self.max_len:
      raise ValueError(f"need 1 <= min_len <= max_len, got {self.min_len}, {self.max_len}")
    if not self.allow_repeats and self.max_len > self.num_items:
      raise ValueError(
        f"max_len={self.max_len} > num_items={self.num_items} is impossible "
        "without repeats (set allow_repeats=True)"
      )
    if self.temperature <= 0 or self.dim < 1 or self.zipf_exponent < 0:
      raise ValueError("need temperature > 0, dim >= 1 and zipf_exponent >= 0")


class SyntheticCatalog:
  """The generator's true parameters. Row/column 0 of every [.., I+1] array is padding."""

  def __init__(self, config: SyntheticConfig):
    config.validate()
    self.config = config
    rng = np.random.default_rng(np.random.SeedSequence([config.seed, 1]))
    n_items, d = config.num_items, config.dim
    self.ranks = np.zeros(n_items + 1, np.int64)
    self.ranks[1:] = rng.permutation(n_items) + 1
    weights = np.zeros(n_items + 1)
    weights[1:] = self.ranks[1:].astype(np.float64) ** (-config.zipf_exponent)
    #: Zipf popularity prior pi, float64 [I+1], pi[0] = 0, sums to 1.
    self.popularity = weights / weights.sum()
    scale = d**-0.25
    #: x_u, float64 [U+1, d] (row 0 unused).
    self.user_factors = np.zeros((config.num_users + 1, d))
    self.user_factors[1:] = rng.normal(0.0, scale, (config.num_users, d))
    #: y_i, float64 [I+1, d] (row 0 unused).
    self.item_factors = np.zeros((n_items + 1, d))
    self.item_factors[1:] = rng.normal(0.0, scale, (n_items, d))

  @property
  def num_items(self) -> int:
    return self.config.num_items

  def logits(self, user_ids, previous_items=None) -> np.ndarray:
    """z_i(u, p) for items i = 1..I: float64 [n, I] (column k is item k + 1).

    previous_items: int [n], 0 (or None) = no previous item.
    """
    user_ids = np.asarray(user_ids, np.int64).reshape(-1)
    if user_ids.size and (user_ids.min() < 1 or user_ids.max() > self.config.num_users):
      raise ValueError(f"user ids must be in 1..{self.config.num_users}")
    y = self.item_factors[1:]
    z = self.user_factors[user_ids] @ y.T
    if previous_items is not None and self.config.transition_weight:
      prev = np.asarray(previous_items, np.int64).reshape(-1)
      if (
        prev.shape != user_ids.shape
        or prev.min(initial=0) < 0
        or prev.max(initial=0) > self.num_items
      ):
        raise ValueError("previous_items must be [n] ids in 0..num_items (0 = none)")
      z = z + self.config.transition_weight * (self.item_factors[prev] @ y.T)
    return z / self.config.temperature + np.log(self.popularity[1:])[None, :]

  def next_item_probs(self, user_ids, previous_items=None, histories=None) -> np.ndarray:
    """The true next-item softmax P(i | u, p, h): float64 [n, I+1], column 0 = 0.

    histories: optional list of n id arrays; unless `allow_repeats`, their items get
      probability 0 and the rest is renormalised (the no-repeat rule of the generator).
    """
    z = self.logits(user_ids, previous_items)
    if histories is not None and not self.config.allow_repeats:
      if len(histories) != z.shape[0]:
        raise ValueError(f"{len(histories)} histories for {z.shape[0]} users")
      for k, h in enumerate(histories):
        h = np.asarray(h, np.int64)
        z[k, h[h > 0] - 1] = -np.inf
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    return np.concatenate([np.zeros((p.shape[0], 1)), p], axis=1)

  def sample_sequences(self, user_ids, lengths, rng: np.random.Generator) -> list:
    """Draws one sequence per user by the generative model.

    Static logits (transition_weight = 0): the Gumbel-top-k trick (see `_sample_static`).
    Otherwise one Gumbel-max draw per step over the masked logits, in user chunks of about
    4M logits (O(users * items * max_len) work: slower for large catalogs).
    """
    user_ids = np.asarray(user_ids, np.int64).reshape(-1)
    lengths = np.asarray(lengths, np.int64).reshape(-1)
    if lengths.shape != user_ids.shape:
      raise ValueError("one length per user is needed")
    if not self.config.allow_repeats and lengths.max(initial=0) > self.num_items:
      raise ValueError("a sequence longer than the catalog needs allow_repeats=True")
    out = [None] * user_ids.size
    chunk = max(1, 4_000_000 // self.num_items)
    for start in range(0, user_ids.size, chunk):
      users = user_ids[start : start + chunk]
      lens = lengths[start : start + chunk]
      n, t_max = users.size, int(lens.max(initial=0))
      base = self.logits(users)
      if not self.config.transition_weight:
        seqs = self._sample_static(base, t_max, rng)
        for k in range(n):
          out[start + k] = seqs[k, : lens[k]]
        continue
      seqs = np.zeros((n, t_max), np.int64)
      used = np.zeros((n, self.num_items), bool)
      prev = np.zeros(n, np.int64)
      # float32 halves the cost of this O(n * I) per step loop; sampling needs no more.
      base = base.astype(np.float32)
      factors = self.item_factors.astype(np.float32)
      y_t = factors[1:].T * np.float32(self.config.transition_weight / self.config.temperature)
      rows = np.arange(n)
      for t in range(t_max):
        # z_i = base_i + beta <y_prev, y_i> / tau (no transition term for the first event).
        z = base + factors[prev] @ y_t if t > 0 else base.copy()
        if not self.config.allow_repeats:
          z[used] = -np.inf
        # -log(E), E ~ Exp(1), is a standard Gumbel variable: argmax(z + G) ~ softmax(z).
        # (E is floored at 1e-30: a float32 draw can be exactly 0, and log(0) = -inf.)
        e = rng.standard_exponential(size=z.shape, dtype=np.float32)
        z -= np.log(np.maximum(e, np.float32(1e-30)))
        draw = np.argmax(z, axis=1)
        used[rows, draw] = True
        prev = draw + 1
        seqs[:, t] = prev
      for k in range(n):
        out[start + k] = seqs[k, : lens[k]]
    return out

  def _sample_static(self, z: np.ndarray, t_max: int, rng: np.random.Generator) -> np.ndarray:
    """[n, t_max] ids when the logits z [n, I] do not depend on the previous item.

    Without repeats: the Gumbel-top-k trick -- the items of the t_max largest z_i + G_i
    (G iid Gumbel), in decreasing order, are distributed exactly as t_max sequential draws
    from softmax(z) without replacement (Plackett-Luce). With repeats: iid inverse-CDF draws.
    """
    n = z.shape[0]
    if t_max == 0:
      return np.zeros((n, 0), np.int64)
    if self.config.allow_repeats:
      p = np.exp(z - z.max(axis=1, keepdims=True))
      cdf = np.cumsum(p, axis=1)
      cdf /= cdf[:, -1:]
      u = rng.random((n, t_max))
      draws = np.stack([np.searchsorted(cdf[k], u[k], side="right") for k in range(n)])
      return np.minimum(draws, self.num_items - 1).astype(np.int64) + 1
    perturbed = z + rng.gumbel(size=z.shape)
    top = np.argpartition(-perturbed, t_max - 1, axis=1)[:, :t_max]
    order = np.argsort(-np.take_along_axis(perturbed, top, axis=1), axis=1)
    return np.take_along_axis(top, order, axis=1).astype(np.int64) + 1


def generate(config: SyntheticConfig) -> tuple:
  """Returns (catalog, per-user sequences, per-user timestamps or None); users are 1..U."""
  catalog = SyntheticCatalog(config)
  rng = np.random.default_rng(np.random.SeedSequence([config.seed, 2]))
  lengths = rng.integers(config.min_len, config.max_len + 1, size=config.num_users)
  users = np.arange(1, config.num_users + 1, dtype=np.int64)
  seqs = catalog.sample_sequences(users, lengths, rng)
  times = None
  if config.timestamps:
    starts = rng.integers(0, config.time_span, size=config.num_users)
    times = []
    for s0, n in zip(starts, lengths):
      gaps = rng.exponential(config.mean_gap, size=n)
      times.append(1_000_000_000 + s0 + np.floor(np.cumsum(gaps)).astype(np.int64))
  return catalog, seqs, times


def load_synthetic(
  *,
  split: str = "leave_one_out",
  seed: int = 0,
  catalog_config: Optional[SyntheticConfig] = None,
  **kwargs,
) -> SequenceData:
  """Generates the synthetic dataset and splits it (no k-core filtering, ids kept as drawn).

  kwargs: any `SyntheticConfig` field (num_users, num_items, min_len, max_len, zipf_exponent,
  dim, temperature, transition_weight, allow_repeats, timestamps, ...), plus split options of
  `train.data.splits.build_sequence_data` (temporal_fraction, num_val_users, ...).
  The temporal split needs timestamps=True. metadata["catalog"] is the `SyntheticCatalog`,
  metadata["true_popularity"] its Zipf prior pi.
  """
  fields = {f.name for f in dataclasses.fields(SyntheticConfig)}
  cfg_kwargs = {k: v for k, v in kwargs.items() if k in fields}
  split_kwargs = {k: v for k, v in kwargs.items() if k not in fields}
  config = catalog_config or SyntheticConfig(seed=seed, **cfg_kwargs)
  if catalog_config is not None and cfg_kwargs:
    raise ValueError("pass either catalog_config or generator keyword arguments, not both")
  catalog, seqs, times = generate(config)
  if split == "temporal" and times is None:
    raise ValueError("the temporal split of the synthetic data needs timestamps=True")
  lengths = np.array([s.size for s in seqs])
  users = np.repeat(np.arange(1, config.num_users + 1, dtype=np.int64), lengths)
  items = np.concatenate(seqs)
  ts = (
    np.concatenate(times)
    if times is not None
    else np.concatenate([np.arange(n, dtype=np.int64) for n in lengths])
  )
  data = build_sequence_data(
    "synthetic",
    users,
    items,
    ts,
    split=split,
    min_count=0,
    renumber_ids=False,
    num_items=config.num_items,
    metadata=dict(
      format="synthetic",
      config=dataclasses.asdict(config),
      catalog=catalog,
      true_popularity=catalog.popularity,
    ),
    **split_kwargs,
  )
  if times is None:
    data.timestamps = None
    data.val.timestamps = None
    data.test.timestamps = None
  return data
