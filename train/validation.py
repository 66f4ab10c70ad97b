"""Exact brute-force validation metrics for the training binary (filter-rated protocol).

For every evaluation query u (input history H_u, held-out target t_u, user id), q_u =
``model.serving_queries`` of the last max_len items of H_u (left-padded) and the user id; all
items are scored, s(u, d) = <q_u, c_d> (the temperature does not change the ranking); the items
of the FULL history H_u (not only its last max_len items) are removed -- the target too when it
occurs in H_u, unless ``filter_rated="except_target"`` -- and padding id 0; with r_u the 0-based
rank of t_u:

    Recall@k = mean_u 1[r_u < k],        NDCG@k = mean_u 1[r_u < k] / log2(r_u + 2).

The queries are computed by one compiled program over fixed-shape batches (`pad_batches`: the
last one completed), and the top-k is the on-device search `tfrs_logq.core.top_k` (ties: lower
id first), chunked over queries and items: `tfrs_logq.tf_keras.top_k.exact_top_k` here, the same
function `python -m eval.evaluate` reports as its exact search; `python -m train.keras3` passes
its Keras 3 twin `tfrs_logq.keras3.top_k.exact_top_k` (same checks, ids and ties), so this module
imports TensorFlow only where a tf-keras model is evaluated (`evaluate`, `query_embeddings`).
The numpy search `tfrs_logq.core.ranking.exact_top_k_np` is the tests' oracle.
"""

from __future__ import annotations

import weakref
from typing import Callable, Optional

import numpy as np

from tfrs_logq.core import ranking
from train import data as data_lib

__all__ = [
  "FILTER_RATED",
  "check_split",
  "evaluate",
  "evaluate_queries",
  "pad_batches",
  "query_embeddings",
]

# Rated-item filtering: "all" removes every item of the query's input, the target included when
# it occurs there (the paper's protocol, gSASRec's filter_rated); "except_target" never removes
# the target.
FILTER_RATED = ("all", "except_target")


def pad_batches(inputs: np.ndarray, batch_size: int):
  """(batches of ``batch_size`` rows, real rows of each): the last batch completed with copies of
  its last row, so that a compiled encoder sees one input shape (min(Q, batch_size) rows)."""
  size = min(batch_size, inputs.shape[0])
  out = []
  for s in range(0, inputs.shape[0], size):
    chunk = inputs[s : s + size]
    rows = chunk.shape[0]
    if rows < size:
      chunk = np.concatenate([chunk, np.repeat(chunk[-1:], size - rows, axis=0)])
    out.append((chunk, rows))
  return out


# One compiled serving function per model (a tf.function traced once per input shape).
_ENCODERS = weakref.WeakKeyDictionary()


def _compiled_encoder(model):
  from tfrs_logq.tf_keras import compiled

  fn = _ENCODERS.get(model)
  if fn is None:
    fn = _ENCODERS[model] = compiled.compile_function(
      lambda history, user_ids: model.serving_queries(history, user_ids=user_ids)
    )
  return fn


def query_embeddings(model, inputs: np.ndarray, user_ids=None, batch_size: int = 512) -> np.ndarray:
  """float32 [Q, d]: ``model.serving_queries`` of left-padded histories int [Q, max_len] (and
  the queries' user ids, which a two-tower model with a user-id embedding uses), one compiled
  program (tf.function) over batches of one shape (`pad_batches`)."""
  import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

  import tensorflow as tf

  fn = _compiled_encoder(model)
  users = None if user_ids is None else pad_batches(np.asarray(user_ids), batch_size)
  out = []
  for i, (chunk, rows) in enumerate(pad_batches(inputs, batch_size)):
    u = None if users is None else tf.constant(users[i][0], tf.int64)
    out.append(np.asarray(fn(tf.constant(chunk, tf.int64), u), np.float32)[:rows])
  return np.concatenate(out)


def evaluate(
  model, split, *, max_len: int, ks=(10, 20), batch_size: int = 512, filter_rated: str = "all"
) -> dict:
  """{"recall@k", "ndcg@k", "num_queries"} over ``split`` (a `train.data.EvalSplit`)."""
  check_split(split, filter_rated)
  inputs = data_lib.left_pad(split.inputs, max_len)
  queries = query_embeddings(model, inputs, split.user_ids, batch_size)
  import tensorflow as tf  # loaded by query_embeddings

  table = np.asarray(tf.convert_to_tensor(model.all_item_embeddings()), np.float32)
  return evaluate_queries(
    queries, table, split, ks=ks, batch_size=batch_size, filter_rated=filter_rated
  )


def check_split(split, filter_rated: str) -> None:
  """Raises ValueError for an unknown ``filter_rated`` or a split without queries."""
  if filter_rated not in FILTER_RATED:
    raise ValueError(f"filter_rated must be one of {FILTER_RATED}, got {filter_rated!r}")
  if split.num_queries == 0:
    raise ValueError("evaluation split has no queries")


def evaluate_queries(
  queries: np.ndarray,
  table: np.ndarray,
  split,
  *,
  ks=(10, 20),
  batch_size: int = 512,
  filter_rated: str = "all",
  exact_top_k: Optional[Callable] = None,
) -> dict:
  """The metrics of `evaluate` from the split's query embeddings float [Q, d] and the item
  table float [num_items + 1, d] (row 0 padding), whatever framework computed them (the Keras 3
  binary, `train.keras3`, calls this with its own model's arrays). ``exact_top_k``: the search,
  `tfrs_logq.tf_keras.top_k.exact_top_k` (TensorFlow) when None, or one with its signature
  (`tfrs_logq.core.ranking.exact_top_k_np`)."""
  if exact_top_k is None:
    from tfrs_logq.tf_keras import top_k as top_k_lib

    exact_top_k = top_k_lib.exact_top_k
  check_split(split, filter_rated)
  table = np.asarray(table, np.float32)
  k_max = max(ks)
  if k_max > table.shape[0] - 1:
    raise ValueError(f"k={k_max} exceeds the catalog size {table.shape[0] - 1}")
  targets = split.targets
  ids, _ = exact_top_k(
    np.asarray(queries, np.float32),
    table,
    k_max,
    rated=split.inputs,
    targets=targets if filter_rated == "except_target" else None,
    chunk_size=batch_size,
  )
  out = ranking.retrieval_metrics(ids, targets, ks)
  out["num_queries"] = int(split.num_queries)
  return out
