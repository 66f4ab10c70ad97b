r"""Cross-batch negatives: a memory of the last M pushes' positives, reused as shared negatives.

The memory. M blocks of S slots (``memory_size`` = M S). Push t (one per training step: the
step's global batch of positives, B rows; for SASRec the B L positions with ``valid`` marking
the padding) writes block t mod M, so after T pushes the memory holds the last min(T, M)
pushes (FIFO). A push is deduplicated by first occurrence among its valid rows; with
``slots_per_batch = k < B`` it keeps the uniform subset of min(U, k) of its U distinct ids of
the in-batch rule (`tfrs_logq.core.negatives.subsample_first_occurrences`, one random key per
valid row). The memory is read newest block first, and deduplicated over all its slots (the
newest copy of an id wins). Layout, read order and formulas: `tfrs_logq.core.cross_batch`.

Two modes:

* ``mode="ids"``: the memory stores ids; each step embeds them with the *current* candidate
  tower (``candidate_embedder``, or rows of ``item_table``), so the negatives are never stale
  and the gradient reaches the tower (the item table's rows of the memory ids).
* ``mode="embeddings"``: the memory also stores the tower's output at push time (float32, in
  a variable, so no gradient path back to the push): no tower call for the memory, no gradient
  into it, and the embeddings are up to M steps old (stale by the optimiser's drift).

Order within a step: **score, then update**: ``score(...)`` reads the memory (the previous
pushes), the loss is computed, then ``update(positive_ids, positive_embeddings)`` pushes the
step's batch (the step never scores against its own positives through the memory: they are its
in-batch block). ``score`` never modifies the memory.

log Q of a memory slot (and of the positives, for Q'), with q = q_uni(d) the frequency
estimator's per-draw probability at read time (`tfrs_logq.core.cross_batch.memory_log_q`):

* ``"unigram"`` (the paper's; ``"mixture"`` is the same for one block): log Q = log q_uni(d).
* ``"expected_count"``: log Q = log pi_M(d) - log max(U_M, 1), pi_M(d) = 1 - prod_m (1 -
  rho_m(d)), rho_m(d) = (1 - (1 - q)^{B_m}) n_m / U_m over the pushes m in memory (B_m valid
  rows, U_m distinct ids, n_m kept slots), U_M the memory's distinct valid ids; without a
  subsample pi_M(d) = 1 - (1 - q)^{sum_m B_m}.

A positive whose ``expected_count`` log Q is not finite (only while every push in memory is
empty) gets its ``unigram`` value, the ``expected_count`` value of a memory of one draw, so the
loss's checks pass; its row has no valid memory negative then.

Masking (``Negatives.valid`` and the scoring's accidental hits): a slot is valid when it was
filled (not warm-up, not a padding row, not a duplicate within its push, kept by the subsample),
it is the newest copy of its id in the memory, and its log q_uni is finite; invalid slots have
log Q = 0 (finite). Each row masks its own positive (per position for SASRec), so the corrected
loss's n is the row's count of valid slots; an empty memory gives n = 0 and a finite (zero) loss.

State (non-trainable tf.Variables made in ``__init__``: create the sampler inside
``strategy.scope()`` when distributing; a checkpoint taken before the first push restores):
``ids`` int64 [M S], ``filled`` bool [M S], ``embeddings`` float32 [M S, d] (embeddings mode),
per-push ``push_draws`` / ``push_distinct`` / ``push_kept`` float32 [M] (B_m, U_m, n_m),
``num_pushed`` int64 and the base ``random_seed`` int64 of the subsample. Under
``tf.distribute`` ``update`` is called inside ``strategy.run``: the push rows of all replicas are
gathered (`cross_replica.all_gather_rows`, replica order) and every replica writes the same
global values into its own copy (``aggregation=NONE``, as the frequency estimators, so no
``merge_call``: it also runs in an XLA-compiled replica function). ``update`` and ``score`` keep
static shapes (no `tf.unique` / `tf.boolean_mask`), so both run under
``tf.function(jit_compile=True)``.
"""

from typing import Any, Callable, Dict, NamedTuple, Optional

from tfrs_logq.tf_keras import _static_shapes
from tfrs_logq.tf_keras.negatives import cross_replica, scoring
from tfrs_logq.tf_keras.negatives.base import (
  ItemTable,
  Negatives,
  as_float,
  as_ids,
)
from tfrs_logq.tf_keras.negatives.in_batch import _random_keys
from tfrs_logq.tf_keras.negatives.sampler import NegativeSampler

import numpy as np
import tensorflow as tf

from tfrs_logq.core import cross_batch as cross_batch_core
from tfrs_logq.core import negatives as negatives_core
from tfrs_logq.core.ops import tf_ops

__all__ = ["CrossBatchNegatives"]  # (the twin of keras3/negatives/cross_batch.py)

MODES = cross_batch_core.MODES
CONVENTIONS = cross_batch_core.CONVENTIONS


class MemoryContents(NamedTuple):
  """The memory as the next step reads it, newest push first (all [M S] = ``memory_size``).

  Attributes:
    ids: int64 [M S] the slots' ids (empty slots hold 0 or an old id; see ``valid``).
    embeddings: float32 [M S, d]: the current tower's (ids mode) or the stored ones.
    log_q: float32 [M S] log Q under the convention; 0 where not ``valid``.
    valid: bool [M S]: filled, the newest copy of its id, finite log q_uni.
    num_distinct: float32 scalar U_M, the number of valid slots (= distinct valid ids).
  """

  ids: tf.Tensor
  embeddings: tf.Tensor
  log_q: tf.Tensor
  valid: tf.Tensor
  num_distinct: tf.Tensor


class _Slots(NamedTuple):
  """Newest-first slot indices and the validity of what they hold (no embeddings)."""

  order: tf.Tensor
  ids: tf.Tensor
  valid: tf.Tensor
  log_q_unigram: tf.Tensor
  num_distinct: tf.Tensor


def _flat(x: tf.Tensor, inner_rank: int, name: str) -> tf.Tensor:
  """Flattens the leading axes of x to one (rows), keeping ``inner_rank`` trailing axes."""
  if x.shape.rank is None or x.shape.rank < 1 + inner_rank:
    raise ValueError(f"{name} must have rank >= {1 + inner_rank}, got shape {x.shape}")
  if x.shape.rank == 1 + inner_rank:
    return x
  inner = x.shape[x.shape.rank - inner_rank :].as_list()
  if None in inner:
    inner = tf.unstack(tf.shape(x)[x.shape.rank - inner_rank :])
  return tf.reshape(x, [-1] + list(inner))


class CrossBatchNegatives(NegativeSampler, tf.Module):
  """Shared negatives from a FIFO memory of the last M pushes' positives (module docstring).

  Per step: ``scored = memory.score(query, positive_ids, positive_embeddings)`` (the memory's
  M S slots as shared negatives, log Q, masks), the loss, then ``memory.update(positive_ids,
  positive_embeddings, valid=...)``. Join it with in-batch / uniform blocks with
  `tfrs_logq.tf_keras.negatives.JoinedNegatives`.

  Args:
    frequency_estimator: any object with ``log_q(ids)`` (log per-draw q_uni), e.g. a
      `tfrs_logq.tf_keras.frequency` estimator; the sampler only reads it (update it once per
      step yourself).
    num_batches: M, the number of pushes kept.
    batch_size: B, the rows of one push (the global batch's positives after the cross-replica
      gather; for SASRec all B L positions, ``valid`` marking the padding).
    slots_per_batch: S <= B slots per push; None: B (every distinct id of the push); S < B
      keeps a uniform subset of min(U, S) distinct ids.
    mode: ``"ids"`` (scored with the current tower) or ``"embeddings"`` (stored, stale).
    embedding_dim: d, required in ``"embeddings"`` mode.
    convention: ``"unigram"`` (= ``"mixture"``) or ``"expected_count"``.
    candidate_embedder: ids mode: callable ids [k] -> [k, d] (else ``item_table`` at score).
    cross_replica: gather the push over replicas under ``tf.distribute`` (inside
      ``strategy.run``).
    seed: base seed of the subsample's random keys (push t uses it folded with t, so a run is
      deterministic and a resumed one redraws the same); None: a random one, kept in the state.
    name: the module's name.

  Raises:
    ValueError: bad M, B, S, mode or convention (`tfrs_logq.core.cross_batch.check_memory`),
      embeddings mode without ``embedding_dim``.
    TypeError: an estimator without ``log_q``.
  """

  def __init__(
    self,
    frequency_estimator: Any,
    num_batches: int,
    batch_size: int,
    *,
    slots_per_batch: Optional[int] = None,
    mode: str = "ids",
    embedding_dim: Optional[int] = None,
    convention: str = "unigram",
    candidate_embedder: Optional[Callable] = None,
    cross_replica: bool = True,
    seed: Optional[int] = None,
    name: Optional[str] = None,
  ) -> None:
    m, b, s = cross_batch_core.check_memory(
      num_batches, batch_size, slots_per_batch, mode, convention
    )
    embedding_dim, seed = cross_batch_core.check_memory_inputs(
      mode, embedding_dim, frequency_estimator, candidate_embedder, seed
    )
    tf.Module.__init__(self, name=name)
    self.frequency_estimator = frequency_estimator
    self.num_batches, self.batch_size, self.slots_per_batch = m, b, s
    self.mode = mode
    self.embedding_dim = embedding_dim
    self.convention = convention
    self.candidate_embedder = candidate_embedder
    self.cross_replica = bool(cross_replica)
    self.seed = seed
    initial_seed = seed if seed is not None else int(np.random.default_rng().integers(2**31))
    size = m * s
    with self.name_scope:
      self.ids = self._state("ids", tf.zeros([size], tf.int64))
      self.filled = self._state("filled", tf.zeros([size], tf.bool))
      self.embeddings = (
        self._state("embeddings", tf.zeros([size, embedding_dim], tf.float32))
        if mode == "embeddings"
        else None
      )
      self.push_draws = self._state("push_draws", tf.zeros([m], tf.float32))
      self.push_distinct = self._state("push_distinct", tf.zeros([m], tf.float32))
      self.push_kept = self._state("push_kept", tf.zeros([m], tf.float32))
      self.num_pushed = self._state("num_pushed", tf.constant(0, tf.int64))
      self.random_seed = self._state("random_seed", tf.constant(initial_seed, tf.int64))

  @staticmethod
  def _state(name: str, initial_value: tf.Tensor) -> tf.Variable:
    return tf.Variable(
      initial_value,
      trainable=False,
      name=name,
      synchronization=tf.VariableSynchronization.ON_WRITE,
      aggregation=tf.VariableAggregation.NONE,
    )

  @property
  def memory_size(self) -> int:
    """M S, the number of slots (the negatives of a step, valid or not)."""
    return self.num_batches * self.slots_per_batch

  def get_config(self) -> Dict[str, Any]:
    """Constructor arguments; the estimator and the embedder are returned as the objects."""
    return dict(
      frequency_estimator=self.frequency_estimator,
      num_batches=self.num_batches,
      batch_size=self.batch_size,
      slots_per_batch=self.slots_per_batch,
      mode=self.mode,
      embedding_dim=self.embedding_dim,
      convention=self.convention,
      candidate_embedder=self.candidate_embedder,
      cross_replica=self.cross_replica,
      seed=self.seed,
      name=self.name,
    )

  # ---- push ----------------------------------------------------------------------------------
  def _push_seed(self, seed: Optional[tf.Tensor]) -> tf.Tensor:
    if seed is not None:
      seed = tf.convert_to_tensor(seed)
      if not seed.dtype.is_integer:
        raise TypeError(f"seed must be an integer [2] stateless seed, got {seed.dtype.name}")
      return _static_shapes.stateless_seed(seed)
    base = tf.stack([tf.convert_to_tensor(self.random_seed), tf.constant(0, tf.int64)])
    folded = tf.random.experimental.stateless_fold_in(
      _static_shapes.stateless_seed(base), tf.convert_to_tensor(self.num_pushed)
    )
    return _static_shapes.stateless_seed(folded)

  def update(
    self,
    positive_ids: tf.Tensor,
    positive_embeddings: Optional[tf.Tensor] = None,
    *,
    valid: Optional[tf.Tensor] = None,
    seed: Optional[tf.Tensor] = None,
  ) -> None:
    """Pushes one step's positives into block (t mod M) (call it after the step scored).

    Args:
      positive_ids: integer ``[B_r]`` (or ``[B_r, L]``, flattened) ids of this replica's rows.
      positive_embeddings: ``[B_r, d]`` (or ``[B_r, L, d]``) their candidate embeddings;
        required in embeddings mode (stored float32 in a variable: no gradient path), ignored
        in ids mode.
      valid: optional bool of the shape of ``positive_ids``: False rows (padding) never enter.
      seed: optional ``[2]`` stateless seed of the subsample (default: the sampler's ``seed``
        folded with the push number).

    Raises:
      ValueError: a push whose gathered size is not ``batch_size`` (at run time when the size
        is not static), embeddings mode without ``positive_embeddings`` or of another d.
      TypeError: non-integer ids, non-bool valid, non-float embeddings.
    """
    b = self.batch_size
    ids = _flat(as_ids(positive_ids, "positive_ids"), 0, "positive_ids")
    rows = [ids]
    if valid is not None:
      valid = tf.convert_to_tensor(valid)
      if valid.dtype != tf.bool:
        raise TypeError(f"valid must be bool, got {valid.dtype.name}")
      valid = tf.reshape(valid, [-1])
      rows.append(valid)
    emb = None
    if self.mode == "embeddings":
      if positive_embeddings is None:
        raise ValueError("mode='embeddings' needs positive_embeddings at update")
      # No gradient path: the rows are written into a variable (a later read is a leaf).
      emb = _flat(as_float(positive_embeddings, "positive_embeddings"), 1, "positive_embeddings")
      if emb.shape[-1] is not None and emb.shape[-1] != self.embedding_dim:
        raise ValueError(
          f"positive_embeddings have dimension {emb.shape[-1]}, the memory stores "
          f"embedding_dim={self.embedding_dim}"
        )
      rows.append(emb)
    deps = []
    for x in rows[1:]:
      if x.shape[0] is not None and ids.shape[0] is not None and x.shape[0] != ids.shape[0]:
        raise ValueError(f"update: {ids.shape[0]} ids but {x.shape[0]} rows of valid/embeddings")
      deps.append(
        tf.debugging.assert_equal(
          tf.shape(x)[0], tf.shape(ids)[0], message="update: ids and valid/embeddings differ"
        )
      )
    if self.cross_replica:
      rows = cross_replica.all_gather_rows(rows)
    ids = rows[0]
    valid = rows[1] if valid is not None else tf.ones_like(ids, tf.bool)
    if emb is not None:
      emb = rows[-1]
    if ids.shape[0] is not None and ids.shape[0] != b:
      raise ValueError(
        f"a push has {ids.shape[0]} rows (after the cross-replica gather), the memory was "
        f"built with batch_size={b}"
      )
    deps.append(
      tf.debugging.assert_equal(
        tf.shape(ids)[0],
        b,
        message=f"a push must have batch_size={b} rows (after the cross-replica gather)",
      )
    )
    # Every op of the push (the writes too) waits for the checks: a bad push changes nothing.
    with tf.control_dependencies(deps):
      self._write(ids, valid, emb, seed)

  def _write(
    self, ids: tf.Tensor, valid: tf.Tensor, emb: Optional[tf.Tensor], seed: Optional[tf.Tensor]
  ) -> None:
    """Dedup, subsample and the writes of one gathered push (ids / valid [B], emb [B, d])."""
    ops = tf_ops()
    b, s, m = self.batch_size, self.slots_per_batch, self.num_batches
    ids, valid = tf.identity(ids), tf.identity(valid)
    emb = None if emb is None else tf.identity(emb)
    if (
      ids.shape[0] is None
    ):  # static [B] rows (a gather: no shape-inference error before the check)
      rows = tf.range(b)
      ids, valid = tf.gather(ids, rows), tf.gather(valid, rows)
      emb = None if emb is None else tf.gather(emb, rows)

    first, _, num_distinct = _static_shapes.first_occurrence(ids, valid)
    num_draws = tf.reduce_sum(tf.cast(valid, tf.int32))
    if s < b:
      # Row r's key is z[rank(r)] (rank among the valid rows): the in-batch subsample rule.
      keys = tf.gather(
        _random_keys(b, self._push_seed(seed)), tf.minimum(_static_shapes.valid_rank(valid), b - 1)
      )
      lowest = tf.int64.min
      chosen, kept = negatives_core.subsample_first_occurrences(
        ops, first, tf.cast(keys, tf.int64), s, lowest
      )
      chosen = tf.minimum(chosen, b - 1)
      take = lambda x: tf.gather(x, chosen)
    else:
      kept = first
      take = lambda x: x
    num_kept = tf.reduce_sum(tf.cast(kept, tf.int32))

    num_pushed = tf.convert_to_tensor(self.num_pushed)
    slots = cross_batch_core.write_slots(ops, num_pushed, m, s)
    block = tf.reshape(tf.cast(tf.math.floormod(num_pushed, m), tf.int32), [1])
    self.ids.scatter_update(tf.IndexedSlices(take(ids), slots))
    self.filled.scatter_update(tf.IndexedSlices(kept, slots))
    if emb is not None:
      assert self.embeddings is not None  # the state of the embeddings mode
      self.embeddings.scatter_update(tf.IndexedSlices(take(emb), slots))
    for var, value in (
      (self.push_draws, num_draws),
      (self.push_distinct, num_distinct),
      (self.push_kept, num_kept),
    ):
      var.scatter_update(tf.IndexedSlices(tf.reshape(tf.cast(value, tf.float32), [1]), block))
    self.num_pushed.assign_add(1)

  # ---- read ----------------------------------------------------------------------------------
  def _slots(self) -> _Slots:
    ops = tf_ops()
    order = cross_batch_core.newest_first_slots(
      ops, tf.convert_to_tensor(self.num_pushed), self.num_batches, self.slots_per_batch
    )
    ids = tf.gather(tf.convert_to_tensor(self.ids), order)
    filled = tf.gather(tf.convert_to_tensor(self.filled), order)
    log_q = tf.cast(self.frequency_estimator.log_q(ids), tf.float32)
    finite = tf.math.is_finite(log_q)
    valid, _, num_distinct = _static_shapes.first_occurrence(ids, tf.logical_and(filled, finite))
    log_q = tf.where(finite, log_q, tf.zeros_like(log_q))
    return _Slots(order, ids, valid, log_q, tf.cast(num_distinct, tf.float32))

  def _convention_log_q(self, log_q_unigram: tf.Tensor, num_distinct: tf.Tensor) -> tf.Tensor:
    return cross_batch_core.memory_log_q(
      tf_ops(),
      log_q_unigram,
      self.convention,
      tf.convert_to_tensor(self.push_draws),
      tf.convert_to_tensor(self.push_distinct),
      tf.convert_to_tensor(self.push_kept),
      num_distinct,
    )

  def log_q(self, ids: tf.Tensor, num_distinct: Optional[tf.Tensor] = None) -> tf.Tensor:
    """log Q(d) of any ids (e.g. the positives) under the convention and the memory's state.

    Args:
      ids: integer ids of any shape.
      num_distinct: U_M (float scalar); None reads it from the memory.

    Returns:
      float32 of the shape of ids (``expected_count``: the ``unigram`` value where the memory
      gives no finite value, see the module docstring).
    """
    ids = as_ids(ids, "ids")
    if num_distinct is None:
      num_distinct = self._slots().num_distinct
    unigram = tf.cast(self.frequency_estimator.log_q(ids), tf.float32)
    shape = tf.shape(unigram)
    flat = tf.reshape(unigram, [-1])
    out = self._convention_log_q(flat, tf.cast(num_distinct, tf.float32))
    out = tf.where(tf.math.is_finite(out), out, flat)
    return tf.reshape(out, shape)

  def memory(self, item_table: Optional[ItemTable] = None) -> MemoryContents:
    """The memory's slots newest first, their embeddings, log Q and validity (`MemoryContents`).

    Args:
      item_table: ids mode without ``candidate_embedder``: ``[V, d]`` (or a zero-argument
        callable) whose row i embeds id i.
    """
    slots = self._slots()
    if self.mode == "embeddings":
      emb = tf.gather(tf.convert_to_tensor(self.embeddings), slots.order)
    else:
      emb = scoring.embed_ids(
        slots.ids, candidate_embedder=self.candidate_embedder, item_table=item_table
      )
    log_q = self._convention_log_q(slots.log_q_unigram, slots.num_distinct)
    log_q = tf.where(slots.valid, log_q, tf.zeros_like(log_q))
    return MemoryContents(slots.ids, emb, log_q, slots.valid, slots.num_distinct)

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
    """The memory's M S slots as shared negatives (`Negatives`, ``valid`` [M S]).

    ``positive_log_q`` = `log_q` of the positives; reads the memory, never changes it.
    """
    del query_embeddings, positive_embeddings, seed, sequence_ids, valid
    contents = self.memory(item_table=item_table)
    return Negatives(
      ids=contents.ids,
      embeddings=contents.embeddings,
      log_q=contents.log_q,
      positive_log_q=self.log_q(positive_ids, contents.num_distinct),
      valid=contents.valid,
    )
