"""Runs the Keras 3 path on one backend (KERAS_BACKEND) and writes every result to an npz.

    KERAS_BACKEND=jax python backend_worker.py CASES.npz OUT.npz

Spawned by test_backends.py in a fresh process per backend (without TF_USE_LEGACY_KERAS), so it
imports only keras, keras.ops and tfrs_logq.keras3 (plus the backend for gradients). It asserts
nothing about the values: test_backends.py compares them with the tf-keras path and the numpy
references. It records, besides the arrays, whether TensorFlow / the tf-keras switch were loaded.
"""

import os
import sys
import tempfile
import time
import warnings

import keras
import numpy as np
from keras import ops

import tfrs_logq.keras3 as tlk
from tfrs_logq.keras3 import accidental_hits, frequency, losses, negatives
from tfrs_logq.keras3.frequency import hashing

BACKEND = keras.backend.backend()


def _np(x):
  return np.asarray(ops.convert_to_numpy(x))


def grads(fn, *arrays):
  """Gradients of sum(fn(*arrays)) with respect to each array (numpy in, numpy out)."""
  if BACKEND == "jax":
    import jax

    g = jax.grad(lambda *a: ops.sum(fn(*a)), argnums=tuple(range(len(arrays))))(
      *[jax.numpy.asarray(a) for a in arrays]
    )
  elif BACKEND == "tensorflow":
    import tensorflow as tf

    xs = [tf.constant(a) for a in arrays]
    with tf.GradientTape() as tape:
      tape.watch(xs)
      total = ops.sum(fn(*xs))
    g = tape.gradient(total, xs)
  elif BACKEND == "torch":
    import torch

    xs = [torch.tensor(a, requires_grad=True) for a in arrays]
    ops.sum(fn(*xs)).backward()
    g = [x.grad for x in xs]
  else:
    raise ValueError(BACKEND)
  return [_np(v) for v in g]


def run_losses(cases, out):
  for key in sorted(k for k in cases if k.startswith("loss/") and k.endswith("/s_p")):
    base = key[: -len("/s_p")]
    s_p, s_n = cases[base + "/s_p"], cases[base + "/s_n"]
    lq_n, lq_p, valid = cases[base + "/lq_n"], cases[base + "/lq_p"], cases[base + "/valid"]
    dtype = str(cases[base + "/dtype"])
    for correction in tlk.CORRECTIONS:
      for q_prime in ("exact", "proxy") if correction == "corrected" else ("exact",):
        tag = f"{base}/{correction}/{q_prime}"

        def fn(sp, sn, correction=correction, q_prime=q_prime):
          return tlk.sampled_softmax_loss(
            sp,
            sn,
            lq_n,
            correction=correction,
            positive_log_q=lq_p,
            valid_mask=valid,
            q_prime=q_prime,
          ).loss

        res = tlk.sampled_softmax_loss(
          s_p.astype(dtype),
          s_n.astype(dtype),
          lq_n,
          correction=correction,
          positive_log_q=lq_p,
          valid_mask=valid,
          q_prime=q_prime,
        )
        out[tag + "/loss"], out[tag + "/weight"] = _np(res.loss), _np(res.weight)
        out[tag + "/num_valid"] = _np(res.num_valid)
        out[tag + "/loss_dtype"] = np.array(keras.backend.standardize_dtype(res.loss.dtype))
        if dtype == "float32":
          out[tag + "/grad_pos"], out[tag + "/grad_neg"] = grads(fn, s_p, s_n)
  # ratio floor (corrected only)
  c = "loss/0"
  res = tlk.sampled_softmax_loss(
    cases[c + "/s_p"],
    cases[c + "/s_n"],
    cases[c + "/lq_n"],
    correction="corrected",
    positive_log_q=cases[c + "/lq_p"],
    valid_mask=cases[c + "/valid"],
    ratio_floor=0.3,
  )
  out["ratio_floor/loss"] = _np(res.loss)


def run_retrieval(cases, out):
  for key in sorted(k for k in cases if k.startswith("task/") and k.endswith("/query")):
    base = key[: -len("/query")]
    kwargs = dict(eval(str(cases[base + "/kwargs"])))
    call = dict(eval(str(cases[base + "/call"])))
    inputs = {name: cases[f"{base}/{name}"] for name in call.values()}
    task = tlk.Retrieval(**kwargs)

    def fn(q, c, task=task, call=call, inputs=inputs):
      return task(q, c, **{arg: inputs[name] for arg, name in call.items()})

    out[base + "/loss"] = _np(fn(cases[base + "/query"], cases[base + "/cand"]))
    out[base + "/grad_query"], out[base + "/grad_cand"] = grads(
      fn, cases[base + "/query"], cases[base + "/cand"]
    )


class _StubSampler:
  """A negative sampler with fixed draws from its own proposal Q_s: UniformNegatives' layouts,
  shared ids [N] or per query [A, N], log Q_s of each draw and Q_s(p) of the positives (None:
  no positive_log_q). Records the keywords of its last ``score`` call."""

  def __init__(self, table, ids, log_q, positive_log_q):
    self.table, self.ids, self.log_q, self.positive_log_q = table, ids, log_q, positive_log_q
    self.received = None

  def score(
    self,
    query_embeddings,
    positive_ids,
    positive_embeddings,
    *,
    temperature=1.0,
    seed=None,
    sequence_ids=None,
    item_table=None,
    valid=None,
  ):
    self.received = dict(seed=seed, sequence_ids=sequence_ids, item_table=item_table, valid=valid)
    negs = negatives.Negatives(
      self.ids,
      ops.take(ops.convert_to_tensor(self.table), self.ids, axis=0),
      self.log_q,
      positive_log_q=self.positive_log_q,
    )
    return negatives.score_negatives(
      query_embeddings, positive_ids, positive_embeddings, negs, temperature=temperature
    )


class _MIDXLike(_StubSampler):
  """A sampler whose score names temperature, seed and item_table only (no sequence_ids, no
  valid, no ``**kwargs``): the task leaves the other keywords out."""

  def score(
    self,
    query_embeddings,
    positive_ids,
    positive_embeddings,
    *,
    temperature=1.0,
    seed=None,
    item_table=None,
  ):
    return super().score(
      query_embeddings,
      positive_ids,
      positive_embeddings,
      temperature=temperature,
      seed=seed,
      item_table=item_table,
    )


class _TemperatureOnly(_StubSampler):
  """A sampler whose score takes no seed (a seed given to the task is an error)."""

  def score(self, query_embeddings, positive_ids, positive_embeddings, *, temperature=1.0):
    return super().score(
      query_embeddings, positive_ids, positive_embeddings, temperature=temperature
    )


def _error(fn):
  """'TypeName: message' of what fn raises ('' when it raises nothing)."""
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", DeprecationWarning)
      fn()
  except Exception as e:
    return np.array(f"{type(e).__name__}: {e}")
  return np.array("")


def _sampler_of(cases, base, positive_log_q=True, cls=_StubSampler):
  return cls(
    cases[base + "/table"],
    cases[base + "/extra"],
    cases[base + "/lq_s"],
    cases[base + "/lqp_s"] if positive_log_q else None,
  )


def run_sampler_task(cases, out):
  """Retrieval(negative_sampler=...): the stub's block after the in-batch block, its errors."""
  for key in sorted(k for k in cases if k.startswith("sampler_task/") and k.endswith("/query")):
    base = key[: -len("/query")]
    kwargs = dict(eval(str(cases[base + "/kwargs"])))
    call = dict(eval(str(cases[base + "/call"])))
    inputs = {name: cases[f"{base}/{name}"] for name in call.values()}
    task = tlk.Retrieval(negative_sampler=_sampler_of(cases, base), **kwargs)

    def fn(q, c, task=task, call=call, inputs=inputs):
      return task(q, c, **{arg: inputs[name] for arg, name in call.items()})

    out[base + "/loss"] = _np(fn(cases[base + "/query"], cases[base + "/cand"]))
    out[base + "/grad_query"], out[base + "/grad_cand"] = grads(
      fn, cases[base + "/query"], cases[base + "/cand"]
    )
  base = "sampler_task/0"
  q, c, ids, p = (cases[f"{base}/{k}"] for k in ("query", "cand", "ids", "prob"))
  with_sampler = tlk.Retrieval(negative_sampler=_sampler_of(cases, base))
  no_positive = tlk.Retrieval(negative_sampler=_sampler_of(cases, base, positive_log_q=False))
  midx_like = _sampler_of(cases, base, cls=_MIDXLike)
  midx_task = tlk.Retrieval(negative_sampler=midx_like, loss="none")
  seed = np.array([3, 4], np.int32)
  temperature_only = tlk.Retrieval(
    negative_sampler=_sampler_of(cases, base, cls=_TemperatureOnly), loss="none"
  )
  out["sampler/temperature_only/loss"] = _np(
    temperature_only(q, c, candidate_sampling_probability=p, candidate_ids=ids)
  )
  out["sampler/midx_like/loss"] = _np(
    midx_task(q, c, candidate_sampling_probability=p, candidate_ids=ids, seed=seed, item_table=c)
  )
  out["sampler/midx_like/seed"] = _np(midx_like.received["seed"])
  errors = {
    "no_ids": lambda: with_sampler(q, c, candidate_sampling_probability=p),
    "max_sim": lambda: with_sampler(
      np.stack([q, q], axis=1), c, candidate_sampling_probability=p, candidate_ids=ids
    ),
    "no_positive_log_q": lambda: no_positive(
      q, c, candidate_sampling_probability=p, candidate_ids=ids
    ),
    "not_a_sampler": lambda: tlk.Retrieval(negative_sampler=object()),
    "get_config": with_sampler.get_config,
    # a seed for a sampler whose score takes none
    "seed_not_taken": lambda: temperature_only(
      q, c, candidate_sampling_probability=p, candidate_ids=ids, seed=seed
    ),
  }
  for name, fn in errors.items():
    out[f"sampler/error/{name}"] = _error(fn)


def _deprecations(make):
  """(made object, messages of the DeprecationWarnings raised while making it)."""
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    made = make()
  return made, [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]


def run_task_arguments(cases, out):
  """Retrieval's constructor: loss= (a reduction name or a CategoricalCrossentropy),
  reduction= and the former positional order (deprecated), config round trips, errors."""
  base = "task/0"
  q, c, ids, p = (cases[f"{base}/{k}"] for k in ("query", "cand", "ids", "prob"))

  def loss_of(task):
    return _np(task(q, c, candidate_sampling_probability=p, candidate_ids=ids))

  for name in tlk.retrieval.REDUCTIONS:
    task, warned = _deprecations(lambda name=name: tlk.Retrieval(loss=name, correction="standard"))
    out[f"args/loss/{name}"], out[f"args/loss/{name}/warnings"] = loss_of(task), np.array(warned)
    task, warned = _deprecations(
      lambda name=name: tlk.Retrieval(reduction=name, correction="standard")
    )
    out[f"args/reduction/{name}"] = loss_of(task)
    out[f"args/reduction/{name}/warnings"] = np.array(warned)
  for name in ("sum", "sum_over_batch_size", "mean", "none"):
    # positional, as tf-keras's loss
    task = tlk.Retrieval(
      keras.losses.CategoricalCrossentropy(from_logits=True, reduction=name), correction="standard"
    )
    out[f"args/cce/{name}"], out[f"args/cce/{name}/reduction"] = loss_of(task), task.reduction
  out["args/cce/default/reduction"] = np.array(
    tlk.Retrieval(keras.losses.CategoricalCrossentropy(from_logits=True)).reduction
  )
  # tf-keras's positional order: (loss, metrics, batch_metrics, loss_metrics, temperature,
  # num_hard_negatives, remove_accidental_hits, name, correction, q_prime)
  task, warned = _deprecations(
    lambda: tlk.Retrieval("mean", None, None, None, 0.5, 4, True, "positional", "standard")
  )
  out["args/positional"], out["args/positional/warnings"] = loss_of(task), np.array(warned)
  out["args/positional/name"] = np.array(task.name)
  # the former order: (correction, q_prime, temperature, num_hard_negatives,
  # remove_accidental_hits, reduction, ...)
  task, warned = _deprecations(lambda: tlk.Retrieval("standard", "exact", 0.5, 4, True, "mean"))
  out["args/former"], out["args/former/warnings"] = loss_of(task), np.array(warned)
  task, warned = _deprecations(lambda: tlk.Retrieval("none"))
  out["args/former_none/correction"] = np.array(task.correction)
  out["args/former_none/reduction"] = np.array(task.reduction)
  out["args/former_none/warnings"] = np.array(warned)
  # a config written with reduction= (before loss=) loads without a warning
  config = tlk.Retrieval(loss="mean", correction="standard", temperature=0.5).get_config()
  config["reduction"] = config.pop("loss")
  task, warned = _deprecations(lambda: tlk.Retrieval.from_config(config))
  out["args/old_config"], out["args/old_config/warnings"] = loss_of(task), np.array(warned)
  out["args/old_config/loss"] = np.array(task.get_config()["loss"])
  errors = {
    "loss_name": lambda: tlk.Retrieval(loss="avg"),
    "loss_probabilities": lambda: tlk.Retrieval(loss=keras.losses.CategoricalCrossentropy()),
    "loss_smoothing": lambda: tlk.Retrieval(
      loss=keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    ),
    "loss_mse": lambda: tlk.Retrieval(loss=keras.losses.MeanSquaredError()),
    "loss_weighted_mean": lambda: tlk.Retrieval(
      loss=keras.losses.CategoricalCrossentropy(
        from_logits=True, reduction="mean_with_sample_weight"
      )
    ),
    "loss_and_reduction": lambda: tlk.Retrieval(loss="sum", reduction="mean"),
    "metrics": lambda: tlk.Retrieval(metrics=[keras.metrics.Mean()]),
    "batch_metrics": lambda: tlk.Retrieval(batch_metrics=[keras.metrics.AUC()]),
    "former_too_many": lambda: tlk.Retrieval("none", *([None] * 10)),
    "former_twice": lambda: tlk.Retrieval("none", "exact", q_prime="proxy"),
  }
  for name, fn in errors.items():
    out[f"args/error/{name}"] = _error(fn)
  out["args/empty_metrics"] = _error(lambda: tlk.Retrieval(metrics=[], loss_metrics=()))


def run_layers(cases, out):
  logits, q = cases["layers/logits"], cases["layers/q"]
  spc = tlk.SamplingProbabilityCorrection()
  out["spc/prob"] = _np(spc(logits, q))
  out["spc/log"] = _np(tlk.SamplingProbabilityCorrection(from_log=True)(logits, np.log(q)))
  out["spc/rows"] = _np(spc(logits, np.broadcast_to(q, logits.shape).copy()))
  out["spc/float16"] = _np(spc(logits.astype("float16"), q))
  out["spc/float16_dtype"] = np.array(
    keras.backend.standardize_dtype(spc(logits.astype("float16"), q).dtype)
  )
  out["spc/clip"] = _np(tlk.SamplingProbabilityCorrection(epsilon=1e-3)(logits, q * 1e-4))
  for name, bad in (("zero", np.where(np.arange(q.size) == 1, 0.0, q)), ("above_one", q * 100.0)):
    try:
      spc(logits, bad.astype("float32"))
      out[f"spc/raises_{name}"] = np.array(False)
    except ValueError:
      out[f"spc/raises_{name}"] = np.array(True)
  labels, ids = cases["layers/labels"], cases["layers/ids"]
  rah = tlk.RemoveAccidentalHits()
  for dtype in ("float32", "float16"):
    res = rah(logits.astype(dtype), labels, ids)
    out[f"rah/{dtype}"] = _np(res).astype("float64")
    out[f"rah/{dtype}_dtype"] = np.array(keras.backend.standardize_dtype(res.dtype))
  out["rah/rows"] = _np(rah(logits, labels, np.broadcast_to(ids, logits.shape).copy()))
  out["mask"] = _np(accidental_hits.accidental_hit_mask(cases["mask/pos"], cases["mask/neg"]))
  out["mask_rows"] = _np(
    accidental_hits.accidental_hit_mask(cases["mask/pos"], cases["mask/neg_rows"])
  )
  out["log_q_prime"] = _np(tlk.log_q_prime(cases["lqp/neg"], cases["lqp/pos"]))


def run_estimators(cases, out):
  keys = cases["hash/keys"]
  for seed in (0, 1, 7):
    for num_buckets in (1, 7, 1000, 2**20, 2**31 - 1):
      out[f"hash/{seed}/{num_buckets}"] = _np(
        hashing.bucket(ops.convert_to_tensor(keys), seed, num_buckets)
      )
  stream = [cases[f"stream/{i}"] for i in range(int(cases["stream/n"]))]
  probe = cases["stream/probe"]
  exact = frequency.ExactCounts(int(cases["stream/vocab"]))
  table = frequency.ExactCounts(int(cases["stream/vocab"]), counts=cases["stream/table"])
  for cfg in ("a", "b", "c"):
    kw = dict(eval(str(cases[f"hash_cfg/{cfg}"])))
    est = frequency.HashArrayEstimator(**kw)
    for i, ids in enumerate(stream):
      est.update(ids)
      out[f"hash_cfg/{cfg}/log_q/{i}"] = _np(est.log_q(probe))
    out[f"hash_cfg/{cfg}/last_step"] = _np(est.last_step)
    out[f"hash_cfg/{cfg}/gap"] = _np(est.gap)
    out[f"hash_cfg/{cfg}/step"] = _np(est.step)
  for i, ids in enumerate(stream):
    exact.update(ids)
    out[f"exact/log_q/{i}"] = _np(exact.log_q(probe))
    out[f"exact/log_one_minus_q/{i}"] = _np(exact.log_one_minus_q(probe))
  out["exact/counts"] = _np(exact.counts)
  out["exact/log_q_prime"] = _np(exact.log_q_prime(probe[:5], probe[5:10, None]))
  out["table/log_q"] = _np(table.log_q(probe))
  try:
    exact.update(np.array([0, int(cases["stream/vocab"])]))
    out["exact/raises_out_of_range"] = np.array(False)
  except ValueError:
    out["exact/raises_out_of_range"] = np.array(True)
  out["exact/counts_after_bad"] = _np(exact.counts)


def run_negatives(cases, out):
  pos_ids, pos_valid = cases["neg/pos_ids"], cases["neg/pos_valid"]
  emb_table = cases["neg/emb_table"]
  query = cases["neg/query"]
  est = frequency.ExactCounts(emb_table.shape[0], counts=cases["neg/counts"])

  def embed(ids):
    return ops.take(ops.convert_to_tensor(emb_table), ids, axis=0)

  out["neg/first"] = _np(negatives.first_occurrence_mask(pos_ids, pos_valid))
  pos_emb = emb_table[pos_ids]
  for convention in negatives.CONVENTIONS:
    mixed = negatives.MixedNegatives(
      int(cases["neg/k_u"]), id_range=(1, emb_table.shape[0]), convention=convention, seed=3
    )
    negs = mixed(
      pos_ids, pos_emb, candidate_embedder=embed, log_q_unigram=est.log_q, valid=pos_valid
    )
    scored = negatives.score_negatives(query, pos_ids, pos_emb, negs, temperature=0.5)
    loss = losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected")
    for name in ("ids", "log_q", "valid", "positive_log_q"):
      out[f"neg/{convention}/{name}"] = _np(getattr(negs, name))
    out[f"neg/{convention}/loss"] = _np(loss.loss)
  uniform = negatives.UniformNegatives(
    5, candidate_ids=cases["neg/table_ids"], per_query=True, seed=4
  )
  ids = uniform(num_queries=query.shape[0])
  negs = negatives.Negatives(ids, embed(ids), uniform.log_q(ids))
  scored = negatives.score_negatives(query, pos_ids, pos_emb, negs)
  out["per_query/ids"] = _np(ids)
  out["per_query/log_q"] = _np(negs.log_q)
  scored = scored._replace(positive_log_q=uniform.log_q(pos_ids))
  out["per_query/loss"] = _np(
    losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected").loss
  )


class _TwoTower(keras.Model):
  """A tiny two-tower trained by fit: estimator updated in the step, mixed negatives, corrected
  loss through compute_loss (the keras-rs pattern)."""

  def __init__(self, num_items, **kwargs):
    super().__init__(**kwargs)
    self.users = keras.layers.Embedding(8, 4)
    self.items = keras.layers.Embedding(num_items, 4)
    self.estimator = frequency.HashArrayEstimator(num_buckets=64, alpha=0.1)
    self.mixed = negatives.MixedNegatives(3, id_range=(0, num_items), seed=1)

  def call(self, inputs):
    return self.users(inputs["user"]), self.items(inputs["item"])

  def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
    query, positive = y_pred
    self.estimator.update(x["item"])
    negs = self.mixed(
      x["item"], positive, candidate_embedder=self.items, log_q_unigram=self.estimator.log_q
    )
    scored = negatives.score_negatives(query, x["item"], positive, negs)
    return ops.mean(
      losses.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected").loss
    )


class _AddLoss(keras.Model):
  """The Retrieval task inside call + add_loss: compile(optimizer) without a loss."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.users = keras.layers.Embedding(8, 4)
    self.items = keras.layers.Embedding(12, 4)
    self.task = tlk.Retrieval(
      loss="mean", correction="corrected", frequency_estimator=frequency.ExactCounts(12)
    )

  def call(self, inputs, training=False):
    u, i = self.users(inputs["user"]), self.items(inputs["item"])
    self.add_loss(self.task(u, i, candidate_ids=inputs["item"], training=training))
    return u


def run_training(out):
  rng = np.random.default_rng(0)
  x = {
    "user": rng.integers(0, 8, 64).astype("int32"),
    "item": rng.integers(0, 12, 64).astype("int32"),
  }
  model = _TwoTower(12, name="two_tower")
  model.compile(optimizer=keras.optimizers.Adam(0.05))
  hist = model.fit(x, epochs=2, batch_size=16, verbose=0, shuffle=False)
  out["fit/loss"] = np.array(hist.history["loss"])
  out["fit/estimator_step"] = _np(model.estimator.step)
  model2 = _AddLoss(name="add_loss_model")
  model2.compile(optimizer=keras.optimizers.Adam(0.05))
  hist2 = model2.fit(x, epochs=2, batch_size=16, verbose=0, shuffle=False)
  out["add_loss/loss"] = np.array(hist2.history["loss"])
  out["add_loss/counts"] = _np(model2.task.frequency_estimator.counts)
  out["fit/items"] = x["item"]


@keras.saving.register_keras_serializable(package="tfrs_logq_tests")
class _Holder(keras.Model):
  """A model holding one layer (its variables are saved with the model)."""

  def __init__(self, attached, **kwargs):
    super().__init__(**kwargs)
    self.attached = attached

  def call(self, x):
    return x

  def get_config(self):
    return {"name": self.name, "attached": keras.saving.serialize_keras_object(self.attached)}

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    config["attached"] = keras.saving.deserialize_keras_object(config["attached"])
    return cls(**config)


def _roundtrip(layer, call, directory, name):
  """Same outputs after get_config -> from_config (+ weights) and after a .keras save / load."""
  before = [_np(v) for v in keras.tree.flatten(call(layer))]
  clone = layer.__class__.from_config(layer.get_config())
  if layer.weights:
    clone.set_weights(layer.get_weights())
  cloned = [_np(v) for v in keras.tree.flatten(call(clone))]
  config_same = clone.get_config() == layer.get_config()
  wrapper = _Holder(layer, name="holder")
  wrapper(np.zeros((1, 1), np.float32))
  path = os.path.join(directory, f"{name}.keras")
  wrapper.save(path)
  loaded = keras.saving.load_model(path)
  after = [_np(v) for v in keras.tree.flatten(call(loaded.attached))]
  return before, cloned, after, config_same


def run_serialisation(cases, out):
  s_p, s_n = cases["loss/0/s_p"], cases["loss/0/s_n"]
  lq_n, lq_p, valid = cases["loss/0/lq_n"], cases["loss/0/lq_p"], cases["loss/0/valid"]
  logits, q = cases["layers/logits"], cases["layers/q"]
  labels, ids = cases["layers/labels"], cases["layers/ids"]
  stream = [cases[f"stream/{i}"] for i in range(int(cases["stream/n"]))]
  probe = cases["stream/probe"]
  hash_est = frequency.HashArrayEstimator(num_buckets=32, num_hashes=2, alpha=0.2, seed=5)
  exact = frequency.ExactCounts(int(cases["stream/vocab"]), accumulate=True, min_count=0.5)
  for ids_ in stream[:4]:
    hash_est.update(ids_)
    exact.update(ids_)
  task_q, task_c = cases["task/0/query"], cases["task/0/cand"]
  task_ids, task_p = cases["task/0/ids"], cases["task/0/prob"]
  layers = {
    "SampledSoftmaxLoss": (
      losses.SampledSoftmaxLoss("corrected", "proxy", ratio_floor=0.01),
      lambda l: l(s_p, s_n, lq_n, lq_p, valid),
    ),
    "SamplingProbabilityCorrection": (
      tlk.SamplingProbabilityCorrection(from_log=True),
      lambda l: l(logits, np.log(q)),
    ),
    "RemoveAccidentalHits": (tlk.RemoveAccidentalHits(), lambda l: l(logits, labels, ids)),
    "Retrieval": (
      tlk.Retrieval(
        loss="mean",
        correction="standard",
        temperature=0.5,
        num_hard_negatives=5,
        remove_accidental_hits=True,
      ),
      lambda l: l(task_q, task_c, candidate_sampling_probability=task_p, candidate_ids=task_ids),
    ),
    "RetrievalWithLossObject": (
      tlk.Retrieval(
        keras.losses.CategoricalCrossentropy(from_logits=True, reduction="sum"),
        correction="standard",
        num_hard_negatives=5,
      ),
      lambda l: l(task_q, task_c, candidate_sampling_probability=task_p, candidate_ids=task_ids),
    ),
    "RetrievalWithEstimator": (
      tlk.Retrieval(correction="corrected", frequency_estimator=exact, update_frequency="never"),
      lambda l: l(task_q, task_c, candidate_ids=task_ids),
    ),
    "ExactCounts": (exact, lambda l: l.log_q(probe)),
    "HashArrayEstimator": (hash_est, lambda l: l.log_q(probe)),
    "UniformNegatives": (
      negatives.UniformNegatives(4, id_range=(3, 9), seed=2),
      lambda l: l.log_q(ops.arange(4)),
    ),
    "MixedNegatives": (
      negatives.MixedNegatives(4, candidate_ids=[2, 4, 6, 8, 10], convention="mixture", seed=2),
      lambda l: l.log_q(ops.convert_to_tensor([-1.0, -2.0]), 3.0),
    ),
  }
  with tempfile.TemporaryDirectory() as directory:
    for name, (layer, call) in layers.items():
      before, cloned, after, config_same = _roundtrip(layer, call, directory, name)
      for i, (b, c, a) in enumerate(zip(before, cloned, after)):
        out[f"serial/{name}/{i}/before"], out[f"serial/{name}/{i}/clone"] = b, c
        out[f"serial/{name}/{i}/after"] = a
      out[f"serial/{name}/config_same"] = np.array(config_same)


def main():
  cases = dict(np.load(sys.argv[1], allow_pickle=False))
  # After importing keras and tfrs_logq.keras3, before keras's own fit / saving utilities
  # (which may load TensorFlow for data handling on any backend).
  out = {"env/tensorflow_loaded": np.array("tensorflow" in sys.modules)}
  for section in (
    run_losses,
    run_retrieval,
    run_sampler_task,
    run_task_arguments,
    run_layers,
    run_estimators,
    run_negatives,
  ):
    start = time.process_time()
    section(cases, out)
    print(f"{section.__name__}: {time.process_time() - start:.1f} s", file=sys.stderr)
  start = time.time()
  run_training(out)
  print(f"run_training: {time.time() - start:.1f} s", file=sys.stderr)
  start = time.time()
  run_serialisation(cases, out)
  print(f"run_serialisation: {time.time() - start:.1f} s", file=sys.stderr)
  out["env/backend"] = np.array(BACKEND)
  out["env/legacy_keras_var"] = np.array(os.environ.get("TF_USE_LEGACY_KERAS", ""))
  out["env/tf_keras_loaded"] = np.array("tf_keras" in sys.modules)
  np.savez(sys.argv[2], **out)


if __name__ == "__main__":
  main()
