"""One arm of bench/world_scale.py: a jitted JAX step composed from the Keras 3 library (the
model, the step of each source, the update rule and the two passes that find a step's rows:
bench/README.md, section `world_scale.py`).
"""

from __future__ import annotations

import os
import pathlib
import time
from typing import Dict

import jax
import jax.numpy as jnp
import keras
import numpy as np
from keras import ops

import tfrs_logq.keras3 as tlk
from bench.common.timing import rotated
from bench.world.rows import RowSpec, Settings
from tfrs_logq.core import lazy_adam as lazy_adam_core
from tfrs_logq.keras3 import negatives as neg

BETA_1, BETA_2, EPSILON = 0.9, 0.999, 1e-7  # keras.optimizers.Adam's


def machine_label() -> str:
  """'<accelerator or CPU model> (<n> cores), jax <version> <backend>' for the absolute times."""
  device, name = jax.devices()[0], "CPU"
  if device.platform != "cpu":
    name = getattr(device, "device_kind", device.platform)
  elif os.path.exists("/proc/cpuinfo"):
    lines = pathlib.Path("/proc/cpuinfo").read_text().splitlines()
    name = next((l.split(":", 1)[1].strip() for l in lines if l.startswith("model name")), name)
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  return f"{name} ({cores} cores), jax {jax.__version__} {device.platform}"


class Arm:
  """The samplers, the jitted step and the state of one row x seed (bench/README.md)."""

  def __init__(self, row: RowSpec, settings: Settings, seed: int, counts: np.ndarray):
    s = self.settings = settings
    self.row, self.seed, self.num_items, k = row, seed, s.num_items, s.k
    self.estimator = tlk.frequency.ExactCounts(
      s.num_items, counts=np.asarray(counts, np.int64), accumulate=False, validate_ids=False
    )
    self._embed_fn = None  # the candidate embedder of the current pass (bench/README.md)
    self.in_batch_k = k if k < s.batch_size else None
    self.in_batch_seed = self.mixed = self.midx = self.memory = None
    if row.source in ("in_batch", "xbatch") and self.in_batch_k is not None:
      self.in_batch_seed = keras.random.SeedGenerator(seed * 7919 + 1)
    if row.source == "mixed":
      self.mixed = neg.MixedNegatives(
        neg.InBatchNegatives(None, num_negatives=k // 2, cross_replica=False),
        neg.UniformNegatives(None, k - k // 2, id_range=(0, s.num_items), seed=seed * 7919 + 2),
        convention=row.convention,
      )
    elif row.source == "midx":
      self.midx = neg.MIDXSampler(
        s.midx_codewords,
        "pq",
        num_items=s.num_items,
        dim=s.embedding_dim + 1,
        seed=seed * 7919 + 3,
        num_negatives=s.k_midx,
        candidate_embedder=self._embed,
      )
    elif row.source == "xbatch":
      self.memory = neg.CrossBatchNegatives(
        self.estimator,
        row.memory,
        s.batch_size,
        slots_per_batch=min(k, s.batch_size),
        mode="ids",
        convention=row.convention,
        candidate_embedder=self._embed,
        cross_replica=False,
        seed=seed * 7919 + 4,
      )
    layers = [x for x in (self.estimator, self.mixed, self.midx, self.memory) if x is not None]
    variables = [v for layer in layers for v in layer.variables]
    if self.in_batch_seed is not None:
      variables.append(self.in_batch_seed.state)
    self.variables = list({id(v): v for v in variables}.values())
    self._initial_values = [np.array(v.value) for v in self.variables]
    self.schedule = keras.optimizers.schedules.CosineDecay(s.learning_rate, s.steps, alpha=0.01)
    self._step = jax.jit(self._step_fn, donate_argnums=(0, 1))

  # ------------------------------------------------------------------------- the library
  def _embed(self, ids):
    return self._embed_fn(ids)

  def _in_batch(self, q, ids, pos_emb):
    negatives = neg.in_batch_negatives(
      ids,
      pos_emb,
      self.estimator.log_q(ids),
      convention=self.row.convention,
      cross_replica=False,
      num_negatives=self.in_batch_k,
      seed=self.in_batch_seed,
    )
    return neg.score_negatives(q, ids, pos_emb, negatives)

  def _scored(self, q, ids, pos_emb):
    """The library's ScoredCandidates of the row (bench/README.md)."""
    src = self.row.source
    if src == "in_batch":
      return self._in_batch(q, ids, pos_emb)
    if src == "mixed":
      negatives, blocks = self.mixed.blocks(
        ids, pos_emb, candidate_embedder=self._embed, log_q_unigram=self.estimator.log_q
      )
      return neg.score_blocks(q, ids, pos_emb, negatives, blocks)
    if src == "midx":
      return self.midx.score(q, ids, pos_emb)
    remembered = self.memory.score(q, ids, pos_emb)  # scored before the in-batch block
    rebase = self.row.correction == "corrected"
    return neg.join_blocks([self._in_batch(q, ids, pos_emb), remembered], rebase_q_prime=rebase)

  def _loss(self, q, ids, pos_emb):
    out = tlk.sampled_softmax_loss(
      **self._scored(q, ids, pos_emb).loss_kwargs(), correction=self.row.correction
    )
    return ops.mean(out.loss), ops.mean(out.weight)

  # ------------------------------------------------------------------------------ the step
  @staticmethod
  def _queries(w, features, users):
    x = jnp.take(features, users.astype(jnp.int32), axis=0) @ w
    return jnp.concatenate([x, jnp.ones_like(x[:, :1])], axis=1)

  def _with_state(self, values, fn):
    """fn() under a StatelessScope holding ``values``; (result, [the new value of each
    variable that fn assigned, None for the others])."""
    with keras.StatelessScope(state_mapping=list(zip(self.variables, values))) as scope:
      before = [scope.get_current_value(v) for v in self.variables]
      out = fn()
      after = [scope.get_current_value(v) for v in self.variables]
    return out, [a if a is not b else None for a, b in zip(after, before)]

  @staticmethod
  def _adam(param, slots, g, lr, rows=None):
    """(param - delta, the new (m, v, k)): the core's LazyAdam rule with keras' Adam constants."""
    *slots, delta = lazy_adam_core.update_rows(
      ops, *slots, g, lr, BETA_1, BETA_2, EPSILON, adaptive_epsilon=False, rows=rows
    )
    return param - delta, tuple(slots)

  def _step_fn(self, params, moments, values, features, users, items, t):
    (w, table), (slots_w, slots_t) = params, moments
    lr = ops.cast(self.schedule(t), "float32")
    ids = items.astype(jnp.int32)
    if self.row.source == "full":

      def full(w, table):
        out = tlk.full_softmax_loss(self._queries(w, features, users), ids, table)
        return ops.mean(out.loss), ([None] * len(values), ops.mean(out.weight))

      (loss, (new, weight)), (g_w, g_t) = jax.value_and_grad(full, (0, 1), has_aux=True)(w, table)
      table, slots_t = self._adam(table, slots_t, g_t, lr)
    else:
      recorded = []

      def record(i):
        recorded.append(jnp.ravel(i))
        return jnp.take(table, i, axis=0)

      self._embed_fn = record  # pass 1: the ids the samplers embed
      q0 = jax.lax.stop_gradient(self._queries(w, features, users))
      self._with_state(values, lambda: self._scored(q0, ids, jnp.take(table, ids, axis=0)))
      every = jnp.concatenate([ids] + recorded)
      size = min(self.num_items, int(every.shape[0]))
      rows = jnp.unique(every, size=size, fill_value=self.num_items)  # sorted, |D| = padding
      take = lambda a: jnp.take(a, rows, axis=0, mode="fill", fill_value=0)
      local_table = take(table)

      def sampled(w, local):
        self._embed_fn = lambda i: jnp.take(local, jnp.searchsorted(rows, i), axis=0)

        def body():
          loss, weight = self._loss(self._queries(w, features, users), ids, self._embed_fn(ids))
          if self.memory is not None:
            self.memory.update(ids, None)
          return loss, weight

        (loss, weight), new = self._with_state(values, body)
        return loss, (new, weight)

      grad = jax.value_and_grad(sampled, (0, 1), has_aux=True)
      (loss, (new, weight)), (g_w, g_local) = grad(w, local_table)
      self._embed_fn = None
      real = (rows < self.num_items) & lazy_adam_core.nonzero_rows(ops, g_local)
      local_table, slots_l = self._adam(local_table, map(take, slots_t), g_local, lr, real)
      put = lambda a, b: a.at[rows].set(b, mode="drop")
      table, slots_t = put(table, local_table), tuple(map(put, slots_t, slots_l))
    w, slots_w = self._adam(w, slots_w, g_w, lr)
    return (w, table), (slots_w, slots_t), new, loss, weight

  # ----------------------------------------------------------------------------- the state
  def initial_state(self, user_weights, item_table) -> Dict:
    """A fresh state (device arrays) from the initial weights, the samplers' variables at their
    initial values (an arm whose MIDX index was refreshed before starts over: same draws)."""
    w, table = jnp.asarray(user_weights), jnp.asarray(item_table)
    zeros = lambda a: (jnp.zeros_like(a), jnp.zeros_like(a), jnp.zeros(a.shape[:1], a.dtype))
    for v, value in zip(self.variables, self._initial_values):
      v.assign(value)
    self.refresh_seconds = []  # this state's MIDX refreshes (a run's, not the timing's)
    state = dict(
      params=(w, table),
      moments=(zeros(w), zeros(table)),
      values=[jnp.asarray(value) for value in self._initial_values],
      step=0,
    )
    if self.midx is not None:
      self.refresh(state)
    return state

  def refresh(self, state: Dict) -> None:
    """MIDX: rebuilds the index from the state's item table (eager), into the state's values."""
    start = time.perf_counter()
    for v, value in zip(self.variables, state["values"]):
      v.assign(value)
    self.midx.refresh(state["params"][1])
    state["values"] = [jnp.asarray(v.value) for v in self.variables]
    self.refresh_seconds.append(time.perf_counter() - start)

  def maybe_refresh(self, state: Dict) -> None:
    """MIDX: refreshes the index before steps --midx_refresh, 2 --midx_refresh, ... (the first
    index is built by `initial_state`); other rows: nothing."""
    t = state["step"]
    if self.midx is not None and t > 0 and t % self.settings.midx_refresh == 0:
      self.refresh(state)

  def step(self, state: Dict, features, users, items):
    """One training step on ``state`` (updated in place; call `maybe_refresh` before it);
    (loss, mean w), synced."""
    t = state["step"]
    batch = (jnp.asarray(users), jnp.asarray(items), jnp.asarray(t, jnp.int32))
    out = self._step(state["params"], state["moments"], state["values"], features, *batch)
    params, moments, changed, loss, weight = out
    values = [o if n is None else n for n, o in zip(changed, state["values"])]
    state.update(params=params, moments=moments, values=values, step=t + 1)
    return float(loss), float(weight)

  @staticmethod
  def weights(state: Dict):
    """(W, item table) as numpy float64 (for the metrics)."""
    w, table = state["params"]
    return np.asarray(w, np.float64), np.asarray(table, np.float64)


def _timed_step(arm: Arm, state: Dict, features, stream) -> tuple:
  """(seconds, loss, mean w) of `Arm.step` on the stream's batch of step ``state["step"]``
  (wrapping around); the MIDX refresh before it is not timed (``arm.refresh_seconds``)."""
  t = state["step"] % stream.items.shape[0]
  arm.maybe_refresh(state)
  start = time.perf_counter()
  loss, weight = arm.step(state, features, stream.users[t], stream.items[t])
  return time.perf_counter() - start, loss, weight


def train(arm: Arm, state: Dict, stream, steps: int, warmup: int = 3) -> Dict:
  """``steps`` steps from ``state["step"]`` on the stream (`data.Stream`), every one timed."""
  features = jnp.asarray(stream.user_features, jnp.float32)
  out = []
  for t in range(state["step"], state["step"] + steps):
    out.append(_timed_step(arm, state, features, stream))
    if not np.isfinite(out[-1][1]):
      raise FloatingPointError(
        f"row {arm.row.name}, seed {arm.seed}: loss {out[-1][1]} at step {t}"
      )
  times, losses, weights = zip(*out)
  timed = np.asarray(times[warmup:] if len(times) > warmup else times) * 1e3
  tail = max(1, steps // 20)
  return dict(
    steps=steps,
    seconds=float(np.sum(times)),
    first_step_s=float(times[0]),
    step_ms_median=float(np.median(timed)),
    step_ms_min=float(np.min(timed)),
    final_loss=float(np.mean(losses[-tail:])),
    mean_weight=float(np.mean(weights[-tail:])),
    refresh_seconds=float(np.sum(arm.refresh_seconds)),
  )


def time_rows(arms: Dict[str, Arm], init, stream, rounds: int, steps_per_round: int, warmup=2):
  """Interleaved step timing of several arms, each on a fresh state from the initial weights
  ``init``: ``warmup`` steps each, then ``rounds`` rounds in which every arm, in rotated order,
  runs ``steps_per_round`` timed steps. {name: {median_ms, min_ms, steps}}."""
  features = jnp.asarray(stream.user_features, jnp.float32)
  states = {n: arm.initial_state(*init) for n, arm in arms.items()}
  times: Dict[str, list] = {n: [] for n in arms}
  step = lambda n: _timed_step(arms[n], states[n], features, stream)[0]
  for n in arms:
    for _ in range(warmup):
      step(n)
  for r in range(rounds):
    for n in rotated(list(arms), r):
      times[n] += [step(n) for _ in range(steps_per_round)]
  ms = lambda v, f: float(f(v) * 1e3)
  return {
    n: dict(median_ms=ms(v, np.median), min_ms=ms(v, np.min), steps=len(v))
    for n, v in times.items()
  }
