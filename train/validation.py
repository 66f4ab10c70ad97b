"""Exact brute-force validation metrics for the training binary (filter-rated protocol).

For every evaluation query u (input history H_u, held-out target t_u, user id), q_u =
``model.serving_queries`` of the last max_len items of H_u (left-padded) and the user id; all
items are scored, s(u, d) = <q_u, c_d> (the temperature does not change the ranking); the items
of the FULL history H_u (not only its last max_len items) are removed -- the target too when it
occurs in H_u, unless ``filter_rated="except_target"`` -- and padding id 0; with r_u the 0-based
rank of t_u:

    Recall@k = mean_u 1[r_u < k],        NDCG@k = mean_u 1[r_u < k] / log2(r_u + 2).

The top-k is `tfrs_logq.metrics.exact_top_k` (ties: lower id first, as top_k does), the same
function `python -m eval.evaluate` reports as its exact search; `python -m train.keras3` passes
its numpy twin `tfrs_logq.core.ranking.exact_top_k_np` (same checks and ties), so this module
imports TensorFlow only where a tf-keras model is evaluated (`evaluate`, `query_embeddings`).
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from tfrs_logq.core import ranking
from train import data as data_lib

__all__ = ["FILTER_RATED", "check_split", "evaluate", "evaluate_queries", "query_embeddings"]

# Rated-item filtering: "all" removes every item of the query's input, the target included when
# it occurs there (the paper's protocol, gSASRec's filter_rated); "except_target" never removes
# the target.
FILTER_RATED = ("all", "except_target")


def query_embeddings(model, inputs: np.ndarray, user_ids=None,
                     batch_size: int = 512) -> np.ndarray:
  """float32 [Q, d]: ``model.serving_queries`` of left-padded histories int [Q, max_len] (and
  the queries' user ids, which a two-tower model with a user-id embedding uses)."""
  import tfrs_logq  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  out = []
  for s in range(0, inputs.shape[0], batch_size):
    users = None if user_ids is None else tf.constant(user_ids[s:s + batch_size], tf.int64)
    out.append(np.asarray(model.serving_queries(tf.constant(inputs[s:s + batch_size], tf.int64),
                                                user_ids=users), np.float32))
  return np.concatenate(out)


def evaluate(model, split, *, max_len: int, ks=(10, 20), batch_size: int = 512,
             filter_rated: str = "all") -> dict:
  """{"recall@k", "ndcg@k", "num_queries"} over ``split`` (a `train.data.EvalSplit`)."""
  check_split(split, filter_rated)
  inputs = data_lib.left_pad(split.inputs, max_len)
  queries = query_embeddings(model, inputs, split.user_ids, batch_size)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  (loaded by query_embeddings)
  table = np.asarray(tf.convert_to_tensor(model.all_item_embeddings()), np.float32)
  return evaluate_queries(queries, table, split, ks=ks, batch_size=batch_size,
                          filter_rated=filter_rated)


def check_split(split, filter_rated: str) -> None:
  """Raises ValueError for an unknown ``filter_rated`` or a split without queries."""
  if filter_rated not in FILTER_RATED:
    raise ValueError(f"filter_rated must be one of {FILTER_RATED}, got {filter_rated!r}")
  if split.num_queries == 0:
    raise ValueError("evaluation split has no queries")


def evaluate_queries(queries: np.ndarray, table: np.ndarray, split, *, ks=(10, 20),
                     batch_size: int = 512, filter_rated: str = "all",
                     exact_top_k: Optional[Callable] = None) -> dict:
  """The metrics of `evaluate` from the split's query embeddings float [Q, d] and the item
  table float [num_items + 1, d] (row 0 padding), whatever framework computed them (the Keras 3
  binary, `train.keras3`, calls this with its own model's arrays). ``exact_top_k``: the search,
  `tfrs_logq.metrics.exact_top_k` (TensorFlow) when None, or one with its signature
  (`tfrs_logq.core.ranking.exact_top_k_np`)."""
  if exact_top_k is None:
    from tfrs_logq import metrics as metrics_lib  # pylint: disable=g-import-not-at-top
    exact_top_k = metrics_lib.exact_top_k
  check_split(split, filter_rated)
  table = np.asarray(table, np.float32)
  k_max = max(ks)
  if k_max > table.shape[0] - 1:
    raise ValueError(f"k={k_max} exceeds the catalog size {table.shape[0] - 1}")
  targets = split.targets
  ids, _ = exact_top_k(
      np.asarray(queries, np.float32), table, k_max, rated=split.inputs,
      targets=targets if filter_rated == "except_target" else None,
      chunk_size=batch_size)
  out = ranking.retrieval_metrics(ids, targets, ks)
  out["num_queries"] = int(split.num_queries)
  return out
