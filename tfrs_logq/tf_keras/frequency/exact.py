"""Exact item counts (the academic setup of the paper, §3.3).

    Q(d)  = #d / N,                 N = Σ_d #d
    Q'(d) = #d / (N − #p)  =  Q(d) / (1 − Q(p))

State: ``counts`` int64 [num_items] and ``total`` int64 (= N). The table can be given up front
(``counts=``, e.g. item frequencies of the training set); ``update(ids)`` then only validates the
ids (``accumulate=False``, the default when a table is given), or adds the step's ids to the
table (``accumulate=True``, the default without a table: exact streaming counts).

Floors (documented, so log Q is always finite): an item with #d < ``min_count`` (default 1) is
treated as if counted ``min_count`` times, Q(d) = max(#d, min_count) / N; before anything has been
counted (N = 0) Q is uniform, 1 / num_items. ``log_q`` and ``log_one_minus_q`` are computed in
float64 from the integer counts and returned as float32, so Q' is #d / (N − #p) to float32
precision (N − #p floored at min_count, so Q' ≤ #d / min_count). Ids must be integers in
[0, num_items); strings need a vocabulary first (tf.keras.layers.StringLookup).
"""

from typing import Any, Dict, Optional, Tuple

from tfrs_logq.tf_keras import sharded
from tfrs_logq.tf_keras.frequency import base

import numpy.typing as npt
import tensorflow as tf

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import frequency as frequency_core
from tfrs_logq.core.ops import tf_ops

__all__ = ["ExactCounts"]

_OPS = tf_ops()


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class ExactCounts(base.FrequencyEstimator):
  """Exact counts: Q(d) = max(#d, min_count) / N and Q'(d) = #d / (N − #p), N = Σ_d #d.

  Integer ids in [0, num_items) only (strings: map them with tf.keras.layers.StringLookup).
  Before anything is counted (N = 0), Q(d) = 1 / num_items.

  Args:
    num_items: size of the counts table (ids 0 .. num_items − 1); int or numpy integer.
    counts: optional initial table [num_items] of whole numbers >= 0 (e.g. training-set counts).
    accumulate: add each ``update``'s ids to the table; default: True without ``counts``,
      False with (the table is then fixed and ``update`` only validates ids).
    min_count: floor of a count, so that log Q is finite (default 1).
    validate_ids: check 0 <= id < num_items at run time.
  """

  supports_strings = False
  num_items: int  # required here (FrequencyEstimator allows None)

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
    self.accumulate = (counts is None) if accumulate is None else bool(accumulate)
    self.counts = self._state("counts", [self.num_items], tf.int64, initial)
    self.total = self._state("total", [], tf.int64, int(initial.sum()))

  def _update_keys(self, keys: tf.Tensor, valid: Optional[tf.Tensor] = None) -> None:
    if not self.accumulate:
      return
    # An integer scatter-add: copies of an id add up in any order (exact, static shapes).
    ones = tf.ones_like(keys) if valid is None else tf.cast(valid, tf.int64)
    self.counts.scatter_add(tf.IndexedSlices(ones, keys))
    self.total.assign_add(tf.reduce_sum(ones))

  def _counts_and_total(self, keys: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """#d and N in float64 (exact for counts below 2**53)."""
    return (
      tf.cast(sharded.gather_rows(self.counts, keys), tf.float64),
      tf.cast(self.total, tf.float64),
    )

  def _log_q_keys(self, keys: tf.Tensor) -> tf.Tensor:
    count, total = self._counts_and_total(keys)
    return tf.cast(
      frequency_core.exact_log_q(_OPS, count, total, self.min_count, self.num_items), tf.float32
    )

  def log_one_minus_q(self, ids: tf.Tensor) -> tf.Tensor:
    """log(1 − Q(p)) = log((N − #p) / N) in float64 (with #p floored at min_count as in Q),
    N − #p floored at min_count ("as if one other item had been counted") so it stays finite;
    with N = 0, 1 − 1/num_items floored at MIN_ONE_MINUS_Q."""
    count, total = self._counts_and_total(self._keys(ids, flatten=False))
    return tf.cast(
      frequency_core.exact_log_one_minus_q(_OPS, count, total, self.min_count, self.num_items),
      tf.float32,
    )

  def get_config(self) -> Dict[str, Any]:
    config = super().get_config()
    config.update(accumulate=self.accumulate, min_count=self.min_count)
    return config
