"""Runs the Keras 3 MIDX sampler, the k_b in-batch subsample, the cross-batch memory and
join_blocks on one backend (KERAS_BACKEND) and writes the results to an npz.

    KERAS_BACKEND=jax python samplers_worker.py CASES.npz OUT.npz

Spawned by test_backends_samplers.py in a fresh Keras-3-only process per backend; CASES holds
the tf-keras MIDX state (copied into the Keras 3 sampler) and the tf-keras subsample keys. It
asserts nothing: the test compares with tf-keras and numpy.
"""

import os
import sys
import tempfile

import backend_worker
import keras
import numpy as np
from keras import ops

from tfrs_logq.keras3 import frequency, losses, negatives

_np = backend_worker._np

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
      embedder = lambda i: ops.take(ops.convert_to_tensor(table), i, axis=0)
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
  call = lambda l: (l.proposal_log_probs(z), l.sample(z, 5, seed=3))
  with tempfile.TemporaryDirectory() as directory:
    before, cloned, after, config_same = backend_worker._roundtrip(
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
  except Exception as e:
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
    l.log_q(ops.convert_to_tensor([-1.0, -2.0]), 3.0, 5.0, 3.0),
    ops.convert_to_tensor(l.num_in_batch),
  )
  with tempfile.TemporaryDirectory() as directory:
    before, cloned, after, config_same = backend_worker._roundtrip(
      mixed, call, directory, "MixedKb"
    )
  out["kb/serial/before"], out["kb/serial/clone"] = before[0], cloned[0]
  out["kb/serial/after"], out["kb/serial/config_same"] = after[0], np.array(config_same)
  out["kb/serial/num_in_batch"] = np.array(
    negatives.MixedNegatives.from_config(mixed.get_config()).num_in_batch
  )


# ---- cross-batch memory --------------------------------------------------------------------------

CROSS_BATCH = {  # tag -> (mode, slots_per_batch, convention, estimator)
  "ids_ec": ("ids", None, "expected_count", "table"),
  "emb_sub_ec": ("embeddings", 3, "expected_count", "exact"),
  "ids_uni": ("ids", None, "unigram", "exact"),  # float16
  "emb_uni": ("embeddings", None, "unigram", "exact"),  # bfloat16
}
CB_RUNS = ("ids_ec", "emb_sub_ec")  # read after each of the pushes
CB_DTYPES = (("float16", "ids_uni"), ("bfloat16", "emb_uni"))  # read after 3 pushes
_COMPILED = {}


class _TableLogQ:
  """An estimator stand-in: log q_uni from a fixed table (-inf: an id it does not count)."""

  def __init__(self, table):
    self.table = ops.convert_to_tensor(table)

  def log_q(self, ids):
    return ops.take(self.table, ops.cast(ids, "int32"))


def _cb_memory(cases, tag, seed=5):
  mode, slots, convention, kind = CROSS_BATCH[tag]
  if kind == "exact":
    estimator = frequency.ExactCounts(len(cases["cb/counts"]), counts=cases["cb/counts"])
  else:
    estimator = _TableLogQ(cases["cb/log_q_table"])
  return negatives.CrossBatchNegatives(
    estimator,
    int(cases["cb/num_batches"]),
    cases["cb/push_ids"].shape[1],
    slots_per_batch=slots,
    mode=mode,
    embedding_dim=cases["cb/table"].shape[1],
    convention=convention,
    seed=seed,
    name=f"memory_{tag}",
  )


def _compiled(key, memory, fn, *args):
  """fn(memory, *args) -> tensors, with memory's state updated in place. On JAX: one jax.jit
  per key (a config and a call), traced on the first memory given and run on the state of any
  memory of that config (eager JAX compiles every op per shape: seconds per config); elsewhere
  the eager call (tests/tfrs_logq/keras3 cover eager JAX elsewhere, and train_on_batch here)."""
  if backend_worker.BACKEND != "jax":
    return fn(memory, *args)
  import jax

  if key not in _COMPILED:
    template = memory

    def stateless(values, *a):
      with keras.StatelessScope(state_mapping=list(zip(template.variables, values))) as scope:
        result = fn(template, *a)
        return result, [scope.get_current_value(v) for v in template.variables]

    _COMPILED[key] = jax.jit(stateless)
  result, values = _COMPILED[key]([v.value for v in memory.variables], *args)
  for variable, value in zip(memory.variables, values):
    variable.assign(value)
  return result


def _cb_push_args(cases, memory, t, dtype):
  """(ids, valid[, embeddings]) of push t; the item tower at push time in embeddings mode."""
  ids, valid = cases["cb/push_ids"][t], cases["cb/push_valid"][t]
  if memory.mode == "ids":
    return ids, valid
  return ids, valid, ops.cast(cases["cb/push_tables"][t][ids], dtype)


def _cb_push(cases, tag, memory, t, dtype="float32", seed=None):
  def push(m, i, v, e=None):
    m.update(i, e, valid=v, seed=seed)
    return ()

  _compiled((tag, "push", dtype, seed), memory, push, *_cb_push_args(cases, memory, t, dtype))


def _cb_inputs(cases, dtype):
  cast = lambda x: ops.cast(ops.convert_to_tensor(cases[x]), dtype)
  return cast("cb/query"), cases["cb/pos_ids"], cast("cb/pos_emb"), cast("cb/table")


def _cb_read(cases, tag, memory, dtype="float32", push=None, what="sample"):
  """As numpy, after push number ``push`` when given (one compiled program on JAX):
  ``sample``: sample_negatives, its score_negatives and the corrected loss; ``score``:
  score(...) and its loss; ``full``: both, and log_q of every id."""

  def read(m, *push_args):
    if push_args:
      m.update(push_args[0], push_args[2] if len(push_args) > 2 else None, valid=push_args[1])
    query, pos, pos_emb, table = _cb_inputs(cases, dtype)
    result = {}
    if what in ("sample", "full"):
      negs = m.sample_negatives(query, pos, pos_emb, item_table=table)
      scored = negatives.score_negatives(query, pos, pos_emb, negs, temperature=0.5)
      result.update(negs._asdict())
      result.update({f"sampled/{k}": v for k, v in scored._asdict().items()})
    if what in ("score", "full"):
      scored = m.score(query, pos, pos_emb, temperature=0.5, item_table=table)
      result.update({f"score/{k}": v for k, v in scored._asdict().items()})
    if what == "full":  # every id, as many as slots + positives (the shape of the reads)
      probe = np.arange(m.memory_size + len(pos)) % cases["cb/table"].shape[0]
      result["probe_log_q"] = m.log_q(probe)
    result["loss"] = losses.sampled_softmax_loss(
      **scored.loss_kwargs(), correction="corrected"
    ).loss
    return result

  args = () if push is None else _cb_push_args(cases, memory, push, dtype)
  result = _compiled((tag, what, dtype, push is None), memory, read, *args)
  return {k: _np(v) for k, v in result.items()}


def _cb_state(memory):
  return [_np(v) for v in memory.variables]


def _holder(layer):
  holder = backend_worker._Holder(layer)
  holder(np.zeros((1, 1), np.float32))
  return holder


def _grads_or_zeros(fn, *arrays):
  """Gradients of sum(fn(*arrays)) on TensorFlow / PyTorch; an input without a path to the
  output gets zeros."""
  if backend_worker.BACKEND == "tensorflow":
    import tensorflow as tf

    xs = [tf.constant(a) for a in arrays]
    with tf.GradientTape() as tape:
      tape.watch(xs)
      total = ops.sum(fn(*xs))
    g = tape.gradient(total, xs, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return [_np(v) for v in g]
  import torch

  xs = [torch.tensor(a, requires_grad=True) for a in arrays]
  ops.sum(fn(*xs)).backward()
  return [np.zeros_like(a) if x.grad is None else _np(x.grad) for a, x in zip(arrays, xs)]


@keras.saving.register_keras_serializable(package="tfrs_logq_tests")
class _MemoryStep(keras.Model):
  """A train step that scores its rows against the memory, then pushes them (ids mode)."""

  def __init__(self, memory, table, **kwargs):
    super().__init__(**kwargs)
    self.memory = memory
    self.items = keras.layers.Embedding(
      table.shape[0], table.shape[1], embeddings_initializer=keras.initializers.Constant(table)
    )
    self.tower = keras.layers.Dense(table.shape[1], use_bias=False)

  def call(self, inputs):
    ids, valid = inputs["ids"], inputs["valid"]
    pos_emb = self.items(ids)
    scored = self.memory.score(
      self.tower(inputs["x"]), ids, pos_emb, item_table=self.items.embeddings
    )
    loss = losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected").loss
    self.memory.update(ids, pos_emb, valid=valid)
    return loss


def run_cross_batch(cases, out):
  """The memory after T = 0..5 pushes (M = 3) of two configs, half-precision embeddings of two
  more, save / restore, the seed of update, gradients, a compiled train step, join_blocks."""
  pushes = cases["cb/push_ids"].shape[0]
  for tag in CB_RUNS:
    memory = _cb_memory(cases, tag)
    before = _cb_state(memory)  # a read (sample_negatives, score, log_q) changes nothing
    for t in range(pushes + 1):
      read = _cb_read(
        cases, tag, memory, push=t - 1 if t else None, what="full" if t == 0 else "sample"
      )
      for name, value in read.items():
        out[f"cb/{tag}/{t}/{name}"] = value
      if t == 0:
        out[f"cb/{tag}/pure"] = np.array(
          all(np.array_equal(a, b) for a, b in zip(before, _cb_state(memory)))
        )
    before = _cb_state(memory)
    for name, value in _cb_read(cases, tag, memory, what="full").items():
      out[f"cb/{tag}/final/{name}"] = value
    out[f"cb/{tag}/pure"] &= all(np.array_equal(a, b) for a, b in zip(before, _cb_state(memory)))
    out[f"cb/{tag}/num_pushed"] = _np(memory.num_pushed)
  # float16 (ids mode: the table) / bfloat16 (embeddings mode: the pushes) embeddings, queries
  for dtype, tag in CB_DTYPES:
    memory = _cb_memory(cases, tag)
    for t in range(3):
      read = _cb_read(cases, tag, memory, dtype, push=t, what="score")
    for name, value in read.items():
      out[f"cb/{tag}/3/{name}"] = value
    out[f"cb/{tag}/memory_dtype"] = np.array(
      "none"
      if memory.embeddings is None
      else keras.backend.standardize_dtype(memory.embeddings.dtype)
    )
  # save / restore after 2 pushes: the restored memory scores and pushes as the uninterrupted one
  with tempfile.TemporaryDirectory() as directory:
    for tag in CB_RUNS:
      memory = _cb_memory(cases, tag)
      for t in range(2):
        _cb_read(cases, tag, memory, push=t)
      path = os.path.join(directory, f"{tag}.weights.h5")
      _holder(memory).save_weights(path)
      fresh = _cb_memory(cases, tag)  # never pushed: the state exists from __init__
      _holder(fresh).load_weights(path)
      clone = negatives.CrossBatchNegatives.from_config(memory.get_config())
      clone.set_weights(memory.get_weights())  # the memory, not the generator (Keras's weights)
      for name, layer in (("run", memory), ("file", fresh), ("set_weights", clone)):
        read = _cb_read(cases, tag, layer, push=2)
        for field in ("ids", "valid", "log_q", "embeddings", "sampled/negative_scores", "loss"):
          out[f"cb/restore/{tag}/{name}/{field}"] = read[field]
      out[f"cb/restore/{tag}/config_same"] = np.array(clone.get_config() == memory.get_config())
  if backend_worker.BACKEND != "jax":  # (one more compile on JAX for the same ops)
    # update(seed=...) instead of the layer's generator: the same subsample whatever its seed
    for layer_seed in (5, 6):
      memory = _cb_memory(cases, "emb_sub_ec", seed=layer_seed)
      _cb_push(cases, "emb_sub_ec", memory, 0, seed=7)
      out[f"cb/seeded/{layer_seed}"] = _np(memory.ids) * _np(memory.filled)
  run_cross_batch_gradients(cases, out)
  run_cross_batch_train_step(cases, out)
  run_join_blocks(cases, out)


def run_cross_batch_gradients(cases, out):
  """d loss / d table: ids mode reaches the memory ids' rows; embeddings mode nothing (eager
  TensorFlow and PyTorch: the embeddings-mode push runs inside the differentiated function)."""
  if backend_worker.BACKEND == "jax":
    return
  memory = _cb_memory(cases, "ids_ec")
  for t in range(3):
    _cb_push(cases, "ids_ec", memory, t)
  q, pos, pos_emb = cases["cb/query"], cases["cb/pos_ids"], cases["cb/pos_emb"]

  def ids_loss(table):
    scored = memory.score(q, pos, pos_emb, temperature=0.5, item_table=table)
    return losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected").loss

  out["cb/grad/ids"] = _grads_or_zeros(ids_loss, cases["cb/table"])[0]
  memory = _cb_memory(cases, "emb_uni")
  ids, valid = cases["cb/push_ids"][0], cases["cb/push_valid"][0]

  def emb_loss(table, query):
    memory.update(ids, ops.take(table, ids, axis=0), valid=valid)
    scored = memory.score(query, pos, pos_emb, temperature=0.5)
    return losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected").loss

  out["cb/grad/emb_table"], out["cb/grad/emb_query"] = _grads_or_zeros(
    emb_loss, cases["cb/table"], q
  )


def run_cross_batch_train_step(cases, out):
  """Score then push inside a compiled JAX train step (model.train_on_batch), against a twin fed
  the same pushes (the same generator seed: the same subsamples; other embeddings)."""
  if backend_worker.BACKEND != "jax":
    return
  tag = "emb_sub_ec"
  memory = _cb_memory(cases, tag)
  model = _MemoryStep(memory, cases["cb/table"])
  model.compile(optimizer="sgd", loss=lambda y_true, y_pred: y_pred)
  twin = _cb_memory(cases, tag)
  steps = []
  for t in range(cases["cb/step_x"].shape[0]):
    ids, valid = cases["cb/push_ids"][t], cases["cb/push_valid"][t]
    x = {"x": cases["cb/step_x"][t], "ids": ids, "valid": valid}
    weight = valid.astype(np.float32)
    steps.append(model.train_on_batch(x, np.zeros(ids.shape, np.float32), sample_weight=weight))
    _cb_read(cases, tag, twin, push=t)
  out["cb/train/losses"] = np.array(steps, np.float32)
  names = ("ids", "filled", "push_draws", "push_distinct", "push_kept", "num_pushed")
  out["cb/train/same"] = np.array(
    [np.array_equal(_np(getattr(memory, n)), _np(getattr(twin, n))) for n in names]
    + [np.array_equal(_np(memory.seed_generator.state), _np(twin.seed_generator.state))]
  )
  out["cb/train/num_pushed"] = _np(memory.num_pushed)
  out["cb/train/embeddings_moved"] = np.array(
    not np.allclose(_np(model.items.embeddings), cases["cb/table"])
  )


def run_join_blocks(cases, out):
  blocks = []
  for k in range(3):
    pre = f"join/{k}"
    blocks.append(
      negatives.ScoredCandidates(
        cases[f"{pre}/s_p"],
        cases[f"{pre}/s_n"],
        cases[f"{pre}/lq"],
        cases[f"{pre}/valid"],
        cases[f"{pre}/pos_lq"],
      )
    )
  for rebase in (True, False):
    join = lambda b, rebase=rebase: negatives.join_blocks(b, rebase_q_prime=rebase)
    if backend_worker.BACKEND == "jax":  # one compile, not one per eager op
      import jax

      join = jax.jit(join)
    for name, value in join(blocks)._asdict().items():
      out[f"join/{rebase}/{name}"] = _np(value)
  no_positive = blocks[:1] + [blocks[1]._replace(positive_log_q=None)]
  out["join/missing"] = np.array(
    _error(lambda: negatives.join_blocks(no_positive, rebase_q_prime=True))
  )


def run_in_batch_sampler(cases, out):
  """The InBatchNegatives class (the tf-keras sampler's arguments): score(...) of the k_b case
  without a subsample, under both conventions."""
  pos_ids, valid = cases["kb/pos_ids"], cases["kb/valid"]
  emb = cases["kb/emb"][pos_ids]
  for convention in ("unigram", "expected_count"):
    sampler = negatives.InBatchNegatives(
      _TableLogQ(cases["kb/log_q_table"]), convention=convention, cross_replica=False
    )
    scored = sampler.score(cases["kb/query"], pos_ids, emb, temperature=0.5, valid=valid)
    for name, value in scored._asdict().items():
      out[f"ibs/{convention}/{name}"] = _np(value)


def run_front_functions(cases, out):
  """The functions both fronts' negatives packages have: expected_count_log_q of a pool,
  mixture_log_q, subsample_indices, validate_negatives, num_replicas."""
  pos_ids, valid, emb = cases["kb/pos_ids"], cases["kb/valid"], cases["kb/emb"]
  log_q_table = cases["kb/log_q_table"]
  pool = negatives.in_batch_pool(
    pos_ids,
    emb[pos_ids],
    log_q_table[pos_ids],
    valid,
    False,
    num_negatives=3,
    keys=cases["kb/keys"],
  )
  out["fn/pool"] = np.array(
    [float(_np(pool.num_draws)), float(_np(pool.num_distinct)), float(_np(pool.num_kept))]
  )
  out["fn/expected_count"] = _np(negatives.expected_count_log_q(log_q_table, pool))
  lq = cases["fn/log_q"]
  out["fn/mixture"] = _np(negatives.mixture_log_q(lq, 3, 4, 50))
  out["fn/mixture_no_batch"] = _np(negatives.mixture_log_q(lq, 0, 4, 50))
  out["fn/subsample"] = np.stack(
    [_np(negatives.subsample_indices(6, 2, seed=s)) for s in range(int(cases["fn/draws"]))]
  )
  out["fn/subsample_small"] = _np(negatives.subsample_indices(3, 5, seed=1))
  out["fn/subsample_empty"] = np.array(_np(negatives.subsample_indices(0, 5)).shape)
  out["fn/subsample_bad"] = np.array(
    [
      _error(lambda: negatives.subsample_indices(6, 0)),
      _error(lambda: negatives.subsample_indices(6, 2.0)),
      _error(lambda: negatives.subsample_indices(6, None)),
    ]
  )
  ids = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
  good = negatives.Negatives(ids, np.zeros((2, 3, 4), np.float16), np.zeros(3, np.float64))
  checked = negatives.validate_negatives(good)
  out["fn/validate_dtypes"] = np.array(
    [str(ops.dtype(checked.embeddings)), str(ops.dtype(checked.log_q))]
  )
  bad = {
    "float_ids": good._replace(ids=ids.astype(np.float32)),
    "int_embeddings": good._replace(embeddings=np.zeros((2, 3, 4), np.int32)),
    "rank": good._replace(embeddings=np.zeros((3, 4), np.float32)),
    "sizes": good._replace(log_q=np.zeros(4, np.float32)),
    "rows": good._replace(embeddings=np.zeros((3, 3, 4), np.float32)),
    "valid_dtype": good._replace(valid=np.ones((2, 3), np.int32)),
    "valid_shape": good._replace(valid=np.ones(3, bool)),
    "tuple": tuple(good),
  }
  for name, negs in bad.items():
    out[f"fn/validate/{name}"] = np.array(_error(lambda: negatives.validate_negatives(negs)))
  out["fn/num_replicas"] = np.array(negatives.num_replicas())


def main():
  cases = dict(np.load(sys.argv[1], allow_pickle=False))
  out = {}
  for section in (
    run_midx,
    run_midx_score,
    run_midx_serialisation,
    run_bad_arguments,
    run_in_batch_subsample,
    run_in_batch_sampler,
    run_front_functions,
    run_cross_batch,
  ):
    section(cases, out)
  out["env/backend"] = np.array(backend_worker.BACKEND)
  out["env/tf_keras_loaded"] = np.array("tf_keras" in sys.modules)
  out["env/legacy_keras_var"] = np.array(os.environ.get("TF_USE_LEGACY_KERAS", ""))
  np.savez(sys.argv[2], **out)


if __name__ == "__main__":
  main()
