"""Hash-array streaming frequency estimator (Yi et al. 2019, extended) on the Keras 3 path.

The Keras 3 twin of ``tfrs_logq.tf_keras.frequency.HashArrayEstimator``: the same arguments, update
rule and reading (see that module for the derivation). Per hash function h_i, A_i = step of the
last hit, B_i = moving estimate of steps per hit, K_i = hits since the first sighting (capped at
J = ⌊1/α⌋); a bucket hit c times in step t with gap g = t − A_i and k = K_i prior hits gets

    B ← w·B + (1 − w)·g / c, w = Π_{j=k+1}^{k+c} (1 − max(α, 1/j))  (core.frequency)

(the first sighting only sets B = t / c), and

    Q(d) = 1 / (max_i B_i[h_i(d)] · n̄),   n̄ = moving mean of ids per step (rate max(α, 1/t)),

with the pending-gap reading and the floors of the tf-keras estimator. Differences: the hash
functions are the 32-bit ``keras3.frequency.hashing`` ones (not SplitMix64), so two estimators
agree bucket for bucket only where neither has collisions; the step counter is int32.
Duplicate slots of a batch are grouped by a sort (``base.group_sorted``), not ``unique``, so
the update has static shapes.
"""

import numbers
from typing import Any, Dict, Optional

import keras
from keras import ops

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import frequency as frequency_core
from tfrs_logq.keras3._tensors import Tensor
from tfrs_logq.keras3.frequency import base, hashing

__all__ = ["HashArrayEstimator"]


@keras.saving.register_keras_serializable(package="tfrs_logq")
class HashArrayEstimator(base.FrequencyEstimator):
  """Yi et al. hash arrays with multi-hit steps and per-draw output (module docstring)."""

  def __init__(
    self,
    num_buckets: int = frequency_core.DEFAULTS["num_buckets"],
    num_hashes: int = frequency_core.DEFAULTS["num_hashes"],
    alpha: float = frequency_core.DEFAULTS["alpha"],
    warmup: bool = frequency_core.DEFAULTS["warmup"],
    pending_gap: bool = frequency_core.DEFAULTS["pending_gap"],
    seed: int = 0,
    num_items: Optional[int] = None,
    validate_ids: bool = True,
    **kwargs: Any,
  ) -> None:
    super().__init__(num_items=num_items, validate_ids=validate_ids, **kwargs)
    for name, value in (("num_buckets", num_buckets), ("num_hashes", num_hashes)):
      if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    num_buckets, num_hashes = int(num_buckets), int(num_hashes)
    warmup_hits = core_checks.check_hash_array(num_buckets, num_hashes, alpha, 24)
    self.num_buckets = num_buckets
    self.num_hashes = num_hashes
    self.alpha = float(alpha)
    self.warmup = bool(warmup)
    self.pending_gap = bool(pending_gap)
    self.seed = int(seed)
    self.warmup_hits = warmup_hits  # J
    size = num_buckets * num_hashes
    self.last_step = self._state("last_step", (size,), "int32", 0)  # A
    self.gap = self._state("gap", (size,), "float32", 0.0)  # B
    self.hits = self._state("hits", (size,), "int32", 0)  # K (capped at J)
    self.step = self._state("step", (), "int32", 0)  # t
    self.ids_per_step = self._state("ids_per_step", (), "float32", 0.0)  # n̄
    self.built = True

  def _slots(self, keys: Tensor) -> Tensor:
    """Flat slots i·H + h_i(key) of every hash, shape [m] + keys.shape (int32)."""
    return ops.stack(
      [
        hashing.bucket(keys, self.seed + i, self.num_buckets) + i * self.num_buckets
        for i in range(self.num_hashes)
      ]
    )

  def _prior_hits(self, hits: Tensor) -> Tensor:
    """k as float32: gap samples so far (0 before the second sighting; J after it without
    warm-up)."""
    return frequency_core.prior_hits(ops, ops.cast(hits, "float32"), self.warmup, self.warmup_hits)

  def _update_keys(self, keys: Tensor, valid: Optional[Tensor] = None) -> None:
    n = base.num_counted(keys, valid)
    slots = self._slots(keys)
    masked = valid is not None
    if valid is not None:  # slots of entries that do not count: the sentinel (base.masked_index)
      slots = base.masked_index(slots, valid[None, :], self.num_buckets * self.num_hashes)
    nonempty = n > 0
    t_new = self.step + ops.cast(nonempty, "int32")
    slots, counts = base.group_sorted(slots)
    last = base.take_state(self.last_step, slots)
    old_gap = base.take_state(self.gap, slots)
    k = self._prior_hits(base.take_state(self.hits, slots))
    c = ops.cast(counts, "float32")
    g = ops.cast(t_new - last, "float32")
    new_gap = frequency_core.updated_gap(ops, old_gap, k, c, g, self.alpha, self.warmup_hits)
    new_hits = frequency_core.updated_hits(
      ops, ops.cast(k, "int32"), counts, last, self.warmup_hits
    )
    self.gap.assign(base.scatter_state(self.gap, slots, new_gap, masked))
    self.hits.assign(base.scatter_state(self.hits, slots, ops.cast(new_hits, "int32"), masked))
    new_last = ops.cast(ops.full_like(slots, 1) * t_new, "int32")
    self.last_step.assign(base.scatter_state(self.last_step, slots, new_last, masked))
    n_bar = frequency_core.updated_ids_per_step(ops, self.ids_per_step, n, t_new, self.alpha)
    self.ids_per_step.assign(ops.where(nonempty, n_bar, self.ids_per_step.value))
    self.step.assign(t_new)

  def steps_per_hit(self, ids: Tensor) -> Tensor:
    """B̂(d) = max_i B_i as read (floors and pending gap applied), float32, shape of ids."""
    return self._steps_per_hit_keys(self._keys(ids, flatten=False))

  def _steps_per_hit_keys(self, keys: Tensor) -> Tensor:
    slots = self._slots(keys)
    k = self._prior_hits(ops.take(self.hits, slots)) if self.pending_gap else None
    return frequency_core.read_steps_per_hit(
      ops,
      ops.take(self.gap, slots),
      ops.take(self.last_step, slots),
      ops.cast(self.step, "float32"),
      k,
      self.alpha,
      self.warmup_hits,
      self.pending_gap,
    )

  def _log_q_keys(self, keys: Tensor) -> Tensor:
    return frequency_core.hash_array_log_q(ops, self._steps_per_hit_keys(keys), self.ids_per_step)

  def get_config(self) -> Dict[str, Any]:
    return {
      **super().get_config(),
      "num_buckets": self.num_buckets,
      "num_hashes": self.num_hashes,
      "alpha": self.alpha,
      "warmup": self.warmup,
      "pending_gap": self.pending_gap,
      "seed": self.seed,
    }
