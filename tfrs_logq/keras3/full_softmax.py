r"""Full softmax over every candidate row of a table, Keras 3 front: `full_softmax_loss` and
its layer `FullSoftmaxLoss`.

The formula, L = softplus(LSE_{d != p} s_d - s_p), is ``tfrs_logq.core.sampled_softmax``'s
(``softmax_with_positive``), evaluated with ``keras.ops`` in float32: the Keras 3 twin of
``tfrs_logq.tf_keras.full_softmax`` (same arguments, checks and results). Ids outside
``[id_offset, id_offset + V)`` raise ValueError where values are concrete (the tf-keras front
raises ``tf.errors.InvalidArgumentError`` at run time); inside a compiled step they cannot raise.
"""

from typing import Any, Dict

import keras
from keras import ops

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import sampled_softmax as sampled_softmax_core
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3 import losses as losses_lib
from tfrs_logq.keras3._tensors import Tensor

__all__ = ["full_softmax_loss", "FullSoftmaxLoss"]


def _check_ids(cols: Tensor, num_rows: int, id_offset: int) -> None:
  value = _tensors.concrete(cols)
  if value is None or value.size == 0:
    return
  if value.min() < 0:
    raise ValueError(f"positive ids must be >= {id_offset} (id_offset)")
  if num_rows is not None and value.max() >= num_rows:
    raise ValueError(f"positive ids must be < id_offset + V = {id_offset + num_rows}")


def full_softmax_loss(
  query_embeddings: Tensor,
  positive_ids: Tensor,
  candidate_embeddings: Tensor,
  *,
  temperature: float = 1.0,
  id_offset: int = 0,
  check_scores: bool = False,
) -> losses_lib.LossOutput:
  """L = softplus(LSE_{d != p} s_d - s_p) = -s_p + log sum_d exp(s_d) over every candidate row.

  Args:
    query_embeddings: float [A, d].
    positive_ids: int [A]; candidate row ``c`` has id ``c + id_offset``.
    candidate_embeddings: float [V, d], every candidate (e.g. an item table without its padding
      row 0, with ``id_offset=1``).
    temperature: scores are s_d = <q, c_d> / temperature (> 0).
    id_offset: id of row 0 (an int >= 0).
    check_scores: raise ValueError on non-finite concrete scores (eager only).

  Returns:
    LossOutput(loss [A] float32, weight 1, num_valid V - 1 int32).

  Raises:
    ValueError / TypeError: bad ranks, dtypes, temperature, id_offset, an empty batch, or
    (concrete ids) a positive id outside ``[id_offset, id_offset + V)``.
  """
  temperature, id_offset = core_checks.check_full_softmax(temperature, id_offset)
  q = ops.convert_to_tensor(query_embeddings)
  table = ops.convert_to_tensor(candidate_embeddings)
  if isinstance(positive_ids, (str, bytes)):
    raise TypeError(f"positive_ids must be integer, got {type(positive_ids).__name__}")
  ids = ops.convert_to_tensor(positive_ids)
  if not (
    _tensors.dtype_of(q) in _tensors.FLOAT_DTYPES
    and _tensors.dtype_of(table) in _tensors.FLOAT_DTYPES
  ):
    raise TypeError(
      "query_embeddings and candidate_embeddings must be floating, got "
      f"{_tensors.dtype_of(q)} and {_tensors.dtype_of(table)}"
    )
  if _tensors.dtype_of(ids) not in _tensors.INT_DTYPES:
    raise TypeError(f"positive_ids must be integer, got {_tensors.dtype_of(ids)}")
  if len(q.shape) != 2 or len(table.shape) != 2 or len(ids.shape) != 1:
    raise ValueError(
      f"expected query_embeddings [A, d], candidate_embeddings [V, d], "
      f"positive_ids [A]; got {tuple(q.shape)}, {tuple(table.shape)}, "
      f"{tuple(ids.shape)}"
    )
  if ids.shape[0] == 0:
    raise ValueError("empty batch: no queries")
  _tensors.check_same_dim(q, 0, ids, 0, "query_embeddings vs positive_ids")
  _tensors.check_same_dim(q, 1, table, 1, "query vs candidate embedding dimension")
  q, table = ops.cast(q, "float32"), ops.cast(table, "float32")
  cols = ops.cast(ids, "int32") - id_offset
  _check_ids(cols, table.shape[0], id_offset)
  logits = ops.matmul(q, ops.transpose(table)) * (1.0 / temperature)  # [A, V]
  s_p = ops.squeeze(ops.take_along_axis(logits, ops.expand_dims(cols, 1), axis=1), 1)
  if check_scores:
    losses_lib.check_finite_scores(s_p, logits, names=("positive scores", "scores"))
  num_rows = ops.shape(table)[0]
  valid = ops.not_equal(
    ops.expand_dims(ops.arange(num_rows, dtype="int32"), 0), ops.expand_dims(cols, 1)
  )
  num_valid = ops.full(ops.shape(s_p), num_rows - 1, "int32")
  loss = sampled_softmax_core.softmax_with_positive(ops, s_p, logits, valid, num_valid > 0)
  return losses_lib.LossOutput(loss=loss, weight=ops.ones_like(loss), num_valid=num_valid)


@keras.saving.register_keras_serializable(package="tfrs_logq")
class FullSoftmaxLoss(keras.layers.Layer):
  """Keras 3 layer computing :func:`full_softmax_loss`: L = -s_p + log sum_d exp(s_d), float32.

  ``call(query_embeddings, positive_ids, candidate_embeddings)`` returns a ``LossOutput``; the
  dtype policy is fixed to float32 (mixed precision is safe).

  Args:
    temperature: s_d = <q, c_d> / temperature.
    id_offset: id of candidate row 0.
    check_scores: raise ValueError on non-finite concrete scores (eager only).
  """

  def __init__(
    self, temperature: float = 1.0, id_offset: int = 0, check_scores: bool = False, **kwargs: Any
  ) -> None:
    kwargs["dtype"] = "float32"
    super().__init__(**kwargs)
    self.temperature, self.id_offset = core_checks.check_full_softmax(temperature, id_offset)
    self.check_scores = bool(check_scores)
    self.built = True

  def call(
    self, query_embeddings: Tensor, positive_ids: Tensor, candidate_embeddings: Tensor
  ) -> losses_lib.LossOutput:
    return full_softmax_loss(
      query_embeddings,
      positive_ids,
      candidate_embeddings,
      temperature=self.temperature,
      id_offset=self.id_offset,
      check_scores=self.check_scores,
    )

  def compute_output_spec(self, query_embeddings: Tensor, *args: Any, **kwargs: Any) -> Any:
    rows = query_embeddings.shape[:1]
    return losses_lib.LossOutput(
      keras.KerasTensor(rows, "float32"),
      keras.KerasTensor(rows, "float32"),
      keras.KerasTensor(rows, "int32"),
    )

  def get_config(self) -> Dict[str, Any]:
    return {
      **super().get_config(),
      "temperature": self.temperature,
      "id_offset": self.id_offset,
      "check_scores": self.check_scores,
    }
