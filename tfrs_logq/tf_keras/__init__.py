"""tfrs_logq.tf_keras: the corrected logQ for tf-keras (Keras 2) and TensorFlow Recommenders.

The twin of ``tfrs_logq.keras3``: the same file names and the same public names, the formulas
from ``tfrs_logq.core`` (tested equal on every backend). TFRS 0.7 needs Keras 2, so importing
this package sets ``TF_USE_LEGACY_KERAS=1`` when TensorFlow is not imported yet and raises an
ImportError naming the fix when ``tf.keras`` is already Keras 3 (``tfrs_logq._keras_env``)::

    import tfrs_logq.tf_keras as tlt     # before `import tensorflow`
    import tensorflow as tf

* ``SamplingProbabilityCorrection`` (``logq_correction``): TFRS's layer of the misspelled name
  ``SamplingProbablityCorrection``, without the 1e-6 clip (``epsilon=1e-6`` restores it).
* ``RemoveAccidentalHits``, ``accidental_hit_mask`` (``accidental_hits``).
* ``sampled_softmax_loss`` / ``SampledSoftmaxLoss`` (``losses``): none / standard /
  standard_no_positive / corrected, per example, with the weight w and n.
* ``full_softmax_loss`` / ``FullSoftmaxLoss`` (``full_softmax``); ``bce_loss``, ``gbce_loss``,
  ``gbce_beta`` / ``GBCELoss`` (``gbce``).
* ``Retrieval`` (``retrieval``): the drop-in ``tfrs.tasks.Retrieval``.
* ``LazyAdam`` (``lazy_adam``); ``frequency`` (streaming estimators of Q); ``negatives``
  (in-batch, uniform, mixed, cross-replica, MIDX); ``top_k`` (the exact filtered top-k and the
  paper's metrics).

Only in this front (TensorFlow's own machinery): ``sharded`` (row access to tables sharded over
parameter servers), ``negatives.kmeans`` and ``negatives.midx_refresh`` (MIDX's index refresh
under tf.distribute). Names load on first use, so the import stays cheap (no TFRS, no ScaNN ops).
"""

import importlib
from typing import Any

from tfrs_logq import _keras_env

_keras_env.ensure_legacy_keras()

_SUBMODULES = (
  "accidental_hits",
  "frequency",
  "full_softmax",
  "gbce",
  "lazy_adam",
  "log_q",
  "logq_correction",
  "losses",
  "negatives",
  "retrieval",
  "sharded",
  "top_k",
)
# Public name -> the submodule that defines it (the names of tfrs_logq.keras3's __all__).
_EXPORTS = {
  "SamplingProbabilityCorrection": "logq_correction",
  "RemoveAccidentalHits": "accidental_hits",
  "accidental_hit_mask": "accidental_hits",
  "log_q_prime": "log_q",
  "sampled_softmax_loss": "losses",
  "SampledSoftmaxLoss": "losses",
  "LossOutput": "losses",
  "CORRECTIONS": "losses",
  "Q_PRIME_MODES": "losses",
  "Retrieval": "retrieval",
  "full_softmax_loss": "full_softmax",
  "FullSoftmaxLoss": "full_softmax",
  "bce_loss": "gbce",
  "gbce_loss": "gbce",
  "gbce_beta": "gbce",
  "GBCELoss": "gbce",
  "LazyAdam": "lazy_adam",
}

__all__ = [*_EXPORTS, "frequency", "negatives"]


def __getattr__(name: str) -> Any:
  """Imports a submodule or a public name on first use."""
  if name in _SUBMODULES:
    return importlib.import_module(f"{__name__}.{name}")
  if name in _EXPORTS:
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list:
  return sorted([*globals(), *_SUBMODULES, *_EXPORTS])
