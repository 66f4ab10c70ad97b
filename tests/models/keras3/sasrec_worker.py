"""Runs the Keras 3 SASRec on one backend (KERAS_BACKEND) with weights copied from the tf-keras
SASRec, and writes its outputs to an npz.

    KERAS_BACKEND=jax python sasrec_worker.py CASES.npz OUT.npz

Spawned by test_sasrec.py in a fresh process per backend (no TF_USE_LEGACY_KERAS): it imports
keras and models.keras3 only. For each case it builds the model from the case's config, sets the
copied weights sublayer by sublayer (`models.sasrec_weights.sublayers`, one order for both twins),
and records the hidden states, the queries, the scores, the same after a get_config round trip
and after a .keras round trip, the same with the encoder packed (`sasrec_ops.token_index`)
and the gradients of a fixed projection of the hidden states, padded and packed, and whether
importing keras and models.keras3 loaded TensorFlow.
"""

import json
import os
import sys
import tempfile

import numpy as np

from models.sasrec_weights import sublayers


def gradients(model, loss_fn):
  """d loss_fn() / d every trainable variable, flattened and concatenated (numpy)."""
  import keras

  variables = model.trainable_variables
  if keras.backend.backend() == "jax":
    import jax

    def loss(values):
      with keras.StatelessScope(state_mapping=list(zip(variables, values))):
        return loss_fn()

    grads = jax.grad(loss)([v.value for v in variables])
  else:
    import tensorflow as tf

    with tf.GradientTape() as tape:
      value = loss_fn()
    grads = [
      None if g is None else tf.convert_to_tensor(g)  # IndexedSlices -> dense
      for g in tape.gradient(value, variables)
    ]
  return np.concatenate(
    [
      np.zeros(int(np.prod(v.shape)), np.float32)
      if g is None  # unused
      else np.ravel(keras.ops.convert_to_numpy(g))
      for v, g in zip(variables, grads)
    ]
  )


def main(cases_path, out_path):
  import keras

  from models.keras3 import SASRec, sasrec_ops

  tensorflow_loaded = "tensorflow" in sys.modules  # before .keras saving (which may load it)
  cases = np.load(cases_path)
  names = json.loads(str(cases["names"]))
  out = {}
  np_ = keras.ops.convert_to_numpy
  for name in names:
    config = json.loads(str(cases[f"{name}/config"]))
    x = cases[f"{name}/inputs"]
    model = SASRec(**config)
    for sub, layer in sublayers(model):
      count = int(cases[f"{name}/w/{sub}/count"])
      layer.set_weights([cases[f"{name}/w/{sub}/{k}"] for k in range(count)])
    out[f"{name}/hidden"] = np_(model.encode(x))
    out[f"{name}/queries"] = np_(model.query_embeddings(x))
    out[f"{name}/scores"] = np_(model(x))
    out[f"{name}/train_queries"] = np_(
      model.training_queries({"inputs": x, "targets": x}, training=False).queries
    )
    clone = SASRec.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    out[f"{name}/config_roundtrip"] = np_(clone.query_embeddings(x))
    path = os.path.join(tempfile.mkdtemp(), "sasrec.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    out[f"{name}/keras_roundtrip"] = np_(loaded.query_embeddings(x))
    out[f"{name}/loaded_config"] = np.array(
      json.dumps({k: v for k, v in loaded.get_config().items() if k in config}, sort_keys=True)
    )
    out[f"{name}/dropout_differs"] = np.array(
      not np.allclose(np_(model.encode(x, training=True)), out[f"{name}/hidden"])
    )
    # token packing: the same function in inference, the same gradients; dropout in training
    tokens = sasrec_ops.token_index(x)
    out[f"{name}/packed_capacity"] = np.array(len(tokens.rows))
    out[f"{name}/packed_hidden"] = np_(model.encode(x, tokens=tokens))
    out[f"{name}/packed_exact_hidden"] = np_(
      model.encode(x, tokens=sasrec_ops.token_index(x, buckets=None))
    )
    out[f"{name}/packed_train_queries"] = np_(
      model.training_queries(
        sasrec_ops.with_token_index({"inputs": x, "targets": x}), training=False
      ).queries
    )
    weights = np.random.default_rng(7).normal(size=out[f"{name}/hidden"].shape).astype("float32")
    for key, t in (("padded", None), ("packed", tokens)):
      out[f"{name}/grads_{key}"] = gradients(
        model, lambda: keras.ops.sum(model.encode(x, tokens=t) * weights)
      )
    out[f"{name}/packed_dropout_differs"] = np.array(
      not np.allclose(
        np_(model.encode(x, training=True, tokens=tokens)), out[f"{name}/packed_hidden"]
      )
    )
  out["tensorflow_loaded"] = np.array(tensorflow_loaded)
  out["backend"] = np.array(keras.backend.backend())
  np.savez(out_path, **out)


if __name__ == "__main__":
  main(*sys.argv[1:])
