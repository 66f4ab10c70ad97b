"""Serving SavedModel: user history -> top-k item ids and scores through the ScaNN TF ops.

Exported signature ``serving_default`` (and the method ``recommend``):

    inputs:  history  int64 [B, L]   item ids, oldest first, left-padded with 0; any L >= 1
                                     (cut or left-padded to the encoder's max_len inside)
    outputs: item_ids int64  [B, k]  recommended ids in 1..num_items, best first; -1 when
                                     fewer than k items remain after filtering
             scores   float32 [B, k] s(u, d) = <q_u, c_d> (float32 min in empty slots)

The query tower q_u = encoder(history) comes from the training export
(``export_dir/query_encoder``); the item embeddings (``item_embeddings.npy``, row 0 =
padding) are indexed by ScaNN (``eval.index.IndexConfig``) and the searcher's state is
stored in the SavedModel as variables (``scann_ops.ScannState``). The searcher is built from
them by the ``TensorsToScann`` op on the first call and kept by the op's kernel (with a fixed
``shared_name``, also in the resource manager) for later calls: measured on 300k items, the
first call took ~0.15 s and the following ones ~3 ms for 32 queries.

With ``filter_history=True`` (default) the items of each row of ``history`` are removed from
the results (rated-item filtering): the searcher over-fetches k + L candidates (L = the
history width, an upper bound of the distinct rated items), the rated ones are masked and
the best k remain.

The SavedModel uses ScaNN's custom ops (namespace ``Scann``): the process that loads it must
``import scann`` first (``load_serving_model`` does, and explains the problem when the ops are
missing). TF Serving needs a build with the ScaNN ops.
"""

import json
import pathlib
import uuid
from typing import Optional, Union

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import compiled

import numpy as np
import tensorflow as tf

from eval import index as index_lib
from train import data as data_lib
from train import export as export_lib

SCANN_OPS_MESSAGE = (
  "This SavedModel uses ScaNN's custom TensorFlow ops (namespace 'Scann'), which are not "
  "registered in this process. Install ScaNN (`pip install scann`, matching your "
  "TensorFlow version) and run `import scann` before `tf.saved_model.load(...)` (or use "
  "eval.serving.load_serving_model, which imports it). For TF Serving, use a model server "
  "built with the ScaNN ops."
)


class ScannOpsMissingError(RuntimeError):
  """The ScaNN TF ops needed by a serving SavedModel are not available."""


def _scann_ops():
  try:
    from scann.scann_ops.py import scann_ops
  except ImportError as e:
    raise ScannOpsMissingError(f"{SCANN_OPS_MESSAGE} (import failed: {e})") from e
  return scann_ops


def _encoder_fn(query_encoder):
  """(callable history[B, L] -> embedding[B, d], max_len or None) for a SavedModel/Keras model."""
  signatures = getattr(query_encoder, "signatures", None)
  if signatures is not None and "serving_default" in signatures:
    fn = signatures["serving_default"]
    spec = fn.structured_input_signature[1].get("history")
    if spec is None:
      raise ValueError("the query encoder's serving_default signature has no 'history' input")
    max_len = spec.shape[1] if spec.shape.rank == 2 else None
    return (lambda h: fn(history=h)["embedding"]), max_len
  if callable(query_encoder):

    def call(h):
      out = query_encoder(h)
      return out["embedding"] if isinstance(out, dict) else out

    return call, None
  raise ValueError(
    f"query_encoder must be a SavedModel with a serving_default signature or a "
    f"callable, got {type(query_encoder)}"
  )


class ServingModule(tf.Module):
  """history [B, L] -> top-k (item_ids, scores) through the ScaNN TF ops."""

  def __init__(
    self,
    query_encoder,
    item_embeddings,
    k: int = 10,
    max_len: Optional[int] = None,
    filter_history: bool = True,
    index_config: Optional[index_lib.IndexConfig] = None,
  ):
    super().__init__()
    emb = np.asarray(item_embeddings, np.float32)
    if int(k) != k or not 1 <= k <= emb.shape[0] - 1:
      raise ValueError(f"k must be in [1, {emb.shape[0] - 1}], got {k}")
    self.query_encoder = query_encoder  # tracked, so a loaded SavedModel is re-saved
    self._encode, sig_len = _encoder_fn(query_encoder)
    self.max_len = max_len or sig_len
    self.k = int(k)
    self.num_items = emb.shape[0] - 1
    self.filter_history = bool(filter_history)
    index = index_lib.ScannIndex(emb, self.k, index_config, backend="tf")
    self.index_config = index.config
    self.scann_state = index.searcher.serialize_to_module()
    self._shared_name = f"tfrs_logq_scann_serving_{uuid.uuid4().hex}"
    self._reorder_k = index.config.reorder_k if index.config.mode == "tree_ah" else -1

  def _fit_length(self, history):
    return data_lib.fit_length(history, self.max_len) if self.max_len else history

  @compiled.compile_function(
    input_signature=[tf.TensorSpec([None, None], tf.int64, name="history")]
  )
  def recommend(self, history):
    """history int64 [B, L] -> {"item_ids": int64 [B, k], "scores": float32 [B, k]}."""
    checks = [
      tf.debugging.assert_non_negative(history, message="history holds negative item ids"),
      tf.debugging.assert_less_equal(
        history, tf.constant(self.num_items, tf.int64), message="history holds ids above num_items"
      ),
    ]
    with tf.control_dependencies(checks):
      history = tf.identity(history)
    queries = tf.cast(self._encode(self._fit_length(history)), tf.float32)
    width = tf.shape(history)[1] if self.filter_history else 0
    fetch = tf.minimum(self.k + width, self.num_items)
    pre = tf.maximum(fetch, self._reorder_k) if self._reorder_k > 0 else -1
    ops = _scann_ops()
    st = self.scann_state
    # Built on the first call, then reused (the op kernel keeps it; the fixed shared_name
    # names it in the resource manager).
    handle = ops.tensors_to_scann(
      st.dataset,
      st.scann_config,
      st.serialized_partitioner,
      st.datapoint_to_token,
      st.ah_codebook,
      st.hashed_dataset,
      st.int8_dataset,
      st.int8_multipliers,
      st.dp_norms,
      shared_name=self._shared_name,
    )
    idx, scores = ops.scann_search_batched(handle, queries, fetch, pre, -1, False)
    idx = tf.cast(idx, tf.int64)
    low = tf.constant(np.finfo(np.float32).min, tf.float32)
    found = (idx >= 0) & tf.math.is_finite(scores)
    ids = tf.where(found, idx + 1, tf.constant(-1, tf.int64))
    valid = found
    if self.filter_history:
      rated = tf.reduce_any(tf.equal(ids[:, :, None], history[:, None, :]), axis=2)
      valid = valid & ~rated
    masked = tf.where(valid, scores, low)
    top_scores, pos = tf.math.top_k(masked, k=tf.minimum(self.k, fetch))
    top_ids = tf.gather(ids, pos, batch_dims=1)
    top_ids = tf.where(top_scores > low, top_ids, tf.constant(-1, tf.int64))
    missing = self.k - tf.shape(top_ids)[1]
    top_ids = tf.pad(top_ids, [[0, 0], [0, missing]], constant_values=-1)
    top_scores = tf.pad(top_scores, [[0, 0], [0, missing]], constant_values=low)
    return {"item_ids": top_ids, "scores": top_scores}


def export_serving_model(
  output_dir: Union[str, pathlib.Path],
  query_encoder,
  item_embeddings,
  *,
  k: int = 10,
  max_len: Optional[int] = None,
  filter_history: bool = True,
  index_config: Optional[index_lib.IndexConfig] = None,
) -> pathlib.Path:
  """Builds the ScaNN index and saves the serving SavedModel to ``output_dir``.

  Args:
    output_dir: where to write the SavedModel.
    query_encoder: a loaded SavedModel with ``serving_default(history) -> {"embedding"}``,
      a Keras model, or a path to such a SavedModel.
    item_embeddings: float [num_items + 1, d], row 0 = padding.
    k: results per query.
    max_len: history length the encoder expects (default: from its signature; None keeps L).
    filter_history: remove the history's items from the results.
    index_config: ScaNN parameters (``eval.index.IndexConfig``).
  Returns:
    The output directory.
  """
  if isinstance(query_encoder, (str, pathlib.Path)):
    query_encoder = tf.saved_model.load(str(query_encoder))
  module = ServingModule(
    query_encoder,
    item_embeddings,
    k=k,
    max_len=max_len,
    filter_history=filter_history,
    index_config=index_config,
  )
  return save_serving_module(module, output_dir)


def save_serving_module(
  module: ServingModule, output_dir: Union[str, pathlib.Path]
) -> pathlib.Path:
  """Saves a ServingModule (signature serving_default = recommend) and serving_meta.json."""
  output_dir = pathlib.Path(output_dir)
  tf.saved_model.save(
    module,
    str(output_dir),
    signatures={"serving_default": module.recommend},
    options=tf.saved_model.SaveOptions(namespace_whitelist=["Scann"]),
  )
  meta = {
    "k": module.k,
    "num_items": module.num_items,
    "max_len": module.max_len,
    "filter_history": module.filter_history,
    "index": vars(module.index_config),
    "signature": {
      "inputs": {"history": "int64 [B, L]"},
      "outputs": {"item_ids": "int64 [B, k]", "scores": "float32 [B, k]"},
    },
  }
  (output_dir / "serving_meta.json").write_text(json.dumps(meta, indent=2))
  return output_dir


def export_from_training_export(
  export_dir: Union[str, pathlib.Path], output_dir: Union[str, pathlib.Path], **kwargs
) -> pathlib.Path:
  """Serving model from a training export (query_encoder/, item_embeddings.npy,
  export_meta.json)."""
  export_dir = pathlib.Path(export_dir)
  kwargs.setdefault("max_len", export_lib.read_meta(export_dir).get("max_len"))
  emb = np.load(export_dir / "item_embeddings.npy")
  return export_serving_model(output_dir, export_dir / "query_encoder", emb, **kwargs)


def _is_missing_op_error(e: Exception) -> bool:
  text = str(e)
  return "Scann" in text or "not registered" in text or "Op type" in text


def load_serving_model(path: Union[str, pathlib.Path], *, import_scann: bool = True):
  """Loads a serving SavedModel; ``import scann`` first so its ops are registered.

  Raises:
    ScannOpsMissingError: ScaNN is not installed, or its ops are not registered (e.g.
      ``import_scann=False`` in a process that never imported it), with the fix spelled out.
  """
  if import_scann:
    _scann_ops()
  try:
    return tf.saved_model.load(str(path))
  except Exception as e:
    if _is_missing_op_error(e):
      raise ScannOpsMissingError(f"{SCANN_OPS_MESSAGE}\nOriginal error: {e}") from e
    raise
