"""tfrs_logq: corrected logQ sampled softmax for TensorFlow Recommenders.

Importing this package sets ``TF_USE_LEGACY_KERAS=1`` when TensorFlow is not imported yet
(TFRS needs Keras 2) and raises a clear ImportError when ``tf.keras`` is already Keras 3.
"""

from tfrs_logq._keras_env import ensure_legacy_keras as _ensure_legacy_keras

_ensure_legacy_keras()

__version__ = "0.1.0"
