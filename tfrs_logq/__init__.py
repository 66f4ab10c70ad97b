"""tfrs_logq: corrected logQ sampled softmax for TensorFlow Recommenders.

Importing this package sets ``TF_USE_LEGACY_KERAS=1`` when TensorFlow is not imported yet
(TFRS needs Keras 2) and raises a clear ImportError when ``tf.keras`` is already Keras 3.
``import tfrs_logq.keras3`` (the Keras 3 path, any backend) and ``import tfrs_logq.core`` (the
framework-free formulas) skip that check; it then runs before the first tf-keras submodule is
imported, if any.
"""

from tfrs_logq import _keras_env

if _keras_env.importing_without_tf_keras():
  _keras_env.install_legacy_keras_guard()
else:
  _keras_env.ensure_legacy_keras()

__version__ = "0.1.0"

_SUBMODULES = (
  "log_q",
  "losses",
  "accidental_hits",
  "logq_correction",
  "tasks",
  "metrics",
  "frequency",
  "negatives",
)
_EXPORTS = {"SampledSoftmaxLoss": "losses", "sampled_softmax_loss": "losses", "Retrieval": "tasks"}


def __getattr__(name):
  """Loads submodules on first use: `import tfrs_logq; tfrs_logq.tasks.Retrieval(...)` works,
  and a bare `import tfrs_logq` stays light (it does not pull in TFRS or ScaNN's ops)."""
  import importlib  # pylint: disable=g-import-not-at-top

  if name in _SUBMODULES:
    return importlib.import_module(f"tfrs_logq.{name}")
  if name in _EXPORTS:
    return getattr(importlib.import_module(f"tfrs_logq.{_EXPORTS[name]}"), name)
  raise AttributeError(f"module 'tfrs_logq' has no attribute {name!r}")
