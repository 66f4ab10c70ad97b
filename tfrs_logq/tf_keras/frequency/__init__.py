"""Streaming estimators of Q(d), the per-draw sampling probability of item d.

All share the ``FrequencyEstimator`` interface (``update(ids)`` once per step, ``log_q(ids)``,
``log_q_prime(ids, positive_ids)`` = log Q(d) − log(1 − Q(p))):

* ``ExactCounts``: Q(d) = #d / N from a counts table (integer ids in [0, num_items));
* ``HashArrayEstimator``: Yi et al. 2019 hash arrays, extended to several hits per step and
  per-draw output, Q(d) = 1 / (B̂(d) · n̄) (int or string ids);
* ``CountMinSketch``: Q(d) = min_j C[j, h_j(d)] / N, optional conservative update and decay
  (int or string ids).
"""

from tfrs_logq.tf_keras.frequency.base import MIN_ONE_MINUS_Q, FrequencyEstimator
from tfrs_logq.tf_keras.frequency.count_min import CountMinSketch, sketch_shape
from tfrs_logq.tf_keras.frequency.exact import ExactCounts
from tfrs_logq.tf_keras.frequency.hash_array import HashArrayEstimator

__all__ = [
  "FrequencyEstimator",
  "ExactCounts",
  "HashArrayEstimator",
  "CountMinSketch",
  "sketch_shape",
  "MIN_ONE_MINUS_Q",
]
