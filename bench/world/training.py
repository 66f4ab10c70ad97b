r"""One arm of bench/world_scale.py: a jitted JAX step composed from the Keras 3 library (the
model, the step of each source and the update rule: bench/README.md, section `world_scale.py`).

The rows of a step are found in two passes over the samplers with the same random state: pass 1
(no gradient) records the ids every sampler embeds (the candidate embedder is a recorder), the
step takes their distinct ids (``jnp.unique`` with a static size); pass 2 differentiates the loss
with respect to those rows only (the embedder gathers from them). The state, (W, table), their
optimizer slots (m, v, k) and every Keras variable of the samplers and the estimator, goes in and
out of the step through ``keras.StatelessScope``: compiled once, never stale; the table and its
moments are donated.
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional, Sequence

import jax
import jax.numpy as jnp
import keras
import numpy as np
from keras import ops

import tfrs_logq.keras3 as tlk
from bench.world.rows import RowSpec, Settings
from tfrs_logq.core import lazy_adam as lazy_adam_core
from tfrs_logq.keras3 import negatives as neg

__all__ = ["Arm", "machine_label"]

BETA_1, BETA_2, EPSILON = 0.9, 0.999, 1e-7  # keras.optimizers.Adam's


def machine_label() -> str:
  """'<accelerator or CPU model> (<n> cores), jax <backend>' for the absolute times."""
  import os

  device = jax.devices()[0]
  if device.platform != "cpu":
    name = getattr(device, "device_kind", device.platform)
  else:
    name = "CPU"
    try:
      with open("/proc/cpuinfo") as f:
        for line in f:
          if line.startswith("model name"):
            name = line.split(":", 1)[1].strip()
            break
    except OSError:
      pass
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  return f"{name} ({cores} cores), jax {jax.__version__} {device.platform}"


class Arm:
  """The samplers, the jitted step and the state of one row x seed (bench/README.md)."""

  def __init__(self, row: RowSpec, settings: Settings, seed: int, counts: np.ndarray):
    s = self.settings = settings
    self.row, self.seed = row, seed
    self.num_items, self.batch = s.num_items, s.batch_size
    k = s.k
    self.estimator = tlk.frequency.ExactCounts(
      s.num_items, counts=np.asarray(counts, np.int64), accumulate=False, validate_ids=False
    )
    self._embed_fn = None  # the candidate embedder of the current pass (module docstring)
    self.in_batch_k = k if k < s.batch_size else None
    self.in_batch_seed = None
    self.mixed = self.midx = self.memory = None
    layers: List = [self.estimator]
    if row.source in ("in_batch", "xbatch") and self.in_batch_k is not None:
      self.in_batch_seed = keras.random.SeedGenerator(seed * 7919 + 1)
    if row.source == "mixed":
      self.mixed = neg.MixedNegatives(
        neg.InBatchNegatives(None, num_negatives=k // 2, cross_replica=False),
        neg.UniformNegatives(None, k - k // 2, id_range=(0, s.num_items), seed=seed * 7919 + 2),
        convention=row.convention,
      )
      layers.append(self.mixed)
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
      layers.append(self.midx)
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
      layers.append(self.memory)
    variables = [v for layer in layers for v in layer.variables]
    if self.in_batch_seed is not None:
      variables.append(self.in_batch_seed.state)
    self.variables = list({id(v): v for v in variables}.values())
    self._initial_values = [np.array(v.value) for v in self.variables]
    self.schedule = keras.optimizers.schedules.CosineDecay(s.learning_rate, s.steps, alpha=0.01)
    self._step = jax.jit(self._step_fn, donate_argnums=(0, 1))
    self.refresh_seconds: List[float] = []

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
    remembered = self.memory.score(q, ids, pos_emb)
    return neg.join_blocks(
      [self._in_batch(q, ids, pos_emb), remembered],
      rebase_q_prime=self.row.correction == "corrected",
    )

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

  def _adam(self, m, v, k, g, lr, rows=None):
    return lazy_adam_core.update_rows(
      ops, m, v, k, g, lr, BETA_1, BETA_2, EPSILON, adaptive_epsilon=False, rows=rows
    )

  def _step_fn(self, params, moments, values, features, users, items, t):
    w, table = params
    (m_w, v_w, k_w), (m_t, v_t, k_t) = moments
    lr = ops.cast(self.schedule(t), "float32")
    ids = items.astype(jnp.int32)
    if self.row.source == "full":

      def full(w, table):
        out = tlk.full_softmax_loss(self._queries(w, features, users), ids, table)
        return ops.mean(out.loss), ([None] * len(values), ops.mean(out.weight))

      (loss, (new, weight)), (g_w, g_t) = jax.value_and_grad(full, (0, 1), has_aux=True)(w, table)
      m_t, v_t, k_t, delta = self._adam(m_t, v_t, k_t, g_t, lr)
      table = table - delta
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
      local_table = jnp.take(table, rows, axis=0, mode="fill", fill_value=0.0)

      def sampled(w, local):
        self._embed_fn = lambda i: jnp.take(local, jnp.searchsorted(rows, i), axis=0)

        def body():
          pos_emb = self._embed_fn(ids)
          loss, weight = self._loss(self._queries(w, features, users), ids, pos_emb)
          if self.memory is not None:
            self.memory.update(ids, None)
          return loss, weight

        (loss, weight), new = self._with_state(values, body)
        return loss, (new, weight)

      grad = jax.value_and_grad(sampled, (0, 1), has_aux=True)
      (loss, (new, weight)), (g_w, g_local) = grad(w, local_table)
      self._embed_fn = None
      real = (rows < self.num_items) & lazy_adam_core.nonzero_rows(ops, g_local)
      take = lambda a: jnp.take(a, rows, axis=0, mode="fill", fill_value=0)
      m_l, v_l, k_l, delta = self._adam(take(m_t), take(v_t), take(k_t), g_local, lr, real)
      put = lambda a, b: a.at[rows].set(b, mode="drop")
      table = put(table, local_table - delta)
      m_t, v_t, k_t = put(m_t, m_l), put(v_t, v_l), put(k_t, k_l)
    m_w, v_w, k_w, delta_w = self._adam(m_w, v_w, k_w, g_w, lr)
    w = w - delta_w
    return (w, table), ((m_w, v_w, k_w), (m_t, v_t, k_t)), new, loss, weight

  # ----------------------------------------------------------------------------- the state
  def initial_state(self, user_weights, item_table) -> Dict:
    """A fresh state (device arrays) from the initial weights, the samplers' variables at their
    initial values (an arm whose MIDX index was refreshed before starts over: same draws)."""
    w, table = jnp.asarray(user_weights), jnp.asarray(item_table)
    zeros = lambda a: (jnp.zeros_like(a), jnp.zeros_like(a), jnp.zeros(a.shape[:1], a.dtype))
    for v, value in zip(self.variables, self._initial_values):
      v.assign(value)
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

  def step(self, state: Dict, features, users, items, sync: bool = True):
    """One training step on ``state`` (updated in place; call `maybe_refresh` before it);
    (loss, mean w) when ``sync``."""
    t = state["step"]
    params, moments, changed, loss, weight = self._step(
      state["params"],
      state["moments"],
      state["values"],
      features,
      jnp.asarray(users),
      jnp.asarray(items),
      jnp.asarray(t, jnp.int32),
    )
    values = [o if n is None else n for n, o in zip(changed, state["values"])]
    state.update(params=params, moments=moments, values=values, step=t + 1)
    if sync:
      return float(loss), float(weight)
    return loss, weight

  @staticmethod
  def weights(state: Dict):
    """(W, item table) as numpy float64 (for the metrics)."""
    w, table = state["params"]
    return np.asarray(w, np.float64), np.asarray(table, np.float64)


def train(
  arm: Arm,
  state: Dict,
  features,
  stream_users: np.ndarray,
  stream_items: np.ndarray,
  steps: int,
  warmup: int = 3,
) -> Dict:
  """``steps`` steps from ``state["step"]``; every step timed (after syncing its loss)."""
  times, losses, weights = [], [], []
  features = jnp.asarray(features, jnp.float32)
  for _ in range(steps):
    t = state["step"]
    arm.maybe_refresh(state)  # not timed: refresh_seconds
    start = time.perf_counter()
    loss, weight = arm.step(state, features, stream_users[t], stream_items[t])
    times.append(time.perf_counter() - start)
    losses.append(loss)
    weights.append(weight)
    if not np.isfinite(loss):
      raise FloatingPointError(f"row {arm.row.name}, seed {arm.seed}: loss {loss} at step {t}")
  timed = np.asarray(times[warmup:] if len(times) > warmup else times) * 1e3
  return dict(
    steps=steps,
    seconds=float(np.sum(times)),
    first_step_s=float(times[0]) if times else None,
    step_ms_median=float(np.median(timed)) if timed.size else None,
    step_ms_min=float(np.min(timed)) if timed.size else None,
    final_loss=float(np.mean(losses[-max(1, steps // 20) :])),
    mean_weight=float(np.mean(weights[-max(1, steps // 20) :])),
    refresh_seconds=float(np.sum(arm.refresh_seconds)),
  )


def time_rows(
  arms: Dict[str, Arm],
  states: Dict[str, Dict],
  features,
  stream_users: np.ndarray,
  stream_items: np.ndarray,
  rounds: int,
  steps_per_round: int,
  warmup: int = 2,
  rotated=None,
) -> Dict[str, Dict]:
  """Interleaved step timing of several arms (each on its own state): ``warmup`` steps each,
  then ``rounds`` rounds in which every arm, in rotated order, runs ``steps_per_round`` timed
  steps. {name: {median_ms, min_ms, steps}}."""
  features = jnp.asarray(features, jnp.float32)
  names = list(arms)
  times: Dict[str, List[float]] = {n: [] for n in names}

  def run(name, timed: bool):
    state = states[name]
    t = state["step"] % stream_items.shape[0]
    arms[name].maybe_refresh(state)
    start = time.perf_counter()
    arms[name].step(state, features, stream_users[t], stream_items[t])
    if timed:
      times[name].append(time.perf_counter() - start)

  for name in names:
    for _ in range(warmup):
      run(name, False)
  for r in range(rounds):
    for name in rotated(names, r) if rotated else names:
      for _ in range(steps_per_round):
        run(name, True)
  return {
    n: dict(
      median_ms=float(np.median(v) * 1e3) if v else None,
      min_ms=float(np.min(v) * 1e3) if v else None,
      steps=len(v),
    )
    for n, v in times.items()
  }


def timing_rows(rows: Sequence[RowSpec], reference: Optional[RowSpec]) -> List[RowSpec]:
  """The rows timed in an invocation: the reference (mixed) first, then the others once."""
  out = [reference] if reference is not None else []
  return out + [r for r in rows if reference is None or r.name != reference.name]
