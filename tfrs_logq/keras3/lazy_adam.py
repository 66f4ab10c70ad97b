r"""`LazyAdam` for Keras 3 (JAX, TensorFlow, PyTorch): Adam whose embedding tables move only in
the rows of the step, each row with its own update count in the bias correction.

The semantics of the tf-keras `tfrs_logq.tf_keras.lazy_adam.LazyAdam`, the formula written once in
`tfrs_logq.core.lazy_adam.update_rows`: for every row r of a table in the step (g_r its gradient,
k_r the updates the row has received, this one included)

    k_r ← k_r + 1
    m_r ← β1 m_r + (1 − β1) g_r
    v_r ← β2 v_r + (1 − β2) g_r²
    θ_r ← θ_r − η · sqrt(1 − β2^{k_r}) / (1 − β1^{k_r}) · m_r / (sqrt(v_r) + ε)

and every other row keeps θ_r, m_r, v_r and k_r. Every variable that is not a table gets
``keras.optimizers.Adam``'s update (the global step in the bias correction).

Which variables are tables: those whose ``variable.path`` matches the regular expression
``table_pattern`` (``re.search``) and have rank >= 1; the default, ``(^|/)embeddings$``, takes
the table of every ``keras.layers.Embedding`` (its weight is named ``embeddings``). Pass a
narrower pattern to keep some of them on Adam (e.g. ``"item_embedding/embeddings$"``), ``"$^"``
for none. A table's counts k are one float variable of shape [rows] per table (exact up to 2^24
updates of a row), saved with the optimizer's other variables (``.keras``, ``variables``).

The rows of a step. Keras 3 hands the optimizer a dense gradient of the table on JAX and
PyTorch, and a ``tf.IndexedSlices`` on the TensorFlow backend (the gradient of an embedding
lookup), which is made dense here; so on every backend the rows of the step are **the rows whose
gradient is not all zero**, found with a mask and updated with ``ops.where`` (static shapes:
the whole update compiles under ``jax.jit``; it costs O(|I| d) per table per step, like Adam,
what is saved is the rows' decay, not the time). The one difference from the tf-keras
LazyAdam: a row named by the batch whose gradient is exactly zero (e.g. gradients that cancel)
is left untouched here and updated with g = 0 there (its momentum moves it and k_r counts it).

Limits: ``amsgrad`` is refused (its max over all rows is dense), as on tf-keras; the tf-keras
``adaptive_epsilon`` has no Keras 3 counterpart (Keras 3's Adam uses ε as written above).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import keras
from keras import ops

from tfrs_logq.core import lazy_adam as core_lazy_adam
from tfrs_logq.keras3._tensors import Tensor

__all__ = ["LazyAdam", "DEFAULT_TABLE_PATTERN"]

DEFAULT_TABLE_PATTERN = r"(^|/)embeddings$"


@keras.saving.register_keras_serializable(package="tfrs_logq")
class LazyAdam(keras.optimizers.Adam):
  """Adam with lazy, per-row-counted updates of the tables (module docstring).

  Args:
    learning_rate, beta_1, beta_2, epsilon: as ``keras.optimizers.Adam``.
    table_pattern: regular expression on ``variable.path`` choosing the tables.
    **kwargs: the other arguments of ``keras.optimizers.Adam`` (``amsgrad=True`` is refused).
  """

  def __init__(
    self,
    learning_rate: Union[
      float, keras.optimizers.schedules.LearningRateSchedule, Callable[[], float]
    ] = 0.001,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    epsilon: float = 1e-7,
    table_pattern: str = DEFAULT_TABLE_PATTERN,
    name: str = "lazy_adam",
    **kwargs: Any,
  ) -> None:
    if kwargs.pop("amsgrad", False):
      raise ValueError("LazyAdam does not support amsgrad (its max over all rows is dense)")
    re.compile(table_pattern)
    super().__init__(
      learning_rate=learning_rate,
      beta_1=beta_1,
      beta_2=beta_2,
      epsilon=epsilon,
      amsgrad=False,
      name=name,
      **kwargs,
    )
    self.table_pattern = table_pattern

  def is_table(self, variable: keras.Variable) -> bool:
    """Whether ``variable`` gets the lazy update (module docstring)."""
    return len(variable.shape) >= 1 and re.search(self.table_pattern, variable.path) is not None

  def build(self, var_list: Sequence[keras.Variable]) -> None:
    if self.built:
      return
    super().build(var_list)
    self._row_counts: List[Optional[keras.Variable]] = []
    for var in var_list:
      self._row_counts.append(
        self.add_variable(
          (var.shape[0],),
          initializer="zeros",
          dtype=var.dtype,
          name=f"{var.path.replace('/', '_')}_row_count",
        )
        if self.is_table(var)
        else None
      )

  def row_counts(self, variable: keras.Variable) -> Optional[keras.Variable]:
    """The counts k [rows] of a table (None for a variable updated by Adam)."""
    return self._row_counts[self._get_variable_index(variable)]

  def update_step(self, gradient: Tensor, variable: keras.Variable, learning_rate: Tensor) -> None:
    index = self._get_variable_index(variable)
    count = self._row_counts[index]
    if count is None:
      return super().update_step(gradient, variable, learning_rate)
    dtype = variable.dtype
    g = ops.cast(ops.convert_to_tensor(gradient), dtype)  # IndexedSlices (tensorflow): dense
    m, v = self._momentums[index], self._velocities[index]
    m_new, v_new, k_new, delta = core_lazy_adam.update_rows(
      ops,
      m.value,
      v.value,
      count.value,
      g,
      ops.cast(learning_rate, dtype),
      ops.cast(self.beta_1, dtype),
      ops.cast(self.beta_2, dtype),
      ops.cast(self.epsilon, dtype),
      rows=core_lazy_adam.nonzero_rows(ops, g),
    )
    self.assign(m, m_new)
    self.assign(v, v_new)
    self.assign(count, k_new)
    self.assign_sub(variable, delta)

  def get_config(self) -> Dict[str, Any]:
    config = super().get_config()
    config.pop("amsgrad", None)
    config["table_pattern"] = self.table_pattern
    return config
