"""Runs the Keras 3 MIDX sampler and the k_b in-batch subsample on one backend (KERAS_BACKEND)
and writes the results to an npz.

    KERAS_BACKEND=jax python samplers_worker.py CASES.npz OUT.npz

Spawned by test_backends_samplers.py in a fresh Keras-3-only process per backend; CASES holds
the tf-keras MIDX state (copied into the Keras 3 sampler) and the tf-keras subsample keys. It
asserts nothing: the test compares with tf-keras and numpy.
"""

import os
import sys
import tempfile

import numpy as np

import keras
from keras import ops

from tfrs_logq.keras3 import losses, negatives

import backend_worker

_np = backend_worker._np  # pylint: disable=protected-access

QUANTIZERS = ("pq", "rq")
STATE = ("codebook_1", "codebook_2", "item_codes", "sorted_items", "cell_counts", "cell_offsets")
NUM_DRAWS = 30000


def copied_sampler(cases, q, **kwargs):
  """A Keras 3 sampler holding the tf-keras sampler's state (codebooks and index)."""
  n, d = cases[f"midx/{q}/emb"].shape
  sampler = negatives.MIDXSampler(
    num_codewords=int(cases["midx/k"]),
    quantizer=q,
    num_items=n,
    dim=d,
    temperature=float(cases["midx/temperature"]),
    id_offset=1,
    seed=11,
    **kwargs,
  )
  for name in STATE:
    variable = getattr(sampler, name)
    variable.assign(ops.cast(cases[f"midx/{q}/{name}"], variable.dtype))
  sampler.num_refreshes.assign(1)
  return sampler


def run_midx(cases, out):
  for q in QUANTIZERS:
    z, pos = cases[f"midx/{q}/z"], cases[f"midx/{q}/pos"]
    sampler = copied_sampler(cases, q)
    out[f"midx/{q}/proposal"] = _np(sampler.proposal_log_probs(z))
    out[f"midx/{q}/log_prob"] = _np(sampler.log_prob(z, pos))
    out[f"midx/{q}/log_prob_2d"] = _np(sampler.log_prob(z, np.stack([pos, pos[::-1]], 1)))
    ids, log_q = sampler.sample(z, NUM_DRAWS, seed=5)
    out[f"midx/{q}/ids"], out[f"midx/{q}/log_q"] = _np(ids), _np(log_q)
    out[f"midx/{q}/seed_a"] = _np(sampler.sample(z, 64, seed=5)[0])
    out[f"midx/{q}/seed_b"] = _np(sampler.sample(z, 64, seed=5)[0])
    out[f"midx/{q}/seed_c"] = _np(sampler.sample(z, 64, seed=6)[0])
    first, _ = sampler.sample(z, 64)
    second, _ = sampler.sample(z, 64)
    out[f"midx/{q}/generator_1"], out[f"midx/{q}/generator_2"] = _np(first), _np(second)
    # refresh on Keras 3: the index against its definition, determinism, the refresh count
    emb = cases[f"refresh/{q}/emb"]
    a = negatives.MIDXSampler(
      num_codewords=5, quantizer=q, seed=2, kmeans_iterations=5, chunk_size=64
    )
    b = negatives.MIDXSampler(
      num_codewords=5, quantizer=q, seed=2, kmeans_iterations=5, chunk_size=64
    )
    out[f"refresh/{q}/count_1"] = np.array(a.refresh(emb))
    b.refresh(emb)
    for name in STATE:
      out[f"refresh/{q}/{name}"] = _np(getattr(a, name))
      out[f"refresh/{q}/same_{name}"] = np.array(
        np.array_equal(_np(getattr(a, name)), _np(getattr(b, name)))
      )
    moved = cases[f"refresh/{q}/moved"]
    out[f"refresh/{q}/count_2"] = np.array(a.refresh(moved))
    for name in STATE:
      out[f"refresh/{q}/moved_{name}"] = _np(getattr(a, name))
    small = negatives.MIDXSampler(num_codewords=8, quantizer="pq", seed=0)
    small.refresh(cases["refresh/small"])
    out[f"refresh/small/{q}/counts"] = _np(small.cell_counts)
    zs = cases["refresh/small_z"]
    out[f"refresh/small/{q}/sum"] = _np(ops.sum(ops.exp(small.proposal_log_probs(zs)), axis=1))
    ids, log_q = small.sample(zs, 2000, seed=1)
    out[f"refresh/small/{q}/ids"], out[f"refresh/small/{q}/log_q"] = _np(ids), _np(log_q)


def run_midx_score(cases, out):
  table = cases["score/table"]
  z, pos = cases["score/z"], cases["score/pos"]
  for source in ("item_table", "embedder"):
    embedder = None
    if source == "embedder":
      embedder = lambda i: ops.take(ops.convert_to_tensor(table), i, axis=0)  # noqa: E731
    sampler = negatives.MIDXSampler(
      num_codewords=3,
      quantizer="pq",
      seed=4,
      id_offset=1,
      num_negatives=40,
      candidate_embedder=embedder,
    )
    sampler.refresh(table[1:])
    kwargs = dict(item_table=table) if source == "item_table" else {}
    scored = sampler.score(z, pos, table[pos], temperature=0.5, seed=7, **kwargs)
    ids, log_q = sampler.sample(z, 40, seed=7)
    tag = f"score/{source}"
    for name, value in scored._asdict().items():
      out[f"{tag}/{name}"] = _np(value)
    out[f"{tag}/ids"], out[f"{tag}/log_q"] = _np(ids), _np(log_q)
    out[f"{tag}/proposal"] = _np(sampler.proposal_log_probs(z))
    loss = losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected")
    out[f"{tag}/loss"] = _np(loss.loss)


def run_midx_serialisation(cases, out):
  q = "rq"
  z = cases[f"midx/{q}/z"]
  sampler = copied_sampler(cases, q, num_negatives=4)
  call = lambda l: (l.proposal_log_probs(z), l.sample(z, 5, seed=3))  # noqa: E731
  with tempfile.TemporaryDirectory() as directory:
    before, cloned, after, config_same = backend_worker._roundtrip(  # pylint: disable=protected-access
      sampler, call, directory, "MIDXSampler"
    )
  for i, (b, c, a) in enumerate(zip(before, cloned, after)):
    out[f"serial/{i}/before"], out[f"serial/{i}/clone"], out[f"serial/{i}/after"] = b, c, a
  out["serial/config_same"] = np.array(config_same)


BAD_CONSTRUCTOR = [
  dict(num_codewords=0),
  dict(num_codewords=2.0),
  dict(num_codewords=True),
  dict(quantizer="opq"),
  dict(temperature=0.0),
  dict(id_offset=-1),
  dict(id_offset=1.0),
  dict(kmeans_iterations=-1),
  dict(kmeans_max_points=0),
  dict(num_negatives=0),
  dict(num_negatives=2.0),
  dict(num_items=10),
  dict(num_items=0, dim=4),
  dict(quantizer="pq", num_items=10, dim=1),
  dict(quantizer="rq", num_items=4, dim=True),
  dict(candidate_embedder=3),
]


def _error(fn):
  try:
    fn()
    return "no error"
  except Exception as e:  # pylint: disable=broad-except
    return f"{type(e).__name__}: {e}"


def bad_calls(make, rng_emb):
  """(name, call) of a sampler's bad calls; ``make(refreshed)`` builds a sampler (dim 4)."""
  z = np.ones((2, 4), np.float32)
  return [
    ("sample_before_refresh", lambda: make(False).sample(z, 3)),
    ("refresh_ints", lambda: make(False).refresh(np.ones((5, 4), np.int32))),
    ("refresh_empty", lambda: make(False).refresh(np.ones((0, 4), np.float32))),
    ("refresh_other_size", lambda: make(True).refresh(np.ones((6, 4), np.float32))),
    ("sample_wrong_dim", lambda: make(True).sample(np.ones((2, 3), np.float32), 3)),
    ("sample_empty", lambda: make(True).sample(np.ones((0, 4), np.float32), 3)),
    ("sample_zero", lambda: make(True).sample(z, 0)),
    ("sample_float_count", lambda: make(True).sample(z, 2.0)),
    ("sample_int_queries", lambda: make(True).sample(np.ones((2, 4), np.int32), 3)),
    ("log_prob_float_ids", lambda: make(True).log_prob(z, np.array([0.0, 1.0], np.float32))),
    ("log_prob_rows", lambda: make(True).log_prob(z, np.array([0, 1, 2], np.int32))),
    (
      "score_no_num_negatives",
      lambda: make(True).score(z, np.array([0, 1], np.int32), z, item_table=rng_emb),
    ),
  ]


RUNTIME_CALLS = [  # tf-keras raises these in the graph (InvalidArgumentError); same words here
  ("refresh_nan", "NaN"),
  ("sample_inf", "NaN"),
  ("log_prob_out_of_range", "out of range"),
]


def run_bad_arguments(cases, out):
  for i, kwargs in enumerate(BAD_CONSTRUCTOR):
    out[f"bad/constructor/{i}"] = np.array(_error(lambda kw=kwargs: negatives.MIDXSampler(**kw)))
  emb = cases["bad/emb"]

  def make(refreshed):
    sampler = negatives.MIDXSampler(num_codewords=2, seed=0)
    if refreshed:
      sampler.refresh(emb)
    return sampler

  for name, call in bad_calls(make, emb):
    out[f"bad/call/{name}"] = np.array(_error(call))
  nan = np.ones((5, 4), np.float32)
  nan[2, 1] = np.nan
  z = np.ones((2, 4), np.float32)
  runtime = {
    "refresh_nan": lambda: make(False).refresh(nan),
    "sample_inf": lambda: make(True).sample(np.full((2, 4), np.inf, np.float32), 3),
    "log_prob_out_of_range": lambda: make(True).log_prob(z, np.array([0, 5], np.int32)),
  }
  for name, _ in RUNTIME_CALLS:
    out[f"bad/runtime/{name}"] = np.array(_error(runtime[name]))
  out["bad/in_batch_k_b"] = np.array(
    _error(
      lambda: negatives.in_batch_negatives(
        [1, 2], np.ones((2, 2), np.float32), np.zeros(2, np.float32), num_negatives=0
      )
    )
  )
  out["bad/mixed_k_b"] = np.array(
    _error(lambda: negatives.MixedNegatives(3, id_range=(0, 9), num_in_batch=2.0))
  )


def run_in_batch_subsample(cases, out):
  pos_ids, valid = cases["kb/pos_ids"], cases["kb/valid"]
  emb, keys, log_q_table = cases["kb/emb"], cases["kb/keys"], cases["kb/log_q_table"]
  log_q = log_q_table[pos_ids]
  for k_b in cases["kb/sizes"]:
    k_b = int(k_b)
    for convention in negatives.CONVENTIONS:
      tag = f"kb/{k_b}/{convention}"
      negs = negatives.in_batch_negatives(
        pos_ids, emb[pos_ids], log_q, valid, convention=convention, num_negatives=k_b, keys=keys
      )
      for name in ("ids", "log_q", "valid", "positive_log_q"):
        out[f"{tag}/{name}"] = _np(getattr(negs, name))
      out[f"{tag}/embeddings"] = _np(negs.embeddings)
      mixed = negatives.MixedNegatives(
        3, id_range=(1, emb.shape[0]), convention=convention, seed=3, num_in_batch=k_b
      )
      negs = mixed(
        pos_ids,
        emb[pos_ids],
        candidate_embedder=lambda i: ops.take(ops.convert_to_tensor(emb), i, axis=0),
        log_q_unigram=lambda i: ops.take(ops.convert_to_tensor(log_q_table), i),
        valid=valid,
        in_batch_keys=keys,
      )
      for name in ("ids", "log_q", "valid", "positive_log_q"):
        out[f"mixed_{tag}/{name}"] = _np(getattr(negs, name))
      scored = negatives.score_negatives(
        cases["kb/query"], pos_ids, emb[pos_ids], negs, temperature=0.5
      )
      out[f"mixed_{tag}/loss"] = _np(
        losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected").loss
      )
  # random keys: the kept ids are a uniform subset (frequency of each distinct id ~ k_b / U)
  k_b = 3
  generator = keras.random.SeedGenerator(17)
  kept = []
  for _ in range(int(cases["kb/num_random"])):
    negs = negatives.in_batch_negatives(
      pos_ids, emb[pos_ids], log_q, valid, num_negatives=k_b, seed=generator
    )
    ids, mask = _np(negs.ids), _np(negs.valid)
    kept.append(np.isin(np.arange(emb.shape[0]), ids[mask]))
  out["kb/random_kept"] = np.array(kept)
  mixed = negatives.MixedNegatives(
    3, id_range=(1, emb.shape[0]), seed=3, num_in_batch=k_b, convention="expected_count"
  )
  call = lambda l: (
    l.log_q(ops.convert_to_tensor([-1.0, -2.0]), 3.0, 5.0, 3.0),  # noqa: E731
    ops.convert_to_tensor(l.num_in_batch),
  )
  with tempfile.TemporaryDirectory() as directory:
    before, cloned, after, config_same = backend_worker._roundtrip(  # pylint: disable=protected-access
      mixed, call, directory, "MixedKb"
    )
  out["kb/serial/before"], out["kb/serial/clone"] = before[0], cloned[0]
  out["kb/serial/after"], out["kb/serial/config_same"] = after[0], np.array(config_same)
  out["kb/serial/num_in_batch"] = np.array(
    negatives.MixedNegatives.from_config(mixed.get_config()).num_in_batch
  )


def main():
  cases = dict(np.load(sys.argv[1], allow_pickle=False))
  out = {}
  for section in (
    run_midx,
    run_midx_score,
    run_midx_serialisation,
    run_bad_arguments,
    run_in_batch_subsample,
  ):
    section(cases, out)
  out["env/backend"] = np.array(backend_worker.BACKEND)
  out["env/tf_keras_loaded"] = np.array("tf_keras" in sys.modules)
  out["env/legacy_keras_var"] = np.array(os.environ.get("TF_USE_LEGACY_KERAS", ""))
  np.savez(sys.argv[2], **out)


if __name__ == "__main__":
  main()
