"""The query-model interface shared by `models.SASRec` and `models.TwoTower`.

Every query model implements

    training_queries(batch: dict, training: bool, seed, static_shapes=False) -> TrainingQueries(
        queries [A, d], positive_ids int64 [A], sequence_ids int64 [A])
        (static_shapes: A does not depend on the values; padding queries have positive id 0)
    query_embeddings(features, training=False, seed=None) -> [B, d]
    serving_queries(history int64 [B, max_len] left-padded) -> [B, d]
    item_embeddings(ids) -> [..., d];  all_item_embeddings() -> [num_items + 1, d] (row 0 = padding)

so that the training objective, the export and evaluation never branch on the model's type.
A training batch holds A queries: SASRec's non-padding target positions of a ``{"inputs",
"targets"}`` [B, L] batch (``sequence_ids`` = the row each position comes from), or a two-tower
``{"history", "user_id", "item_id"}`` batch (A = B, ``sequence_ids`` = 0..B-1).
"""

from typing import NamedTuple

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import tensorflow as tf

__all__ = ["TrainingQueries"]


class TrainingQueries(NamedTuple):
  """The A training queries of a batch (module docstring)."""

  queries: tf.Tensor
  positive_ids: tf.Tensor
  sequence_ids: tf.Tensor
