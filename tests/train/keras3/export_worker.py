"""Loads an exported query encoder in a fresh Keras 3 process (KERAS_BACKEND) and writes its
validation queries and metrics to an npz.

    KERAS_BACKEND=jax python export_worker.py EXPORT_DIR OUT.npz

Spawned by test_binary.py (no TF_USE_LEGACY_KERAS): keras.saving.load_model of
query_encoder.keras after `import models.keras3`, the validation split of the export's run config
(`train.data`), and the metrics of `train.validation.evaluate_queries`.
"""

import json
import os
import sys

import numpy as np


def main(export_dir, out_path):
  # The application's config and data (tf-keras stack) first: on the tensorflow backend, keras
  # imported first would make tf.keras Keras 3, which `import tfrs_logq.tf_keras` rejects.
  from train import data as data_lib
  from train import validation
  from train.config import RunConfig

  # isort: split
  import keras

  import models.keras3  # noqa: F401

  encoder = keras.saving.load_model(os.path.join(export_dir, "query_encoder.keras"))
  with open(os.path.join(export_dir, "metadata.json")) as f:
    cfg = RunConfig.from_dict(json.load(f)["run_config"])
  data = cfg.data.load()
  inputs = data_lib.left_pad(data.val.inputs, cfg.max_len).astype(np.int32)
  queries = np.asarray(keras.ops.convert_to_numpy(encoder.serving_queries(inputs)))
  table = np.asarray(keras.ops.convert_to_numpy(encoder.all_item_embeddings()))
  metrics = validation.evaluate_queries(
    queries, table, data.val, batch_size=cfg.eval_batch_size, filter_rated=cfg.filter_rated
  )
  np.savez(
    out_path,
    queries=queries,
    metrics=np.array(json.dumps(metrics)),
    backend=np.array(keras.backend.backend()),
  )


if __name__ == "__main__":
  main(*sys.argv[1:])
