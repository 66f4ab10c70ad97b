r"""In-batch negatives on the Keras 3 path: the batch's positives, deduplicated as a mask,
optionally subsampled to k_b distinct ids.

The pool is the B positives of the (global, see ``cross_replica``) batch; all B rows are kept
(static shapes) and ``Negatives.valid`` marks the first valid occurrence of each id, so the loss
sees exactly the deduplicated pool of ``tfrs_logq.tf_keras.negatives.InBatchNegatives``. With
``num_negatives = k_b`` (the tf-keras ``k_b`` option, same semantics) a uniformly random subset
of n_b = min(U, k_b) of the U distinct ids is kept: row r gets the random key z[rank(r)]
(``rank`` = its index among the valid rows, z iid uniform int32) and the k_b first occurrences
with the largest keys are kept (``tfrs_logq.core.negatives.subsample_first_occurrences``); the
pool then has k_b slots (when k_b < B), in increasing row order, ``valid`` marking the kept
ones. With B the valid rows, U their distinct ids and n_b the kept slots, log Q of a slot
(formulas in ``tfrs_logq.core.negatives``)::

    unigram / mixture:  log Q(d) = log q_uni(d)
    expected_count:     log Q(d) = log pi(d) + log n_b - log U - log n_b,
                        pi(d) = 1 - (1 - q_uni(d))^B

(``expected_count``: log E[count of d among the n_b negatives] - log n_b, so the importance
weights e^s / (n Q) are Horvitz-Thompson weights e^s / E[count].) Randomness of the subsample:
``seed`` (an int, a ``keras.random.SeedGenerator``) or explicit ``keys`` z.
"""

import numbers
from typing import Any, Dict, NamedTuple, Optional, Tuple, cast

import keras
from keras import ops

from tfrs_logq.core import negatives as negatives_core
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3._tensors import Seed, Tensor
from tfrs_logq.keras3.negatives import base, scoring
from tfrs_logq.keras3.negatives import cross_replica as cross_replica_lib
from tfrs_logq.keras3.negatives.sampler import NegativeSampler

__all__ = [
  "InBatchNegatives",
  "InBatchPool",
  "in_batch_pool",
  "convention_log_q",
  "expected_count_log_q",
  "in_batch_negatives",
  "subsample_indices",
]


class InBatchPool(NamedTuple):
  """The in-batch negatives of one step (log_q = per-draw log q_uni) with B and U (float32
  scalars); n_b = the valid slots (U, or min(U, k_b) with a subsample)."""

  negatives: base.Negatives
  num_draws: Any
  num_distinct: Any

  @property
  def num_kept(self) -> Tensor:
    return ops.sum(ops.cast(self.negatives.valid, "float32"))


_INT32_MIN = -(2**31)


def check_num_negatives(num_negatives: object, name: str = "num_negatives") -> Optional[int]:
  """k_b: None or a positive Python / numpy int (not bool or float), as the tf-keras path."""
  if num_negatives is None:
    return None
  if (
    isinstance(num_negatives, bool)
    or not isinstance(num_negatives, numbers.Integral)
    or num_negatives <= 0
  ):
    raise ValueError(f"{name} must be a positive int, got {num_negatives!r}")
  return int(num_negatives)


def random_keys(n: int, seed: Optional[Seed] = None) -> Tensor:
  """z: n iid uniform int32 keys >= 0 from ``seed`` (int, SeedGenerator or None)."""
  return keras.random.randint((n,), 0, 2**31 - 1, dtype="int32", seed=seed)


def subsample_indices(n: int, k: int, seed: Optional[Seed] = None) -> Tensor:
  """``min(n, k)`` distinct indices of ``range(n)`` chosen uniformly at random, increasing
  (int32): those with the ``k`` largest of n `random_keys` (the k_b subsample's rule).

  Args:
    n: the pool size, a Python int (static shapes).
    k: the number to keep (positive Python or numpy int; not bool or float).
    seed: int, ``keras.random.SeedGenerator`` or None (the tf-keras function takes a stateless
      ``[2]`` seed instead: tf-keras draws statelessly per call, Keras 3 from a seed state).
  """
  if k is None:
    raise ValueError("num_negatives must be a positive int, got None")
  k = cast(int, check_num_negatives(k))  # not None: k is not None here
  if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
    raise ValueError(f"n must be a non-negative Python int (static shapes), got {n!r}")
  keep = min(int(n), k)
  if keep == 0:
    return ops.zeros((0,), "int32")
  chosen = ops.top_k(random_keys(int(n), seed), keep, sorted=False)[1]
  return ops.sort(ops.cast(chosen, "int32"))


def _subsample(
  ids: Tensor,
  emb: Tensor,
  log_q: Tensor,
  keep: Tensor,
  pool_valid: Tensor,
  num_negatives: int,
  seed: Optional[Seed],
  keys: Optional[Tensor],
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
  """The k_b slots of the pool: (ids, emb, log_q, kept) gathered at the kept rows."""
  b = ids.shape[0]
  if num_negatives >= b:  # every distinct id fits: nothing to drop
    return ids, emb, log_q, keep
  if keys is None:
    keys = random_keys(b, seed)
  keys = ops.cast(ops.convert_to_tensor(keys), "int32")
  _tensors.check_rank(keys, 1, "keys")
  _tensors.check_same_dim(ids, 0, keys, 0, "positive_ids vs keys")
  rank = ops.cumsum(ops.cast(pool_valid, "int32")) - ops.cast(pool_valid, "int32")
  row_keys = ops.take(keys, ops.minimum(rank, b - 1))
  rows, kept = negatives_core.subsample_first_occurrences(
    ops, keep, row_keys, num_negatives, _INT32_MIN
  )
  return (ops.take(ids, rows), ops.take(emb, rows, axis=0), ops.take(log_q, rows), kept)


def in_batch_pool(
  positive_ids: Tensor,
  positive_embeddings: Tensor,
  log_q: Tensor,
  valid: Optional[Tensor] = None,
  cross_replica: bool = True,
  *,
  num_negatives: Optional[int] = None,
  seed: Optional[Seed] = None,
  keys: Optional[Tensor] = None,
) -> InBatchPool:
  """The pool of :func:`in_batch_negatives` under the ``unigram`` log Q, with B and U."""
  num_negatives = check_num_negatives(num_negatives)
  ids = _tensors.as_ids(positive_ids, "positive_ids")
  emb = _tensors.as_float32(positive_embeddings, "positive_embeddings")
  log_q = _tensors.as_float32(log_q, "log_q")
  _tensors.check_rank(ids, 1, "positive_ids")
  _tensors.check_rank(emb, 2, "positive_embeddings")
  _tensors.check_same_dim(ids, 0, emb, 0, "positive_ids vs positive_embeddings")
  _tensors.check_same_dim(ids, 0, log_q, 0, "positive_ids vs log_q")
  if ids.shape[0] == 0:
    raise ValueError("positive_ids is empty: a batch needs at least one row")
  pool_valid = (
    ops.ones(ops.shape(ids), "bool")
    if valid is None
    else ops.cast(ops.convert_to_tensor(valid), "bool")
  )
  _tensors.check_same_dim(ids, 0, pool_valid, 0, "positive_ids vs valid")
  positive_log_q = log_q
  if cross_replica:
    ids, emb, log_q, pool_valid = cross_replica_lib.all_gather_rows([ids, emb, log_q, pool_valid])
  keep = base.first_occurrence_mask(ids, pool_valid)
  num_distinct = ops.sum(ops.cast(keep, "float32"))
  if num_negatives is not None:
    ids, emb, log_q, keep = _subsample(ids, emb, log_q, keep, pool_valid, num_negatives, seed, keys)
  negatives = base.Negatives(ids, emb, log_q, keep, positive_log_q)
  return InBatchPool(negatives, ops.sum(ops.cast(pool_valid, "float32")), num_distinct)


def convention_log_q(log_q_unigram: Tensor, pool: InBatchPool, convention: str) -> Tensor:
  """log Q of in-batch slots under ``convention`` from log q_uni (float32, any shape)."""
  if convention != "expected_count":
    return log_q_unigram
  return negatives_core.expected_count_per_draw_log_q(
    ops, log_q_unigram, pool.num_draws, pool.num_distinct, pool.num_kept
  )


def expected_count_log_q(log_q_unigram: Tensor, pool: InBatchPool) -> Tensor:
  """log E[count of d among the n_b in-batch negatives] = log pi(d) + log n_b - log U, with
  pi(d) = 1 - (1 - q_uni(d))^B; -inf for an empty pool (`convention_log_q`'s
  ``expected_count`` is this minus log n_b: per slot)."""
  return negatives_core.expected_count_log_q(
    ops,
    _tensors.as_float32(log_q_unigram, "log_q_unigram"),
    ops.cast(pool.num_draws, "float32"),
    ops.cast(pool.num_distinct, "float32"),
    ops.cast(pool.num_kept, "float32"),
  )


def in_batch_negatives(
  positive_ids: Tensor,
  positive_embeddings: Tensor,
  log_q: Tensor,
  valid: Optional[Tensor] = None,
  *,
  convention: str = "unigram",
  cross_replica: bool = True,
  num_negatives: Optional[int] = None,
  seed: Optional[Seed] = None,
  keys: Optional[Tensor] = None,
) -> base.Negatives:
  """The batch's positives as shared negatives, duplicates and padding marked invalid.

  Args:
    positive_ids: integer [B].
    positive_embeddings: [B, d] (reused; gradients reach the first row of each id).
    log_q: float [B], log q_uni of each row's item.
    valid: optional bool [B], False for padding rows.
    convention: ``unigram`` (= ``mixture`` here) or ``expected_count`` (module docstring).
    cross_replica: under ``keras.distribution`` data parallelism (JAX) lay the pool out on
      every device (``cross_replica.all_gather_rows``; the pool is the global batch either way).
    num_negatives: k_b, keep at most this many distinct ids (uniform subset; None: all).
    seed: randomness of the subsample: an int, a ``keras.random.SeedGenerator`` (inside a
      compiled JAX step: a layer's generator) or None (Keras's global generator).
    keys: optional int32 [B], the keys z of the subsample (instead of a draw from ``seed``).

  Returns:
    Negatives(ids [N], embeddings [N, d], log_q [N], valid [N], positive_log_q [B]) with log Q
    under the convention; N = B, or k_b when k_b < B (``valid``: the kept slots).
  """
  if convention not in base.CONVENTIONS:
    raise ValueError(f"convention must be one of {base.CONVENTIONS}, got {convention!r}")
  pool = in_batch_pool(
    positive_ids,
    positive_embeddings,
    log_q,
    valid,
    cross_replica,
    num_negatives=num_negatives,
    seed=seed,
    keys=keys,
  )
  negatives = pool.negatives
  return negatives._replace(
    log_q=convention_log_q(negatives.log_q, pool, convention),
    positive_log_q=convention_log_q(negatives.positive_log_q, pool, convention),
  )


class InBatchNegatives(NegativeSampler):
  """Deduplicated (optionally subsampled, cross-replica) in-batch negatives: the tf-keras
  ``InBatchNegatives`` with the same arguments, as a sampler of the shared protocol
  (``NegativeSampler``). The negatives are :func:`in_batch_negatives` of the queries'
  positives, log q_uni from ``frequency_estimator.log_q``; the sampler only reads the estimator.

  Args:
    frequency_estimator: any object with ``log_q(ids)`` (log per-draw q_uni), e.g. a
      ``tfrs_logq.keras3.frequency`` estimator; may be None when every call passes
      ``candidate_log_q``.
    num_negatives: k_b; None keeps every distinct id.
    cross_replica: lay the pool out on every device under ``keras.distribution``.
    convention: ``"unigram"`` (= ``"mixture"`` here) or ``"expected_count"``.
    static_shapes: the Keras 3 path always has static shapes: None or True (False raises).

  The k_b subsample's randomness is the call's ``seed`` (an int, a ``keras.random.SeedGenerator``
  (inside a compiled JAX step: a layer's) or None: Keras's global generator).
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
    if convention not in base.CONVENTIONS:
      raise ValueError(f"convention must be one of {base.CONVENTIONS}, got {convention!r}")
    if static_shapes is not None and not static_shapes:
      raise ValueError("static_shapes=False: the Keras 3 path has static shapes only")
    self.frequency_estimator = frequency_estimator
    self.num_negatives = check_num_negatives(num_negatives)
    self.cross_replica = bool(cross_replica)
    self.convention = convention
    self.static_shapes = None if static_shapes is None else True

  def get_config(self) -> Dict[str, Any]:
    """Constructor arguments; ``frequency_estimator`` is returned as the object itself."""
    return dict(
      frequency_estimator=self.frequency_estimator,
      num_negatives=self.num_negatives,
      cross_replica=self.cross_replica,
      convention=self.convention,
      static_shapes=self.static_shapes,
    )

  def unigram_log_q(self, ids: Tensor) -> Tensor:
    """log q_uni(d) of any ids from the estimator, float32."""
    if self.frequency_estimator is None:
      raise ValueError(
        "InBatchNegatives has no frequency_estimator: pass candidate_log_q to the call, or "
        "give an estimator to compute log Q of arbitrary ids"
      )
    return _tensors.as_float32(self.frequency_estimator.log_q(ids), "log_q(ids)")

  def __call__(
    self,
    positive_ids: Tensor,
    positive_embeddings: Tensor,
    *,
    candidate_log_q: Optional[Tensor] = None,
    valid: Optional[Tensor] = None,
    seed: Optional[Seed] = None,
  ) -> base.Negatives:
    """:func:`in_batch_negatives` of the batch's positives under the sampler's settings."""
    log_q = self.unigram_log_q(positive_ids) if candidate_log_q is None else candidate_log_q
    return in_batch_negatives(
      positive_ids,
      positive_embeddings,
      log_q,
      valid,
      convention=self.convention,
      cross_replica=self.cross_replica,
      num_negatives=self.num_negatives,
      seed=seed,
    )

  def sample_negatives(
    self,
    query_embeddings: Tensor,
    positive_ids: Tensor,
    positive_embeddings: Tensor,
    *,
    seed: Optional[Seed] = None,
    sequence_ids: Optional[Tensor] = None,
    item_table: Optional[Tensor] = None,
    valid: Optional[Tensor] = None,
  ) -> base.Negatives:
    """`__call__` on the queries' positives (the in-batch pool; ``valid`` leaves padding out)."""
    del query_embeddings, sequence_ids, item_table
    return self(positive_ids, positive_embeddings, valid=valid, seed=seed)

  def score(
    self,
    query_embeddings: Tensor,
    positive_ids: Tensor,
    positive_embeddings: Tensor,
    *,
    temperature: float = 1.0,
    seed: Optional[Seed] = None,
    sequence_ids: Optional[Tensor] = None,
    item_table: Optional[Tensor] = None,
    valid: Optional[Tensor] = None,
  ) -> scoring.ScoredCandidates:
    """``score_negatives`` of `sample_negatives` (one [A, d] x [d, N] matmul)."""
    negatives = self.sample_negatives(
      query_embeddings,
      positive_ids,
      positive_embeddings,
      seed=seed,
      sequence_ids=sequence_ids,
      item_table=item_table,
      valid=valid,
    )
    return scoring.score_negatives(
      query_embeddings, positive_ids, positive_embeddings, negatives, temperature=temperature
    )
