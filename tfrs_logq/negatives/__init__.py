"""Negative samplers for sampled softmax, each returning a `Negatives` with log Q.

* `InBatchNegatives`: the (global) batch's positives, deduplicated (first occurrence), optional
  ``k_b`` subsample; log Q = log q_uni (unigram per-draw probability; see `in_batch`).
* `UniformNegatives`: ``k_u`` uniform draws from an id range or id table; log Q = -log |D|.
* `MixedNegatives`: both, log Q under the ``"unigram"`` (paper) or ``"mixture"`` convention.
* `all_gather_rows` (`cross_replica`): global-batch pool under tf.distribute (differentiable).
* `score_negatives` -> `ScoredCandidates`: the inputs of `tfrs_logq.losses.sampled_softmax_loss`;
  `task_candidates`: candidate rows for the drop-in `tfrs_logq.tasks.Retrieval`.
* `MIDXSampler` (`midx`): adaptive query-dependent sampler, imported lazily.
"""

import importlib.util as _importlib_util

from tfrs_logq.negatives.cross_replica import all_gather_rows, num_replicas
from tfrs_logq.negatives.in_batch import (InBatchNegatives, dedup_first_occurrence,
                                          subsample_indices)
from tfrs_logq.negatives.mixed import CONVENTIONS, MixedNegatives, mixture_log_q
from tfrs_logq.negatives.scoring import ScoredCandidates, score_negatives, task_candidates
from tfrs_logq.negatives.base import Negatives, validate_negatives
from tfrs_logq.negatives.uniform import UniformNegatives

__all__ = ["Negatives", "validate_negatives", "InBatchNegatives", "dedup_first_occurrence",
           "subsample_indices", "UniformNegatives", "MixedNegatives", "mixture_log_q",
           "CONVENTIONS", "all_gather_rows", "num_replicas", "ScoredCandidates",
           "score_negatives", "task_candidates", "MIDXSampler"]


def __getattr__(name):
  """Lazy export of `MIDXSampler` from `tfrs_logq.negatives.midx` (imported on first use)."""
  if name == "MIDXSampler" and _importlib_util.find_spec("tfrs_logq.negatives.midx") is not None:
    from tfrs_logq.negatives.midx import MIDXSampler  # pylint: disable=g-import-not-at-top
    return MIDXSampler
  raise AttributeError(f"module 'tfrs_logq.negatives' has no attribute {name!r}")
