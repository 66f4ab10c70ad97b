"""Hash-array streaming frequency estimator (Yi et al. 2019, extended) on the Keras 3 path.

The Keras 3 twin of ``tfrs_logq.frequency.HashArrayEstimator``: the same arguments, update
rule and reading (see that module for the derivation). Per hash function h_i, A_i = step of the
last hit, B_i = moving estimate of steps per hit, K_i = hits since the first sighting (capped at
J = ⌊1/α⌋); a bucket hit c times in step t with gap g = t − A_i and k = K_i prior hits gets

    B ← w·B + (1 − w)·g / c, w = Π_{j=k+1}^{k+c} (1 − max(α, 1/j))  (_formulas.gap_weight)

(the first sighting only sets B = t / c), and

    Q(d) = 1 / (max_i B_i[h_i(d)] · n̄),   n̄ = moving mean of ids per step (rate max(α, 1/t)),

with the pending-gap reading and the floors of the tf-keras estimator. Differences: the hash
functions are the 32-bit ``keras3.frequency.hashing`` ones (not SplitMix64), so two estimators
agree bucket for bucket only where neither has collisions; the step counter is int32.
Duplicate slots of a batch are grouped by a sort (``base.group_sorted``), not ``unique``, so
the update has static shapes.
"""

import numbers

import keras
from keras import ops

from tfrs_logq import _formulas
from tfrs_logq.keras3.frequency import base
from tfrs_logq.keras3.frequency import hashing

__all__ = ["HashArrayEstimator"]


@keras.saving.register_keras_serializable(package="tfrs_logq")
class HashArrayEstimator(base.FrequencyEstimator):
  """Yi et al. hash arrays with multi-hit steps and per-draw output (module docstring)."""

  def __init__(self, num_buckets: int = 2**22, num_hashes: int = 2, alpha: float = 0.001,
               warmup: bool = True, pending_gap: bool = True, seed: int = 0,
               num_items=None, validate_ids: bool = True, **kwargs):
    super().__init__(num_items=num_items, validate_ids=validate_ids, **kwargs)
    for name, value in (("num_buckets", num_buckets), ("num_hashes", num_hashes)):
      if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    num_buckets, num_hashes = int(num_buckets), int(num_hashes)
    warmup_hits = _formulas.check_hash_array(num_buckets, num_hashes, alpha, 24)
    self.num_buckets = num_buckets
    self.num_hashes = num_hashes
    self.alpha = float(alpha)
    self.warmup = bool(warmup)
    self.pending_gap = bool(pending_gap)
    self.seed = int(seed)
    self.warmup_hits = warmup_hits   # J
    size = num_buckets * num_hashes
    self.last_step = self._state("last_step", (size,), "int32", 0)     # A
    self.gap = self._state("gap", (size,), "float32", 0.0)             # B
    self.hits = self._state("hits", (size,), "int32", 0)               # K (capped at J)
    self.step = self._state("step", (), "int32", 0)                    # t
    self.ids_per_step = self._state("ids_per_step", (), "float32", 0.0)  # n̄
    self.built = True

  def _slots(self, keys):
    """Flat slots i·H + h_i(key) of every hash, shape [m] + keys.shape (int32)."""
    return ops.stack([hashing.bucket(keys, self.seed + i, self.num_buckets)
                      + i * self.num_buckets for i in range(self.num_hashes)])

  def _prior_hits(self, hits):
    """k as float32: gap samples so far (0 before the second sighting; J after it without
    warm-up)."""
    hits = ops.cast(hits, "float32")
    if self.warmup:
      return hits
    return ops.where(hits > 0, float(self.warmup_hits), 0.0)

  def _update_keys(self, keys):
    n = keys.shape[0]
    t_new = self.step + 1
    slots, counts = base.group_sorted(self._slots(keys))
    last = ops.take(self.last_step, slots)
    old_gap = ops.take(self.gap, slots)
    k = self._prior_hits(ops.take(self.hits, slots))
    c = ops.cast(counts, "float32")
    g = ops.cast(t_new - last, "float32")
    w = _formulas.gap_weight(ops, k, c, self.alpha, self.warmup_hits)
    new_gap = w * old_gap + (1.0 - w) * (g / c)
    new_hits = ops.minimum(ops.cast(k, "int32") + counts, self.warmup_hits)
    new_hits = ops.where(ops.equal(last, 0), 0, new_hits)  # first sighting: no gap sample yet
    index = ops.expand_dims(slots, 1)
    self.gap.assign(ops.scatter_update(self.gap, index, new_gap))
    self.hits.assign(ops.scatter_update(self.hits, index, ops.cast(new_hits, "int32")))
    self.last_step.assign(ops.scatter_update(
        self.last_step, index, ops.cast(ops.full_like(slots, 1) * t_new, "int32")))
    rate = ops.maximum(self.alpha, 1.0 / ops.cast(t_new, "float32"))
    self.ids_per_step.assign((1.0 - rate) * self.ids_per_step + rate * float(n))
    self.step.assign(t_new)

  def steps_per_hit(self, ids):
    """B̂(d) = max_i B_i as read (floors and pending gap applied), float32, shape of ids."""
    return self._steps_per_hit_keys(self._keys(ids, flatten=False))

  def _steps_per_hit_keys(self, keys):
    slots = self._slots(keys)
    last = ops.take(self.last_step, slots)
    gap = ops.take(self.gap, slots)
    t = ops.cast(self.step, "float32")
    if self.pending_gap:
      k = self._prior_hits(ops.take(self.hits, slots))
      w1 = _formulas.gap_weight(ops, k, ops.ones_like(k), self.alpha, self.warmup_hits)
      g = t - ops.cast(last, "float32")
      gap = ops.maximum(gap, w1 * gap + (1.0 - w1) * g)
    gap = ops.where(ops.equal(last, 0), ops.maximum(t, 1.0), gap)
    return ops.max(gap, axis=0)

  def _log_q_keys(self, keys):
    b_hat = self._steps_per_hit_keys(keys)
    n_bar = ops.maximum(self.ids_per_step, 1.0)
    return ops.minimum(-ops.log(b_hat) - ops.log(n_bar), 0.0)

  def get_config(self):
    return {**super().get_config(), "num_buckets": self.num_buckets,
            "num_hashes": self.num_hashes, "alpha": self.alpha, "warmup": self.warmup,
            "pending_gap": self.pending_gap, "seed": self.seed}
