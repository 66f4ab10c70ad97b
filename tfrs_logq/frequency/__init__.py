"""Streaming estimators of Q(d), the per-draw sampling probability (issue 3).

All share the ``FrequencyEstimator`` interface (``update``, ``log_q``, ``log_q_prime``):
``ExactCounts`` (#d / N from a counts table), ``HashArrayEstimator`` (Yi et al. 2019 hash arrays,
extended to several hits per step and per-draw output) and ``CountMinSketch``.
"""

from tfrs_logq.frequency.base import FrequencyEstimator, MIN_ONE_MINUS_Q, log1m_exp
from tfrs_logq.frequency.count_min import CountMinSketch, sketch_shape
from tfrs_logq.frequency.exact import ExactCounts
from tfrs_logq.frequency.hash_array import HashArrayEstimator

__all__ = ["FrequencyEstimator", "ExactCounts", "HashArrayEstimator", "CountMinSketch",
           "sketch_shape", "log1m_exp", "MIN_ONE_MINUS_Q"]
