"""tfrs_logq.tf_keras.compiled: tf.function without AutoGraph, as a call and as a decorator."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import compiled

import numpy as np
import pytest
import tensorflow as tf


def test_a_python_if_on_a_tensor_raises_at_trace_time():
  """AutoGraph would turn the `if` into a tf.cond; without it the trace refuses the tensor."""

  def relu_by_if(x):
    if tf.reduce_sum(x) > 0:
      return x
    return -x

  with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
    compiled.compile_function(relu_by_if)(tf.constant([1.0, 2.0]))
  # tf.function's default converts it: the same function runs there.
  np.testing.assert_allclose(tf.function(relu_by_if)(tf.constant([1.0, 2.0])), [1.0, 2.0])


def test_graph_control_flow_and_the_decorator_form():
  @compiled.compile_function(input_signature=[tf.TensorSpec([None], tf.float32)])
  def clipped(x):
    return tf.cond(tf.reduce_sum(x) > 0, lambda: x, lambda: -x)

  np.testing.assert_allclose(clipped(tf.constant([-1.0, -2.0])), [1.0, 2.0])
  np.testing.assert_allclose(clipped(tf.constant([3.0])), [3.0])  # same signature, one trace
  assert len(clipped.get_concrete_function().graph.get_operations()) > 0


def test_jit_compile_and_state():
  v = tf.Variable([1.0, 2.0])
  double = compiled.compile_function(lambda x: 2.0 * x + v, jit_compile=True)
  np.testing.assert_allclose(double(tf.constant([1.0, 1.0])), [3.0, 4.0])
  read = compiled.compile_function(lambda: v * 1.0)
  v.assign([5.0, 6.0])
  np.testing.assert_allclose(read(), [5.0, 6.0])  # reads the variable's current value


def test_autograph_cannot_be_turned_back_on():
  with pytest.raises(ValueError, match="AutoGraph"):
    compiled.compile_function(lambda x: x, autograph=True)
