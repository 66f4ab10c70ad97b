r"""log Q of in-batch and mixed negatives under the stated conventions.

q_uni(d) is the estimator's per-draw unigram probability; an in-batch pool has B draws (valid
rows of the global batch), U distinct ids and n_b kept slots (n_b = min(U, k_b)); a mixed row
adds k_u uniform draws from a catalog D.

Uniform over a catalog D::

    log Q(d) = -log |D|

In-batch, ``expected_count`` (log E[count of d among the n_b in-batch negatives], and the
per-draw value of one of the n_b slots)::

    log E_b(d) = log pi(d) + log n_b - log max(U, 1),    pi(d) = 1 - (1 - q_uni(d))^B
    log Q(d)   = log E_b(d) - log max(n_b, 1)

Mixed (n_b in-batch slots, then k_u uniform slots)::

    unigram (the paper's):  log Q(d) = log q_uni(d);  where q_uni(d) = 0 (never seen):
                            log(k_u / ((n_b + k_u) |D|))
    mixture:                Q(d) = (n_b q_uni(d) + k_u / |D|) / (n_b + k_u)
    expected_count:         Q(d) = (E_b(d) + k_u / |D|) / (n_b + k_u)

    two blocks:             log Q = logaddexp(log b(d), log k_u - log |D|) - log(n_b + k_u)

all in log space (n_b, B, U float).

The ``k_b`` subsample of an in-batch pool keeps, of the U first occurrences (one row per
distinct id), the n_b = min(U, k_b) with the largest random keys; row r's key is z[rank(r)], z
iid uniform, rank(r) = r's index among the valid rows (so the kept ids do not depend on where
the padding rows are)::

    kept rows = top-k_b rows of (key if first else lowest), in increasing row order
"""

import math
from typing import Tuple

from tfrs_logq.core import log_q as log_q_lib
from tfrs_logq.core.ops import Ops, Tensor

__all__ = [
  "uniform_log_q",
  "expected_count_log_q",
  "expected_count_per_draw_log_q",
  "two_block_log_q",
  "mixture_log_q",
  "unigram_log_q",
  "subsample_first_occurrences",
]


def uniform_log_q(catalog_size: int) -> float:
  """-log |D|."""
  return -math.log(catalog_size)


def expected_count_log_q(
  ops: Ops, log_q_unigram: Tensor, num_draws: Tensor, num_distinct: Tensor, num_kept: Tensor
) -> Tensor:
  """log pi(d) + log n_b - log max(U, 1) (-inf for an empty pool)."""
  return (
    log_q_lib.log_inclusion_probability(ops, log_q_unigram, num_draws)
    + ops.log(num_kept)
    - ops.log(ops.maximum(num_distinct, 1.0))
  )


def expected_count_per_draw_log_q(
  ops: Ops, log_q_unigram: Tensor, num_draws: Tensor, num_distinct: Tensor, num_kept: Tensor
) -> Tensor:
  """log E_b(d) - log max(n_b, 1): the in-batch ``expected_count`` log Q of one slot."""
  return expected_count_log_q(ops, log_q_unigram, num_draws, num_distinct, num_kept) - ops.log(
    ops.maximum(num_kept, 1.0)
  )


def two_block_log_q(
  ops: Ops,
  log_in_batch_part: Tensor,
  num_in_batch: Tensor,
  num_uniform: int,
  catalog_size: int,
) -> Tensor:
  """log((e^{log_in_batch_part} + k_u / |D|) / (n_b + k_u))."""
  uniform = ops.full_like(log_in_batch_part, math.log(num_uniform) - math.log(catalog_size))
  return ops.logaddexp(log_in_batch_part, uniform) - ops.log(num_in_batch + float(num_uniform))


def mixture_log_q(
  ops: Ops, log_q_unigram: Tensor, num_in_batch: Tensor, num_uniform: int, catalog_size: int
) -> Tensor:
  """log((n_b q_uni(d) + k_u / |D|) / (n_b + k_u)); log q_uni = -inf or n_b = 0 is fine."""
  return two_block_log_q(
    ops, ops.log(num_in_batch) + log_q_unigram, num_in_batch, num_uniform, catalog_size
  )


def unigram_log_q(
  ops: Ops, log_q_unigram: Tensor, num_in_batch: Tensor, num_uniform: int, catalog_size: int
) -> Tensor:
  """log q_uni(d), or log(k_u / ((n_b + k_u) |D|)) where q_uni(d) = 0 (log q_uni not finite)."""
  unseen = (
    math.log(num_uniform) - math.log(catalog_size) - ops.log(num_in_batch + float(num_uniform))
  )
  return ops.where(ops.isfinite(log_q_unigram), log_q_unigram, unseen)


def subsample_first_occurrences(
  ops: Ops, first: Tensor, keys: Tensor, num_keep: int, lowest: Tensor
) -> Tuple[Tensor, Tensor]:
  """The k_b subsample of a static pool: (rows int32 [k_b] increasing, kept bool [k_b]).

  Of the rows marked ``first`` (bool [S], S >= k_b), the ``num_keep`` = k_b with the largest
  ``keys`` (int [S]); when fewer than k_b rows are first, the remaining slots hold other rows,
  ``kept`` False. ``lowest``: a value below every key of a first row (the keys' dtype minimum).
  """
  score = ops.where(first, keys, lowest)
  chosen = ops.sort(ops.cast(ops.top_k(score, num_keep, sorted=True)[1], "int32"))
  return chosen, ops.take(first, chosen)
