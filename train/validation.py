"""Exact brute-force validation metrics for the training binary (filter-rated protocol).

For every evaluation query u (input history H_u, held-out target t_u) all items are scored,
s(u, d) = <q_u, c_d> / T, the items of the FULL history H_u (not only its last max_len items)
are removed except t_u, padding id 0 is removed, and with r_u the 0-based rank of t_u:

    Recall@k = mean_u 1[r_u < k],        NDCG@k = mean_u 1[r_u < k] / log2(r_u + 2).

The top-k and the metrics are `tfrs_logq.metrics.filtered_top_k_tf`, `recall_at_k_tf` and
`ndcg_at_k_tf` (ties: lower id first as top_k does).
"""

from __future__ import annotations

import numpy as np

import tfrs_logq  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

from tfrs_logq import metrics as metrics_lib
from models.sasrec import SASRec
from train import data as data_lib


def query_embeddings(model, inputs, user_ids=None) -> tf.Tensor:
  """Serving query embeddings [Q, d] of left-padded histories (SASRec or two-tower)."""
  inputs = tf.convert_to_tensor(inputs, tf.int64)
  if isinstance(model, SASRec):
    return model.query_embeddings(inputs)
  features = {"history": inputs}
  if user_ids is not None:
    features["user_id"] = tf.convert_to_tensor(user_ids, tf.int64)
  return model.query_embeddings(features)


def evaluate(model, split, *, max_len: int, ks=(10, 20), batch_size: int = 512,
             temperature: float = 1.0) -> dict:
  """{"recall@k", "ndcg@k", "num_queries"} over ``split`` (a `train.data.EvalSplit`)."""
  arrays = data_lib.eval_arrays(split, max_len)
  num_q = arrays["targets"].shape[0]
  if num_q == 0:
    raise ValueError("evaluation split has no queries")
  k_max = max(ks)
  table = tf.convert_to_tensor(model.all_item_embeddings())
  num_items = int(table.shape[0]) - 1
  if k_max > num_items:
    raise ValueError(f"k={k_max} exceeds the catalog size {num_items}")
  sums = {f"{m}@{k}": 0.0 for m in ("recall", "ndcg") for k in ks}
  splits = arrays["rated_row_splits"]
  for start in range(0, num_q, batch_size):
    stop = min(start + batch_size, num_q)
    q = query_embeddings(model, arrays["inputs"][start:stop], arrays["user_ids"][start:stop])
    scores = tf.matmul(q, table, transpose_b=True) / temperature
    rated = tf.RaggedTensor.from_row_splits(
        arrays["rated_values"][splits[start]:splits[stop]],
        splits[start:stop + 1] - splits[start]).to_tensor(0)
    targets = tf.constant(arrays["targets"][start:stop], tf.int64)
    top_ids, _ = metrics_lib.filtered_top_k_tf(scores, rated, k_max, targets=targets)
    for k in ks:
      sums[f"recall@{k}"] += float(tf.reduce_sum(metrics_lib.recall_at_k_tf(top_ids, targets, k)))
      sums[f"ndcg@{k}"] += float(tf.reduce_sum(metrics_lib.ndcg_at_k_tf(top_ids, targets, k)))
  out = {name: value / num_q for name, value in sums.items()}
  out["num_queries"] = int(num_q)
  return out


def numpy_reference(scores: np.ndarray, histories, targets: np.ndarray, k: int) -> tuple:
  """Independent numpy Recall@k / NDCG@k from a full score matrix (used by tests)."""
  recalls, ndcgs = [], []
  for s, h, t in zip(scores, histories, targets):
    s = s.astype(np.float64).copy()
    s[0] = -np.inf
    drop = np.array([i for i in set(np.asarray(h).tolist()) if i != t], np.int64)
    if drop.size:
      s[drop] = -np.inf
    rank = int(np.sum(s > s[t]) + np.sum((s == s[t]) & (np.arange(s.size) < t)))
    recalls.append(float(rank < k))
    ndcgs.append(1.0 / np.log2(rank + 2) if rank < k else 0.0)
  return float(np.mean(recalls)), float(np.mean(ndcgs))
