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
from typing import Any, Optional, Protocol, Sequence, Tuple, Union

__all__ = ["OPS_NAMES", "Ops", "Tensor", "tf_ops"]

Tensor = Any
"""A tensor of the front's backend (a jax / numpy array, a tf.Tensor or tf.Variable, a torch
tensor), or a Python scalar where the formulas accept one."""

Axis = Union[int, Sequence[int], None]

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


class Ops(Protocol):
  """The ``ops`` argument of every core formula: the names of `OPS_NAMES` with keras.ops's
  signatures (``keras.ops`` itself and `tf_ops()` satisfy it; tests/tfrs_logq/core checks the
  names against OPS_NAMES and both namespaces)."""

  def where(
    self, condition: Tensor, x1: Optional[Tensor] = None, x2: Optional[Tensor] = None
  ) -> Tensor: ...
  def max(
    self, x: Tensor, axis: Axis = None, keepdims: bool = False, initial: Optional[Tensor] = None
  ) -> Tensor: ...
  def min(
    self, x: Tensor, axis: Axis = None, keepdims: bool = False, initial: Optional[Tensor] = None
  ) -> Tensor: ...
  def sum(self, x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor: ...
  def exp(self, x: Tensor) -> Tensor: ...
  def log(self, x: Tensor) -> Tensor: ...
  def log1p(self, x: Tensor) -> Tensor: ...
  def expm1(self, x: Tensor) -> Tensor: ...
  def sigmoid(self, x: Tensor) -> Tensor: ...
  def softplus(self, x: Tensor) -> Tensor: ...
  def stop_gradient(self, variable: Tensor) -> Tensor: ...
  def minimum(self, x1: Tensor, x2: Tensor) -> Tensor: ...
  def maximum(self, x1: Tensor, x2: Tensor) -> Tensor: ...
  def logical_and(self, x1: Tensor, x2: Tensor) -> Tensor: ...
  def logical_not(self, x: Tensor) -> Tensor: ...
  def equal(self, x1: Tensor, x2: Tensor) -> Tensor: ...
  def not_equal(self, x1: Tensor, x2: Tensor) -> Tensor: ...
  def squeeze(self, x: Tensor, axis: Axis = None) -> Tensor: ...
  def expand_dims(self, x: Tensor, axis: int) -> Tensor: ...
  def cast(self, x: Tensor, dtype: Any) -> Tensor: ...
  def zeros_like(self, x: Tensor, dtype: Any = None) -> Tensor: ...
  def ones_like(self, x: Tensor, dtype: Any = None) -> Tensor: ...
  def logaddexp(self, x1: Tensor, x2: Tensor) -> Tensor: ...
  def isfinite(self, x: Tensor) -> Tensor: ...
  def power(self, x1: Tensor, x2: Tensor) -> Tensor: ...
  def full_like(self, x: Tensor, fill_value: Tensor, dtype: Any = None) -> Tensor: ...
  def top_k(self, x: Tensor, k: int, sorted: bool = True) -> Tuple[Tensor, Tensor]: ...
  def matmul(self, x1: Tensor, x2: Tensor) -> Tensor: ...
  def transpose(self, x: Tensor, axes: Optional[Sequence[int]] = None) -> Tensor: ...
  def reshape(self, x: Tensor, newshape: Any) -> Tensor: ...
  def square(self, x: Tensor) -> Tensor: ...
  def take(self, x: Tensor, indices: Tensor, axis: Axis = None) -> Tensor: ...
  def take_along_axis(self, x: Tensor, indices: Tensor, axis: Axis = None) -> Tensor: ...
  def logsumexp(self, x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor: ...
  def argmin(self, x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor: ...
  def argsort(self, x: Tensor, axis: int = -1) -> Tensor: ...
  def cumsum(self, x: Tensor, axis: Axis = None, dtype: Any = None) -> Tensor: ...
  def segment_sum(
    self,
    data: Tensor,
    segment_ids: Tensor,
    num_segments: Optional[int] = None,
    sorted: bool = False,
  ) -> Tensor: ...
  def stack(self, x: Tensor, axis: int = 0) -> Tensor: ...
  def arange(
    self,
    start: Tensor,
    stop: Optional[Tensor] = None,
    step: Optional[Tensor] = None,
    dtype: Any = None,
  ) -> Tensor: ...
  def mod(self, x1: Tensor, x2: Tensor) -> Tensor: ...
  def sort(self, x: Tensor, axis: int = -1) -> Tensor: ...
  def sqrt(self, x: Tensor) -> Tensor: ...
  def concatenate(self, xs: Sequence[Tensor], axis: int = 0) -> Tensor: ...
  def logical_or(self, x1: Tensor, x2: Tensor) -> Tensor: ...
  def scatter(self, indices: Tensor, values: Tensor, shape: Any) -> Tensor: ...


@functools.lru_cache(maxsize=None)
def tf_ops() -> types.SimpleNamespace:
  """The namespace above bound to TensorFlow (the tf-keras front and its tests)."""
  import tensorflow as tf

  def _cast(x: Tensor, dtype: Any) -> Tensor:
    return tf.cast(x, dtype)

  def _logaddexp(a: Tensor, b: Tensor) -> Tensor:
    m = tf.maximum(a, b)
    safe = tf.where(tf.math.is_finite(m), m, tf.zeros_like(m))
    return tf.where(
      tf.math.is_finite(m), safe + tf.math.log(tf.exp(a - safe) + tf.exp(b - safe)), m
    )

  def _full_like(x: Tensor, value: Tensor, dtype: Any = None) -> Tensor:
    return tf.fill(tf.shape(x), tf.cast(value, dtype or x.dtype))

  def _top_k(x: Tensor, k: Tensor, sorted: bool = True) -> Tuple[Tensor, Tensor]:
    out = tf.math.top_k(x, k=k, sorted=sorted)
    return out.values, out.indices

  def _transpose(x: Tensor, axes: Optional[Sequence[int]] = None) -> Tensor:
    return tf.transpose(x, perm=axes)

  def _take(x: Tensor, indices: Tensor, axis: Optional[int] = None) -> Tensor:
    if axis is None:
      return tf.gather(tf.reshape(x, [-1]), indices)
    return tf.gather(x, indices, axis=axis)

  def _take_along_axis(x: Tensor, indices: Tensor, axis: int = -1) -> Tensor:
    rank = x.shape.rank
    if axis not in (-1, rank - 1) or indices.shape.rank != rank:
      raise NotImplementedError("tf_ops().take_along_axis: last axis, indices of x's rank")
    return tf.gather(x, indices, axis=rank - 1, batch_dims=rank - 1)

  def _logsumexp(x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
    return tf.reduce_logsumexp(x, axis=axis, keepdims=keepdims)

  def _argmin(x: Tensor, axis: Optional[int] = None, keepdims: bool = False) -> Tensor:
    if axis is None:  # keras.ops: the index in the flattened tensor
      out = tf.argmin(tf.reshape(x, [-1]), axis=0, output_type=tf.int32)
      return tf.reshape(out, [1] * len(x.shape)) if keepdims else out
    out = tf.argmin(x, axis=axis, output_type=tf.int32)
    return tf.expand_dims(out, axis) if keepdims else out

  def _argsort(x: Tensor, axis: int = -1) -> Tensor:
    return tf.argsort(x, axis=axis, stable=True)

  def _segment_sum(
    data: Tensor,
    segment_ids: Tensor,
    num_segments: Optional[Tensor] = None,
    sorted: bool = False,
  ) -> Tensor:
    del sorted  # the unsorted sum is right either way
    return tf.math.unsorted_segment_sum(data, segment_ids, num_segments)

  def _arange(
    start: Tensor, stop: Optional[Tensor] = None, step: Optional[Tensor] = None, dtype: Any = None
  ) -> Tensor:
    if stop is None:
      start, stop = 0, start
    return tf.range(start, stop, 1 if step is None else step, dtype=dtype or "int32")

  def _concatenate(xs: Sequence[Tensor], axis: int = 0) -> Tensor:
    return tf.concat(xs, axis=axis)

  def _scatter(indices: Tensor, values: Tensor, shape: Any) -> Tensor:
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
