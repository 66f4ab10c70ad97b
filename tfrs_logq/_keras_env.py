"""Makes sure TensorFlow uses the legacy Keras 2 (tf-keras) that TFRS needs.

TFRS 0.7.x is written against Keras 2. With TensorFlow >= 2.16, ``tf.keras`` is Keras 3
unless the environment variable ``TF_USE_LEGACY_KERAS=1`` is set *before* TensorFlow is
imported. This module sets it when TensorFlow has not been imported yet, and fails with a
message naming the fix when it is too late.

The Keras 3 path (``tfrs_logq.keras3``) needs none of this and must work in a process that uses
only Keras 3 (any backend, also after ``import tensorflow`` under Keras 3); the core
(``tfrs_logq.core``) imports no framework at all. So ``import tfrs_logq.keras3`` or ``import
tfrs_logq.core`` (or ``from tfrs_logq.keras3 import ...``) skips the check:
``importing_without_tf_keras`` sees that import in progress, and ``install_legacy_keras_guard``
defers the check to the first import of a tf-keras submodule (``tfrs_logq.losses``, ...), which
then sets the variable or raises exactly as ``import tfrs_logq`` would.
"""

import os
import sys

_FIX = (
  "tfrs_logq needs TensorFlow's legacy Keras (tf-keras 2.x), because TensorFlow "
  "Recommenders does. Set TF_USE_LEGACY_KERAS=1 in the environment before TensorFlow is "
  "imported (e.g. `export TF_USE_LEGACY_KERAS=1`), or import tfrs_logq before tensorflow, "
  "and make sure the `tf-keras` package (2.20.x) is installed. (The Keras 3 path needs none "
  "of this: `import tfrs_logq.keras3` works with any Keras 3 backend.)"
)

# Packages importable without tf-keras: importing them first defers the legacy-Keras check.
# (``import tfrs_logq._keras_env`` too: `train` calls ``prefer_legacy_keras`` that way.)
_WITHOUT_TF_KERAS = ("tfrs_logq.keras3", "tfrs_logq.core", "tfrs_logq._keras_env")
# Submodules that do not use tf.keras: importing them never needs the legacy-Keras check.
_NEUTRAL = _WITHOUT_TF_KERAS


def prefer_legacy_keras() -> None:
  """Sets TF_USE_LEGACY_KERAS=1 when TensorFlow is not imported yet and the variable is unset,
  without importing TensorFlow (the first step of ``ensure_legacy_keras``): for an application
  that also runs where TensorFlow is not installed (``train``, whose Keras 3 binary needs none)."""
  if "tensorflow" not in sys.modules and "TF_USE_LEGACY_KERAS" not in os.environ:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"


def ensure_legacy_keras():
  """Sets TF_USE_LEGACY_KERAS=1 if possible and checks that tf.keras is Keras 2.

  Returns:
    The ``tensorflow`` module.

  Raises:
    ImportError: ``tf.keras`` resolves to Keras 3 (TensorFlow was imported before the
      variable was set, or the variable is set to something other than 1), or tf-keras
      is missing.
  """
  prefer_legacy_keras()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

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


def importing_without_tf_keras() -> bool:
  """True while this thread is importing ``tfrs_logq.keras3`` or ``tfrs_logq.core`` (or one of
  their modules).

  Python imports the parent package first; its frames in ``importlib._bootstrap`` keep the
  name of the module being imported. ``from tfrs_logq import keras3`` imports ``tfrs_logq``
  itself first and is not recognised (the documented form is ``import tfrs_logq.keras3``).
  """
  frame = sys._getframe(1)  # pylint: disable=protected-access
  while frame is not None:
    if (
      frame.f_code.co_name == "_find_and_load"
      and frame.f_globals.get("__name__") == "importlib._bootstrap"
    ):
      name = frame.f_locals.get("name")
      if isinstance(name, str) and any(
        name == p or name.startswith(p + ".") for p in _WITHOUT_TF_KERAS
      ):
        return True
    frame = frame.f_back
  return False


class _LegacyKerasGuard:
  """Meta-path hook: runs ``ensure_legacy_keras`` before the first tf-keras submodule loads.

  It finds nothing itself (``find_spec`` returns None, so the normal finders load the module);
  it removes itself once the check has passed.
  """

  def find_spec(self, fullname, path=None, target=None):  # pylint: disable=unused-argument
    if fullname.startswith("tfrs_logq.") and not any(
      fullname == n or fullname.startswith(n + ".") for n in _NEUTRAL
    ):
      ensure_legacy_keras()
      if self in sys.meta_path:
        sys.meta_path.remove(self)
    return None


def install_legacy_keras_guard() -> None:
  """Defers ``ensure_legacy_keras`` to the first import of a tf-keras submodule."""
  if not any(isinstance(f, _LegacyKerasGuard) for f in sys.meta_path):
    sys.meta_path.insert(0, _LegacyKerasGuard())
