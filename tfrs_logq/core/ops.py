r"""The array namespace the core formulas are written against.

Every core formula takes an ``ops`` namespace first: ``keras.ops`` on the Keras 3 front (JAX,
TensorFlow, PyTorch), or ``tf_ops()`` (the same names bound to TensorFlow functions) on the
tf-keras front. The names used, with the keras.ops signatures (``max(x, axis, keepdims)``,
``cast(x, dtype_name)``, ``top_k(x, k, sorted)`` -> (values, indices)):

    where max min sum exp log log1p expm1 sigmoid softplus stop_gradient minimum maximum
    logical_and logical_not equal not_equal squeeze expand_dims cast zeros_like ones_like
    logaddexp isfinite power full_like top_k
    matmul transpose reshape square take take_along_axis logsumexp argmin argsort cumsum
    segment_sum stack arange mod sort sqrt concatenate logical_or scatter

(``take_along_axis(x, indices, axis=-1)`` with indices of the rank of x; ``argsort`` stable;
``segment_sum(data, segment_ids, num_segments)``; ``concatenate(xs, axis)``;
``scatter(indices [M, r], values [M], shape)``: zeros of ``shape`` with the values added at the
indices, duplicates summed.)

Python scalars are accepted wherever a tensor is (they take the tensor's dtype).
"""

import functools
import types

__all__ = ["OPS_NAMES", "tf_ops"]

OPS_NAMES = (
  "where",
  "max",
  "min",
  "sum",
  "exp",
  "log",
  "log1p",
  "expm1",
  "sigmoid",
  "softplus",
  "stop_gradient",
  "minimum",
  "maximum",
  "logical_and",
  "logical_not",
  "equal",
  "not_equal",
  "squeeze",
  "expand_dims",
  "cast",
  "zeros_like",
  "ones_like",
  "logaddexp",
  "isfinite",
  "power",
  "full_like",
  "top_k",
  "matmul",
  "transpose",
  "reshape",
  "square",
  "take",
  "take_along_axis",
  "logsumexp",
  "argmin",
  "argsort",
  "cumsum",
  "segment_sum",
  "stack",
  "arange",
  "mod",
  "sort",
  "sqrt",
  "concatenate",
  "logical_or",
  "scatter",
)


@functools.lru_cache(maxsize=None)
def tf_ops() -> types.SimpleNamespace:
  """The namespace above bound to TensorFlow (the tf-keras front and its tests)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def _cast(x, dtype):
    return tf.cast(x, dtype)

  def _logaddexp(a, b):
    m = tf.maximum(a, b)
    safe = tf.where(tf.math.is_finite(m), m, tf.zeros_like(m))
    return tf.where(
      tf.math.is_finite(m), safe + tf.math.log(tf.exp(a - safe) + tf.exp(b - safe)), m
    )

  def _full_like(x, value):
    return tf.fill(tf.shape(x), tf.cast(value, x.dtype))

  def _top_k(x, k, sorted=True):  # pylint: disable=redefined-builtin
    out = tf.math.top_k(x, k=k, sorted=sorted)
    return out.values, out.indices

  def _transpose(x, axes=None):
    return tf.transpose(x, perm=axes)

  def _take(x, indices, axis=None):
    if axis is None:
      return tf.gather(tf.reshape(x, [-1]), indices)
    return tf.gather(x, indices, axis=axis)

  def _take_along_axis(x, indices, axis=-1):
    rank = x.shape.rank
    if axis not in (-1, rank - 1) or indices.shape.rank != rank:
      raise NotImplementedError("tf_ops().take_along_axis: last axis, indices of x's rank")
    return tf.gather(x, indices, axis=rank - 1, batch_dims=rank - 1)

  def _logsumexp(x, axis=None, keepdims=False):
    return tf.reduce_logsumexp(x, axis=axis, keepdims=keepdims)

  def _argmin(x, axis=None):
    return tf.argmin(x, axis=axis, output_type=tf.int32)

  def _argsort(x, axis=-1):
    return tf.argsort(x, axis=axis, stable=True)

  def _segment_sum(data, segment_ids, num_segments=None):
    return tf.math.unsorted_segment_sum(data, segment_ids, num_segments)

  def _arange(start, stop=None, dtype="int32"):
    if stop is None:
      start, stop = 0, start
    return tf.range(start, stop, dtype=dtype)

  def _concatenate(xs, axis=0):
    return tf.concat(xs, axis=axis)

  def _scatter(indices, values, shape):
    return tf.scatter_nd(indices, values, shape)

  return types.SimpleNamespace(
    where=tf.where,
    max=tf.reduce_max,
    min=tf.reduce_min,
    sum=tf.reduce_sum,
    exp=tf.exp,
    log=tf.math.log,
    log1p=tf.math.log1p,
    expm1=tf.math.expm1,
    sigmoid=tf.sigmoid,
    softplus=tf.math.softplus,
    stop_gradient=tf.stop_gradient,
    minimum=tf.minimum,
    maximum=tf.maximum,
    logical_and=tf.logical_and,
    logical_not=tf.logical_not,
    equal=tf.equal,
    not_equal=tf.not_equal,
    squeeze=tf.squeeze,
    expand_dims=tf.expand_dims,
    cast=_cast,
    zeros_like=tf.zeros_like,
    ones_like=tf.ones_like,
    logaddexp=_logaddexp,
    isfinite=tf.math.is_finite,
    power=tf.pow,
    full_like=_full_like,
    top_k=_top_k,
    matmul=tf.matmul,
    transpose=_transpose,
    reshape=tf.reshape,
    square=tf.square,
    take=_take,
    take_along_axis=_take_along_axis,
    logsumexp=_logsumexp,
    argmin=_argmin,
    argsort=_argsort,
    cumsum=tf.cumsum,
    segment_sum=_segment_sum,
    stack=tf.stack,
    arange=_arange,
    mod=tf.math.floormod,
    sort=tf.sort,
    sqrt=tf.sqrt,
    concatenate=_concatenate,
    logical_or=tf.logical_or,
    scatter=_scatter,
  )
