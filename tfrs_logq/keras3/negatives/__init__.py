"""Negative samplers for the Keras 3 path: in-batch, uniform (per batch / sequence / query),
mixed, and scoring; the Keras 3 twin of ``tfrs_logq.tf_keras.negatives`` with static shapes
(jit-safe).

* ``base``: the ``Negatives`` record, the ``NegativeSampler`` protocol (``sample_negatives``,
  ``score``) of both fronts; dedup as a mask (``first_occurrence_mask``), the
  numbering of distinct sequences (``first_occurrence_segments``).
* ``in_batch``: ``InBatchNegatives`` (the tf-keras sampler's arguments, the shared
  ``NegativeSampler`` protocol) over ``in_batch_negatives`` (log Q ``unigram`` /
  ``expected_count``; optional ``k_b`` subsample, ``num_negatives``).
* ``uniform``: ``UniformNegatives`` (``per="batch" | "sequence" | "query"``), log Q = -log |D|;
  ``block`` embeds its draws as one block of ``score_blocks``.
* ``mixed``: ``MixedNegatives`` (``unigram`` | ``mixture`` | ``expected_count``; optional
  ``k_b`` subsample, ``num_in_batch``); ``blocks`` gives its negatives with their embeddings by
  block (in-batch pool, uniform block) for ``score_blocks``.
* ``midx``: ``MIDXSampler``, the MIDX adaptive proposal Q(i|z) (``tfrs_logq.core.midx``), and
  ``MIDXRefreshCallback``.
* ``cross_batch``: ``CrossBatchNegatives``, a FIFO memory of the last M pushes' positives
  (``ids`` / ``embeddings`` mode, dedup over the memory, log Q ``unigram`` / ``expected_count``
  from ``tfrs_logq.core.cross_batch``); ``update`` after scoring.
* ``joined``: ``JoinedNegatives``, several samplers' blocks as one (``join_blocks``), each with
  its own Q(p) in Q'.
* ``cross_replica``: the in-batch pool is the global batch under ``keras.distribution`` data
  parallelism (JAX); ``all_gather_rows`` lays it out on every device.
* ``scoring``: ``score_negatives`` -> the arguments of ``sampled_softmax_loss``;
  ``score_blocks``, the same from embeddings given block by block; ``join_blocks``, several
  samplers' scores joined along N (each block's own Q(p) in Q' with ``rebase_q_prime``).

In-batch negatives keep all B rows and mark the ones that take part in ``Negatives.valid``
(first occurrence of each id, not padding), so the loss sees exactly the deduplicated pool of the
tf-keras path; the ``k_b`` subsample keeps a uniform subset of the distinct ids (the tf-keras
rule, ``tfrs_logq.core.negatives.subsample_first_occurrences``).
"""

from tfrs_logq.keras3.negatives.base import (
  CONVENTIONS,
  Negatives,
  first_occurrence_mask,
  first_occurrence_segments,
  validate_negatives,
)
from tfrs_logq.keras3.negatives.cross_batch import CrossBatchNegatives
from tfrs_logq.keras3.negatives.cross_replica import all_gather_rows, num_replicas
from tfrs_logq.keras3.negatives.in_batch import (
  InBatchNegatives,
  InBatchPool,
  expected_count_log_q,
  in_batch_negatives,
  in_batch_pool,
  subsample_indices,
)
from tfrs_logq.keras3.negatives.joined import JoinedNegatives
from tfrs_logq.keras3.negatives.midx import MIDXRefreshCallback, MIDXSampler
from tfrs_logq.keras3.negatives.mixed import MixedNegatives, mixture_log_q
from tfrs_logq.keras3.negatives.sampler import NegativeSampler
from tfrs_logq.keras3.negatives.scoring import (
  ScoredCandidates,
  embed_ids,
  join_blocks,
  score_blocks,
  score_negatives,
)
from tfrs_logq.keras3.negatives.uniform import UNIFORM_PER, UniformNegatives

__all__ = [
  "NegativeSampler",
  "Negatives",
  "InBatchNegatives",
  "CONVENTIONS",
  "first_occurrence_mask",
  "first_occurrence_segments",
  "in_batch_negatives",
  "in_batch_pool",
  "InBatchPool",
  "expected_count_log_q",
  "subsample_indices",
  "mixture_log_q",
  "num_replicas",
  "validate_negatives",
  "UniformNegatives",
  "UNIFORM_PER",
  "MixedNegatives",
  "ScoredCandidates",
  "score_negatives",
  "embed_ids",
  "score_blocks",
  "join_blocks",
  "CrossBatchNegatives",
  "JoinedNegatives",
  "all_gather_rows",
  "MIDXSampler",
  "MIDXRefreshCallback",
]
