"""Keras 3 streaming estimators of Q(d), the per-draw sampling probability (stateful layers).

``ExactCounts`` (#d / N from a counts table) and ``HashArrayEstimator`` (Yi et al. 2019 hash
arrays, extended to several hits per step and per-draw output), with the interface of
``tfrs_logq.frequency`` (``update``, ``log_q``, ``log_one_minus_q``, ``log_q_prime``).
"""

from tfrs_logq.keras3.frequency.base import FrequencyEstimator, MIN_ONE_MINUS_Q, log1m_exp
from tfrs_logq.keras3.frequency.exact import ExactCounts
from tfrs_logq.keras3.frequency.hash_array import HashArrayEstimator

__all__ = ["FrequencyEstimator", "ExactCounts", "HashArrayEstimator", "log1m_exp",
           "MIN_ONE_MINUS_Q"]
