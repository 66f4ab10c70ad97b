r"""`LazyAdam`: Adam whose sparse (embedding-table) updates touch only the rows in the gradient.

Why. tf-keras's `Adam` decays both moments of EVERY row of a table at every step, even when the
gradient is an `IndexedSlices` naming a few hundred rows, so a step costs O(|I| d) and grows
with the catalog (docs/results/catalog_size.md: 24 ms at 10^4 items, 2.6 s at 10^6). Here a
sparse gradient updates only its rows, in O(n d) for its n distinct rows; a dense gradient gets
tf-keras's Adam update unchanged. So one optimizer serves a model whose tables receive sparse
gradients and whose other weights receive dense ones.

Notation: for row r of a variable, g_r is the step's gradient of that row (duplicate indices of
the `IndexedSlices` summed), k_r the number of steps that have updated row r, this one included
(one counter per row, kept in the optimizer's state and checkpointed with it), η the learning
rate, β1, β2, ε as in Adam. For every row r named by the gradient:

    k_r ← k_r + 1
    m_r ← β1 m_r + (1 − β1) g_r
    v_r ← β2 v_r + (1 − β2) g_r²
    θ_r ← θ_r − η · sqrt(1 − β2^{k_r}) / (1 − β1^{k_r}) · m_r / (sqrt(v_r) + ε̂)

with ε̂ = ε, or ε · sqrt(1 − β2^{k_r}) when ``adaptive_epsilon`` (tf-keras's Adam form, with the
row's own count in place of the global step). Rows not named are left exactly as they are:
parameters, moments and counter.

Differences from dense Adam (documented choice): (1) a row absent from a step is not decayed,
and is not moved by its remaining momentum — dense Adam keeps moving it by η m̂ / (sqrt(v̂) + ε)
with m and v shrinking; (2) the bias correction uses the row's own update count k_r rather than
the global step t, so a row's first update has the size of Adam's first step whenever it comes
(with t, a row first seen at step 10^4 would get an almost uncorrected — 10× smaller — first
step). A row updated at every step has k_r = t and gets exactly dense Adam's update (tested).

The row formula is `tfrs_logq.core.lazy_adam.update_rows` (shared with the Keras 3
`tfrs_logq.keras3.LazyAdam`); this class gathers the gradient's distinct rows and scatters back.

Limits: ``amsgrad`` is not supported for sparse updates (a ValueError at construction); the
sparse path uses `tf.unique` (dynamic shapes), so it runs outside XLA (``jit_compile=False`` by
default; the training binary refuses it with ``--jit_compile_step``).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence, Union

import tensorflow as tf

from tfrs_logq.core import lazy_adam as core_lazy_adam
from tfrs_logq.core import ops as core_ops

__all__ = ["LazyAdam"]


class LazyAdam(tf.keras.optimizers.Adam):
  """Adam with row-wise lazy updates for sparse gradients (module docstring)."""

  def __init__(
    self,
    learning_rate: Union[
      float, tf.keras.optimizers.schedules.LearningRateSchedule, Callable[[], float]
    ] = 0.001,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    epsilon: float = 1e-7,
    adaptive_epsilon: bool = False,
    amsgrad: bool = False,
    jit_compile: bool = False,
    name: str = "LazyAdam",
    **kwargs: Any,
  ) -> None:
    if amsgrad:
      raise ValueError("LazyAdam does not support amsgrad (its max over all rows is dense)")
    super().__init__(
      learning_rate=learning_rate,
      beta_1=beta_1,
      beta_2=beta_2,
      epsilon=epsilon,
      adaptive_epsilon=adaptive_epsilon,
      amsgrad=False,
      jit_compile=jit_compile,
      name=name,
      **kwargs,
    )

  def add_variable_from_reference(
    self,
    model_variable: tf.Variable,
    variable_name: str,
    shape: Optional[Union[tf.TensorShape, Sequence[int]]] = None,
    initial_value: Optional[Union[tf.Tensor, Callable[[], tf.Tensor]]] = None,
  ) -> tf.Variable:
    """tf-keras's slot creation, with the zeros made where the slot lives: tf-keras computes
    them eagerly on the calling device, so under ParameterServerStrategy the chief would
    materialise every slot of every table shard (m, v, the row counts) and send it to its ps
    (measured: +0.7 GiB of chief peak for a 2e6 x 64 table); a callable initial value runs on
    the slot's own device (its shard's ps)."""
    if initial_value is None and (shape is not None or model_variable.shape.rank is not None):
      dtype = getattr(model_variable, "true_dtype", model_variable.dtype)
      initial_value = functools.partial(
        tf.zeros, model_variable.shape if shape is None else shape, dtype=dtype
      )
    return super().add_variable_from_reference(
      model_variable, variable_name, shape=shape, initial_value=initial_value
    )

  def build(self, var_list: Sequence[tf.Variable]) -> None:
    built = getattr(self, "_built", False)
    super().build(var_list)
    if built:
      return
    # k_r: updates received by each row (a scalar for rank-0 variables). float: exact up to
    # 2^24 updates of one row, past which beta^k is 0 in float32 anyway.
    self._row_counts = [
      self.add_variable_from_reference(
        model_variable=var, variable_name="row_count", shape=var.shape[:1] if var.shape.rank else []
      )
      for var in var_list
    ]

  def update_step(
    self, gradient: Union[tf.Tensor, tf.IndexedSlices], variable: tf.Variable
  ) -> None:
    if not isinstance(gradient, tf.IndexedSlices):
      return super().update_step(gradient, variable)
    dtype = variable.dtype
    index = self._index_dict[self._var_key(variable)]
    m, v, count = self._momentums[index], self._velocities[index], self._row_counts[index]
    rows, position = tf.unique(gradient.indices)
    grad = tf.math.unsorted_segment_sum(gradient.values, position, tf.shape(rows)[0])
    beta_1 = tf.cast(self.beta_1, dtype)
    beta_2 = tf.cast(self.beta_2, dtype)
    m_rows, v_rows, k, delta = core_lazy_adam.update_rows(
      core_ops.tf_ops(),
      tf.gather(m, rows),
      tf.gather(v, rows),
      tf.gather(count, rows),
      grad,
      tf.cast(self.learning_rate, dtype),
      beta_1,
      beta_2,
      self.epsilon,
      adaptive_epsilon=self.adaptive_epsilon,
    )
    count.scatter_update(tf.IndexedSlices(k, rows))
    m.scatter_update(tf.IndexedSlices(m_rows, rows))
    v.scatter_update(tf.IndexedSlices(v_rows, rows))
    variable.scatter_sub(tf.IndexedSlices(delta, rows))
