"""The training objective of `python -m train.keras3`: a short composition of Keras 3 library
objects (`tfrs_logq.keras3`) around the Keras 3 SASRec (`models.keras3`), as `train.objective`
composes the tf-keras ones.

    q, p, rows, valid  = sasrec.training_queries(batch)       all B L positions (static shapes)
    negatives          = in_batch | uniform | mixed            (tfrs_logq.keras3.negatives)
    scored             = score_negatives(q, p, E_out[p], negatives, temperature)
    out                = SampledSoftmaxLoss(logq, q_prime, ratio_floor)(**scored)
    loss               = sum_{valid} out.loss / #valid         (the mean over the real queries)

`RetrievalModel` is a ``keras.Model`` whose ``compute_loss`` is that objective, so Keras compiles
and differentiates the step on every backend (``train_on_batch``); its variables are the
encoder's, the samplers' seed states and the frequency estimator's. Padding positions take part
nowhere: they are masked out of the pool (``valid``), their losses are dropped, and the uniform
draws do not depend on where they are. The frequency estimator is updated outside the compiled
step, before it, with the step's non-padding positives (`update_estimator`), as the tf-keras
objective updates it at the start of its step: the Keras 3 estimators' ``update`` counts every id
it is given, and a static-shape step could not leave the padding out.

Negatives follow the tf-keras binary's settings (`train.objective.build_sampler`) exactly: the
same RunConfig fields give the same blocks, shapes and log Q. With k = num_negatives,
``negatives_split(cfg)`` = (k_b, k_u): in_batch (k, 0), mixed (k // 2, k - k // 2), uniform
(0, k). The in-batch block is the deduplicated pool of the batch's non-padding positions
subsampled to at most k_b distinct ids (the tf-keras ``InBatchNegatives(num_negatives=k_b)``
rule: ``MixedNegatives(num_in_batch=k_b)`` / ``in_batch_negatives(num_negatives=k_b)``), k_b
slots when k_b < B L (the tf-keras static-shape pool), n_b = min(U, k_b) of them valid; the k_u
uniform ones are laid out per --uniform_negatives; log Q follows --log_q_convention. So an
ML-1M step (B L = 25,600 positions, k = 256) scores [B L, 128 + 128] negatives, as the tf-keras
binary's static-shape step. The subsample's keys come from a ``keras.random.SeedGenerator``
seeded from --seed (``tfrs_logq.keras3.negatives.mixed.in_batch_seed``), the tf-keras binary's
from the step's stateless seed: the same rule, other random draws.
"""

from __future__ import annotations

import numpy as np

import keras
from keras import ops

import tfrs_logq.keras3 as tlk
from tfrs_logq.keras3 import negatives as neg_lib
from tfrs_logq.keras3.negatives import mixed as mixed_lib

from models.keras3 import SASRec

__all__ = ["RetrievalModel", "build_encoder", "build_estimator", "negatives_split",
           "update_estimator"]


def build_encoder(cfg, num_items: int) -> SASRec:
  """The Keras 3 SASRec of the run's settings."""
  return SASRec(num_items, max_len=cfg.max_len, embedding_dim=cfg.embedding_dim,
                num_blocks=cfg.num_blocks, num_heads=cfg.num_heads, dropout=cfg.dropout,
                temperature=cfg.temperature, seed=cfg.seed, block_style=cfg.sasrec_block,
                tie_embeddings=cfg.tie_embeddings, attention_blocks=cfg.sasrec_attention_blocks,
                name="sasrec")


def build_estimator(cfg, data):
  """Q(d) estimator of --frequency (`train.trainer.build_estimator`'s settings), Keras 3."""
  n = data.num_items + 1
  freq = tlk.frequency
  if cfg.frequency == "exact":
    return freq.ExactCounts(n, counts=np.asarray(data.item_counts),
                            min_count=cfg.frequency_min_count, name="frequency")
  buckets = cfg.frequency_buckets or max(1024, 4 * n)
  if cfg.frequency == "hash_array":
    return freq.HashArrayEstimator(
        num_buckets=buckets, num_hashes=cfg.hash_array_hashes, alpha=cfg.hash_array_alpha,
        warmup=cfg.hash_array_warmup, pending_gap=cfg.hash_array_pending_gap, seed=cfg.seed,
        num_items=n, name="frequency")
  return freq.CountMinSketch(
      width=buckets, depth=cfg.count_min_depth, conservative=cfg.count_min_conservative,
      half_life=cfg.count_min_half_life, min_count=cfg.frequency_min_count, seed=cfg.seed,
      num_items=n, name="frequency")


def negatives_split(cfg):
  """(k_b, k_u): the in-batch and uniform negatives of --negatives / --num_negatives, the
  tf-keras binary's (`train.objective.build_sampler`): in_batch (k, 0), mixed (k // 2,
  k - k // 2), uniform (0, k)."""
  k = cfg.num_negatives
  if cfg.negatives == "uniform":
    return 0, k
  k_b = k if cfg.negatives == "in_batch" else k // 2
  return k_b, k - k_b


def update_estimator(cfg, estimator, batch) -> None:
  """Counts the step's non-padding positives (streaming estimators only; outside the step)."""
  if cfg.frequency == "exact":
    return
  targets = np.asarray(batch["targets"]).reshape(-1)
  estimator.update(targets[targets != 0].astype(np.int32))


class RetrievalModel(keras.Model):
  """SASRec + negatives + sampled softmax (module docstring); ``compute_loss`` is the objective.

  Args:
    cfg: a `train.config.RunConfig` (loss sampled_softmax; negatives in_batch / uniform /
      mixed; num_negatives, uniform_negatives, logq, q_prime, log_q_convention, ratio_floor,
      temperature, seed).
    encoder: the Keras 3 SASRec.
    estimator: a `tfrs_logq.keras3.frequency` estimator (in-batch and mixed negatives).
  """

  def __init__(self, cfg, encoder: SASRec, estimator, **kwargs):
    super().__init__(**kwargs)
    self.cfg, self.encoder, self.estimator = cfg, encoder, estimator
    num_items = encoder.num_items
    catalog = (1, num_items + 1)
    self.num_in_batch, num_uniform = negatives_split(cfg)
    self.uniform = self.mixed = self.in_batch_seed_generator = None
    if cfg.negatives == "uniform":
      self.uniform = neg_lib.UniformNegatives(num_uniform, id_range=catalog, seed=cfg.seed,
                                              per=cfg.uniform_negatives, name="uniform")
    elif cfg.negatives == "mixed":
      self.mixed = neg_lib.MixedNegatives(num_uniform, id_range=catalog,
                                          convention=cfg.log_q_convention, seed=cfg.seed,
                                          per=cfg.uniform_negatives, cross_replica=False,
                                          num_in_batch=self.num_in_batch, name="mixed")
    else:   # in_batch: the k_b subsample's keys, as MixedNegatives draws them
      self.in_batch_seed_generator = keras.random.SeedGenerator(
          mixed_lib.in_batch_seed(cfg.seed), name="in_batch_seed")
    self.loss_layer = tlk.SampledSoftmaxLoss(cfg.logq, cfg.q_prime, ratio_floor=cfg.ratio_floor,
                                             name="sampled_softmax")

  def negatives(self, tq, positive_embeddings):
    """The `Negatives` of the step's queries (ids, embeddings, log Q, valid, log Q(p))."""
    cfg, embed = self.cfg, self.encoder.item_embeddings
    pos, valid, rows = tq.positive_ids, tq.valid, tq.sequence_ids
    if self.mixed is not None:
      return self.mixed(pos, positive_embeddings, candidate_embedder=embed,
                        log_q_unigram=self.estimator.log_q, valid=valid, sequence_ids=rows)
    if self.uniform is not None:
      ids = (self.uniform() if self.uniform.shared else
             self.uniform(sequence_ids=rows, valid=valid))
      return neg_lib.Negatives(ids, embed(ids), self.uniform.log_q(ids),
                               positive_log_q=self.uniform.log_q(pos))
    return neg_lib.in_batch_negatives(pos, positive_embeddings, self.estimator.log_q(pos),
                                      valid, convention=cfg.log_q_convention,
                                      cross_replica=False, num_negatives=self.num_in_batch,
                                      seed=self.in_batch_seed_generator)

  def call(self, batch, training=False):
    """(per-position loss float [B L], valid bool [B L]) of a {"inputs", "targets"} batch:
    the forward pass that Keras's train step differentiates through `compute_loss`."""
    tq = self.encoder.training_queries(batch, training=training)
    pos_emb = self.encoder.item_embeddings(tq.positive_ids)
    negatives = self.negatives(tq, pos_emb)
    scored = neg_lib.score_negatives(tq.queries, tq.positive_ids, pos_emb, negatives,
                                     temperature=self.cfg.temperature)
    return self.loss_layer(**scored.loss_kwargs()).loss, tq.valid

  def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
    """The mean loss over the real (non-padding) positions."""
    del x, y, sample_weight, training
    loss, valid = y_pred
    count = ops.maximum(ops.sum(ops.cast(valid, "float32")), 1.0)
    return ops.sum(ops.where(valid, loss, 0.0)) / count
