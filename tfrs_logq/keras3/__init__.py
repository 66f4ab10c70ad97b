"""tfrs_logq.keras3: the corrected logQ for Keras 3 (keras-rs users; JAX, TensorFlow, PyTorch).

Only ``keras`` and ``keras.ops``; the formulas come from ``tfrs_logq.core``, shared with the
tf-keras front (``tfrs_logq.tf_keras``, the same file and class names) and tested against it on
every backend.

    import tfrs_logq.keras3 as tlk

* ``SamplingProbabilityCorrection``: keras-rs's layer of that name (same arguments), without
  the 1e-6 clip, taking Q or log Q, computing in float32.
* ``RemoveAccidentalHits``: keras-rs's signature, masks for real (lowest finite logit).
* ``sampled_softmax_loss`` / ``SampledSoftmaxLoss``: none / standard / standard_no_positive /
  corrected, per example, with the weight w and n.
* ``full_softmax_loss`` / ``FullSoftmaxLoss``; ``bce_loss``, ``gbce_loss``, ``gbce_beta`` /
  ``GBCELoss`` (gSASRec).
* ``Retrieval``: the TFRS-style task (scores, masks, corrections, reduction) for
  ``compute_loss`` / ``train_step`` / ``add_loss``.
* ``LazyAdam``: Adam whose embedding tables move only in the rows of the step, each row with
  its own update count in the bias correction (the tf-keras ``tfrs_logq.tf_keras.LazyAdam``'s rule).
* ``frequency.ExactCounts``, ``frequency.HashArrayEstimator``, ``frequency.CountMinSketch``:
  stateful estimators of Q.
* ``negatives``: in-batch, uniform (per batch / sequence / query), mixed (unigram / mixture /
  expected_count; the k_b subsample), cross-replica under ``keras.distribution`` (JAX),
  ``MIDXSampler`` (the MIDX adaptive proposal); ``score_negatives``.

``import tfrs_logq.keras3`` does not run the tf-keras front's switch (``import
tfrs_logq.tf_keras`` sets ``TF_USE_LEGACY_KERAS`` and rejects a Keras-3 ``tf.keras``), so it works
in a process that uses only Keras 3, with any backend, also after ``import tensorflow``.
"""

from tfrs_logq.keras3 import frequency, negatives
from tfrs_logq.keras3.accidental_hits import RemoveAccidentalHits, accidental_hit_mask
from tfrs_logq.keras3.full_softmax import FullSoftmaxLoss, full_softmax_loss
from tfrs_logq.keras3.gbce import GBCELoss, bce_loss, gbce_beta, gbce_loss
from tfrs_logq.keras3.lazy_adam import LazyAdam
from tfrs_logq.keras3.log_q import log_q_prime
from tfrs_logq.keras3.logq_correction import SamplingProbabilityCorrection
from tfrs_logq.keras3.losses import (
  CORRECTIONS,
  Q_PRIME_MODES,
  LossOutput,
  SampledSoftmaxLoss,
  sampled_softmax_loss,
)
from tfrs_logq.keras3.retrieval import Retrieval

__all__ = [
  "SamplingProbabilityCorrection",
  "RemoveAccidentalHits",
  "accidental_hit_mask",
  "log_q_prime",
  "sampled_softmax_loss",
  "SampledSoftmaxLoss",
  "LossOutput",
  "CORRECTIONS",
  "Q_PRIME_MODES",
  "Retrieval",
  "frequency",
  "negatives",
  "full_softmax_loss",
  "FullSoftmaxLoss",
  "bce_loss",
  "gbce_loss",
  "gbce_beta",
  "GBCELoss",
  "LazyAdam",
]
