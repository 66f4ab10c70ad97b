"""SavedModel export for serving (read by `python -m eval.evaluate` and `eval.serving`).

Layout of ``export_dir``:
  query_encoder/        SavedModel, signature ``serving_default``:
                        ``history`` int64 [B, L] (left-padded, any L: re-encoded to the last
                        max_len items by `train.data.fit_length`) -> {"embedding": float32 [B, d]}
                        = ``model.serving_queries`` (a two-tower model with a user-id embedding
                        serves the unknown-user bucket)
  item_embeddings/      SavedModel with the variable ``embeddings`` [num_items + 1, d] and
                        signature ``serving_default``: ``item_ids`` int64 [N] ->
                        {"embedding": float32 [N, d]}
  item_embeddings.npy   float32 [num_items + 1, d], row 0 = padding
  export_meta.json      {"num_items", "max_len", "embedding_dim",
                         "run_config": the whole `train.config.RunConfig` (its "data" entry is
                                       the `train.data.DataConfig` of the training data),
                         "data_fingerprint": `train.data.fingerprint` of that data,
                         "id_maps": {"item_ids": "item_ids.txt", "user_ids": ...} when the
                                    data renumbered its ids}
  item_ids.txt          line i (1-based) = the original id of item i, as in the data file
                        (readers that renumber: movielens_raw, sequences, interactions)
  user_ids.txt          line u = the original id of user u

Embeddings are raw (not divided by the temperature); s(u, d) = <q_u, c_d> / temperature.
Evaluation defaults its data settings to the recorded ones and refuses data whose fingerprint
differs.
"""

from __future__ import annotations

import json
import os

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import compiled, sharded

import numpy as np
import tensorflow as tf

from train import data as data_lib

__all__ = ["ItemEmbeddings", "QueryEncoder", "export", "read_meta", "write_id_maps"]

META_FILE = "export_meta.json"


def _sharded_variables(model) -> list:
  """The partitioned variables (tf.distribute ShardedVariable) held by ``model`` or its
  sub-modules, each once."""
  found = []
  for module in (model, *getattr(model, "submodules", ())):
    for value in vars(module).values():
      if sharded.is_sharded(value) and not any(value is f for f in found):
        found.append(value)
  return found


class QueryEncoder(tf.Module):
  """history int64 [B, L] -> {"embedding": [B, d]} through ``model.serving_queries``.

  Works for a tf-keras query model and for a Keras 3 one on the tensorflow backend (the Keras 3
  binary's SASRec, `train.keras3.trainer.export`): the SavedModel tracks the model's variables,
  not the model object (a Keras 3 model, tracked, would also trace its own default signature
  with float inputs), and the traced function reads them through ``serving_queries``.
  """

  def __init__(self, model, max_len: int):
    super().__init__(name="query_encoder")
    self.model_variables = list(model.variables)
    # Under ParameterServerStrategy `model.variables` lists the shards of a partitioned table,
    # while the traced function reads the ShardedVariable itself: it must be tracked too.
    self.sharded_variables = _sharded_variables(model)
    self._serving_queries = model.serving_queries  # a bound method: not tracked
    self.max_len = int(max_len)

  @compiled.compile_function(
    input_signature=[tf.TensorSpec([None, None], tf.int64, name="history")]
  )
  def serve(self, history):
    embedding = self._serving_queries(data_lib.fit_length(history, self.max_len))
    return {"embedding": tf.cast(embedding, tf.float32)}


class ItemEmbeddings(tf.Module):
  """item_ids int64 [N] -> {"embedding": [N, d]} from a saved variable."""

  def __init__(self, table: np.ndarray):
    super().__init__(name="item_embeddings")
    self.embeddings = tf.Variable(table, trainable=False, name="embeddings")

  @compiled.compile_function(input_signature=[tf.TensorSpec([None], tf.int64, name="item_ids")])
  def serve(self, item_ids):
    return {"embedding": tf.gather(self.embeddings, item_ids)}


def write_id_maps(export_dir, data) -> dict:
  """Writes item_ids.txt / user_ids.txt (line i = the original id of id i) for the maps in
  ``data.metadata``; returns {"item_ids": file name, ...} of the files written."""
  os.makedirs(export_dir, exist_ok=True)
  written = {}
  for key, name in (("item_original_ids", "item_ids"), ("user_original_ids", "user_ids")):
    ids = data.metadata.get(key)
    if ids is None:
      continue
    with open(os.path.join(str(export_dir), f"{name}.txt"), "w") as f:
      f.write("".join(f"{v}\n" for v in ids))
    written[name] = f"{name}.txt"
  return written


def export(model, export_dir: str, *, config, data) -> dict:
  """Writes the layout of the module docstring; returns the metadata written.

  Args:
    model: a query model (`models` interface: serving_queries, all_item_embeddings): tf-keras,
      or Keras 3 on the tensorflow backend.
    export_dir: output folder.
    config: the run's `train.config.RunConfig`.
    data: the `train.data.SequenceData` it was trained on.
  """
  os.makedirs(export_dir, exist_ok=True)
  table = np.asarray(tf.convert_to_tensor(model.all_item_embeddings()), np.float32)
  if table.shape[0] != data.num_items + 1:
    raise ValueError(
      f"item table has {table.shape[0]} rows, expected num_items + 1 = {data.num_items + 1}"
    )
  encoder = QueryEncoder(model, config.max_len)
  tf.saved_model.save(
    encoder,
    os.path.join(export_dir, "query_encoder"),
    signatures={"serving_default": encoder.serve},
  )
  items = ItemEmbeddings(table)
  tf.saved_model.save(
    items, os.path.join(export_dir, "item_embeddings"), signatures={"serving_default": items.serve}
  )
  np.save(os.path.join(export_dir, "item_embeddings.npy"), table)
  meta = dict(
    num_items=int(data.num_items),
    max_len=int(config.max_len),
    embedding_dim=int(table.shape[1]),
    run_config=config.to_dict(),
    data_fingerprint=data_lib.fingerprint(data),
  )
  id_maps = write_id_maps(export_dir, data)
  if id_maps:
    meta["id_maps"] = id_maps
  with open(os.path.join(export_dir, META_FILE), "w") as f:
    json.dump(meta, f, indent=2, sort_keys=True)
  return meta


def read_meta(export_dir) -> dict:
  """The export's metadata ({} when the file is missing)."""
  path = os.path.join(str(export_dir), META_FILE)
  if not os.path.exists(path):
    return {}
  with open(path) as f:
    return json.load(f)
