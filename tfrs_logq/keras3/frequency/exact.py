"""Exact item counts on the Keras 3 path (the academic setup of the paper, §3.3).

    Q(d)  = #d / N,                 N = Σ_d #d
    Q'(d) = #d / (N − #p)  =  Q(d) / (1 − Q(p))

The Keras 3 twin of ``tfrs_logq.tf_keras.frequency.ExactCounts``, same arguments and floors: an item
with #d < ``min_count`` counts as ``min_count``; before anything is counted (N = 0) Q is uniform,
1 / num_items; N − #p is floored at ``min_count``. State: ``counts`` int32 [num_items] and
``total`` int32 (JAX keeps 32-bit integers: up to 2**31 − 1 counted ids), updated by
``segment_sum`` + ``assign``. The formulas are ``tfrs_logq.core.frequency``'s (exact_log_q,
exact_log_one_minus_q), evaluated in float32 (the tf-keras path evaluates them in float64; the
two agree to float32 precision).
"""

from typing import Any, Dict, Optional, Tuple

import keras
import numpy.typing as npt
from keras import ops

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import frequency as frequency_core
from tfrs_logq.keras3._tensors import Tensor
from tfrs_logq.keras3.frequency import base

__all__ = ["ExactCounts"]


@keras.saving.register_keras_serializable(package="tfrs_logq")
class ExactCounts(base.FrequencyEstimator):
  """Q(d) = #d / N from an exact counts table (int ids in [0, num_items))."""

  num_items: int  # required here (check_num_items_given), optional in the base class

  def __init__(
    self,
    num_items: int,
    counts: Optional[npt.ArrayLike] = None,
    accumulate: Optional[bool] = None,
    min_count: float = frequency_core.DEFAULTS["min_count"],
    validate_ids: bool = True,
    **kwargs: Any,
  ) -> None:
    core_checks.check_num_items_given(num_items)
    super().__init__(num_items=num_items, validate_ids=validate_ids, **kwargs)
    assert self.num_items is not None  # check_num_items_given
    self.min_count, initial = core_checks.check_counts_table(self.num_items, min_count, counts)
    if initial.sum() >= 2**31:
      raise ValueError("counts must sum to less than 2**31 (int32 state)")
    self.accumulate = (counts is None) if accumulate is None else bool(accumulate)
    self.counts = self._state("counts", (self.num_items,), "int32", initial)
    self.total = self._state("total", (), "int32", int(initial.sum()))
    self.built = True

  def _update_keys(self, keys: Tensor, valid: Optional[Tensor] = None) -> None:
    if not self.accumulate:
      return
    if valid is None:
      ones, n = ops.ones_like(keys), ops.cast(keys.shape[0], "int32")
    else:  # entries that do not count add 0 to id 0 (their id may be out of range)
      ones = ops.cast(valid, "int32")
      keys, n = ops.where(valid, keys, 0), ops.sum(ones)
    hits = ops.segment_sum(ones, keys, num_segments=self.num_items)
    self.counts.assign(self.counts + hits)
    self.total.assign(self.total + n)

  def _counts_and_total(self, keys: Tensor) -> Tuple[Tensor, Tensor]:
    return ops.cast(ops.take(self.counts, keys), "float32"), ops.cast(self.total, "float32")

  def _log_q_keys(self, keys: Tensor) -> Tensor:
    count, total = self._counts_and_total(keys)
    return frequency_core.exact_log_q(ops, count, total, self.min_count, self.num_items)

  def log_one_minus_q(self, ids: Tensor) -> Tensor:
    """log((N − #p) / N), N − #p floored at min_count; with N = 0, log(1 − 1/num_items)."""
    count, total = self._counts_and_total(self._keys(ids, flatten=False))
    return frequency_core.exact_log_one_minus_q(ops, count, total, self.min_count, self.num_items)

  def get_config(self) -> Dict[str, Any]:
    return {**super().get_config(), "accumulate": self.accumulate, "min_count": self.min_count}
