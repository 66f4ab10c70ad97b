"""Negative samplers for sampled softmax: draw the negatives of a step, score them, give log Q.

Every sampler is a `NegativeSampler`:
``sampler.score(query_embeddings [A, d], positive_ids [A], positive_embeddings [A, d], *,
temperature, seed, sequence_ids, item_table)`` returns a `ScoredCandidates` (positive_scores [A],
negative_scores [A, N], negative_log_q [N] or [A, N], valid_mask [A, N] with accidental hits
masked, positive_log_q [A]): the arguments of ``tfrs_logq.tf_keras.losses.sampled_softmax_loss``.
Q is the per-draw probability of one negative slot under each sampler's stated convention.

* `UniformNegatives` (`uniform`): k uniform draws from an id range or an id table, shared by the
  batch (``per="batch"``), one set per sequence (``"sequence"``) or per query (``"query"``, the
  paper code's per-position negatives); log Q = -log |D| exactly.
* `InBatchNegatives` (`in_batch`): the (global) batch's positives, deduplicated (first
  occurrence), optional ``k_b`` subsample; log Q = log q_uni (``"unigram"``) or the
  ``"expected_count"`` convention log pi(d) - log U, pi(d) = 1 - (1 - q_uni(d))^B. Inside XLA
  (or with ``static_shapes=True``) the pool keeps its full size and masks the duplicates
  (``Negatives.valid``; `first_occurrence_mask`), so a compiled step has static shapes.
* `MixedNegatives` (`mixed`): a shared in-batch block + a uniform block of any layout; log Q
  under ``"unigram"`` (the paper's), ``"mixture"`` (per-slot mixture) or ``"expected_count"``
  (log E[count of d among the row's n negatives] - log n; Horvitz-Thompson weights).
* `CrossBatchNegatives` (`cross_batch`): a FIFO memory of the last M pushes' positives (ids,
  scored with the current tower, or stored embeddings, up to M steps stale), deduplicated, the
  newest copy winning; log Q under ``"unigram"`` or ``"expected_count"`` over the pushes' draws
  (`tfrs_logq.core.cross_batch`); score, then ``update`` once per step.
* `JoinedNegatives` (`joined`): several samplers' blocks (in-batch + memory + uniform ...) scored
  block by block and joined by `join_blocks`, each later block's log Q rebased to the first
  block's Q(p) for ``corrected`` / ``q_prime="exact"`` (``rebase_q_prime``).
* `MIDXSampler` (`midx`): adaptive query-dependent proposal, exact log Q(d|z) [A, N]; imported
  lazily, as its index refresh `MIDXRefreshCallback` (`midx_refresh`).
* `ScoredCandidates` (`scoring`) with ``concat`` to join blocks (`join_blocks`: with the
  per-block rebase of log Q); `score_negatives` for any
  `Negatives`; `per_query_scores` / `per_segment_scores`: the exact scoring paths (gather, [A, V]
  matmul + gather, batched per-sequence matmul); `task_candidates`: candidate rows for the drop-in
  ``tfrs_logq.tf_keras.Retrieval``.
* `all_gather_rows` (`cross_replica`): the global-batch pool under tf.distribute
  (differentiable).
"""

import importlib.util as _importlib_util
from typing import Any

from tfrs_logq.tf_keras.negatives.base import Negatives, validate_negatives
from tfrs_logq.tf_keras.negatives.cross_batch import CrossBatchNegatives
from tfrs_logq.tf_keras.negatives.cross_replica import all_gather_rows, num_replicas
from tfrs_logq.tf_keras.negatives.in_batch import (
  CONVENTIONS,
  InBatchNegatives,
  InBatchPool,
  dedup_first_occurrence,
  expected_count_log_q,
  first_occurrence_mask,
  subsample_indices,
)
from tfrs_logq.tf_keras.negatives.joined import JoinedNegatives
from tfrs_logq.tf_keras.negatives.mixed import MixedNegatives, mixture_log_q
from tfrs_logq.tf_keras.negatives.sampler import NegativeSampler
from tfrs_logq.tf_keras.negatives.scoring import (
  MATMUL_GATHER_RATIO,
  ScoredCandidates,
  embed_ids,
  join_blocks,
  per_query_scores,
  per_segment_scores,
  score_negatives,
  task_candidates,
)
from tfrs_logq.tf_keras.negatives.uniform import UNIFORM_PER, UniformNegatives

__all__ = [
  "NegativeSampler",
  "Negatives",
  "validate_negatives",
  "ScoredCandidates",
  "join_blocks",
  "score_negatives",
  "task_candidates",
  "per_query_scores",
  "per_segment_scores",
  "embed_ids",
  "MATMUL_GATHER_RATIO",
  "UniformNegatives",
  "UNIFORM_PER",
  "InBatchNegatives",
  "InBatchPool",
  "dedup_first_occurrence",
  "first_occurrence_mask",
  "subsample_indices",
  "expected_count_log_q",
  "MixedNegatives",
  "mixture_log_q",
  "CONVENTIONS",
  "CrossBatchNegatives",
  "JoinedNegatives",
  "all_gather_rows",
  "num_replicas",
  "MIDXSampler",
  "MIDXRefreshCallback",
]


def __getattr__(name: str) -> Any:
  """Lazy export of `MIDXSampler` (`.midx`) and `MIDXRefreshCallback` (`.midx_refresh`),
  imported on first use."""
  if (
    name == "MIDXSampler"
    and _importlib_util.find_spec("tfrs_logq.tf_keras.negatives.midx") is not None
  ):
    from tfrs_logq.tf_keras.negatives.midx import MIDXSampler

    return MIDXSampler
  if name == "MIDXRefreshCallback":
    from tfrs_logq.tf_keras.negatives.midx_refresh import MIDXRefreshCallback

    return MIDXRefreshCallback
  raise AttributeError(f"module 'tfrs_logq.tf_keras.negatives' has no attribute {name!r}")
