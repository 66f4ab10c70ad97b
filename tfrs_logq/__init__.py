"""tfrs_logq: corrected logQ sampled softmax for TensorFlow Recommenders.

Importing this package sets ``TF_USE_LEGACY_KERAS=1`` when TensorFlow is not imported yet
(TFRS needs Keras 2) and raises a clear ImportError when ``tf.keras`` is already Keras 3.
"""

from tfrs_logq._keras_env import ensure_legacy_keras as _ensure_legacy_keras

_ensure_legacy_keras()

__version__ = "0.1.0"

_SUBMODULES = ("log_q", "losses", "accidental_hits", "logq_correction", "tasks", "metrics",
               "frequency", "negatives")
_EXPORTS = {"SampledSoftmaxLoss": "losses", "sampled_softmax_loss": "losses",
            "Retrieval": "tasks"}


def __getattr__(name):
  """Loads submodules on first use: `import tfrs_logq; tfrs_logq.tasks.Retrieval(...)` works,
  and a bare `import tfrs_logq` stays light (it does not pull in TFRS or ScaNN's ops)."""
  import importlib  # pylint: disable=g-import-not-at-top
  if name in _SUBMODULES:
    return importlib.import_module(f"tfrs_logq.{name}")
  if name in _EXPORTS:
    return getattr(importlib.import_module(f"tfrs_logq.{_EXPORTS[name]}"), name)
  raise AttributeError(f"module 'tfrs_logq' has no attribute {name!r}")
