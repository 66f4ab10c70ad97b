"""Keras 3 streaming estimators of Q(d), the per-draw sampling probability (stateful layers).

``ExactCounts`` (#d / N from a counts table), ``HashArrayEstimator`` (Yi et al. 2019 hash
arrays, extended to several hits per step and per-draw output) and ``CountMinSketch``
(min_j C[j, h_j(d)] / N, optional conservative update and decay), with the interface of
``tfrs_logq.tf_keras.frequency`` (``update``, ``log_q``, ``log_one_minus_q``, ``log_q_prime``).
"""

from tfrs_logq.keras3.frequency.base import MIN_ONE_MINUS_Q, FrequencyEstimator, log1m_exp
from tfrs_logq.keras3.frequency.count_min import CountMinSketch, sketch_shape
from tfrs_logq.keras3.frequency.exact import ExactCounts
from tfrs_logq.keras3.frequency.hash_array import HashArrayEstimator

__all__ = [
  "FrequencyEstimator",
  "ExactCounts",
  "HashArrayEstimator",
  "CountMinSketch",
  "sketch_shape",
  "log1m_exp",
  "MIN_ONE_MINUS_Q",
]
