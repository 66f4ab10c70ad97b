"""SavedModel export for serving (read by the evaluation binary, issue 6).

Layout of ``export_dir``:
  query_encoder/        SavedModel, signature ``serving_default``:
                        ``history`` int64 [B, L] (left-padded, any L: the last max_len items are
                        kept, shorter inputs are left-padded) -> {"embedding": float32 [B, d]}
  item_embeddings/      SavedModel with the variable ``embeddings`` [num_items + 1, d] and
                        signature ``serving_default``: ``item_ids`` int64 [N] ->
                        {"embedding": float32 [N, d]}
  item_embeddings.npy   float32 [num_items + 1, d], row 0 = padding
  export_meta.json      {num_items, max_len, embedding_dim, model, dataset, loss, logq, negatives,
                         temperature}

Embeddings are raw (not divided by the temperature); s(u, d) = <q_u, c_d> / temperature.
A two-tower model with a user-id embedding is served with the unknown-user bucket (user id 0).
"""

from __future__ import annotations

import json
import os

import numpy as np

import tfrs_logq  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

from models.sasrec import SASRec


class QueryEncoder(tf.Module):
  """history int64 [B, L] -> {"embedding": [B, d]}."""

  def __init__(self, model, max_len: int):
    super().__init__(name="query_encoder")
    self.model = model
    self.max_len = max_len

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64, name="history")])
  def serve(self, history):
    l = tf.shape(history)[1]
    history = history[:, tf.maximum(l - self.max_len, 0):]
    pad = self.max_len - tf.shape(history)[1]
    history = tf.pad(history, [[0, 0], [pad, 0]])
    history = tf.ensure_shape(history, [None, self.max_len])
    if isinstance(self.model, SASRec):
      emb = self.model.query_embeddings(history)
    else:
      emb = self.model.query_embeddings(
          {"history": history, "user_id": tf.zeros([tf.shape(history)[0]], tf.int64)})
    return {"embedding": tf.cast(emb, tf.float32)}


class ItemEmbeddings(tf.Module):
  """item_ids int64 [N] -> {"embedding": [N, d]} from a saved variable."""

  def __init__(self, table: np.ndarray):
    super().__init__(name="item_embeddings")
    self.embeddings = tf.Variable(table, trainable=False, name="embeddings")

  @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="item_ids")])
  def serve(self, item_ids):
    return {"embedding": tf.gather(self.embeddings, item_ids)}


def export(model, export_dir: str, meta: dict) -> dict:
  """Writes the layout of the module docstring; returns the meta dict written."""
  os.makedirs(export_dir, exist_ok=True)
  required = ("num_items", "max_len", "model", "dataset", "loss", "logq", "negatives",
              "temperature")
  missing = [k for k in required if k not in meta]
  if missing:
    raise ValueError(f"export meta is missing {missing}")
  table = np.asarray(tf.convert_to_tensor(model.all_item_embeddings()), np.float32)
  if table.shape[0] != meta["num_items"] + 1:
    raise ValueError(f"item table has {table.shape[0]} rows, expected num_items + 1")
  encoder = QueryEncoder(model, int(meta["max_len"]))
  tf.saved_model.save(encoder, os.path.join(export_dir, "query_encoder"),
                      signatures={"serving_default": encoder.serve})
  items = ItemEmbeddings(table)
  tf.saved_model.save(items, os.path.join(export_dir, "item_embeddings"),
                      signatures={"serving_default": items.serve})
  np.save(os.path.join(export_dir, "item_embeddings.npy"), table)
  meta = dict(meta, embedding_dim=int(table.shape[1]))
  with open(os.path.join(export_dir, "export_meta.json"), "w") as f:
    json.dump(meta, f, indent=2, sort_keys=True)
  return meta
