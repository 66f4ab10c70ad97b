"""tfrs_logq: corrected logQ sampled softmax for TensorFlow Recommenders.

Importing this package sets ``TF_USE_LEGACY_KERAS=1`` when TensorFlow is not imported yet
(TFRS needs Keras 2) and raises a clear ImportError when ``tf.keras`` is already Keras 3.
"""

from tfrs_logq._keras_env import ensure_legacy_keras as _ensure_legacy_keras

_ensure_legacy_keras()

__version__ = "0.1.0"

# Submodules, so that `import tfrs_logq; tfrs_logq.tasks.Retrieval(...)` works.
from tfrs_logq import log_q  # noqa: E402
from tfrs_logq import losses  # noqa: E402
from tfrs_logq import accidental_hits  # noqa: E402
from tfrs_logq import correction  # noqa: E402
from tfrs_logq import tasks  # noqa: E402
from tfrs_logq import metrics  # noqa: E402
from tfrs_logq import frequency  # noqa: E402
from tfrs_logq import negatives  # noqa: E402
from tfrs_logq.losses import SampledSoftmaxLoss, sampled_softmax_loss  # noqa: E402
from tfrs_logq.tasks import Retrieval  # noqa: E402
