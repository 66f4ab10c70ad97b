"""Count-min sketch estimate of Q(d) (Cormode & Muthukrishnan 2005), optionally decayed.

Size from (ε, δ): width w = ⌈e/ε⌉, depth r = ⌈ln(1/δ)⌉ (or give width/depth directly). Row j
hashes ids with h_j (``hashing.bucket`` with seed + j). For a step with c_x occurrences of id x:

* standard update: C[j, h_j(x)] += c_x for every row (each cell adds the total count of all ids
  of the step that hash to it);
* conservative update (``conservative=True``): with est(x) = min_j C[j, h_j(x)] read before the
  step, every cell becomes max(C[j, b], max_{x: h_j(x) = b} est(x) + c_x). This is the batched
  form of Estan & Varghese's rule: independent of the order of the ids (deterministic) and it
  keeps est(x) ≥ true count of x, as the standard update does.

Estimate: est(x) = min_j C[j, h_j(x)], and Q(d) = est(d) / total, total = Σ c (all ids counted).
Guarantee (no decay): true ≤ est ≤ true + ε·total with probability ≥ 1 − δ per id, so
|Q̂(d) − Q(d)| ≤ ε.

Decay (``half_life`` = h steps): every count is weighted γ^(age in steps), γ = 2^(−1/h), in the
cells and in the total alike, so Q is the decayed frequency. It is applied lazily: each cell keeps
the step of its last write and is multiplied by γ^(t − last) when read or written; the total is
decayed every step. No whole-table pass, so the cost per step is independent of the width.

Floor: est is floored at ``min_count`` (default 1, "as if counted once in the current step") and
total at min_count, so log Q is finite and ≤ 0; before any update Q = 1 for every id.
An empty batch is a no-op (no decay step either). Without decay the standard update is a
scatter-add (C += c_x) and N += n an assign-add: concurrent updates of shared state
(ParameterServerStrategy workers) all count, in any order. State is float32: counts are exact
up to 2^24 per cell; beyond that each addition rounds to float32 (relative 2^-24).

The shape, argument checks and formulas are ``tfrs_logq.core.count_min``'s, shared with the
Keras 3 twin ``tfrs_logq.keras3.frequency.CountMinSketch``; this module adds the state, the
hashing (SplitMix64, int or string ids), the grouping of a step's cells and ``tf.distribute``.
"""

from typing import Any, Dict, Optional

from tfrs_logq.tf_keras import _static_shapes, sharded
from tfrs_logq.tf_keras.frequency import base, hashing

import tensorflow as tf

from tfrs_logq.core import count_min as count_min_core
from tfrs_logq.core import frequency as frequency_core
from tfrs_logq.core.ops import tf_ops

__all__ = ["CountMinSketch", "sketch_shape"]

sketch_shape = count_min_core.sketch_shape
_OPS = tf_ops()


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class CountMinSketch(base.FrequencyEstimator):
  """Count-min sketch: Q(d) = min_j C[j, h_j(d)] / N, optional conservative update and decay.

  depth r = ⌈ln 1/δ⌉ rows of width w = ⌈e/ε⌉ cells; a step adds each id's count c_x to
  C[j, h_j(x)] in every row (``conservative``: raises each cell only to max(C, est(x) + c_x)).
  Without decay, true ≤ est ≤ true + ε·N with probability ≥ 1 − δ per id, so |Q̂ − Q| ≤ ε.
  ``half_life`` h weights a count of age a steps by 2^(−a/h) (cells and N alike). Counts are
  floored at ``min_count``. Int or string ids. Details in the module docstring of
  ``tfrs_logq.tf_keras.frequency.count_min``.

  Args:
    epsilon: ε, the additive error bound on Q (default 1e-4 when ``width`` is not given).
    delta: δ, the failure probability per id (default 0.01 when ``depth`` is not given).
    width: w cells per row instead of ⌈e/ε⌉ (int or numpy integer).
    depth: r rows instead of ⌈ln 1/δ⌉.
    conservative: conservative update (Estan & Varghese), batched and order-independent.
    half_life: optional decay half-life in steps (> 0).
    min_count: floor of a cell estimate and of N (default 1).
    seed: seed of the row hashes (row j uses seed + j).
    num_items: optional catalog size (ids are then checked to be < num_items).
    validate_ids: check ids >= 0 (and < num_items) at run time.
  """

  def __init__(
    self,
    epsilon: Optional[float] = None,
    delta: Optional[float] = None,
    *,
    width: Optional[int] = None,
    depth: Optional[int] = None,
    conservative: bool = frequency_core.DEFAULTS["conservative"],
    half_life: Optional[float] = frequency_core.DEFAULTS["half_life"],
    min_count: float = frequency_core.DEFAULTS["min_count"],
    seed: int = 0,
    num_items: Optional[int] = None,
    validate_ids: bool = True,
    **kwargs: Any,
  ) -> None:
    super().__init__(num_items=num_items, validate_ids=validate_ids, **kwargs)
    width, depth, half_life, min_count, seed = count_min_core.check_sketch(
      epsilon, delta, width, depth, half_life, min_count, seed
    )
    self.width, self.depth = width, depth
    self.epsilon, self.delta = count_min_core.guarantees(width, depth)
    self.conservative = bool(conservative)
    self.half_life = half_life
    self.min_count = min_count
    self.seed = seed
    size = self.width * self.depth
    self.table = self._state("table", [size], tf.float32, 0.0)
    self.last_write = (
      self._state("last_write", [size], tf.int32, 0) if self.half_life is not None else None
    )
    self.total = self._state("total", [], tf.float32, 0.0)
    self.step = self._state("step", [], tf.int64, 0)

  @property
  def decay(self) -> float:
    """γ = 2^(−1/half_life) per step (1 without decay)."""
    return count_min_core.decay(self.half_life)

  def _cells(self, keys: tf.Tensor) -> tf.Tensor:
    """Flat cells j·width + h_j(key), shape [depth] + keys.shape."""
    return count_min_core.cells(_OPS, hashing.bucket, keys, self.seed, self.width, self.depth)

  def _read(self, cells: tf.Tensor, t: tf.Tensor) -> tf.Tensor:
    """Cell values decayed to step t."""
    values = sharded.gather_rows(self.table, cells)
    if self.last_write is None:
      return values
    last = sharded.gather_rows(self.last_write, cells)
    age = tf.cast(t - tf.cast(last, tf.int64), tf.float32)
    return count_min_core.decayed(_OPS, values, age, self.decay)

  def _write(
    self, cells: tf.Tensor, values: tf.Tensor, t: tf.Tensor, hit: Optional[tf.Tensor] = None
  ) -> None:
    """Writes cell values at step t. Where ``hit`` is False (the static path's cells hit only by
    padding entries) the cell is written back unchanged, value and last write alike."""
    new_last = tf.fill(tf.shape(cells), tf.cast(t, tf.int32))
    if hit is not None:
      values = tf.where(hit, values, sharded.gather_rows(self.table, cells))
      if self.last_write is not None:
        new_last = tf.where(hit, new_last, sharded.gather_rows(self.last_write, cells))
    self.table.scatter_update(tf.IndexedSlices(values, cells))
    if self.last_write is not None:
      self.last_write.scatter_update(tf.IndexedSlices(new_last, cells))

  def _update_keys(self, keys: tf.Tensor, valid: Optional[tf.Tensor] = None) -> None:
    n = base._num_counted(keys, valid)
    nonempty = n > 0
    t_new = self.step + tf.cast(nonempty, tf.int64)
    hit = None
    if self.conservative and not base._static(valid):
      ids, counts = base._group(keys)
      id_cells = self._cells(ids)  # [depth, u]
      estimate = count_min_core.estimate(_OPS, self._read(id_cells, t_new))
      wanted = tf.reshape(
        estimate + tf.cast(counts, tf.float32)[None, :] + tf.zeros_like(id_cells, tf.float32), [-1]
      )
      cells, segment = tf.unique(tf.reshape(id_cells, [-1]))
      wanted = tf.math.unsorted_segment_max(wanted, segment, tf.size(cells))
      new_values = count_min_core.conservative_cells(_OPS, self._read(cells, t_new), wanted)
    elif self.conservative:
      # Static shapes: every entry (copies of an id carry the same count c_x and estimate), its
      # depth cells sorted; each cell takes the max over its entries of est(x) + c_x.
      ids, counts = base._group(keys, valid)  # [n] sorted, c_x per entry
      id_cells = self._cells(ids)  # [depth, n]
      estimate = count_min_core.estimate(_OPS, self._read(id_cells, t_new))
      wanted = estimate + tf.cast(counts, tf.float32)
      runs = _static_shapes.sorted_runs(tf.reshape(id_cells, [-1]))
      per_cell = lambda x: tf.gather(
        tf.reshape(tf.broadcast_to(x, tf.shape(id_cells)), [-1]), runs.order
      )
      counted = per_cell(counts) > 0
      wanted = tf.where(counted, per_cell(wanted), tf.zeros_like(per_cell(wanted)))
      wanted = _static_shapes.run_total(runs, wanted, "max")  # est + c >= 1 where counted
      hit = _static_shapes.run_total(runs, tf.cast(counted, tf.int32), "max") > 0
      cells = runs.keys
      new_values = count_min_core.conservative_cells(_OPS, self._read(cells, t_new), wanted)
    elif self.last_write is None and not base._static(valid):
      # Standard update without decay: C += counts is an (atomic) scatter-add, N += n and
      # t += 1 are assign-adds, so concurrent updates of shared state (asynchronous workers of
      # ParameterServerStrategy) all count, in any order. Same values as the read-and-write form
      # (one float32 addition per distinct cell).
      cells, counts = base._group_slots(keys, self._cells)
      self.table.scatter_add(tf.IndexedSlices(tf.cast(counts, tf.float32), cells))
      self.total.assign_add(tf.cast(n, tf.float32))
      self.step.assign_add(tf.cast(nonempty, tf.int64))
      return
    else:
      cells, counts = base._group_slots(keys, self._cells, valid)
      new_values = count_min_core.standard_cells(_OPS, self._read(cells, t_new), counts)
      hit = counts > 0 if base._static(valid) else None
    self._write(cells, new_values, t_new, hit)
    total = count_min_core.updated_total(self.total, tf.cast(n, tf.float32), self.decay)
    self.total.assign(tf.where(nonempty, total, self.total))
    self.step.assign(t_new)

  def estimate(self, ids: tf.Tensor) -> tf.Tensor:
    """est(d) = min_j C[j, h_j(d)] (decayed to the current step), float32, unfloored."""
    return count_min_core.estimate(
      _OPS, self._read(self._cells(self._keys(ids, flatten=False)), self.step)
    )

  def _log_q_keys(self, keys: tf.Tensor) -> tf.Tensor:
    est = count_min_core.estimate(_OPS, self._read(self._cells(keys), self.step))
    return count_min_core.log_q(_OPS, est, self.total, self.min_count)

  def get_config(self) -> Dict[str, Any]:
    config = super().get_config()
    config.update(
      width=self.width,
      depth=self.depth,
      conservative=self.conservative,
      half_life=self.half_life,
      min_count=self.min_count,
      seed=self.seed,
    )
    return config
