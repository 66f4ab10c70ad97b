"""Makes sure TensorFlow uses the legacy Keras 2 (tf-keras) that TFRS needs.

TFRS 0.7.x is written against Keras 2. With TensorFlow >= 2.16, ``tf.keras`` is Keras 3 unless
the environment variable ``TF_USE_LEGACY_KERAS=1`` is set *before* TensorFlow is imported.
``ensure_legacy_keras`` sets it when TensorFlow is not imported yet and fails with a message
naming the fix when it is too late. The tf-keras front (``tfrs_logq.tf_keras``) calls it when it
is imported, and nothing else does: ``import tfrs_logq``, ``tfrs_logq.core`` and
``tfrs_logq.keras3`` leave the process as they find it. Importing this module does nothing.
"""

import os
import sys
from typing import Any

_FIX = (
  "the tf-keras front of tfrs_logq needs TensorFlow's legacy Keras (tf-keras 2.x), because "
  "TensorFlow Recommenders does. Set TF_USE_LEGACY_KERAS=1 in the environment before TensorFlow "
  "is imported (e.g. `export TF_USE_LEGACY_KERAS=1`), or import tfrs_logq.tf_keras before "
  "tensorflow, and make sure the `tf-keras` package (2.20.x) is installed. (The Keras 3 front "
  "needs none of this: `import tfrs_logq.keras3` works with any Keras 3 backend.)"
)


def prefer_legacy_keras() -> None:
  """Sets TF_USE_LEGACY_KERAS=1 when TensorFlow is not imported yet and the variable is unset,
  without importing TensorFlow (the first step of ``ensure_legacy_keras``): for an application
  that also runs where TensorFlow is not installed (``train``, whose Keras 3 binary needs none)."""
  if "tensorflow" not in sys.modules and "TF_USE_LEGACY_KERAS" not in os.environ:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"


def ensure_legacy_keras() -> Any:
  """Sets TF_USE_LEGACY_KERAS=1 if possible and checks that tf.keras is Keras 2.

  Returns:
    The ``tensorflow`` module.

  Raises:
    ImportError: ``tf.keras`` resolves to Keras 3 (TensorFlow was imported before the
      variable was set, or the variable is set to something other than 1), or tf-keras
      is missing.
  """
  prefer_legacy_keras()
  import tensorflow as tf

  try:
    module = tf.keras.Model.__module__
  except Exception as e:  # tf-keras missing: tf.keras fails to resolve.
    raise ImportError(f"Could not load tf.keras ({e}). {_FIX}") from e
  if not module.startswith("tf_keras"):
    raise ImportError(
      f"tf.keras resolves to Keras 3 ({module}); TF_USE_LEGACY_KERAS="
      f"{os.environ.get('TF_USE_LEGACY_KERAS')!r}. {_FIX}"
    )
  return tf
