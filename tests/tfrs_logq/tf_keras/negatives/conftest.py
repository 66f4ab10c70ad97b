"""Shared helpers of the negatives tests: a minimal exact-count frequency object."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf


class CountsTable:
  """Any object with ``log_q(ids)`` works as an estimator: log Q(d) = log(#d / N) from counts."""

  def __init__(self, counts):
    self.counts = np.asarray(counts, np.float64)
    with np.errstate(divide="ignore"):
      self.log_table = np.log(self.counts / self.counts.sum())
    self._table = tf.constant(self.log_table, tf.float32)

  def log_q(self, ids):
    return tf.gather(self._table, ids)

  def np_log_q(self, ids):
    return self.log_table[np.asarray(ids)]


@pytest.fixture
def counts_table():
  """Factory: counts_table(counts) -> CountsTable."""
  return CountsTable
