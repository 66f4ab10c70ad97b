"""The training objective of `python -m train.keras3`: a short composition of Keras 3 library
objects (`tfrs_logq.keras3`) around the Keras 3 SASRec (`models.keras3`), as `train.objective`
composes the tf-keras ones.

    q, p, rows, valid  = sasrec.training_queries(batch)       all B L positions (static shapes)
    candidates         = in_batch | uniform | mixed            (tfrs_logq.keras3.negatives:
                                                                the ids, log Q, valid, and the
                                                                embeddings by block)
    scored             = score(q, p, E_out[p], candidates)       (score_negatives, by block)
                         | midx.score(q, p, E_out[p])          (k draws per position from the
                                                                MIDX proposal Q(i|q), log Q(i|q))
    out                = SampledSoftmaxLoss(logq, q_prime, ratio_floor)(**scored)
                         | GBCELoss(beta)(s_p, s_n, valid)     (bce: beta = 1; gbce: gbce_beta(k,
                                                                |I|, t); k uniform negatives)
                         | FullSoftmaxLoss(temperature)(q, p, E_out[1:])   (no sampler)
    loss               = sum_{valid} out.loss / #valid         (the mean over the real queries)
    mean_weight        = sum_{valid} out.weight / #valid       (a metric: compute_metrics)

`RetrievalModel` is a ``keras.Model`` whose ``compute_loss`` is that objective, so Keras compiles
and differentiates the step on every backend (``train_on_batch``); its variables are the
encoder's, the samplers' seed states and the frequency estimator's. Padding positions take part
nowhere: they are masked out of the pool (``valid``), their losses are dropped, and the uniform
draws do not depend on where they are. The frequency estimator is updated outside the compiled
step, before it, with the step's positives and the padding marked not valid (`update_estimator`),
as the tf-keras objective updates it at the start of its step.

Negatives follow the tf-keras binary's settings (`train.objective.build_sampler`) exactly: the
same RunConfig fields give the same blocks, shapes and log Q. With k = num_negatives,
``negatives_split(cfg)`` = (k_b, k_u): in_batch (k, 0), mixed (k // 2, k - k // 2), uniform
(0, k). The in-batch block is the deduplicated pool of the batch's non-padding positions
subsampled to at most k_b distinct ids (the ``InBatchNegatives(num_negatives=k_b)`` rule of
both fronts, inside ``MixedNegatives``), k_b
slots when k_b < B L (the tf-keras static-shape pool), n_b = min(U, k_b) of them valid; the k_u
uniform ones are laid out per --uniform_negatives; log Q follows --log_q_convention. So an
ML-1M step (B L = 25,600 positions, k = 256) scores [B L, 128 + 128] negatives, as the tf-keras
binary's static-shape step. Scores are `score_negatives`'s, computed block by block by the
library's `tfrs_logq.keras3.negatives.score_blocks` (a matmul per shared block, a batched matmul
per sequence, an einsum for per-query draws); the [A, N, d] embeddings of the negatives are never
formed (3.4 GB at ML-1M sizes). The subsample's keys come from a ``keras.random.SeedGenerator``
seeded from --seed (``tfrs_logq.keras3.negatives.mixed.in_batch_seed``), the tf-keras binary's
from the step's stateless seed: the same rule, other random draws.

--negatives=midx (--loss=sampled_softmax; bce / gbce keep uniform negatives) is the tf-keras
binary's sampler on the library's Keras 3 ``MIDXSampler`` (`build_midx`): --midx_codewords
codewords per codebook, product quantization, the proposal's temperature = --temperature, ids
1..|I| (``id_offset=1``, the padding id never drawn), k-means seeded from (--seed, refresh
count), k = --num_negatives draws per position from Q(i|q) with their exact log Q(i|q) and
log Q(p|q) for the loss (so --logq / --q_prime apply to the proposal, as in the tf-keras
binary). `RetrievalModel.refresh_index` rebuilds the index from the current item table (rows
1..|I|); the trainer calls it at the start of every epoch, the tf-keras trainer's schedule.
The index (codebooks, cells, refresh count) and the draws' seed state are variables of the
model, so they are checkpointed and a resumed run redraws what the uninterrupted run drew.
Padding positions score against the id 1 (their loss is dropped; every row draws from its own
proposal, so they change no other row's negatives).

--cross_batch=M adds the library's ``CrossBatchNegatives`` (`build_memory`, the tf-keras
binary's settings) as one more block, joined by ``join_blocks`` (each block keeps its own Q(p) in
Q' under --logq=corrected, --q_prime=exact): the step scores the memory of the last M batches'
positions, then pushes its own (training calls only; the memory's variables are carried in the
step's state and checkpointed with the model's).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Tuple

import keras
import numpy as np
from keras import ops

import tfrs_logq.keras3 as tlk
from models.keras3 import SASRec
from tfrs_logq.core import checks as core_checks
from tfrs_logq.keras3 import negatives as neg_lib
from tfrs_logq.keras3.negatives import mixed as mixed_lib
from train import estimator_spec, negatives_plan

__all__ = [
  "Candidates",
  "RetrievalModel",
  "build_encoder",
  "build_estimator",
  "build_memory",
  "build_midx",
  "check_logq_variants",
  "negatives_split",
  "update_estimator",
]


class Candidates(NamedTuple):
  """The negatives of a step: ``negatives`` (ids [N] or [A, N], log_q, valid, positive_log_q;
  embeddings None) and ``blocks``, their embeddings block by block in slot order: (layout,
  embeddings) with layout ``shared`` [n, d], ``sequence`` [B, n, d] or ``query`` [A, n, d]."""

  negatives: neg_lib.Negatives
  blocks: Tuple[Tuple[str, Any], ...]


def build_encoder(cfg, num_items: int) -> SASRec:
  """The Keras 3 SASRec of the run's settings; with --mixed_precision=bfloat16 its layers
  compute in bfloat16 ("mixed_bfloat16": float32 weights, H cast to float32)."""
  previous = keras.config.dtype_policy()
  keras.config.set_dtype_policy(
    "mixed_bfloat16" if cfg.mixed_precision == "bfloat16" else "float32"
  )
  try:
    return SASRec(
      num_items,
      max_len=cfg.max_len,
      embedding_dim=cfg.embedding_dim,
      num_blocks=cfg.num_blocks,
      num_heads=cfg.num_heads,
      dropout=cfg.dropout,
      temperature=cfg.temperature,
      seed=cfg.seed,
      block_style=cfg.sasrec_block,
      tie_embeddings=cfg.tie_embeddings,
      attention_blocks=cfg.sasrec_attention_blocks,
      name="sasrec",
    )
  finally:
    keras.config.set_dtype_policy(previous)


def build_estimator(cfg, data):
  """Q(d) estimator of --frequency and its settings (train/estimator_spec.py), Keras 3."""
  return estimator_spec.build(tlk.frequency, cfg, data)


def build_midx(cfg, num_items: int, candidate_embedder=None):
  """The library's Keras 3 ``MIDXSampler`` of --negatives=midx (the tf-keras trainer's settings:
  --midx_codewords, pq, temperature, ``id_offset=1``, --seed; k = --num_negatives per query),
  its index state created for |I| items of --embedding_dim (checkpointable before a refresh);
  ``candidate_embedder``: the encoder's item embeddings (ids -> [.., d])."""
  return neg_lib.MIDXSampler(
    cfg.midx_codewords,
    "pq",
    num_items=num_items,
    dim=cfg.embedding_dim,
    temperature=cfg.temperature,
    id_offset=1,
    seed=cfg.seed,
    num_negatives=cfg.num_negatives,
    candidate_embedder=candidate_embedder,
    name="midx",
  )


def build_memory(cfg, encoder: SASRec, estimator, cross_replica: bool):
  """The library's Keras 3 ``CrossBatchNegatives`` of the run's `train.negatives_plan` (None
  without --cross_batch): the tf-keras binary's memory (`train.objective.build_memory`), pushes
  of the B L positions (padding not valid), log Q under --log_q_convention."""
  plan = negatives_plan.negatives_plan(cfg)
  if plan.memory is None:
    return None
  m = plan.memory
  return neg_lib.CrossBatchNegatives(
    estimator,
    m.num_batches,
    m.batch_size,
    slots_per_batch=m.slots_per_batch,
    mode=m.mode,
    embedding_dim=cfg.embedding_dim if m.mode == "embeddings" else None,
    convention=plan.convention,
    candidate_embedder=encoder.item_embeddings,
    cross_replica=cross_replica,
    seed=cfg.seed,
    name="cross_batch",
  )


def negatives_split(cfg):
  """(k_b, k_u): the in-batch and uniform negatives of the run's `train.negatives_plan` (the
  tf-keras binary's, `train.objective.build_sampler`): in_batch (k, 0), mixed (k // 2,
  k - k // 2), uniform (0, k); bce / gbce: uniform (0, k) whatever --negatives; full_softmax
  and midx (its k negatives are MIDX draws): none (0, 0)."""
  return negatives_plan.negatives_plan(cfg).split


def check_logq_variants(loss: str, logq_variants) -> list:
  """The distinct --logq values of one program's runs (``RetrievalModel``'s logq_variants, in
  order), checked: ValueError unless each is a --logq choice and the loss is sampled_softmax."""
  variants = [str(v) for v in logq_variants]
  if not variants or len(set(variants)) != len(variants):
    raise ValueError(f"--logqs needs distinct values, got {variants}")
  unknown = [v for v in variants if v not in core_checks.CORRECTIONS]
  if unknown:
    raise ValueError(f"--logqs: {unknown} not among {list(core_checks.CORRECTIONS)}")
  if loss != "sampled_softmax":
    raise ValueError(f"--logqs needs --loss=sampled_softmax (the logQ corrections), got {loss}")
  return variants


def update_estimator(cfg, estimator, batch) -> None:
  """Counts the step's non-padding positives (streaming estimators only; outside the step).

  The whole [batch, max_len] targets go in with the padding marked not valid: the update's shapes
  are the batch's, so JAX traces it once, not once for every count of positives a batch has."""
  if cfg.frequency == "exact":
    return
  targets = np.asarray(batch["targets"], np.int32).reshape(-1)
  estimator.update(targets, valid=targets != 0)


class RetrievalModel(keras.Model):
  """SASRec + negatives + the loss of --loss (module docstring); ``compute_loss`` is the objective.

  Args:
    cfg: a `train.config.RunConfig` (loss sampled_softmax / full_softmax / bce / gbce;
      negatives in_batch / uniform / mixed / midx (bce, gbce: uniform); midx_codewords,
      num_negatives, uniform_negatives, logq, q_prime, log_q_convention, ratio_floor,
      temperature, seed).
    encoder: the Keras 3 SASRec.
    estimator: a `tfrs_logq.keras3.frequency` estimator (in-batch and mixed negatives).
    logq_variants: None, or {--logq value: its ratio floor} of the runs of one compiled
      program (`train.keras3.seeds`, --logqs; cfg.logq among them, loss sampled_softmax;
      every run of the program gets the same mapping, so each traces the same losses): the model
      computes the sampled softmax of every variant on the same scores and keeps the one of the
      int32 variable ``logq_index`` (cfg.logq's position), a carried part of the step's state,
      so runs stacked along vmap each keep their own variant:

          loss_i = out_{v(i)}.loss_i,   w_i = out_{v(i)}.weight_i,   v = logq_variants[logq_index]

      The other variants' losses get a zero cotangent (a select, never 0 · x), so the gradient
      is the chosen variant's; they are computed and dropped (the loss is a small part of the
      step: the scores, the encoder and the negatives are computed once).
  """

  def __init__(self, cfg, encoder: SASRec, estimator, logq_variants=None, **kwargs):
    super().__init__(**kwargs)
    self.cfg, self.encoder, self.estimator = cfg, encoder, estimator
    num_items = encoder.num_items
    catalog = (1, num_items + 1)
    plan = negatives_plan.negatives_plan(cfg)  # the binaries' one settings -> negatives map
    self.num_in_batch, num_uniform = plan.split
    # --strategy=mirrored (keras.distribution.DataParallel, train.keras3.parallel): the in-batch
    # pool (the global batch's positives) laid out on every device (all_gather_rows).
    self.cross_replica = cfg.strategy == "mirrored"
    self.uniform = self.mixed = self.midx = self.in_batch_seed_generator = None
    if plan.source == "full":
      pass  # every other item is a negative: no sampler
    elif plan.source == "uniform":
      self.uniform = neg_lib.UniformNegatives(
        None,
        num_uniform,
        id_range=catalog,
        seed=cfg.seed,
        per=cfg.uniform_negatives,
        name="uniform",
      )
    elif plan.source == "midx":
      self.midx = build_midx(cfg, num_items, encoder.item_embeddings)
    elif plan.source == "mixed":
      self.mixed = neg_lib.MixedNegatives(
        neg_lib.InBatchNegatives(
          estimator, num_negatives=self.num_in_batch, cross_replica=self.cross_replica
        ),
        neg_lib.UniformNegatives(
          None,
          num_uniform,
          id_range=catalog,
          seed=cfg.seed,
          per=cfg.uniform_negatives,
          name="uniform",
        ),
        convention=cfg.log_q_convention,
        name="mixed",
      )
    else:  # in_batch: the k_b subsample's keys, as MixedNegatives draws them
      self.in_batch_seed_generator = keras.random.SeedGenerator(
        mixed_lib.in_batch_seed(cfg.seed), name="in_batch_seed"
      )
    self.memory = build_memory(cfg, encoder, estimator, self.cross_replica)
    if self.memory is not None and logq_variants is not None:
      raise ValueError(
        "--cross_batch with --logqs: the memory block's log Q is rebased for one correction "
        "(corrected, q_prime exact) or none; run the corrections as separate programs"
      )
    if cfg.loss == "full_softmax":
      self.loss_layer = tlk.FullSoftmaxLoss(cfg.temperature, id_offset=1, name="full_softmax")
    elif cfg.loss == "sampled_softmax":
      self.loss_layer = tlk.SampledSoftmaxLoss(
        cfg.logq, cfg.q_prime, ratio_floor=cfg.ratio_floor, name="sampled_softmax"
      )
    else:  # bce (beta = 1) / gbce (gSASRec's beta of k uniform negatives, |I| items, t)
      beta = tlk.gbce_beta(cfg.num_negatives, num_items, cfg.gbce_t) if cfg.loss == "gbce" else 1.0
      self.loss_layer = tlk.GBCELoss(beta, name=cfg.loss)
    self.variant_layers = None
    if logq_variants is not None:
      variants = check_logq_variants(cfg.loss, logq_variants)
      if cfg.logq not in variants:
        raise ValueError(f"--logq={cfg.logq} is not among the program's --logqs {variants}")
      # The run's own variant is cfg.logq's position; every variant's layer is built alike.
      self.variant_layers = [
        tlk.SampledSoftmaxLoss(v, cfg.q_prime, ratio_floor=float(logq_variants[v]), name=f"ss_{v}")
        for v in variants
      ]
      self.logq_index = keras.Variable(
        variants.index(cfg.logq), dtype="int32", trainable=False, name="logq_index"
      )
    self.mean_weight = keras.metrics.Mean(name="mean_weight")

  def refresh_index(self) -> None:
    """--negatives=midx: rebuilds the MIDX index from the item table's rows 1..|I| (eager,
    between steps; the trainer calls it at the start of every epoch). Otherwise nothing."""
    if self.midx is not None:
      self.midx.refresh(self.encoder.all_item_embeddings()[1:])

  def candidates(self, tq, positive_embeddings, batch_size: int) -> Candidates:
    """The step's negatives (ids, log Q, valid, log Q(p); no [A, N, d] embeddings) and the
    embeddings of their blocks, for `score` (the library's ``MixedNegatives.blocks`` /
    ``UniformNegatives.block``: the A = B L rows are a row-major [B, L] grid)."""
    cfg = self.cfg
    pos, valid, rows = tq.positive_ids, tq.valid, tq.sequence_ids
    embed = self.encoder.item_embeddings
    if self.mixed is not None:
      negatives, blocks = self.mixed.blocks(
        pos,
        positive_embeddings,
        candidate_embedder=embed,
        log_q_unigram=self.estimator.log_q,
        valid=valid,
        sequence_ids=rows,
        num_sequences=batch_size,
      )
      return Candidates(negatives, blocks)
    if self.uniform is not None:
      u = self.uniform
      ids = u() if u.shared else u(sequence_ids=rows, valid=valid)
      negatives = neg_lib.Negatives(ids, None, u.log_q(ids), positive_log_q=u.log_q(pos))
      return Candidates(negatives, (u.block(ids, embed, num_sequences=batch_size),))
    negatives = neg_lib.in_batch_negatives(
      pos,
      positive_embeddings,
      self.estimator.log_q(pos),
      valid,
      convention=cfg.log_q_convention,
      cross_replica=self.cross_replica,
      num_negatives=self.num_in_batch,
      seed=self.in_batch_seed_generator,
    )
    return Candidates(negatives._replace(embeddings=None), (("shared", negatives.embeddings),))

  def score(
    self, queries, positive_ids, positive_embeddings, candidates: Candidates
  ) -> neg_lib.ScoredCandidates:
    """`tfrs_logq.keras3.negatives.score_blocks` of the step's blocks (the [A, N, d]
    negatives' embeddings are never formed, except per-query draws' own [A, k_u, d])."""
    return neg_lib.score_blocks(
      queries,
      positive_ids,
      positive_embeddings,
      candidates.negatives,
      candidates.blocks,
      temperature=self.cfg.temperature,
    )

  def call(self, batch, training=False):
    """(per-position loss float [B L], weight w float [B L], valid bool [B L]) of a
    {"inputs", "targets"} batch: the forward pass that Keras's train step differentiates
    through `compute_loss`."""
    tq = self.encoder.training_queries(batch, training=training)
    if self.cfg.loss == "full_softmax":  # padding rows: any real id, their loss is dropped
      ids = ops.where(tq.valid, tq.positive_ids, ops.ones_like(tq.positive_ids))
      out = self.loss_layer(tq.queries, ids, self.encoder.all_item_embeddings()[1:])
      return out.loss, out.weight, tq.valid
    pos_emb = self.encoder.item_embeddings(tq.positive_ids)
    if self.midx is not None:  # padding rows: any real id, their loss is dropped
      ids = ops.where(tq.valid, tq.positive_ids, ops.ones_like(tq.positive_ids))
      scored = self.midx.score(
        tq.queries,
        ids,
        pos_emb,
        temperature=self.cfg.temperature,
      )
    else:
      candidates = self.candidates(tq, pos_emb, batch_size=batch["targets"].shape[0])
      scored = self.score(tq.queries, tq.positive_ids, pos_emb, candidates)
    if self.memory is not None:  # score the last M batches' positives, then push this one
      remembered = self.memory.score(
        tq.queries,
        tq.positive_ids,
        pos_emb,
        temperature=self.cfg.temperature,
        valid=tq.valid,
      )
      rebase = self.cfg.logq == "corrected" and self.cfg.q_prime == "exact"
      scored = neg_lib.join_blocks([scored, remembered], rebase_q_prime=rebase)
      if training:
        embeddings = pos_emb if self.memory.mode == "embeddings" else None
        self.memory.update(tq.positive_ids, embeddings, valid=tq.valid)
    if self.variant_layers is not None:
      return self._selected_variant(scored) + (tq.valid,)
    if self.cfg.loss == "sampled_softmax":
      out = self.loss_layer(**scored.loss_kwargs())
    else:
      out = self.loss_layer(scored.positive_scores, scored.negative_scores, scored.valid_mask)
    return out.loss, out.weight, tq.valid

  def _selected_variant(self, scored):
    """(loss, w) of the variant ``logq_index`` selects (class docstring, logq_variants)."""
    kwargs = scored.loss_kwargs()
    index = ops.convert_to_tensor(self.logq_index)
    loss = weight = None
    for k, layer in enumerate(self.variant_layers):
      out = layer(**kwargs)
      if loss is None:
        loss, weight = out.loss, out.weight
        continue
      chosen = ops.equal(index, k)
      loss = ops.where(chosen, out.loss, loss)
      weight = ops.where(chosen, out.weight, weight)
    return loss, weight

  def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
    """The mean loss over the real (non-padding) positions."""
    del x, y, sample_weight, training
    loss, _, valid = y_pred
    count = ops.maximum(ops.sum(ops.cast(valid, "float32")), 1.0)
    return ops.sum(ops.where(valid, loss, 0.0)) / count

  def compute_metrics(self, x, y, y_pred, sample_weight=None):
    """Keras's metrics + ``mean_weight``: the mean w over the real positions (the tf-keras
    binary's weight_sum / count; 1 except under --logq=corrected)."""
    _, weight, valid = y_pred
    self.mean_weight.update_state(weight, sample_weight=ops.cast(valid, "float32"))
    return super().compute_metrics(x, y, y_pred, sample_weight)
