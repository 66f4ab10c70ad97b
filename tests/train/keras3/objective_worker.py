"""The Keras 3 objective's loss on a fixed batch with copied SASRec weights, in a fresh Keras 3
process.

    KERAS_BACKEND=jax python objective_worker.py CASES.npz OUT.npz

Spawned by test_objective_losses.py (no TF_USE_LEGACY_KERAS): it builds
`train.keras3.objective.RetrievalModel` from the case's RunConfig settings as the binary does,
sets the tf-keras model's weights sublayer by sublayer (`models.sasrec_weights`) and writes
``compute_loss`` of ``call(batch, training=False)``, padded and with the batch's token index
(the encoder packed).
"""

import json
import sys
import types

import numpy as np

from models import sasrec_weights


def main(cases_path, out_path):
  import keras
  from keras import ops

  from models.keras3 import sasrec_ops
  from train.config import RunConfig
  from train.keras3 import objective

  cases = np.load(cases_path)
  out = {"backend": np.array(keras.backend.backend())}
  for name in json.loads(str(cases["names"])):
    settings = json.loads(str(cases[f"{name}/settings"]))
    cfg = RunConfig.create(**settings)
    counts = cases[f"{name}/counts"]
    data = types.SimpleNamespace(num_items=len(counts) - 1, item_counts=counts)
    encoder = objective.build_encoder(cfg, data.num_items)
    model = objective.RetrievalModel(
      cfg, encoder, objective.build_estimator(cfg, data), name="retrieval"
    )
    batch = {k: cases[f"{name}/{k}"].astype(np.int32) for k in ("inputs", "targets")}
    model(batch, training=False)  # builds the encoder's sublayers
    for sub, layer in sasrec_weights.sublayers(encoder):
      count = int(cases[f"{name}/w/{sub}/count"])
      layer.set_weights([cases[f"{name}/w/{sub}/{k}"] for k in range(count)])
    loss = model.compute_loss(y_pred=model(batch, training=False))
    out[f"{name}/loss"] = np.asarray(ops.convert_to_numpy(loss))
    packed = sasrec_ops.with_token_index(batch)  # the binary's packed batch
    loss = model.compute_loss(y_pred=model(packed, training=False))
    out[f"{name}/loss_packed"] = np.asarray(ops.convert_to_numpy(loss))
  np.savez(out_path, **out)


if __name__ == "__main__":
  main(*sys.argv[1:])
