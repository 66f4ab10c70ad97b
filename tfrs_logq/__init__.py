"""tfrs_logq: corrected logQ sampled softmax for TensorFlow Recommenders and Keras 3.

Three packages, side by side; importing ``tfrs_logq`` itself does nothing but name them:

* ``tfrs_logq.core``: the formulas, framework-free (numpy, TensorFlow or keras.ops through one
  ``Ops`` protocol).
* ``tfrs_logq.tf_keras``: the tf-keras (Keras 2) front for TensorFlow Recommenders; importing it
  selects legacy Keras (``TF_USE_LEGACY_KERAS=1``) before TensorFlow loads.
* ``tfrs_logq.keras3``: the Keras 3 front (JAX, TensorFlow, PyTorch), the same file and class
  names.

The names of the first releases, where the package root was the tf-keras front
(``tfrs_logq.tasks.Retrieval``, ``from tfrs_logq import frequency, losses, negatives, tasks``),
still resolve, lazily and with a DeprecationWarning, to their place in ``tfrs_logq.tf_keras``.
"""

import importlib
import warnings
from typing import Any

__version__ = "0.2.0"

_FRONTS = ("core", "keras3", "tf_keras")
# Deprecated name at the root -> its module in tfrs_logq.tf_keras.
_MOVED_MODULES = {
  "accidental_hits": "accidental_hits",
  "frequency": "frequency",
  "lazy_adam": "lazy_adam",
  "log_q": "log_q",
  "logq_correction": "logq_correction",
  "losses": "losses",
  "metrics": "top_k",
  "negatives": "negatives",
  "sharded": "sharded",
  "tasks": "retrieval",
}
# Deprecated names of classes and functions at the root (now tfrs_logq.tf_keras's own names).
_MOVED_NAMES = ("Retrieval", "SampledSoftmaxLoss", "sampled_softmax_loss")


def __getattr__(name: str) -> Any:
  """The fronts on first use; the former names with a DeprecationWarning."""
  if name in _FRONTS:
    return importlib.import_module(f"tfrs_logq.{name}")
  if name in _MOVED_MODULES:
    where = f"tfrs_logq.tf_keras.{_MOVED_MODULES[name]}"
  elif name in _MOVED_NAMES:
    where = f"tfrs_logq.tf_keras.{name}"
  else:
    raise AttributeError(f"module 'tfrs_logq' has no attribute {name!r}")
  warnings.warn(
    f"tfrs_logq.{name} has moved to {where}; the old name will be removed",
    DeprecationWarning,
    stacklevel=2,
  )
  if name in _MOVED_MODULES:
    return importlib.import_module(where)
  return getattr(importlib.import_module("tfrs_logq.tf_keras"), name)
