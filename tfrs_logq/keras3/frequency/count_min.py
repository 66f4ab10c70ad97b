r"""Count-min sketch estimate of Q(d) (Cormode & Muthukrishnan 2005) on the Keras 3 path.

Row j of a depth x width table C hashes ids with h_j; a step holds c_x occurrences of id x, n
ids in all; gamma = 2^(-1/half_life) (1 without decay), applied lazily from each cell's last
write; m = ``min_count``::

    shape:         depth = ceil(ln(1/delta)),  width = ceil(e/epsilon)
    standard:      C[j, b] <- C[j, b] gamma^(t - last) + sum_{x: h_j(x) = b} c_x
    conservative:  C[j, b] <- max(C[j, b] gamma^(t - last), max_{x: h_j(x) = b} est(x) + c_x)
    est(x)       = min_j C[j, h_j(x)] gamma^(t - last),   N <- gamma N + n
    Q(d)         = min(max(est(d), m) / max(N, m), 1)

Without decay, true <= est <= true + epsilon N with probability >= 1 - delta per id.

The Keras 3 twin of ``tfrs_logq.tf_keras.frequency.CountMinSketch``: the same arguments, checks,
update rule and reading (shape, checks and formulas from ``tfrs_logq.core.count_min``). Differences:
the row hashes are the 32-bit ``keras3.frequency.hashing`` ones (not SplitMix64; int ids only), so
two sketches agree cell for cell only where neither has collisions; the step counter is int32. A
step's cells are grouped by a sort (``base.group_sorted``), not ``unique``, so the update has static
shapes (jit-safe) and writes the same value to every copy of a cell. State (float32 table, int32
last writes with decay, float32 N, int32 step) lives in non-trainable variables. An empty batch
(static size 0) is a no-op.
"""

from typing import Any, Dict, Optional

import keras
from keras import ops

from tfrs_logq.core import count_min as count_min_core
from tfrs_logq.core import frequency as frequency_core
from tfrs_logq.keras3._tensors import Tensor
from tfrs_logq.keras3.frequency import base, hashing

__all__ = ["CountMinSketch", "sketch_shape"]

sketch_shape = count_min_core.sketch_shape


@keras.saving.register_keras_serializable(package="tfrs_logq")
class CountMinSketch(base.FrequencyEstimator):
  """Count-min sketch: Q(d) = min_j C[j, h_j(d)] / N, optional conservative update and decay.

  Args (those of ``tfrs_logq.tf_keras.frequency.CountMinSketch``):
    epsilon: the additive error bound on Q (default 1e-4 when ``width`` is not given).
    delta: the failure probability per id (default 0.01 when ``depth`` is not given).
    width: cells per row instead of ceil(e / epsilon) (int or numpy integer).
    depth: rows instead of ceil(ln 1 / delta).
    conservative: conservative update (Estan & Varghese), batched and order-independent.
    half_life: optional decay half-life in steps (> 0).
    min_count: floor of a cell estimate and of N (default 1).
    seed: seed of the row hashes (row j uses seed + j).
    num_items: optional catalog size (ids are then checked to be < num_items).
    validate_ids: check concrete ids >= 0 (and < num_items).
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
    size = width * depth
    self.table = self._state("table", (size,), "float32", 0.0)
    self.last_write = (
      self._state("last_write", (size,), "int32", 0) if half_life is not None else None
    )
    self.total = self._state("total", (), "float32", 0.0)
    self.step = self._state("step", (), "int32", 0)
    self.built = True

  @property
  def decay(self) -> float:
    """gamma = 2^(-1/half_life) per step (1 without decay)."""
    return count_min_core.decay(self.half_life)

  def _cells(self, keys: Tensor) -> Tensor:
    """Flat cells j * width + h_j(key), shape [depth] + keys.shape (int32)."""
    return count_min_core.cells(ops, hashing.bucket, keys, self.seed, self.width, self.depth)

  def _read(self, cells: Tensor, t: Tensor) -> Tensor:
    """Cell values decayed to step t (the sentinel cell reads the last one: base.take_state)."""
    values = base.take_state(self.table, cells)
    if self.last_write is None:
      return values
    age = ops.cast(t - base.take_state(self.last_write, cells), "float32")
    return count_min_core.decayed(ops, values, age, self.decay)

  def _write(self, cells: Tensor, values: Tensor, t: Tensor, masked: bool) -> None:
    """Writes ``values`` at 1-D ``cells`` (with ``masked``, the sentinel cell's are dropped)."""
    self.table.assign(base.scatter_state(self.table, cells, values, masked))
    if self.last_write is not None:
      written = ops.cast(ops.full_like(cells, 1) * t, "int32")
      self.last_write.assign(base.scatter_state(self.last_write, cells, written, masked))

  def _update_keys(self, keys: Tensor, valid: Optional[Tensor] = None) -> None:
    n = base.num_counted(keys, valid)
    masked = valid is not None
    nonempty = n > 0
    t_new = self.step + ops.cast(nonempty, "int32")
    size = self.width * self.depth
    if self.conservative:
      # c_x on every copy of x; entries that do not count become id -1 (ids are >= 0), sorted
      # first, and their cells the sentinel (base.masked_index).
      ids, counts = base.group_sorted(ops.where(valid, keys, -1) if masked else keys)
      id_cells = self._cells(ids)  # [depth, n]
      if masked:
        id_cells = base.masked_index(id_cells, ops.expand_dims(ids >= 0, 0), size)
      estimate = count_min_core.estimate(ops, self._read(id_cells, t_new))
      wanted = ops.reshape(
        ops.broadcast_to(estimate + ops.cast(counts, "float32"), ops.shape(id_cells)), (-1,)
      )
      flat = ops.reshape(id_cells, (-1,))
      order = ops.argsort(flat)
      cells, wanted = ops.take(flat, order), ops.take(wanted, order)
      first = ops.concatenate([ops.ones((1,), "bool"), ops.not_equal(cells[1:], cells[:-1])])
      run = ops.cumsum(ops.cast(first, "int32")) - 1
      per_cell = ops.segment_max(wanted, run, num_segments=cells.shape[0])
      new_values = count_min_core.conservative_cells(
        ops, self._read(cells, t_new), ops.take(per_cell, run)
      )
    else:
      cells = self._cells(keys)
      if masked:
        cells = base.masked_index(cells, ops.expand_dims(valid, 0), size)
      cells, counts = base.group_sorted(cells)  # a cell's hits this step
      new_values = count_min_core.standard_cells(ops, self._read(cells, t_new), counts)
    self._write(cells, new_values, t_new, masked)
    total = count_min_core.updated_total(self.total, n, self.decay)
    self.total.assign(ops.where(nonempty, total, self.total.value))
    self.step.assign(t_new)

  def estimate(self, ids: Tensor) -> Tensor:
    """est(d) = min_j C[j, h_j(d)] (decayed to the current step), float32, unfloored."""
    return count_min_core.estimate(
      ops, self._read(self._cells(self._keys(ids, flatten=False)), self.step)
    )

  def _log_q_keys(self, keys: Tensor) -> Tensor:
    est = count_min_core.estimate(ops, self._read(self._cells(keys), self.step))
    return count_min_core.log_q(ops, est, self.total, self.min_count)

  def get_config(self) -> Dict[str, Any]:
    return {
      **super().get_config(),
      "width": self.width,
      "depth": self.depth,
      "conservative": self.conservative,
      "half_life": self.half_life,
      "min_count": self.min_count,
      "seed": self.seed,
    }
