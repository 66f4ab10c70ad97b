"""Runs the Keras 3 full softmax, BCE / gBCE, CountMinSketch, every estimator's update with a
`valid` mask, and negatives (per sequence, expected_count) on one backend (KERAS_BACKEND) and
writes the results to an npz.

    KERAS_BACKEND=jax python features_worker.py OUT.npz

Spawned by test_backends_features.py in a fresh process per backend (Keras 3 only: no
TF_USE_LEGACY_KERAS); it asserts nothing, the test compares with tf-keras and numpy.
"""

import os
import sys
import tempfile

import backend_worker
import features_cases as fc
import keras
import numpy as np
from keras import ops

import tfrs_logq.keras3 as tlk
from tfrs_logq.keras3 import frequency, losses, negatives

_np = backend_worker._np
grads = backend_worker.grads


def run_full_softmax(out):
  c = fc.full_softmax_case()
  table = c["table"]

  def fn(q, t):
    return tlk.full_softmax_loss(q, c["ids"], t, temperature=0.5, id_offset=1).loss

  res = tlk.full_softmax_loss(c["query"], c["ids"], table, temperature=0.5, id_offset=1)
  out["full/loss"], out["full/num_valid"] = _np(res.loss), _np(res.num_valid)
  out["full/grad_query"], out["full/grad_table"] = grads(fn, c["query"], table)
  out["full/layer"] = _np(
    tlk.FullSoftmaxLoss(temperature=0.5, id_offset=1)(c["query"], c["ids"], table).loss
  )
  huge = tlk.full_softmax_loss(c["query"] * 1e18, c["ids"], table, id_offset=1)
  out["full/huge"] = _np(huge.loss)
  out["full/huge_grad"] = grads(
    lambda q: tlk.full_softmax_loss(q, c["ids"], table, id_offset=1).loss, c["query"] * 1e18
  )[0]
  for name, bad in (("low", [0, 1, 2, 3, 4, 5]), ("high", [1, 2, 3, 4, 5, 10])):
    try:
      tlk.full_softmax_loss(c["query"], np.array(bad, np.int32), table, id_offset=1)
      out[f"full/raises_{name}"] = np.array("")
    except ValueError as e:
      out[f"full/raises_{name}"] = np.array(str(e))


def run_gbce(out):
  for case_name, c in (("gbce", fc.gbce_case()), ("gbce_extreme", fc.gbce_extreme_case())):
    for beta in fc.GBCE_BETAS:
      tag = f"{case_name}/{beta}"

      def fn(sp, sn, beta=beta, c=c):
        return tlk.gbce_loss(sp, sn, beta=beta, valid_mask=c["valid"]).loss

      res = tlk.gbce_loss(c["s_p"], c["s_n"], beta=beta, valid_mask=c["valid"])
      out[tag + "/loss"], out[tag + "/num_valid"] = _np(res.loss), _np(res.num_valid)
      out[tag + "/grad_pos"], out[tag + "/grad_neg"] = grads(fn, c["s_p"], c["s_n"])
      out[tag + "/layer"] = _np(tlk.GBCELoss(beta)(c["s_p"], c["s_n"], c["valid"]).loss)
  c = fc.gbce_case()
  out["bce/loss"] = _np(tlk.bce_loss(c["s_p"], c["s_n"], c["valid"]).loss)
  out["gbce/beta"] = np.array(tlk.gbce_beta(256, 3000, 0.75))


def run_count_min(out):
  for name, cfg in fc.COUNT_MIN_CONFIGS.items():
    cms = frequency.CountMinSketch(**cfg)
    update = cms.update
    if backend_worker.BACKEND == "jax":  # a compiled update, as inside model.fit
      import jax

      @jax.jit
      def step(state, ids):
        with keras.StatelessScope(
          state_mapping=list(zip(cms.non_trainable_variables, state))
        ) as scope:
          cms.update(ids)
        return [scope.get_current_value(v) for v in cms.non_trainable_variables]

      def update(ids):
        for v, value in zip(
          cms.non_trainable_variables, step([v.value for v in cms.non_trainable_variables], ids)
        ):
          v.assign(value)

    for i, ids in enumerate(fc.stream()):
      update(ids)
      out[f"cms/{name}/log_q/{i}"] = _np(cms.log_q(fc.PROBE))
      out[f"cms/{name}/estimate/{i}"] = _np(cms.estimate(fc.PROBE))
    out[f"cms/{name}/total"] = _np(cms.total)
    out[f"cms/{name}/step"] = _np(cms.step)
    out[f"cms/{name}/log_q_prime"] = _np(cms.log_q_prime(fc.PROBE[0], fc.PROBE[1:3, :1]))


def run_masked_updates(out):
  """Each estimator counts the stream (plain) and the padded stream with valid (masked); on JAX
  the masked update is one jax.jit program for every batch (its trace count is recorded). The
  bad `valid` arguments' errors are recorded as text."""
  for name, (cls, kwargs) in fc.MASKED_ESTIMATORS.items():
    plain, masked = getattr(frequency, cls)(**kwargs), getattr(frequency, cls)(**kwargs)
    for ids in fc.stream():
      plain.update(ids)
    update, traces = masked.update, []
    if backend_worker.BACKEND == "jax":
      import jax

      @jax.jit
      def step(state, ids, valid, masked=masked):
        traces.append(1)
        with keras.StatelessScope(
          state_mapping=list(zip(masked.non_trainable_variables, state))
        ) as scope:
          masked.update(ids, valid)
        return [scope.get_current_value(v) for v in masked.non_trainable_variables]

      def update(ids, valid, masked=masked):
        state = [v.value for v in masked.non_trainable_variables]
        for v, value in zip(masked.non_trainable_variables, step(state, ids, valid)):
          v.assign(value)

    for ids, valid in fc.padded_stream():
      update(ids, valid)
    for v_plain, v_masked in zip(plain.non_trainable_variables, masked.non_trainable_variables):
      out[f"masked/{name}/plain/{v_plain.path}"] = _np(v_plain)
      out[f"masked/{name}/masked/{v_plain.path}"] = _np(v_masked)
    out[f"masked/{name}/traces"] = np.array(len(traces))
  bad = [
    (np.arange(8, dtype=np.int32), np.ones(8, np.int32)),  # not bool
    (np.arange(8, dtype=np.int32), np.ones((2, 4), bool)),  # not ids' shape
    (np.array([1, 99], np.int32), np.array([True, True])),  # a counted id out of range
    (np.array([1, 99], np.int32), np.array([True, False])),  # out of range, not counted: fine
  ]
  for i, (ids, valid) in enumerate(bad):
    try:
      frequency.HashArrayEstimator(num_buckets=13, num_items=fc.VOCAB).update(ids, valid)
      out[f"masked_bad/{i}"] = np.array("no error")
    except Exception as e:
      out[f"masked_bad/{i}"] = np.array(f"{type(e).__name__}: {e}")


def run_negatives(out):
  c = fc.negatives_case()
  table = c["emb_table"]
  est = frequency.ExactCounts(table.shape[0], counts=c["counts"])
  pos_ids, valid, pos_emb = c["pos_ids"], c["pos_valid"], table[c["pos_ids"]]

  def embed(ids):
    return ops.take(ops.convert_to_tensor(table), ids, axis=0)

  for convention in negatives.CONVENTIONS:
    negs = negatives.in_batch_negatives(
      pos_ids, pos_emb, est.log_q(pos_ids), valid, convention=convention
    )
    out[f"in_batch/{convention}/log_q"] = _np(negs.log_q)
    out[f"in_batch/{convention}/positive_log_q"] = _np(negs.positive_log_q)
    out[f"in_batch/{convention}/valid"] = _np(negs.valid)
    for per in negatives.UNIFORM_PER:
      tag = f"mixed/{convention}/{per}"
      mixed = negatives.MixedNegatives(
        c["k_u"], id_range=(1, table.shape[0]), convention=convention, per=per, seed=3
      )
      negs = mixed(
        pos_ids,
        pos_emb,
        candidate_embedder=embed,
        log_q_unigram=est.log_q,
        valid=valid,
        sequence_ids=c["sequence_ids"],
      )
      scored = negatives.score_negatives(c["query"], pos_ids, pos_emb, negs, temperature=0.5)
      loss = losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected")
      for name in ("ids", "log_q", "valid", "positive_log_q"):
        out[f"{tag}/{name}"] = _np(getattr(negs, name))
      out[f"{tag}/loss"] = _np(loss.loss)
      out[f"{tag}/weight"] = _np(loss.weight)
  # MixedNegatives.blocks on a [2, 4] grid of rows (k_b = 4 subsample): the negatives of `call`
  # (a layer seeded the same), scored block by block with score_blocks
  grid_sequences = np.repeat(np.arange(2, dtype=np.int32), 4)
  for per in negatives.UNIFORM_PER:
    for how in ("call", "blocks"):
      mixed = negatives.MixedNegatives(
        c["k_u"],
        id_range=(1, table.shape[0]),
        convention="mixture",
        per=per,
        seed=3,
        num_in_batch=4,
      )
      kwargs = dict(
        candidate_embedder=embed, log_q_unigram=est.log_q, valid=valid, sequence_ids=grid_sequences
      )
      if how == "call":
        negs = mixed(pos_ids, pos_emb, **kwargs)
        scored = negatives.score_negatives(c["query"], pos_ids, pos_emb, negs, temperature=0.5)
      else:
        negs, blocks = mixed.blocks(pos_ids, pos_emb, num_sequences=2, **kwargs)
        out[f"blocks/{per}/layouts"] = np.array([layout for layout, _ in blocks])
        out[f"blocks/{per}/shapes"] = np.array([tuple(e.shape) for _, e in blocks][1])
        assert negs.embeddings is None
        scored = negatives.score_blocks(c["query"], pos_ids, pos_emb, negs, blocks, temperature=0.5)
      out[f"blocks/{per}/{how}/ids"] = _np(negs.ids)
      for name in scored._fields:
        out[f"blocks/{per}/{how}/{name}"] = _np(getattr(scored, name))
  # per-sequence numbering: padding moved, same A and seed -> the same sets in valid order
  for name, pad in (("pad_a", [1, 1, 0, 1, 1, 1]), ("pad_b", [0, 1, 1, 1, 1, 1])):
    pad = np.array(pad, bool)
    seq = np.full(6, -1, np.int32)
    seq[pad] = [7, 7, 3, 9, 3]
    layer = negatives.UniformNegatives(4, id_range=(0, 1000), per="sequence", seed=9)
    out[f"per_sequence/{name}"] = _np(layer(sequence_ids=seq, valid=pad))[pad]


def run_serialisation(out):
  c, g = fc.full_softmax_case(), fc.gbce_case()
  cms = frequency.CountMinSketch(width=16, depth=2, conservative=True, half_life=2.0, seed=4)
  for ids in fc.stream()[:3]:
    cms.update(ids)
  layers = {
    "FullSoftmaxLoss": (
      tlk.FullSoftmaxLoss(temperature=0.25, id_offset=1, check_scores=True),
      lambda l: l(c["query"], c["ids"], c["table"]),
    ),
    "GBCELoss": (tlk.GBCELoss(0.3, check_scores=True), lambda l: l(g["s_p"], g["s_n"], g["valid"])),
    "CountMinSketch": (cms, lambda l: l.log_q(fc.PROBE)),
    "UniformNegativesPerSequence": (
      negatives.UniformNegatives(4, candidate_ids=[2, 4, 6], per="sequence", seed=2),
      lambda l: l.log_q(ops.arange(4)),
    ),
    "MixedNegativesExpectedCount": (
      negatives.MixedNegatives(
        3, id_range=(1, 12), convention="expected_count", per="query", cross_replica=False, seed=2
      ),
      lambda l: l.log_q(ops.convert_to_tensor([-1.0, -2.0]), 3.0, 5.0, 3.0),
    ),
    "SampledSoftmaxLossCheckScores": (
      losses.SampledSoftmaxLoss("none", check_scores=True),
      lambda l: l(g["s_p"], g["s_n"], valid_mask=g["valid"]),
    ),
  }
  with tempfile.TemporaryDirectory() as directory:
    for name, (layer, call) in layers.items():
      before, cloned, after, config_same = backend_worker._roundtrip(layer, call, directory, name)
      for i, (b, cl, a) in enumerate(zip(before, cloned, after)):
        out[f"serial/{name}/{i}/before"], out[f"serial/{name}/{i}/clone"] = b, cl
        out[f"serial/{name}/{i}/after"] = a
      out[f"serial/{name}/config_same"] = np.array(config_same)


def run_bad_arguments(out):
  makers = {
    "FullSoftmaxLoss": tlk.FullSoftmaxLoss,
    "GBCELoss": tlk.GBCELoss,
    "gbce_beta": tlk.gbce_beta,
    "CountMinSketch": frequency.CountMinSketch,
    "UniformNegatives": negatives.UniformNegatives,
    "InBatchConvention": lambda convention: negatives.in_batch_negatives(
      [1, 2], np.ones((2, 2), np.float32), np.zeros(2, np.float32), convention=convention
    ),
  }
  for i, (name, kwargs) in enumerate(fc.BAD_ARGUMENTS):
    try:
      makers[name](**kwargs)
      out[f"bad/{i}"] = np.array("no error")
    except Exception as e:
      out[f"bad/{i}"] = np.array(f"{type(e).__name__}: {e}")


def main():
  out = {}
  for section in (
    run_full_softmax,
    run_gbce,
    run_count_min,
    run_masked_updates,
    run_negatives,
    run_serialisation,
    run_bad_arguments,
  ):
    section(out)
  out["env/backend"] = np.array(backend_worker.BACKEND)
  out["env/tf_keras_loaded"] = np.array("tf_keras" in sys.modules)
  out["env/legacy_keras_var"] = np.array(os.environ.get("TF_USE_LEGACY_KERAS", ""))
  np.savez(sys.argv[1], **out)


if __name__ == "__main__":
  main()
