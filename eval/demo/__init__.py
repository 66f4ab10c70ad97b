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

* ``full``: full softmax over the catalog, ``tfrs_logq.tf_keras.full_softmax.full_softmax_loss``
(the target the
  sampled losses approximate);
* ``SOURCE:CORRECTION[:CONVENTION]``: sampled softmax with ``tfrs_logq.tf_keras.negatives``
  (``in_batch`` = InBatchNegatives, ``mixed`` = MixedNegatives, ``uniform`` = UniformNegatives),
  log Q from a ``tfrs_logq.tf_keras.frequency.ExactCounts`` table of the training draws under the
  sampler's log-Q CONVENTION, scored by ``sampler.score`` and turned into a loss by
  ``tfrs_logq.tf_keras.losses.sampled_softmax_loss(correction=CORRECTION)`` (the library computes
  every score, log Q, accidental-hit mask and loss; this module only composes them).

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

# The run and the CLI live here (``python -m eval.demo``: __main__.py); the demo's parts:
# config (settings, rows), training (the models), metrics, stats (over seeds, the summary),
# report (table, summary.md, verdicts), plots (PNGs). The names of __all__ are importable from
# eval.demo.

import json
import pathlib
import time
from typing import Dict

import numpy as np
from absl import app, flags

from eval import synthetic_world as world_lib
from eval.demo.config import (
  NEGATIVES,
  USER_TOWERS,
  DemoConfig,
  RowSpec,
  default_rows,
  parse_row,
  validate_config,
)
from eval.demo.metrics import (
  Accumulator,
  evaluate_model,
  hit_rate_at,
  kl_divergence,
  log_softmax,
  rank_bins,
  recall_at,
  reference_models,
  top_k,
)
from eval.demo.plots import write_plots
from eval.demo.report import format_markdown, format_table, verdicts
from eval.demo.stats import mean_and_se, paired_difference, summarise
from eval.demo.training import Trainer

__all__ = [
  "DemoConfig",
  "validate_config",
  "RowSpec",
  "parse_row",
  "default_rows",
  "Trainer",
  "log_softmax",
  "top_k",
  "kl_divergence",
  "recall_at",
  "hit_rate_at",
  "Accumulator",
  "rank_bins",
  "evaluate_model",
  "reference_models",
  "mean_and_se",
  "paired_difference",
  "verdicts",
  "format_table",
  "format_markdown",
  "run",
]

_D = DemoConfig()
FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defines the demo's absl flags (at run time, so importing this module defines none)."""
  flags.DEFINE_string("output_dir", "runs/demo", "Where summary.json/.md and the PNGs go.")
  flags.DEFINE_list(
    "rows",
    None,
    "Rows: 'full' or SOURCE:CORRECTION[:CONVENTION] with "
    f"SOURCE in {NEGATIVES}, CORRECTION one of tfrs_logq.tf_keras.losses.CORRECTIONS, "
    "CONVENTION one of tfrs_logq.tf_keras.negatives.CONVENTIONS (default unigram). "
    "Default: full, in_batch:{none,standard,corrected}, "
    "in_batch:{standard,corrected}:expected_count.",
  )
  flags.DEFINE_list(
    "seeds",
    [str(s) for s in _D.seeds],
    "Paired seeds (initialisation, training draws and order, sampling).",
  )
  flags.DEFINE_integer("steps", _D.steps, "Training steps.")
  flags.DEFINE_integer("batch_size", _D.batch_size, "Training rows per step (the in-batch pool).")
  flags.DEFINE_integer(
    "num_negatives",
    _D.num_negatives,
    "in_batch: keep at most this many "
    "distinct ids; mixed: k // 2 in-batch + the rest uniform; uniform: k draws.",
  )
  flags.DEFINE_float("learning_rate", _D.learning_rate, "Adam's initial rate (cosine decay to 1%).")
  flags.DEFINE_integer("embedding_dim", _D.embedding_dim, "Model dimension (+1 bias column).")
  flags.DEFINE_enum(
    "user_tower",
    _D.user_tower,
    list(USER_TOWERS),
    "features: q_u = [x_u W, 1], metrics on held-out users; id: a user-id "
    "embedding, metrics on the training users (held-out draws).",
  )
  flags.DEFINE_integer("num_items", _D.num_items, "Catalog size |D|.")
  flags.DEFINE_integer("feature_dim", _D.feature_dim, "User feature dimension f.")
  flags.DEFINE_float("zipf", _D.zipf, "Zipf exponent of the item popularity bias.")
  flags.DEFINE_float("tau", _D.tau, "Peakedness of the preferences (scale of <x_u, v_d>).")
  flags.DEFINE_integer("world_seed", _D.world_seed, "Seed of the world (items, held-out users).")
  flags.DEFINE_integer("train_users", _D.train_users, "Training user pool size.")
  flags.DEFINE_integer("eval_users", _D.eval_users, "Held-out users of the final metrics.")
  flags.DEFINE_integer("k", _D.k, "Cut-off k of R@k and HR@k.")
  flags.DEFINE_integer("num_bins", _D.num_bins, "Popularity bins (10 = deciles).")
  flags.DEFINE_integer(
    "curve_points", _D.curve_points, "KL evaluations during training (learning curve; 0 = none)."
  )
  flags.DEFINE_integer("curve_users", _D.curve_users, "Held-out users of each curve point.")
  flags.DEFINE_bool("plot", True, "Write the PNGs.")


def _config_from_flags() -> DemoConfig:
  try:
    seeds = tuple(int(x) for x in FLAGS.seeds)
  except ValueError as e:
    raise ValueError(f"seeds must be integers, got {FLAGS.seeds}") from e
  rows = tuple(parse_row(r) for r in FLAGS.rows) if FLAGS.rows else ()
  values = {
    name: getattr(FLAGS, name) for name in DemoConfig._fields if name not in ("rows", "seeds")
  }
  return validate_config(DemoConfig(rows=rows, seeds=seeds, **values))


# ------------------------------------------------------------------------------ the run


def _eval_sets(cfg: DemoConfig, world, streams, num_users: int):
  """Per seed: (features, ids, P) of the users the metrics are computed on."""
  sets = []
  if cfg.user_tower == "features":
    x = world_lib.held_out_users(world, num_users, cfg.world_seed)
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
  streams = [
    world_lib.training_stream(world, cfg.train_users, cfg.steps, cfg.batch_size, s)
    for s in cfg.seeds
  ]
  eval_sets = _eval_sets(cfg, world, streams, cfg.eval_users)
  curve_sets = _eval_sets(cfg, world, streams, cfg.curve_users)
  # Popularity: Q(d) = E_u P(d|u) over the evaluation users of the first seed's set.
  popularity = eval_sets[0][2].mean(axis=0)
  bins = world_lib.popularity_bins(popularity, cfg.num_bins)
  ranks = rank_bins(popularity)
  head = np.zeros(cfg.num_items, bool)
  head[np.argsort(-popularity, kind="stable")[: max(1, cfg.num_items // 100)]] = True
  stats = _world_stats(eval_sets[0][2], popularity, cfg.batch_size)
  log(f"world: {cfg.num_items} items, Zipf {cfg.zipf}, tau {cfg.tau}; {stats}")
  trainer = Trainer(cfg, streams)
  log(
    f"training {len(cfg.rows)} rows x {len(cfg.seeds)} seeds for {cfg.steps} steps "
    f"(batch {cfg.batch_size}) ..."
  )
  curve_steps = (
    sorted({max(1, round(cfg.steps * (i + 1) / cfg.curve_points)) for i in range(cfg.curve_points)})
    if cfg.curve_points
    else []
  )
  curve = {row.name: [[] for _ in cfg.seeds] for row in cfg.rows}
  train_start = time.time()
  for target in curve_steps or [cfg.steps]:
    trainer.train(target - trainer.step)
    if curve_steps:
      for model in trainer.models:
        r, s = model[0], model[1]
        x, ids, p = curve_sets[s]
        curve[cfg.rows[r].name][s].append(
          float(kl_divergence(p, trainer.log_probs(model, x, ids)).mean())
        )
      log(
        f"  step {trainer.step}: KL "
        + ", ".join(
          f"{row.name} {np.mean([c[-1] for c in curve[row.name]]):.3f}" for row in cfg.rows
        )
      )
  trainer.train(cfg.steps - trainer.step)
  train_seconds = time.time() - train_start

  per_seed = {row.name: [None] * len(cfg.seeds) for row in cfg.rows}
  for model in trainer.models:
    r, s = model[0], model[1]
    x, ids, p = eval_sets[s]
    per_seed[cfg.rows[r].name][s] = evaluate_model(
      p, trainer.log_probs(model, x, ids), bins, cfg.k, cfg.num_bins, ranks=ranks, head=head
    )
  references = {  # P̂ = P, and P̂ = Q (the same list for every user)
    name: [
      evaluate_model(p, fn(x, p), bins, cfg.k, cfg.num_bins, ranks=ranks, head=head)
      for x, _, p in eval_sets
    ]
    for name, fn in reference_models(popularity).items()
  }
  summary = summarise(cfg, per_seed, references, curve, curve_steps)
  summary["world"] = {"stats": stats, "rank_bins": ranks[1], "popularity": popularity.tolist()}
  summary["seconds"] = {"train": train_seconds, "total": time.time() - start}
  summary["config"] = {
    k: (list(v) if isinstance(v, (list, tuple)) else v)
    for k, v in cfg._asdict().items()
    if k != "rows"
  }
  summary["config"]["rows"] = [r.name for r in cfg.rows]
  table = format_table(summary)
  log(table)
  (out / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
  (out / "summary.md").write_text(format_markdown(summary))
  if plot:
    write_plots(summary, out)
  log(
    f"outputs: {out}/summary.md, summary.json"
    + (", calibration.png, recall_by_decile.png, learning_curve.png" if plot else "")
    + f"  ({summary['seconds']['total']:.0f} s, training {train_seconds:.0f} s)"
  )
  return summary


def _world_stats(p, popularity, batch_size) -> str:
  mean_pp = float((p**2).sum(axis=1).mean())
  top = np.argsort(-popularity)[: max(1, p.shape[1] // 100)]
  head_pp = float((p[:, top] ** 2).sum() / p[:, top].sum())
  entropy = float(-(p * np.log(np.where(p > 0, p, 1.0))).sum(axis=1).mean())
  return (
    f"entropy of P(.|u) {entropy:.2f} nats; E[P(p|u)] of a drawn positive {mean_pp:.2f}, "
    f"{head_pp:.2f} when it is in the top 1% of items; top item Q = {popularity.max():.3f} "
    f"(B*Q = {batch_size * popularity.max():.1f}), top decile holds "
    f"{np.sort(popularity)[::-1][: len(popularity) // 10].sum():.0%} of the draws"
  )


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  try:
    cfg = _config_from_flags()
  except ValueError as e:
    raise app.UsageError(str(e)) from e
  run(cfg, FLAGS.output_dir, plot=FLAGS.plot)
