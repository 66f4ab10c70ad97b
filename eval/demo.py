r"""`make demo`: does the corrected logQ matter, and where? Measured in a world that knows P(d|u).

    python -m eval.demo --output_dir=runs/demo                  # the default run
    python -m eval.demo --steps=300 --seeds=0 --eval_users=300  # a quick look

World (`eval.synthetic_world`): 2,000 items with Zipf(1.1) popularity, users with observed
features x_u and peaked preferences, true logits t(u, d) = tau <x_u, v_d> + b_d and
P(d|u) = softmax_d t(u, d). Training rows are i.i.d. (user, next item ~ P(.|u)) draws from a
pool of training users; every metric is computed on held-out users (fresh x_u) against the truth.

Model: a matrix-factorisation two-tower that can represent the truth exactly,
q_u = [x_u W, 1], c_d = [e_d, beta_d], s(u, d) = <q_u, c_d> (``--user_tower=id`` replaces x_u W
by a user-id embedding; it is then evaluated on held-out draws of the training users, as ids
cannot generalise to new users). One row per loss:

* ``full``: full softmax over the catalog, ``tfrs_logq.losses.full_softmax_loss`` (the target the
  sampled losses approximate);
* ``NEGATIVES:CORRECTION[:CONVENTION]``: sampled softmax with ``tfrs_logq.negatives``
  (``in_batch`` = InBatchNegatives, ``mixed`` = MixedNegatives, ``uniform`` = UniformNegatives),
  log Q from a ``tfrs_logq.frequency.ExactCounts`` table of the training draws under the
  sampler's log-Q CONVENTION, scored by ``sampler.score`` and turned into a loss by
  ``tfrs_logq.losses.sampled_softmax_loss(correction=CORRECTION)`` (the library computes every
  score, log Q, accidental-hit mask and loss; this module only composes them).

Paired seeds: seed s fixes the initialisation, the training draws, their order and the
samplers' random streams, identically for every row, so rows differ only by their loss. All
rows x seeds train side by side in one graph (one Adam over disjoint variables, which is the
same as training each alone).

Metrics, on held-out users u (E_u = mean over them), with P = P(.|u) and P̂ the model's softmax:

    KL          = E_u sum_d P(d|u) (log P(d|u) - log P̂(d|u))        (lower is better, 0 = truth)
    R@k oracle  = E_u |top_k(P̂) ∩ top_k(P)| / k     (agreement with the true top-k)
    HR@k        = E_u sum_{d in top_k(P̂)} P(d|u)    (probability that a held-out draw is
                                                     retrieved; the oracle top-k gives the maximum)
    HR@k bin j  = E_u sum_{d in top_k(P̂), bin(d) = j} P(d|u) / E_u sum_{bin(d) = j} P(d|u)
                  (the same, for held-out draws whose item lies in popularity decile j)
    calibration bin j = E over held-out draws (u, d), bin(d) = j, of log P̂(d|u) - log P(d|u)
                  (learned logit - true logit, centred per user by each side's log-normaliser;
                   > 0: the model over-predicts the bin's items, < 0: under-predicts)

Deciles rank the items by their true popularity Q(d) = E_u P(d|u) (decile 1 = the most popular
tenth); the table also gives HR@k of deciles 2-10 together and the calibration of the most
popular 1% of the items, summary.md the calibration by popularity-rank bins (1, 2-3, 4-10,
11-30, ...: finer at the head, where standard logQ's bias ~ P(p|u) / (1 - P(p|u)) is predicted),
and learning_curve.png the KL (on --curve_users users) at --curve_points steps of training.
Reference rows: ``oracle`` (P̂ = P) and ``most popular`` (P̂ = Q, the same list for every
user). Every row is reported as mean ± standard error over the seeds, and the paired
differences corrected - standard, corrected - none and expected_count - unigram log Q (per seed,
then mean ± t_{0.975, S-1} * sd / sqrt(S), a 95% interval, by ``eval.paired_stats``) wherever
both rows are present.

Outputs in --output_dir: summary.json (everything, per seed), summary.md (the tables and the
verdict), calibration.png, recall_by_decile.png, learning_curve.png; the table is printed.
"""

import json
import pathlib
import time
from typing import Dict, List, NamedTuple, Sequence, Tuple

from absl import app
from absl import flags

import numpy as np

from eval import paired_stats
from eval import synthetic_world as world_lib

__all__ = ["DemoConfig", "validate_config", "RowSpec", "parse_row", "default_rows", "Trainer",
           "log_softmax", "top_k", "kl_divergence", "recall_vs_oracle", "hit_rate",
           "hit_rate_by_bin", "calibration_by_bin", "rank_bins", "evaluate_model", "mean_and_se",
           "paired_difference", "verdicts", "format_table", "format_markdown", "run"]

NEGATIVES = ("in_batch", "mixed", "uniform")
USER_TOWERS = ("features", "id")
_LABELS = {"in_batch": "in-batch", "mixed": "mixed", "uniform": "uniform"}
RANK_EDGES = (1, 2, 4, 11, 31, 101, 301, 1001, 3001, 10001, 30001, 100001)


class DemoConfig(NamedTuple):
  """Settings of one demo run (the flags of ``python -m eval.demo`` carry the same names)."""
  rows: Tuple["RowSpec", ...] = ()  # () = default_rows()
  seeds: Tuple[int, ...] = (0, 1, 2)
  steps: int = 2000
  batch_size: int = 256
  num_negatives: int = 256
  learning_rate: float = 0.02
  embedding_dim: int = 16
  user_tower: str = "features"
  num_items: int = 2000
  feature_dim: int = 16
  zipf: float = 1.1
  tau: float = 4.0
  world_seed: int = 0
  train_users: int = 4096
  eval_users: int = 2000
  k: int = 10
  num_bins: int = 10
  curve_points: int = 5
  curve_users: int = 500


_D = DemoConfig()
FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defines the demo's absl flags (at run time, so importing this module defines none)."""
  flags.DEFINE_string("output_dir", "runs/demo", "Where summary.json/.md and the PNGs go.")
  flags.DEFINE_list("rows", None, "Rows: 'full' or NEGATIVES:CORRECTION[:CONVENTION] with "
                    f"NEGATIVES in {NEGATIVES}, CORRECTION one of tfrs_logq.losses.CORRECTIONS, "
                    "CONVENTION one of tfrs_logq.negatives.CONVENTIONS (default unigram). "
                    "Default: full, in_batch:{none,standard,corrected}, plus "
                    "in_batch:{standard,corrected}:expected_count when the library offers it.")
  flags.DEFINE_list("seeds", [str(s) for s in _D.seeds],
                    "Paired seeds (initialisation, training draws and order, sampling).")
  flags.DEFINE_integer("steps", _D.steps, "Training steps.")
  flags.DEFINE_integer("batch_size", _D.batch_size, "Training rows per step (the in-batch pool).")
  flags.DEFINE_integer("num_negatives", _D.num_negatives, "in_batch: keep at most this many "
                       "distinct ids; mixed: k // 2 in-batch + the rest uniform; uniform: k draws.")
  flags.DEFINE_float("learning_rate", _D.learning_rate, "Adam's initial rate (cosine decay to 1%).")
  flags.DEFINE_integer("embedding_dim", _D.embedding_dim, "Model dimension (+1 bias column).")
  flags.DEFINE_enum("user_tower", _D.user_tower, list(USER_TOWERS),
                    "features: q_u = [x_u W, 1], metrics on held-out users; id: a user-id "
                    "embedding, metrics on the training users (held-out draws).")
  flags.DEFINE_integer("num_items", _D.num_items, "Catalog size |D|.")
  flags.DEFINE_integer("feature_dim", _D.feature_dim, "User feature dimension f.")
  flags.DEFINE_float("zipf", _D.zipf, "Zipf exponent of the item popularity bias.")
  flags.DEFINE_float("tau", _D.tau, "Peakedness of the preferences (scale of <x_u, v_d>).")
  flags.DEFINE_integer("world_seed", _D.world_seed, "Seed of the world (items, held-out users).")
  flags.DEFINE_integer("train_users", _D.train_users, "Training user pool size.")
  flags.DEFINE_integer("eval_users", _D.eval_users, "Held-out users of the final metrics.")
  flags.DEFINE_integer("k", _D.k, "Cut-off k of R@k and HR@k.")
  flags.DEFINE_integer("num_bins", _D.num_bins, "Popularity bins (10 = deciles).")
  flags.DEFINE_integer("curve_points", _D.curve_points,
                       "KL evaluations during training (learning curve; 0 = none).")
  flags.DEFINE_integer("curve_users", _D.curve_users, "Held-out users of each curve point.")
  flags.DEFINE_bool("plot", True, "Write the PNGs.")


# ------------------------------------------------------------------------------ rows


class RowSpec(NamedTuple):
  """One loss: full softmax, or a sampler + correction + log-Q convention."""
  negatives: str  # "full" or one of NEGATIVES
  correction: str = "none"
  convention: str = "unigram"

  @property
  def name(self) -> str:
    if self.negatives == "full":
      return "full"
    base = f"{self.negatives}:{self.correction}"
    return base if self.convention == "unigram" else f"{base}:{self.convention}"

  @property
  def label(self) -> str:
    if self.negatives == "full":
      return "full softmax"
    parts = [_LABELS[self.negatives], self.correction]
    if self.convention != "unigram":
      parts.append(self.convention)
    return ", ".join(parts)


def _library_choices():
  from tfrs_logq import losses, negatives  # pylint: disable=g-import-not-at-top
  return losses.CORRECTIONS, tuple(negatives.CONVENTIONS)


def parse_row(text: str) -> RowSpec:
  """'full' | 'NEGATIVES:CORRECTION[:CONVENTION]' -> RowSpec (ValueError naming what is wrong)."""
  corrections, conventions = _library_choices()
  parts = text.strip().split(":")
  if parts == ["full"]:
    return RowSpec("full")
  if len(parts) not in (2, 3):
    raise ValueError(f"rows: {text!r} is not 'full' or NEGATIVES:CORRECTION[:CONVENTION]")
  negatives, correction = parts[0], parts[1]
  convention = parts[2] if len(parts) == 3 else "unigram"
  if negatives not in NEGATIVES:
    raise ValueError(f"rows: negatives must be one of {NEGATIVES}, got {negatives!r}")
  if correction not in corrections:
    raise ValueError(f"rows: correction must be one of {corrections}, got {correction!r}")
  if convention not in conventions:
    raise ValueError(f"rows: convention must be one of {conventions}, got {convention!r}")
  if negatives == "uniform" and convention != "unigram":
    raise ValueError(f"rows: {text!r}: uniform negatives have one log Q (-log |D|), a "
                     "convention does not apply")
  return RowSpec(negatives, correction, convention)


def default_rows() -> List[RowSpec]:
  """full, in-batch none / standard / corrected (+ the expected_count rows when available)."""
  _, conventions = _library_choices()
  rows = [RowSpec("full")] + [RowSpec("in_batch", c) for c in ("none", "standard", "corrected")]
  if "expected_count" in conventions:
    rows += [RowSpec("in_batch", c, "expected_count") for c in ("standard", "corrected")]
  return rows


# ------------------------------------------------------------------------------ metrics (numpy)


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


def evaluate_model(p, log_p_hat, bins, k: int, num_bins: int, oracle_top=None,
                   ranks=None, head=None) -> Dict:
  """Every metric of one model on held-out users (module docstring).

  ``ranks`` (`rank_bins`) adds ``calibration_by_rank``; ``head`` (bool [D], e.g. the most popular
  1% of the items) adds ``calibration_head``, the calibration over those items.
  """
  log_p_hat = np.asarray(log_p_hat, np.float64)
  extra = {}
  if head is not None:
    extra["calibration_head"] = float(calibration_by_bin(
        p, log_p_hat, np.where(np.asarray(head), 0, 1), 2)[0])
  if ranks is not None:
    extra["calibration_by_rank"] = calibration_by_bin(p, log_p_hat, ranks[0],
                                                      len(ranks[1])).tolist()
  model_top = top_k(log_p_hat, k)
  oracle_top = top_k(p, k) if oracle_top is None else oracle_top
  return {"kl": float(kl_divergence(p, log_p_hat).mean()),
          "recall_vs_oracle": float(recall_vs_oracle(model_top, oracle_top).mean()),
          "hit_rate": float(hit_rate(p, model_top).mean()),
          "hit_rate_tail": float(hit_rate_by_bin(p, model_top, np.minimum(bins, 1), 2)[1]),
          "hit_rate_by_bin": hit_rate_by_bin(p, model_top, bins, num_bins).tolist(),
          "calibration_by_bin": calibration_by_bin(p, log_p_hat, bins, num_bins).tolist(),
          **extra}


def _nan_if_none(value, like):
  """summary.json's mark of a spread one seed cannot give: nan, in the shape of the mean."""
  return np.full(np.shape(like), np.nan) if value is None else value


def mean_and_se(values) -> tuple:
  """(mean, standard error sd / sqrt(S)) along axis 0 (``paired_stats.mean_se``); the s.e. is
  nan for one seed."""
  stats = paired_stats.mean_se(values)
  return stats["mean"], _nan_if_none(stats["se"], stats["mean"])


def paired_difference(a, b) -> tuple:
  """(mean of a - b, 95% half-width t_{0.975, S-1} sd / sqrt(S)) over the seeds, paired by
  position, along axis 0 (``paired_stats.paired_difference``); the half-width is nan for one
  seed."""
  stats = paired_stats.paired_difference(a, b)
  return stats["mean"], _nan_if_none(stats["half_width"], stats["mean"])


# ------------------------------------------------------------------------------ training (TF)


def validate_config(cfg: DemoConfig) -> DemoConfig:
  """Checks every setting (ValueError naming it); returns cfg with the default rows filled in."""
  rows = tuple(cfg.rows) or tuple(default_rows())
  if not all(isinstance(r, RowSpec) for r in rows):
    raise TypeError("rows must be RowSpec values (see parse_row)")
  names = [r.name for r in rows]
  if len(set(names)) != len(names):
    raise ValueError(f"rows: duplicate rows in {names}")
  seeds = tuple(cfg.seeds)
  if not seeds or len(set(seeds)) != len(seeds) or not all(
      isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in seeds):
    raise ValueError(f"seeds must be distinct integers, got {cfg.seeds}")
  for name in ("steps", "batch_size", "num_negatives", "embedding_dim", "num_items",
               "feature_dim", "train_users", "eval_users", "k", "num_bins", "curve_users"):
    value = getattr(cfg, name)
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
      raise ValueError(f"{name} must be a positive int, got {value!r}")
  if cfg.curve_points < 0:
    raise ValueError(f"curve_points must be >= 0, got {cfg.curve_points}")
  if cfg.k > cfg.num_items or cfg.num_bins > cfg.num_items:
    raise ValueError(f"k and num_bins must be <= num_items ({cfg.num_items}), got {cfg.k}, "
                     f"{cfg.num_bins}")
  if not cfg.learning_rate > 0:
    raise ValueError(f"learning_rate must be > 0, got {cfg.learning_rate}")
  if cfg.user_tower not in USER_TOWERS:
    raise ValueError(f"user_tower must be one of {USER_TOWERS}, got {cfg.user_tower!r}")
  if cfg.user_tower == "id" and cfg.eval_users > cfg.train_users:
    raise ValueError("user_tower='id' evaluates the training users: eval_users must be <= "
                     f"train_users ({cfg.train_users}), got {cfg.eval_users}")
  return cfg._replace(rows=rows, seeds=tuple(int(x) for x in seeds))


def _config_from_flags() -> DemoConfig:
  try:
    seeds = tuple(int(x) for x in FLAGS.seeds)
  except ValueError as e:
    raise ValueError(f"seeds must be integers, got {FLAGS.seeds}") from e
  rows = tuple(parse_row(r) for r in FLAGS.rows) if FLAGS.rows else ()
  values = {name: getattr(FLAGS, name) for name in DemoConfig._fields
            if name not in ("rows", "seeds")}
  return validate_config(DemoConfig(rows=rows, seeds=seeds, **values))


def _initial_weights(cfg: DemoConfig, seed: int):
  """Same seed -> same initial weights for every row (paired)."""
  rng = np.random.default_rng([seed, 2])
  rows = cfg.feature_dim if cfg.user_tower == "features" else cfg.train_users
  user = rng.normal(scale=0.1, size=(rows, cfg.embedding_dim))
  items = np.concatenate([rng.normal(scale=0.1, size=(cfg.num_items, cfg.embedding_dim)),
                          np.zeros((cfg.num_items, 1))], axis=1)
  return user.astype(np.float32), items.astype(np.float32)


class Trainer:
  """All rows x seeds in one graph; ``train(num_steps)`` advances every model."""

  def __init__(self, cfg: DemoConfig, streams):
    import tfrs_logq  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from tfrs_logq import frequency, losses, negatives  # pylint: disable=g-import-not-at-top
    self._tf, self._losses, self._negatives = tf, losses, negatives
    self.cfg = cfg
    self.step = 0
    self._data = []
    for stream in streams:
      counts = np.bincount(stream.items.ravel(), minlength=cfg.num_items)
      self._data.append(dict(
          features=tf.constant(stream.user_features, tf.float32),
          users=tf.constant(stream.users, tf.int32),
          items=tf.constant(stream.items.astype(np.int64)),
          estimator=frequency.ExactCounts(cfg.num_items, counts=counts, accumulate=False)))
    self.models = []  # (row index, seed index, user variable, item variable, sampler)
    for r, row in enumerate(cfg.rows):
      for s, seed in enumerate(cfg.seeds):
        user, items = _initial_weights(cfg, seed)
        self.models.append((r, s, tf.Variable(user), tf.Variable(items),
                            self._sampler(row, self._data[s]["estimator"])))
    self._variables = [v for m in self.models for v in m[2:4]]
    schedule = tf.keras.optimizers.schedules.CosineDecay(cfg.learning_rate, cfg.steps,
                                                         alpha=0.01)
    self._optimizer = tf.keras.optimizers.Adam(schedule)
    self._optimizer.build(self._variables)
    self._train = tf.function(self._train_steps)

  def _sampler(self, row: RowSpec, estimator):
    neg, k = self._negatives, self.cfg.num_negatives
    if row.negatives == "full":
      return None
    if row.negatives == "in_batch":
      return neg.InBatchNegatives(estimator, num_negatives=k, cross_replica=False,
                                  convention=row.convention)
    if row.negatives == "uniform":
      return neg.UniformNegatives(None, k, id_range=(0, self.cfg.num_items))
    k_b = max(k // 2, 1)
    return neg.MixedNegatives(
        neg.InBatchNegatives(estimator, num_negatives=k_b, cross_replica=False),
        neg.UniformNegatives(None, max(k - k_b, 1), id_range=(0, self.cfg.num_items)),
        convention=row.convention)

  def _queries(self, user_var, data, users):
    tf = self._tf
    if self.cfg.user_tower == "features":
      x = tf.matmul(tf.gather(data["features"], users), user_var)
    else:
      x = tf.gather(user_var, users)
    return tf.concat([x, tf.ones_like(x[:, :1])], axis=1)

  def _loss(self, model, step):
    """Mean loss of one model on its seed's batch ``step`` (composed from the library)."""
    tf = self._tf
    r, s, user_var, item_var, sampler = model
    row, data = self.cfg.rows[r], self._data[s]
    ids = data["items"][step]
    query = self._queries(user_var, data, data["users"][step])
    if sampler is None:  # full softmax over the whole catalog
      return tf.reduce_mean(self._losses.full_softmax_loss(query, ids, item_var).loss)
    seed = tf.stack([tf.constant(self.cfg.seeds[s], tf.int64), tf.cast(step, tf.int64)])
    scored = sampler.score(query, ids, tf.gather(item_var, ids), seed=seed, item_table=item_var)
    out = self._losses.sampled_softmax_loss(**scored.loss_kwargs(), correction=row.correction)
    return tf.reduce_mean(out.loss)

  def _train_steps(self, start, num_steps):
    tf = self._tf
    for step in tf.range(start, start + num_steps):
      with tf.GradientTape() as tape:
        total = tf.add_n([self._loss(m, step) for m in self.models])
      grads = tape.gradient(total, self._variables)
      self._optimizer.apply_gradients(zip(grads, self._variables))

  def batch_losses(self, step: int) -> np.ndarray:
    """Mean loss of every model (order of ``self.models``) on batch ``step``, eagerly."""
    return np.array([float(self._loss(m, self._tf.constant(step))) for m in self.models])

  def train(self, num_steps: int):
    tf = self._tf
    if num_steps > 0:
      self._train(tf.constant(self.step), tf.constant(num_steps))
      self.step += num_steps

  def log_probs(self, model, user_features=None, users=None) -> np.ndarray:
    """log P̂(.|u) [U, D] of one model for held-out features or training-user ids."""
    _, _, user_var, item_var, _ = model
    table = user_var.numpy().astype(np.float64)
    x = user_features @ table if self.cfg.user_tower == "features" else table[users]
    q = np.concatenate([x, np.ones((x.shape[0], 1))], axis=1)
    return log_softmax(q @ item_var.numpy().astype(np.float64).T)


# ------------------------------------------------------------------------------ the run


def _eval_sets(cfg: DemoConfig, world, streams, num_users: int):
  """Per seed: (features, ids, P) of the users the metrics are computed on."""
  sets = []
  if cfg.user_tower == "features":
    rng = np.random.default_rng([cfg.world_seed, 3])
    x = world_lib.sample_users(world, num_users, rng)
    p = world_lib.true_probabilities(world, x)
    return [(x, None, p)] * len(streams)
  for stream in streams:
    ids = np.arange(min(num_users, stream.user_features.shape[0]))
    sets.append((None, ids, world_lib.true_probabilities(world, stream.user_features[ids])))
  return sets


def run(cfg: DemoConfig, output_dir: str, plot: bool = True, log=print) -> Dict:
  """Trains every row x seed, evaluates, writes the outputs; returns the summary dict."""
  start = time.time()
  cfg = validate_config(cfg)
  out = pathlib.Path(output_dir)
  out.mkdir(parents=True, exist_ok=True)
  world = world_lib.make_world(cfg.num_items, cfg.feature_dim, cfg.zipf, cfg.tau, cfg.world_seed)
  streams = [world_lib.training_stream(world, cfg.train_users, cfg.steps, cfg.batch_size, s)
             for s in cfg.seeds]
  eval_sets = _eval_sets(cfg, world, streams, cfg.eval_users)
  curve_sets = _eval_sets(cfg, world, streams, cfg.curve_users)
  # Popularity: Q(d) = E_u P(d|u) over the evaluation users of the first seed's set.
  popularity = eval_sets[0][2].mean(axis=0)
  bins = world_lib.popularity_bins(popularity, cfg.num_bins)
  ranks = rank_bins(popularity)
  head = np.zeros(cfg.num_items, bool)
  head[np.argsort(-popularity, kind="stable")[:max(1, cfg.num_items // 100)]] = True
  stats = _world_stats(eval_sets[0][2], popularity, cfg.batch_size)
  log(f"world: {cfg.num_items} items, Zipf {cfg.zipf}, tau {cfg.tau}; {stats}")
  trainer = Trainer(cfg, streams)
  log(f"training {len(cfg.rows)} rows x {len(cfg.seeds)} seeds for {cfg.steps} steps "
      f"(batch {cfg.batch_size}) ...")
  curve_steps = sorted({max(1, round(cfg.steps * (i + 1) / cfg.curve_points))
                        for i in range(cfg.curve_points)}) if cfg.curve_points else []
  curve = {row.name: [[] for _ in cfg.seeds] for row in cfg.rows}
  train_start = time.time()
  for target in curve_steps or [cfg.steps]:
    trainer.train(target - trainer.step)
    if curve_steps:
      for model in trainer.models:
        r, s = model[0], model[1]
        x, ids, p = curve_sets[s]
        curve[cfg.rows[r].name][s].append(
            float(kl_divergence(p, trainer.log_probs(model, x, ids)).mean()))
      log(f"  step {trainer.step}: KL " + ", ".join(
          f"{row.name} {np.mean([c[-1] for c in curve[row.name]]):.3f}" for row in cfg.rows))
  trainer.train(cfg.steps - trainer.step)
  train_seconds = time.time() - train_start

  per_seed = {row.name: [None] * len(cfg.seeds) for row in cfg.rows}
  for model in trainer.models:
    r, s = model[0], model[1]
    x, ids, p = eval_sets[s]
    per_seed[cfg.rows[r].name][s] = evaluate_model(p, trainer.log_probs(model, x, ids), bins,
                                                   cfg.k, cfg.num_bins, ranks=ranks, head=head)
  references = {"oracle": [], "most popular": []}
  for _, _, p in eval_sets:  # P̂ = P, and P̂ = Q (the same list for every user)
    references["oracle"].append(evaluate_model(p, np.log(p), bins, cfg.k, cfg.num_bins,
                                               ranks=ranks, head=head))
    references["most popular"].append(evaluate_model(
        p, np.log(np.broadcast_to(popularity, p.shape)), bins, cfg.k, cfg.num_bins, ranks=ranks,
        head=head))
  summary = _summarise(cfg, per_seed, references, curve, curve_steps)
  summary["world"] = {"stats": stats, "rank_bins": ranks[1],
                      "popularity": popularity.tolist()}
  summary["seconds"] = {"train": train_seconds, "total": time.time() - start}
  summary["config"] = {k: (list(v) if isinstance(v, (list, tuple)) else v)
                       for k, v in cfg._asdict().items() if k != "rows"}
  summary["config"]["rows"] = [r.name for r in cfg.rows]
  table = format_table(summary)
  log(table)
  (out / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
  (out / "summary.md").write_text(format_markdown(summary))
  if plot:
    _plot(summary, out)
  log(f"outputs: {out}/summary.md, summary.json" + (
      ", calibration.png, recall_by_decile.png, learning_curve.png" if plot else "") +
      f"  ({summary['seconds']['total']:.0f} s, training {train_seconds:.0f} s)")
  return summary


def _world_stats(p, popularity, batch_size) -> str:
  mean_pp = float((p ** 2).sum(axis=1).mean())
  top = np.argsort(-popularity)[:max(1, p.shape[1] // 100)]
  head_pp = float((p[:, top] ** 2).sum() / p[:, top].sum())
  entropy = float(-(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=1).mean())
  return (f"entropy of P(.|u) {entropy:.2f} nats; E[P(p|u)] of a drawn positive {mean_pp:.2f}, "
          f"{head_pp:.2f} when it is in the top 1% of items; top item Q = {popularity.max():.3f} "
          f"(B*Q = {batch_size * popularity.max():.1f}), top decile holds "
          f"{np.sort(popularity)[::-1][:len(popularity) // 10].sum():.0%} of the draws")


_SCALARS = ("kl", "recall_vs_oracle", "hit_rate", "hit_rate_tail", "calibration_head")
_VECTORS = ("hit_rate_by_bin", "calibration_by_bin", "calibration_by_rank")


def _aggregate(results: List[Dict]) -> Dict:
  agg = {}
  for key in _SCALARS + _VECTORS:
    mean, se = mean_and_se([r[key] for r in results])
    agg[key] = {"mean": np.asarray(mean).tolist(), "se": np.asarray(se).tolist()}
  return agg


def _pairs(rows: Sequence[RowSpec]):
  """(corrected, standard) and (corrected, none) pairs of the same negatives / convention."""
  names = {r.name for r in rows}
  pairs = []
  for r in rows:
    if r.negatives == "full" or r.correction != "corrected":
      continue
    standard = r._replace(correction="standard")
    none = RowSpec(r.negatives, "none")
    if standard.name in names:
      pairs.append((r, standard))
    if none.name in names and r.convention == "unigram":
      pairs.append((r, none))
  for r in rows:  # a convention against the paper's, same correction
    if r.negatives != "full" and r.convention != "unigram":
      paper = r._replace(convention="unigram")
      if paper.name in names:
        pairs.append((r, paper))
  return pairs


def _summarise(cfg, per_seed, references, curve, curve_steps) -> Dict:
  rows = {r.name: {"label": r.label, "per_seed": per_seed[r.name],
                   **_aggregate(per_seed[r.name])} for r in cfg.rows}
  refs = {name: {"label": name, **_aggregate(res)} for name, res in references.items()}
  diffs = []
  for a, b in _pairs(cfg.rows):
    neg = _LABELS[a.negatives]
    if a.correction != b.correction:
      kind, context = "correction", f"{neg}, {a.convention} log Q"
      label = f"{a.correction} − {b.correction} ({context})"
    else:
      kind, context = "convention", f"{neg}, {a.correction}"
      label = f"{a.convention} − {b.convention} log Q ({context})"
    entry = {"a": a.name, "b": b.name, "kind": kind, "context": context, "label": label}
    for key in _SCALARS + _VECTORS:
      mean, half = paired_difference([x[key] for x in per_seed[a.name]],
                                     [x[key] for x in per_seed[b.name]])
      entry[key] = {"mean": np.asarray(mean).tolist(), "ci95": np.asarray(half).tolist()}
    if curve_steps:  # the KL difference along training (learning-curve users)
      mean, half = paired_difference(curve[a.name], curve[b.name])
      entry["kl_curve"] = {"mean": np.asarray(mean).tolist(), "ci95": np.asarray(half).tolist()}
    diffs.append(entry)
  return {"rows": rows, "references": refs, "paired_differences": diffs,
          "learning_curve": {"steps": curve_steps, "kl": curve},
          "seeds": list(cfg.seeds), "k": cfg.k,
          "evaluated_on": ("held-out users" if cfg.user_tower == "features"
                           else "the training users (held-out draws)")}


# ------------------------------------------------------------------------------ reporting


def _pm(stat, key, fmt="{:.3f}", index=None):
  mean, se = stat[key]["mean"], stat[key]["se"]
  if index is not None:
    mean, se = mean[index], se[index]
  text = fmt.format(mean)
  if se is None or not np.isfinite(se):
    return text
  return f"{text} ± {fmt.replace('+', '').format(se)}"


def _ci(entry, key, index=None, fmt="{:+.3f}"):
  mean, half = entry[key]["mean"], entry[key]["ci95"]
  if index is not None:
    mean, half = mean[index], half[index]
  if half is None or not np.isfinite(half):
    return fmt.format(mean)
  return f"{fmt.format(mean)} [{fmt.format(mean - half)}, {fmt.format(mean + half)}]"


def _table_rows(summary):
  k = summary["k"]
  header = ["row", "KL(P‖P̂) ↓", f"R@{k} vs oracle ↑", f"HR@{k} ↑", f"HR@{k} decile 1",
            f"HR@{k} deciles 2–10", "log P̂/P top 1%"]
  lines = []
  for stat in list(summary["rows"].values()) + list(summary["references"].values()):
    lines.append([stat["label"], _pm(stat, "kl"), _pm(stat, "recall_vs_oracle"),
                  _pm(stat, "hit_rate"), _pm(stat, "hit_rate_by_bin", index=0),
                  _pm(stat, "hit_rate_tail"), _pm(stat, "calibration_head", "{:+.2f}")])
  return header, lines


def _ranges(values: List[int]) -> str:
  """[2, 3, 4, 7] -> '2–4, 7'."""
  out, i = [], 0
  while i < len(values):
    j = i
    while j + 1 < len(values) and values[j + 1] == values[j] + 1:
      j += 1
    out.append(str(values[i]) if i == j else f"{values[i]}–{values[j]}")
    i = j + 1
  return ", ".join(out) or "none"


def _where(d) -> str:
  """Deciles where a's HR@k is above / below b's (95% interval excluding 0)."""
  mean = np.asarray(d["hit_rate_by_bin"]["mean"], np.float64)
  half = np.asarray(d["hit_rate_by_bin"]["ci95"], np.float64)
  ok = np.isfinite(half) & np.isfinite(mean)
  higher = [i + 1 for i in range(mean.size) if ok[i] and mean[i] - half[i] > 0]
  lower = [i + 1 for i in range(mean.size) if ok[i] and mean[i] + half[i] < 0]
  return f"higher {_ranges(higher)}; lower {_ranges(lower)}"


def _difference_rows(summary):
  k = summary["k"]
  header = ["paired difference (95% interval)", "ΔKL", f"ΔR@{k} vs oracle", f"ΔHR@{k}",
            f"HR@{k} by decile"]
  lines = [[d["label"], _ci(d, "kl"), _ci(d, "recall_vs_oracle"), _ci(d, "hit_rate"), _where(d)]
           for d in summary["paired_differences"]]
  return header, lines


def verdicts(summary) -> List[str]:
  """One plain sentence per corrected − standard pair: who is closer to the truth, and where."""
  k = summary["k"]
  out = []
  for d in summary["paired_differences"]:
    if d["kind"] != "correction" or d["b"].split(":")[1] != "standard":
      continue
    mean, half = d["kl"]["mean"], d["kl"]["ci95"]
    if not np.isfinite(half):
      head = f"{d['context']}: one seed, no interval: corrected − standard KL {mean:+.3f}"
    elif mean + half < 0:
      head = f"{d['context']}: corrected is ahead of standard (KL {_ci(d, 'kl')})"
    elif mean - half > 0:
      head = (f"{d['context']}: corrected is NOT ahead — standard is closer to the truth "
              f"(KL {_ci(d, 'kl')})")
    else:
      head = (f"{d['context']}: corrected and standard do not differ beyond seed noise "
              f"(KL {_ci(d, 'kl')})")
    out.append(f"{head}; corrected's HR@{k} by popularity decile: {_where(d)}.")
  return out


def _text_table(header, lines) -> List[str]:
  widths = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(header)]
  fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
  return [fmt(header), "  ".join("-" * w for w in widths)] + [fmt(l) for l in lines]


def _md_table(header, lines) -> List[str]:
  return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
          + ["| " + " | ".join(l) + " |" for l in lines])


def format_table(summary) -> str:
  n = len(summary["seeds"])
  text = _text_table(*_table_rows(summary))
  text.append(f"(mean ± s.e. over {n} paired seed{'s' if n > 1 else ''}, "
              f"{summary['evaluated_on']}; "
              f"HR@k: probability that a held-out draw is retrieved, the oracle's is the "
              f"maximum; log P̂/P top 1%: calibration on the most popular 1% of items)")
  if summary["paired_differences"]:
    text += [""] + _text_table(*_difference_rows(summary))
  text += [""] + ["verdict: " + v for v in verdicts(summary)]
  return "\n".join(text)


def format_markdown(summary) -> str:
  header, lines = _table_rows(summary)
  k, bins = summary["k"], len(summary["references"]["oracle"]["hit_rate_by_bin"]["mean"])
  md = ["# Demo: corrected vs standard logQ in a world that knows P(d|u)", "",
        f"World: {summary['world']['stats']}.", ""] + _md_table(header, lines)
  md += ["", f"Mean ± standard error over seeds {summary['seeds']} (paired: same seed, same "
         f"initialisation and data for every row), on {summary['evaluated_on']}. HR@k: the "
         "probability that a held-out draw is in the top k (the oracle's is the maximum); "
         "log P̂/P top 1%: calibration on the most popular 1% of items.", "",
         "## Paired differences (95% interval over seeds)", ""]
  md += _md_table(*_difference_rows(summary))
  md += [""] + ["- " + v for v in verdicts(summary)]
  md += ["", f"## HR@{k} by popularity decile of the held-out draw (1 = most popular)", "",
         "| row | " + " | ".join(str(i + 1) for i in range(bins)) + " |",
         "|" + "---|" * (bins + 1)]
  for stat in list(summary["rows"].values()) + list(summary["references"].values()):
    md.append(f"| {stat['label']} | " + " | ".join(
        f"{v:.3f}" for v in stat["hit_rate_by_bin"]["mean"]) + " |")
  md += ["", "## Calibration: E[log P̂(d|u) − log P(d|u)] over held-out draws, by decile", "",
         "| row | " + " | ".join(str(i + 1) for i in range(bins)) + " |",
         "|" + "---|" * (bins + 1)]
  for stat in summary["rows"].values():
    md.append(f"| {stat['label']} | " + " | ".join(
        f"{v:+.2f}" for v in stat["calibration_by_bin"]["mean"]) + " |")
  labels = summary["world"]["rank_bins"]
  md += ["", "The same by popularity rank of the item (finer at the head, where "
         "standard logQ's bias ≈ P(p|u) / (1 − P(p|u)) is predicted):", "",
         "| row | " + " | ".join(labels) + " |", "|" + "---|" * (len(labels) + 1)]
  for stat in summary["rows"].values():
    md.append(f"| {stat['label']} | " + " | ".join(
        f"{v:+.2f}" for v in stat["calibration_by_rank"]["mean"]) + " |")
  md += ["", f"Training {summary['seconds']['train']:.0f} s, total "
         f"{summary['seconds']['total']:.0f} s. Configuration: `{json.dumps(summary['config'])}`"]
  return "\n".join(md) + "\n"


def _errorbar_lines(ax, x, stats, key):
  for stat in stats:
    mean = np.asarray(stat[key]["mean"], np.float64)
    se = np.nan_to_num(np.asarray(stat[key]["se"], np.float64))
    style = "--" if stat["label"] in ("oracle", "most popular") else "-"
    ax.errorbar(x, mean, yerr=se, marker="o", ms=3, capsize=2, linestyle=style,
                label=stat["label"])


def _plot(summary, out: pathlib.Path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  k = summary["k"]
  stats = list(summary["rows"].values())
  deciles = np.arange(1, len(stats[0]["hit_rate_by_bin"]["mean"]) + 1)
  decile_label = "popularity decile of the item (1 = most popular)"

  fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
  _errorbar_lines(axes[0], deciles, stats, "calibration_by_bin")
  axes[0].set_xticks(deciles)
  axes[0].set_xlabel(decile_label)
  labels = summary["world"]["rank_bins"]
  _errorbar_lines(axes[1], np.arange(len(labels)), stats, "calibration_by_rank")
  axes[1].set_xticks(np.arange(len(labels)))
  axes[1].set_xticklabels(labels, fontsize=8)
  axes[1].set_xlabel("popularity rank of the item")
  axes[0].set_ylabel("E[log P̂(d|u) − log P(d|u)] over held-out draws")
  for ax in axes:
    ax.axhline(0.0, color="black", lw=0.8)
    ax.grid(alpha=0.3)
  axes[1].legend(fontsize=8)
  fig.suptitle("Calibration: learned − true log-probability (0 = the truth; < 0: "
               "under-predicted)", fontsize=10)
  fig.tight_layout()
  fig.savefig(out / "calibration.png", dpi=110)
  plt.close(fig)

  fig, ax = plt.subplots(figsize=(7.5, 4.8))
  _errorbar_lines(ax, deciles, stats + list(summary["references"].values()), "hit_rate_by_bin")
  ax.set_xticks(deciles)
  ax.set_xlabel(decile_label)
  ax.set_ylabel(f"HR@{k}: share of the decile's held-out draws retrieved")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(out / "recall_by_decile.png", dpi=110)
  plt.close(fig)

  curve = summary["learning_curve"]
  if curve["steps"]:
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for name, per_seed in curve["kl"].items():
      mean, se = mean_and_se(per_seed)
      axes[0].errorbar(curve["steps"], mean, yerr=np.nan_to_num(se), marker="o", ms=3,
                       capsize=2, label=summary["rows"][name]["label"])
    axes[0].set_yscale("log")
    axes[0].set_ylabel("KL(P ‖ P̂) on held-out users")
    for d in summary["paired_differences"]:
      if "kl_curve" in d and not d["b"].endswith(":none"):  # none is off this scale
        axes[1].errorbar(curve["steps"], d["kl_curve"]["mean"],
                         yerr=np.nan_to_num(np.asarray(d["kl_curve"]["ci95"], np.float64)),
                         marker="o", ms=3, capsize=2, label=d["label"])
    axes[1].axhline(0.0, color="black", lw=0.8)
    axes[1].set_ylabel("paired KL difference (95% interval); < 0: first is closer")
    for ax in axes:
      ax.set_xlabel("training step")
      ax.grid(alpha=0.3, which="both")
      ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "learning_curve.png", dpi=110)
    plt.close(fig)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  try:
    cfg = _config_from_flags()
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  run(cfg, FLAGS.output_dir, plot=FLAGS.plot)


def cli() -> None:
  """Entry point: `python -m eval.demo`."""
  define_flags()
  app.run(main)


if __name__ == "__main__":
  cli()
