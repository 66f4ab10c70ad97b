"""Runs `models.keras3.dropout.Dropout` on one backend (KERAS_BACKEND, set by test_dropout.py in a
fresh process) and saves what it drew: ``python dropout_worker.py OUT.npz``."""

import sys

import numpy as np


def main(out_path):
  import keras

  from models.keras3.dropout import Dropout

  out = {"backend": np.array(keras.backend.backend())}
  x = np.full((64, 100, 32), 2.0, np.float32)
  for rate in (0.5, 0.3):
    layer = Dropout(rate, seed=7)
    out[f"{rate}/first"] = keras.ops.convert_to_numpy(layer(x, training=True))
    out[f"{rate}/second"] = keras.ops.convert_to_numpy(layer(x, training=True))
    again = Dropout(rate, seed=7)
    out[f"{rate}/same_seed"] = keras.ops.convert_to_numpy(again(x, training=True))
    out[f"{rate}/inference"] = keras.ops.convert_to_numpy(layer(x, training=False))
    clone = Dropout.from_config(layer.get_config())
    out[f"{rate}/config"] = np.array(repr(sorted(clone.get_config().items())))
    out[f"{rate}/config_want"] = np.array(repr(sorted(layer.get_config().items())))
  restored = keras.saving.deserialize_keras_object(
    keras.saving.serialize_keras_object(Dropout(0.5, seed=1))
  )
  out["deserialized_class"] = np.array(type(restored).__module__ + "." + type(restored).__name__)
  out["rate0"] = keras.ops.convert_to_numpy(Dropout(0.0, seed=1)(x, training=True))
  try:
    Dropout(0.5, noise_shape=(1, 100, 32))
    out["noise_shape_error"] = np.array("")
  except ValueError as e:
    out["noise_shape_error"] = np.array(str(e))
  np.savez(out_path, **out)


if __name__ == "__main__":
  main(sys.argv[1])
