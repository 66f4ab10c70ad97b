r"""Full softmax over every candidate row of a table, tf-keras front: `full_softmax_loss` and
its layer `FullSoftmaxLoss`.

The formula, L = softplus(LSE_{d != p} s_d - s_p), is ``tfrs_logq.core.sampled_softmax``'s
(``softmax_with_positive``: the ``none`` correction with every row but p a valid negative),
computed here in float32 on TensorFlow; the Keras 3 twin is ``tfrs_logq.keras3.full_softmax``.
"""

from typing import Any, Dict

from tfrs_logq.tf_keras.losses import LossOutput, _assert_finite

import tensorflow as tf

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import sampled_softmax as sampled_softmax_core
from tfrs_logq.core.ops import tf_ops

__all__ = ["full_softmax_loss", "FullSoftmaxLoss"]

_OPS = tf_ops()


def full_softmax_loss(
  query_embeddings: tf.Tensor,
  positive_ids: tf.Tensor,
  candidate_embeddings: tf.Tensor,
  *,
  temperature: float = 1.0,
  id_offset: int = 0,
  check_scores: bool = False,
) -> LossOutput:
  """L = softplus(LSE_{d != p} s_d - s_p) = -s_p + log sum_d exp(s_d) over every candidate row.

  Args:
    query_embeddings: float [A, d].
    positive_ids: int [A]; candidate row ``c`` has id ``c + id_offset``.
    candidate_embeddings: float [V, d], every candidate (e.g. an item table without its padding
      row 0, with ``id_offset=1``).
    temperature: scores are s_d = <q, c_d> / temperature (> 0).
    id_offset: id of row 0 (>= 0).
    check_scores: assert that every score is finite.

  Returns:
    LossOutput(loss [A], weight 1, num_valid V - 1).

  Raises:
    ValueError / TypeError: bad ranks, dtypes, temperature; tf.errors.InvalidArgumentError at
    run time for a positive id outside ``[id_offset, id_offset + V)``.
  """
  temperature, id_offset = core_checks.check_full_softmax(temperature, id_offset)
  q = tf.convert_to_tensor(query_embeddings)
  table = tf.convert_to_tensor(candidate_embeddings)
  ids = tf.convert_to_tensor(positive_ids)
  if not (q.dtype.is_floating and table.dtype.is_floating):
    raise TypeError(
      f"query_embeddings and candidate_embeddings must be floating, got {q.dtype} and {table.dtype}"
    )
  if not ids.dtype.is_integer:
    raise TypeError(f"positive_ids must be integer, got {ids.dtype}")
  if q.shape.rank != 2 or table.shape.rank != 2 or ids.shape.rank != 1:
    raise ValueError(
      f"expected query_embeddings [A, d], candidate_embeddings [V, d], "
      f"positive_ids [A]; got {q.shape}, {table.shape}, {ids.shape}"
    )
  q, table = tf.cast(q, tf.float32), tf.cast(table, tf.float32)
  cols = tf.cast(ids, tf.int64) - int(id_offset)
  num_rows = tf.shape(table, out_type=tf.int64)[0]
  checks = [
    tf.debugging.assert_non_negative(cols, message=f"positive ids must be >= {id_offset}"),
    tf.debugging.assert_less(cols, num_rows, message="positive ids must be < id_offset + V"),
    tf.debugging.assert_positive(tf.size(ids), message="empty batch: no queries"),
  ]
  with tf.control_dependencies(checks):
    logits = tf.matmul(q, table, transpose_b=True) * (1.0 / float(temperature))  # [A, V]
  s_p = tf.gather(logits, cols, batch_dims=1)
  s_p, logits = _assert_finite(s_p, logits, check_scores)
  valid = tf.not_equal(tf.range(num_rows)[tf.newaxis, :], cols[:, tf.newaxis])
  num_valid = tf.fill(tf.shape(s_p), tf.cast(num_rows, tf.int32) - 1)
  loss = sampled_softmax_core.softmax_with_positive(_OPS, s_p, logits, valid, num_valid > 0)
  return LossOutput(loss=loss, weight=tf.ones_like(loss), num_valid=num_valid)


class FullSoftmaxLoss(tf.keras.layers.Layer):
  """Keras layer computing `full_softmax_loss`: L = -s_p + log sum_d exp(s_d), float32.

  ``call(query_embeddings, positive_ids, candidate_embeddings)`` returns a `LossOutput`.

  Args:
    temperature: s_d = <q, c_d> / temperature.
    id_offset: id of candidate row 0.
    check_scores: assert that every score is finite.
  """

  def __init__(
    self, temperature: float = 1.0, id_offset: int = 0, check_scores: bool = False, **kwargs: Any
  ) -> None:
    kwargs["dtype"] = "float32"
    super().__init__(**kwargs)
    self.temperature, self.id_offset = core_checks.check_full_softmax(temperature, id_offset)
    self.check_scores = bool(check_scores)

  def call(
    self, query_embeddings: tf.Tensor, positive_ids: tf.Tensor, candidate_embeddings: tf.Tensor
  ) -> LossOutput:
    return full_softmax_loss(
      query_embeddings,
      positive_ids,
      candidate_embeddings,
      temperature=self.temperature,
      id_offset=self.id_offset,
      check_scores=self.check_scores,
    )

  def get_config(self) -> Dict[str, Any]:
    return {
      **super().get_config(),
      "temperature": self.temperature,
      "id_offset": self.id_offset,
      "check_scores": self.check_scores,
    }
