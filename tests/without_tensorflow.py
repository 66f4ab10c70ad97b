"""Subprocess environments as on a machine without TensorFlow: `hide(env)` puts
``no_tensorflow_site/`` first on PYTHONPATH, whose sitecustomize makes every import of tensorflow,
tf_keras, TFRS, ScaNN and TFDS raise ModuleNotFoundError.

The Keras 3 tests start their jax and torch processes this way. It is the case the Keras 3 front
promises to work in (a GPU machine with JAX or PyTorch alone): a library import of TensorFlow
fails the test instead of passing unnoticed. It also spares each process the ~9 s of CPU that
Keras 3 would spend importing TensorFlow where it is installed (its ``get_config`` looks for
``tf.TensorShape``).
"""

import os
import pathlib

SITE = pathlib.Path(__file__).resolve().parent / "no_tensorflow_site"


def hide(env: dict, also=()) -> dict:
  """``env`` with TensorFlow (and the top-level modules ``also``) hidden from the process (a
  new dict)."""
  path = env.get("PYTHONPATH", "")
  out = dict(env, PYTHONPATH=f"{SITE}{os.pathsep}{path}" if path else str(SITE))
  if also:
    out["HIDDEN_ALSO"] = ",".join(also)
  return out


def for_backend(env: dict, backend: str) -> dict:
  """``env`` as is on the tensorflow backend, TensorFlow hidden on the others."""
  return env if backend == "tensorflow" else hide(env)
