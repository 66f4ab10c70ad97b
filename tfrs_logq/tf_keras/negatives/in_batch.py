"""In-batch negatives: the batch's positives, deduplicated by id, optionally subsampled to k_b.

Pool. The positives ``p_1 .. p_B`` of the (global, see `cross_replica`) batch, their candidate
embeddings (already computed by the candidate tower for the positive scores: reused, never
recomputed) and their log Q. Rows where ``valid`` is False (padding) are left out.

Deduplication (deterministic). Distinct ids are kept in order of **first occurrence**; the
embedding and log Q of a distinct id are those of its first row, so its gradient flows to that row
(with an id table every row of an id holds the same vector). Optionally ``num_negatives = k_b``
keeps a uniformly random subset of ``min(U, k_b)`` of the ``U`` distinct ids (without replacement,
kept in first-occurrence order): every valid pool row r gets a random int32 key ``z[rank(r)]``
(``rank`` = its index among the valid rows, ``z`` a stateless draw of the step seed) and the
``k_b`` distinct ids with the largest keys of their first rows are kept. The same negatives are
shared by every query; each query masks its own positive later (accidental hits, `scoring`).

Static shapes (``static_shapes=True``, or automatically inside ``tf.function(jit_compile=True)``):
the pool keeps all ``B`` rows (all ``k_b`` slots with a subsample) and marks the first
occurrences in ``Negatives.valid`` instead of dropping the rest: dedup by a stable sort
(``tfrs_logq.tf_keras._static_shapes.first_occurrence``), subsample by ``top_k`` over the keys of
the first occurrences (padding slots when U < k_b). Padding rows of the batch (``valid``) stay in
the pool, masked; every masked slot has log Q = 0 (finite). Scoring masks the slots, so the loss, U,
n_b and the log Q of every convention equal the dynamic path's, and since the keys follow the rank
among valid rows the static subsample keeps the same ids as the dynamic one.

log Q conventions (``convention``; Q is a per-draw probability, see `tfrs_logq.tf_keras.log_q`):

* ``"unigram"`` (the paper's, default; ``"mixture"`` is the same for in-batch alone): each batch
  row is one draw from the unigram distribution, so

      log Q(d) = log q_uni(d) = log(#d / N)   (the frequency estimator's ``log_q``).

  The approximation: after deduplication an item is present once with inclusion probability
  ``pi(d) = 1 - (1 - Q(d))^B``, not ``B * Q(d)`` times. Self-normalised importance sampling only
  needs weights proportional to ``pi(d)``, and ``pi(d) ~ B * Q(d)`` while ``B * Q(d) << 1``; for
  items with ``B * Q(d)`` near or above 1 the true ``pi(d)`` saturates at 1, so ``log Q``
  over-corrects the most popular items by up to ``log(B * Q(d)) - log(pi(d))``.
* ``"expected_count"``: log Q_eff(d) = log E[#times d is among the negatives] - log n_b, with
  B the pool size (valid rows of the global batch), U its number of distinct ids and
  n_b = min(U, k_b) the negatives kept:

      E[count(d)] = pi(d) * n_b / U,   log Q_eff(d) = log pi(d) - log U,

  which makes the importance weights (1/n) e^{s} / Q_eff = e^{s} / E[count] Horvitz-Thompson
  (sum_d Q_eff(d) = E[U] / U ~ 1). Subsampling to ``k_b`` multiplies every inclusion probability
  by the same ``n_b / U``.

Both conventions need the per-draw q_uni (estimator or ``candidate_log_q``); the pool statistics
(B, U, n_b) of the step are returned by `InBatchNegatives.pool` as an `InBatchPool`.
"""

from typing import Any, Dict, NamedTuple, Optional, Tuple

from tfrs_logq.tf_keras import _static_shapes
from tfrs_logq.tf_keras.negatives import cross_replica
from tfrs_logq.tf_keras.negatives.base import (
  ItemTable,
  Negatives,
  as_float,
  as_ids,
  check_not_empty,
  check_positive_int,
  check_rank,
  check_same_dim,
)
from tfrs_logq.tf_keras.negatives.sampler import NegativeSampler

import tensorflow as tf

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import negatives as negatives_core
from tfrs_logq.core.ops import tf_ops

__all__ = [
  "InBatchNegatives",
  "InBatchPool",
  "CONVENTIONS",
  "dedup_first_occurrence",
  "first_occurrence_mask",
  "subsample_indices",
  "expected_count_log_q",
]

CONVENTIONS = core_checks.LOG_Q_CONVENTIONS


def dedup_first_occurrence(ids: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """Distinct ids in order of first occurrence.

  Args:
    ids: integer ``[B]``.

  Returns:
    ``(unique_ids [U] int64, first_index [U] int32, inverse [B] int32)`` with
    ``unique_ids[inverse] == ids`` and ``ids[first_index] == unique_ids``, ``first_index``
    the smallest position of each distinct id (increasing).
  """
  ids = as_ids(ids, "ids")
  check_rank(ids, 1, "ids")
  unique_ids, inverse = tf.unique(ids, out_idx=tf.int32)
  positions = tf.range(tf.shape(ids)[0], dtype=tf.int32)
  first_index = tf.math.unsorted_segment_min(positions, inverse, tf.shape(unique_ids)[0])
  return unique_ids, first_index, inverse


def first_occurrence_mask(ids: tf.Tensor, valid: Optional[tf.Tensor] = None) -> tf.Tensor:
  """Static-shape dedup: bool ``[B]``, True at the first valid row of each distinct id.

  ``boolean_mask(ids, mask)`` is ``dedup_first_occurrence(boolean_mask(ids, valid))[0]``; the
  shape is that of ``ids`` whatever the values (a stable sort, no `tf.unique`: XLA / TPU).

  Args:
    ids: integer ``[B]``.
    valid: optional bool ``[B]``; False rows are never a first occurrence.
  """
  ids = as_ids(ids, "ids")
  check_rank(ids, 1, "ids")
  if valid is not None:
    valid = tf.convert_to_tensor(valid)
    if valid.dtype != tf.bool:
      raise TypeError(f"valid must be bool, got {valid.dtype.name}")
  return _static_shapes.first_occurrence(ids, valid)[0]


def _random_keys(n: tf.Tensor, seed: Optional[tf.Tensor]) -> tf.Tensor:
  """int32 [n] uniform keys from a stateless ``[2]`` seed (a fresh one when None).

  Integer keys from a 32-bit seed (`_static_shapes.stateless_seed`): bit-identical with and
  without XLA (float draws are not), and the first m keys of a draw of n are the draw of m.
  """
  if seed is None:
    seed = tf.random.uniform([2], minval=0, maxval=2**32, dtype=tf.int64)
  return tf.random.stateless_uniform(
    tf.reshape(tf.cast(n, tf.int32), [1]),
    seed=_static_shapes.stateless_seed(seed),
    minval=None,
    maxval=None,
    dtype=tf.int32,
  )


def subsample_indices(n: tf.Tensor, k: int, seed: Optional[tf.Tensor] = None) -> tf.Tensor:
  """``min(n, k)`` distinct indices of ``range(n)`` chosen uniformly at random, increasing.

  The indices with the ``k`` largest of n random int32 keys (`InBatchNegatives` keeps its
  ``k_b`` distinct ids the same way, one key per valid pool row).

  Args:
    n: scalar int, the pool size.
    k: the number to keep (positive Python or numpy int; not bool or float).
    seed: optional ``[2]`` int seed for the stateless RNG (same seed -> same subset, also
      across replicas); None draws a fresh seed from the stateful global RNG.
  """
  k = check_positive_int(k, "num_negatives")
  n = tf.cast(n, tf.int32)
  _, chosen = tf.math.top_k(_random_keys(n, seed), k=tf.minimum(n, k))
  return tf.sort(chosen)


class InBatchPool(NamedTuple):
  """The in-batch negatives of one step with the pool statistics the conventions need.

  Attributes:
    negatives: `Negatives` (ids [n_b], embeddings [n_b, d], log_q [n_b] = the per-draw
      log q_uni of each negative, positive_log_q [B_local] = log q_uni of the queries' positives).
    num_draws: B, int32 scalar: pool rows (valid rows of the global batch) before dedup.
    num_distinct: U, int32 scalar: distinct ids of the pool (before the k_b subsample).
  """

  negatives: Negatives
  num_draws: tf.Tensor
  num_distinct: tf.Tensor

  @property
  def num_kept(self) -> tf.Tensor:
    """n_b = min(U, k_b), int32 scalar (the valid slots of a static-shape pool)."""
    if self.negatives.valid is None:
      return tf.shape(self.negatives.ids)[0]
    return tf.reduce_sum(tf.cast(self.negatives.valid, tf.int32))


def expected_count_log_q(log_q_unigram: tf.Tensor, pool: InBatchPool) -> tf.Tensor:
  """log E[count of d among the n_b in-batch negatives] = log pi(d) + log n_b - log U.

  pi(d) = 1 - (1 - q_uni(d))^B (`log_q.log_inclusion_probability`); -inf for an empty
  pool.
  """
  return negatives_core.expected_count_log_q(
    tf_ops(),
    tf.cast(log_q_unigram, tf.float32),
    tf.cast(pool.num_draws, tf.float32),
    tf.cast(pool.num_distinct, tf.float32),
    tf.cast(pool.num_kept, tf.float32),
  )


class InBatchNegatives(NegativeSampler):
  """Deduplicated (optionally subsampled, cross-replica) in-batch negatives.

  Negatives: the distinct positives of the (global) batch, in first-occurrence order, at most
  ``k_b`` of them (uniform subset). ``log Q(d) = log q_uni(d)`` (``"unigram"``, the paper's) or
  ``log pi(d) - log U`` with pi(d) = 1 - (1 - q_uni(d))^B (``"expected_count"``), q_uni from
  ``frequency_estimator.log_q`` or the caller's ``candidate_log_q``; see the module docstring.
  The sampler only reads the estimator: call ``frequency_estimator.update(ids)`` once per step
  yourself (with the step's candidate ids; the `tfrs_logq.tf_keras.frequency` estimators gather them
  across replicas).

  SASRec: pass the A non-padding positions' targets and embeddings (or all B*L positions with
  ``valid`` = not padding) as ``positive_ids`` / ``positive_embeddings``.

  Args:
    frequency_estimator: any object with ``log_q(ids) -> float [same shape]`` (log per-draw
      unigram probability), e.g. `tfrs_logq.tf_keras.frequency` estimators. May be None when every
      call passes ``candidate_log_q``.
    num_negatives: ``k_b``; None keeps every distinct id.
    cross_replica: under ``tf.distribute`` (inside ``strategy.run``) all-gather the pool over
      replicas so the global batch is the in-batch pool (see `cross_replica`).
    convention: ``"unigram"`` (= ``"mixture"`` here) or ``"expected_count"``.
    static_shapes: keep the pool at its full size with ``Negatives.valid`` (module docstring);
      None (default) = only while compiled by XLA.
  """

  def __init__(
    self,
    frequency_estimator: Any = None,
    *,
    num_negatives: Optional[int] = None,
    cross_replica: bool = True,
    convention: str = "unigram",
    static_shapes: Optional[bool] = None,
  ) -> None:
    if frequency_estimator is not None and not callable(
      getattr(frequency_estimator, "log_q", None)
    ):
      raise TypeError(
        "frequency_estimator must have a log_q(ids) method, got "
        f"{type(frequency_estimator).__name__}"
      )
    if num_negatives is not None:
      num_negatives = check_positive_int(num_negatives, "num_negatives")
    if convention not in CONVENTIONS:
      raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    self.frequency_estimator = frequency_estimator
    self.num_negatives = num_negatives
    self.cross_replica = bool(cross_replica)
    self.convention = convention
    self.static_shapes = None if static_shapes is None else bool(static_shapes)

  def get_config(self) -> Dict[str, Any]:
    """Constructor arguments; ``frequency_estimator`` is returned as the object itself."""
    return dict(
      frequency_estimator=self.frequency_estimator,
      num_negatives=self.num_negatives,
      cross_replica=self.cross_replica,
      convention=self.convention,
      static_shapes=self.static_shapes,
    )

  def unigram_log_q(self, ids: tf.Tensor) -> tf.Tensor:
    """log q_uni(d) of any ids from the estimator, float32."""
    if self.frequency_estimator is None:
      raise ValueError(
        "InBatchNegatives has no frequency_estimator: pass candidate_log_q to "
        "the call, or give an estimator to compute log Q of arbitrary ids"
      )
    ids = as_ids(ids, "ids")
    return tf.cast(self.frequency_estimator.log_q(ids), tf.float32)

  def log_q(self, ids: tf.Tensor, pool: Optional[InBatchPool] = None) -> tf.Tensor:
    """log Q(d) of any ids (e.g. the queries' positives) under the convention, float32.

    ``"expected_count"`` needs the step's ``pool`` (its B, U and n_b).
    """
    return self._convention_log_q(self.unigram_log_q(ids), pool)

  def _convention_log_q(self, log_q_unigram: tf.Tensor, pool: Optional[InBatchPool]) -> tf.Tensor:
    if self.convention != "expected_count":
      return log_q_unigram
    if pool is None:
      raise ValueError("convention='expected_count' needs the step's InBatchPool (B, U, n_b)")
    return negatives_core.expected_count_per_draw_log_q(
      tf_ops(),
      tf.cast(log_q_unigram, tf.float32),
      tf.cast(pool.num_draws, tf.float32),
      tf.cast(pool.num_distinct, tf.float32),
      tf.cast(pool.num_kept, tf.float32),
    )

  def pool(
    self,
    positive_ids: tf.Tensor,
    positive_embeddings: tf.Tensor,
    *,
    candidate_log_q: Optional[tf.Tensor] = None,
    valid: Optional[tf.Tensor] = None,
    seed: Optional[tf.Tensor] = None,
  ) -> InBatchPool:
    """The deduplicated, subsampled negatives with per-draw log q_uni and (B, U).

    Args: as `__call__`.
    """
    ids = as_ids(positive_ids, "positive_ids")
    emb = as_float(positive_embeddings, "positive_embeddings")
    check_rank(ids, 1, "positive_ids")
    check_rank(emb, 2, "positive_embeddings")
    deps = check_not_empty(ids, "positive_ids")
    deps += check_same_dim(ids, 0, emb, 0, "positive_ids vs positive_embeddings")
    if candidate_log_q is not None:
      log_q = as_float(candidate_log_q, "candidate_log_q")
      check_rank(log_q, 1, "candidate_log_q")
      deps += check_same_dim(ids, 0, log_q, 0, "positive_ids vs candidate_log_q")
    else:
      log_q = self.unigram_log_q(ids)
    if valid is not None:
      valid = tf.convert_to_tensor(valid)
      if valid.dtype != tf.bool:
        raise TypeError(f"valid must be bool, got {valid.dtype.name}")
      check_rank(valid, 1, "valid")
      deps += check_same_dim(ids, 0, valid, 0, "positive_ids vs valid")
    with tf.control_dependencies(deps):
      ids = tf.identity(ids)
    if _static_shapes.use_static_shapes(self.static_shapes):
      return self._static_pool(ids, emb, log_q, valid, seed)
    positive_log_q = log_q
    pool_ids, pool_emb, pool_log_q = ids, emb, log_q
    if valid is not None:
      pool_ids = tf.boolean_mask(pool_ids, valid)
      pool_emb = tf.boolean_mask(pool_emb, valid)
      pool_log_q = tf.boolean_mask(pool_log_q, valid)
    if self.cross_replica:
      pool_ids, pool_emb, pool_log_q = cross_replica.all_gather_rows(
        [pool_ids, pool_emb, pool_log_q]
      )
    unique_ids, first_index, _ = dedup_first_occurrence(pool_ids)
    num_distinct = tf.shape(unique_ids)[0]
    if self.num_negatives is not None:
      keys = tf.gather(_random_keys(tf.shape(pool_ids)[0], seed), first_index)
      _, chosen = tf.math.top_k(keys, k=tf.minimum(num_distinct, self.num_negatives))
      first_index = tf.gather(first_index, tf.sort(chosen))
      unique_ids = tf.gather(pool_ids, first_index)
    negatives = Negatives(
      ids=unique_ids,
      embeddings=tf.gather(pool_emb, first_index),
      log_q=tf.gather(pool_log_q, first_index),
      positive_log_q=positive_log_q,
    )
    return InBatchPool(negatives, tf.shape(pool_ids)[0], num_distinct)

  def _static_pool(
    self,
    ids: tf.Tensor,
    emb: tf.Tensor,
    log_q: tf.Tensor,
    valid: Optional[tf.Tensor],
    seed: Optional[tf.Tensor],
  ) -> InBatchPool:
    """The pool with static shapes: all rows (or k_b slots), ``Negatives.valid`` marking the
    kept first occurrences; masked slots get log Q = 0."""
    positive_log_q = log_q
    pool_valid = tf.ones_like(ids, tf.bool) if valid is None else valid
    pool_ids, pool_emb, pool_log_q = ids, emb, log_q
    if self.cross_replica:
      pool_ids, pool_emb, pool_log_q, pool_valid = cross_replica.all_gather_rows(
        [pool_ids, pool_emb, pool_log_q, pool_valid]
      )
    first, _, num_distinct = _static_shapes.first_occurrence(pool_ids, pool_valid)
    num_draws = tf.reduce_sum(tf.cast(pool_valid, tf.int32))
    if self.num_negatives is None:
      kept, rows = first, None
    else:
      k = self.num_negatives
      n = tf.shape(pool_ids)[0]
      # Row r's key is z[rank(r)]: the key the dynamic path gives the same row.
      keys = tf.gather(
        _random_keys(n, seed), tf.minimum(_static_shapes.valid_rank(pool_valid), n - 1)
      )
      lowest = tf.int64.min
      padded_keys = tf.concat([tf.cast(keys, tf.int64), tf.fill([k], lowest)], 0)  # >= k slots
      padded_first = tf.concat([first, tf.zeros([k], tf.bool)], 0)
      chosen, kept = negatives_core.subsample_first_occurrences(
        tf_ops(), padded_first, padded_keys, k, lowest
      )
      rows = tf.minimum(chosen, n - 1)
    take = (lambda x: x) if rows is None else (lambda x: tf.gather(x, rows))
    negatives = Negatives(
      ids=take(pool_ids),
      embeddings=take(pool_emb),
      log_q=tf.where(kept, take(pool_log_q), tf.zeros_like(take(pool_log_q))),
      positive_log_q=positive_log_q,
      valid=kept,
    )
    return InBatchPool(negatives, num_draws, num_distinct)

  def __call__(
    self,
    positive_ids: tf.Tensor,
    positive_embeddings: tf.Tensor,
    *,
    candidate_log_q: Optional[tf.Tensor] = None,
    valid: Optional[tf.Tensor] = None,
    seed: Optional[tf.Tensor] = None,
  ) -> Negatives:
    """Builds the in-batch negatives of one step from the batch's positives.

    Args:
      positive_ids: integer ``[B]``, the local batch's positive ids.
      positive_embeddings: ``[B, d]``, their candidate embeddings (reused; gradients flow back
        to the first row of each distinct id, on the replica that produced it).
      candidate_log_q: optional float ``[B]``, log q_uni of each positive (overrides the
        estimator, e.g. precomputed in the input pipeline).
      valid: optional bool ``[B]``; False rows (padding) are left out of the pool.
      seed: optional ``[2]`` int stateless seed for the ``k_b`` subsample.

    Returns:
      ``Negatives(ids [N], embeddings [N, d], log_q [N], positive_log_q [B])`` with log Q under
      the convention, ``positive_log_q`` that of the *local* positives (the queries' positives);
      on the static path N is the pool size (or k_b) and ``valid [N]`` marks the kept slots.

    Raises:
      TypeError / ValueError: wrong dtypes, ranks, mismatched sizes or an empty batch.
    """
    pool = self.pool(
      positive_ids, positive_embeddings, candidate_log_q=candidate_log_q, valid=valid, seed=seed
    )
    neg = pool.negatives
    return neg._replace(
      log_q=self._convention_log_q(neg.log_q, pool),
      positive_log_q=self._convention_log_q(neg.positive_log_q, pool),
    )

  def sample_negatives(
    self,
    query_embeddings: tf.Tensor,
    positive_ids: tf.Tensor,
    positive_embeddings: tf.Tensor,
    *,
    seed: Optional[tf.Tensor] = None,
    sequence_ids: Optional[tf.Tensor] = None,
    item_table: Optional[ItemTable] = None,
    valid: Optional[tf.Tensor] = None,
  ) -> Negatives:
    """`__call__` on the queries' positives (the in-batch pool; ``valid`` leaves padding out)."""
    del query_embeddings, sequence_ids, item_table
    return self(positive_ids, positive_embeddings, seed=seed, valid=valid)
