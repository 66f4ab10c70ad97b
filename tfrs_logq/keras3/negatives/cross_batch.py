r"""Cross-batch negatives on the Keras 3 path: a FIFO memory of the last M pushes' positives.

The Keras 3 twin of ``tfrs_logq.tf_keras.negatives.CrossBatchNegatives`` (same constructor, same
methods); the formulas are ``tfrs_logq.core.cross_batch``'s, evaluated with ``keras.ops``.

Memory. M = ``num_batches`` blocks of S = ``slots_per_batch`` slots (capacity M S). Push t
(``update``, once per training step) writes block t mod M, so after T pushes the memory holds the
last min(T, M) pushes and the oldest block is overwritten; the read order is newest first
(``core.cross_batch.write_slots`` / ``newest_first_slots``). A push is the B = ``batch_size`` rows
of the (global, see ``cross_replica``) batch's positives (SASRec: the B L positions, ``valid``
False at the padding); padding rows never enter. With S = B slot j holds row j (its first
occurrence in the push, dedup); with S = k < B a uniform subset of min(U, k) of the push's U
distinct ids is kept, the in-batch ``k_b`` rule (``core.negatives.subsample_first_occurrences``:
row r's key z[rank(r)], z from the layer's ``keras.random.SeedGenerator`` or the ``seed`` of
``update``). An empty slot holds id 0 (its log Q is read, then masked).

Modes. ``"ids"``: a slot keeps an id, and ``sample_negatives`` / ``score`` embed it with the
current weights (``candidate_embedder(ids)`` or ``ops.take(item_table, ids)``): exact for id
towers, and the gradient reaches those table rows. ``"embeddings"``: a slot also keeps the item
tower's output at push time (float32 [M S, ``embedding_dim``], written into a variable, so
no gradient path back to the push), and is up to M steps stale.

Order of a step: score against the memory, then push the step's positives (``update``), so a
row never meets its own batch twice (in-batch negatives are another block, joined with
``scoring.join_blocks``). ``score`` and ``sample_negatives`` never modify the memory.

Masks. ``Negatives.valid`` [M S] = filled AND the newest copy of its id (dedup over the newest
first order, ``base.first_occurrence_mask``: the newest copy wins) AND a finite log Q; the
accidental hits of each row's positive are masked by ``score_negatives``. Empty (warm-up)
slots have a finite log Q and ``valid`` False, so an empty memory scores to n = 0 (loss 0).

log Q (``core.cross_batch.memory_log_q``, q_uni = the estimator's per-draw probability at read
time): ``unigram`` (= ``mixture``), log Q(d) = log q_uni(d); ``expected_count``, the inclusion
probability pi_M(d) of d in the memory over the pushes' draws B_m, distinct ids U_m and kept
slots n_m, per draw log pi_M(d) - log max(U_M, 1) (U_M: the memory's distinct valid ids). The
queries' positives get log Q under the same convention (``Negatives.positive_log_q``; on an
empty memory, where ``expected_count`` gives Q(p) = 0 and no finite log, the unigram value
stands in: every slot is invalid then).

State: non-trainable ``keras.Variable``s created in ``__init__`` (a checkpoint restores before
the first push): ``ids`` int32 [M S], ``filled`` int32 [M S] (0 / 1), ``embeddings`` float32
[M S, d] (embeddings mode), ``push_draws`` / ``push_distinct`` / ``push_kept`` float32 [M] (B_m,
U_m, n_m of each block), ``num_pushed`` int32, and the layer's ``SeedGenerator``. ``update``
assigns them with static shapes (scatter updates), so it runs inside a compiled JAX train step
(as BatchNormalization's moving statistics) and on TensorFlow and PyTorch. ``get_weights``
holds the memory and the estimator's state; the generator's state (Keras leaves it out of
``weights``) is saved with the layer's own variables (``.weights.h5``, ``.keras``).
"""

from typing import Any, Callable, Dict, List, Mapping, MutableMapping, NamedTuple, Optional, Tuple

import keras
from keras import ops

from tfrs_logq.core import cross_batch as cross_batch_core
from tfrs_logq.core import negatives as negatives_core
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3._tensors import Seed, Tensor
from tfrs_logq.keras3.negatives import base, in_batch
from tfrs_logq.keras3.negatives import cross_replica as cross_replica_lib
from tfrs_logq.keras3.negatives.sampler import NegativeSampler
from tfrs_logq.keras3.negatives.scoring import ScoredCandidates, embed_ids, score_negatives

__all__ = ["CrossBatchNegatives"]

MODES = cross_batch_core.MODES
_INT32_MIN = -(2**31)


class _Memory(NamedTuple):
  """One read of the memory, newest first: the slots (int32 [M S]) and their ids, ``present``
  (filled, newest copy, finite log q_uni), U_M (float32: the present slots), log q_uni and
  log Q under the convention of the slots followed by the ids asked for ([M S + n])."""

  order: Any
  ids: Any
  present: Any
  num_distinct: Any
  log_q_unigram: Any
  log_q: Any


@keras.saving.register_keras_serializable(package="tfrs_logq")
class CrossBatchNegatives(keras.layers.Layer, NegativeSampler):
  """The positives of the last M pushes as shared negatives, with log Q (module docstring).

  Usage (one training step)::

    memory = CrossBatchNegatives(estimator, num_batches=4, batch_size=B, seed=1)
    scored = memory.score(query, pos_ids, pos_emb, item_table=table)   # before the push
    loss = sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected")
    memory.update(pos_ids, valid=valid)                                 # after scoring

  Args:
    frequency_estimator: an object with ``log_q(ids)`` (log per-draw q_uni), e.g. a
      ``tfrs_logq.keras3.frequency`` estimator (read, never updated here).
    num_batches: M, the pushes kept.
    batch_size: B, the rows of one push (the global batch's positives).
    slots_per_batch: S <= B slots per push (None: B); S < B keeps a uniform subset of min(U, S)
      distinct ids of each push.
    mode: ``"ids"`` (embed with the current weights) or ``"embeddings"`` (stored, stale).
    embedding_dim: d of the stored embeddings (required by ``"embeddings"``).
    convention: ``unigram`` (the paper's), ``mixture`` (= unigram) or ``expected_count``.
    candidate_embedder: ids [m] -> embeddings [m, d] for ``"ids"`` (else ``item_table``); not
      part of the config.
    cross_replica: gather the push rows over the replicas under ``keras.distribution`` data
      parallelism (``cross_replica.all_gather_rows``).
    seed: seed of the subsample's ``keras.random.SeedGenerator``.

  ``get_config`` serialises a Keras estimator (an object without ``get_config`` is returned
  as itself: ``from_config`` in the same process, not a ``.keras`` file).
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
    **kwargs: Any,
  ) -> None:
    kwargs["dtype"] = "float32"
    super().__init__(name=name, **kwargs)
    m, b, s = cross_batch_core.check_memory(
      num_batches, batch_size, slots_per_batch, mode, convention
    )
    embedding_dim, seed = cross_batch_core.check_memory_inputs(
      mode, embedding_dim, frequency_estimator, candidate_embedder, seed
    )
    self.frequency_estimator = frequency_estimator
    self.num_batches, self.batch_size, self.slots_per_batch = m, b, s
    self.mode = mode
    self.embedding_dim = embedding_dim
    self.convention = convention
    self.candidate_embedder = candidate_embedder
    self.cross_replica = bool(cross_replica)
    self.seed = seed
    size = m * s
    self.ids = self._state("ids", (size,), "int32")
    self.filled = self._state("filled", (size,), "int32")
    self.embeddings = None
    if mode == "embeddings":
      self.embeddings = self._state("embeddings", (size, self.embedding_dim), "float32")
    self.push_draws = self._state("push_draws", (m,), "float32")
    self.push_distinct = self._state("push_distinct", (m,), "float32")
    self.push_kept = self._state("push_kept", (m,), "float32")
    self.num_pushed = self._state("num_pushed", (), "int32")
    self.seed_generator = keras.random.SeedGenerator(self.seed)
    self.built = True

  def _state(self, name: str, shape: Tuple[Optional[int], ...], dtype: str) -> keras.Variable:
    return self.add_weight(
      name=name,
      shape=shape,
      dtype=dtype,
      initializer="zeros",
      trainable=False,
      autocast=False,
    )

  @property
  def memory_size(self) -> int:
    """M S, the number of slots (the N of ``sample_negatives``)."""
    return self.num_batches * self.slots_per_batch

  # -------------------------------------------------------------------------------- log Q
  def _log_q_unigram(self, ids: Tensor) -> Tensor:
    return _tensors.as_float32(self.frequency_estimator.log_q(ids), "frequency_estimator.log_q")

  def _read(self, ids: Tensor) -> _Memory:
    """The memory and log Q of its slots and of ``ids`` (int [n]): one estimator call and one
    ``memory_log_q`` for both."""
    size = self.memory_size
    order = cross_batch_core.newest_first_slots(
      ops, self.num_pushed.value, self.num_batches, self.slots_per_batch
    )
    slot_ids = ops.take(self.ids.value, order)
    filled = ops.greater(ops.take(self.filled.value, order), 0)
    newest = base.first_occurrence_mask(slot_ids, filled)
    log_q_unigram = self._log_q_unigram(ops.concatenate([slot_ids, ops.cast(ids, "int32")]))
    present = ops.logical_and(newest, ops.isfinite(log_q_unigram[:size]))
    num_distinct = ops.sum(ops.cast(present, "float32"))
    log_q = cross_batch_core.memory_log_q(
      ops,
      log_q_unigram,
      self.convention,
      self.push_draws.value,
      self.push_distinct.value,
      self.push_kept.value,
      num_distinct,
    )
    return _Memory(order, slot_ids, present, num_distinct, log_q_unigram, log_q)

  def log_q(self, ids: Tensor) -> Tensor:
    """log Q(d) of any ids under the current state (``core.cross_batch.memory_log_q``),
    float32, ids' shape; ``expected_count`` on an empty memory gives -inf (Q = 0)."""
    ids = _tensors.as_ids(ids, "ids")
    shape = ops.shape(ids)
    log_q = self._read(ops.reshape(ids, (-1,))).log_q[self.memory_size :]
    return ops.reshape(log_q, shape)

  # ---------------------------------------------------------------------------- negatives
  def _embed(self, ids: Tensor, item_table: Optional[Tensor]) -> Tensor:
    return embed_ids(
      ids,
      candidate_embedder=self.candidate_embedder,
      item_table=item_table,
      owner="CrossBatchNegatives(mode='ids')",
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
    """The memory as shared negatives, newest first (the state is not modified).

    Args:
      query_embeddings, positive_embeddings: [A, d] (the common sampler signature; the memory
        does not depend on them).
      positive_ids: integer [A], the queries' positives (``positive_log_q``).
      seed, sequence_ids, valid: accepted for the samplers' common signature; unused (the
        memory draws nothing at read time and is shared by every row).
      item_table: [num_items, d], embeds the ids in ``"ids"`` mode without a
        ``candidate_embedder``.

    Returns:
      Negatives(ids int32 [M S], embeddings float32 [M S, d], log_q [M S] (finite), valid bool
      [M S], positive_log_q [A]).
    """
    del query_embeddings, positive_embeddings, seed, sequence_ids, valid
    pos_ids = _tensors.as_ids(positive_ids, "positive_ids")
    _tensors.check_rank(pos_ids, 1, "positive_ids")
    size = self.memory_size
    memory = self._read(pos_ids)
    log_q, pos_log_q = memory.log_q[:size], memory.log_q[size:]
    pos_unigram = memory.log_q_unigram[size:]
    slot_valid = ops.logical_and(memory.present, ops.isfinite(log_q))
    if self.mode == "embeddings":
      assert self.embeddings is not None  # the state of this mode
      embeddings = ops.take(self.embeddings.value, memory.order, axis=0)
    else:
      embeddings = self._embed(memory.ids, item_table)
    return base.Negatives(
      ids=memory.ids,
      embeddings=embeddings,
      log_q=ops.where(slot_valid, log_q, 0.0),
      valid=slot_valid,
      positive_log_q=ops.where(ops.isfinite(pos_log_q), pos_log_q, pos_unigram),
    )

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
  ) -> ScoredCandidates:
    """``score_negatives`` of the queries against the memory (arguments of
    ``sampled_softmax_loss``: float32 scores [A], [A, M S], log Q [M S], valid_mask [A, M S] with
    each row's accidental hits masked, positive_log_q [A]). Call it before ``update``."""
    if not temperature > 0:
      raise ValueError(f"temperature must be > 0, got {temperature!r}")
    negatives = self.sample_negatives(
      query_embeddings,
      positive_ids,
      positive_embeddings,
      seed=seed,
      sequence_ids=sequence_ids,
      item_table=item_table,
      valid=valid,
    )
    return score_negatives(
      query_embeddings, positive_ids, positive_embeddings, negatives, temperature=temperature
    )

  # --------------------------------------------------------------------------------- push
  def update(
    self,
    positive_ids: Tensor,
    positive_embeddings: Optional[Tensor] = None,
    *,
    valid: Optional[Tensor] = None,
    seed: Optional[Seed] = None,
  ) -> None:
    """Pushes one step's positives into the oldest block (after the step has scored).

    Args:
      positive_ids: integer [B] (the global batch's positives; SASRec: the B L positions).
      positive_embeddings: [B, d], the item tower's outputs (``"embeddings"`` mode; stored
        as float32 in a variable, so no gradient flows back; ignored in ``"ids"`` mode).
      valid: optional bool [B], False for padding rows (never pushed).
      seed: randomness of the S < B subsample instead of the layer's generator (an int or a
        ``keras.random.SeedGenerator``).
    """
    ids = ops.cast(_tensors.as_ids(positive_ids, "positive_ids"), "int32")
    _tensors.check_rank(ids, 1, "positive_ids")
    rows_valid = (
      ops.ones(ops.shape(ids), "bool")
      if valid is None
      else ops.cast(ops.convert_to_tensor(valid), "bool")
    )
    _tensors.check_rank(rows_valid, 1, "valid")
    _tensors.check_same_dim(ids, 0, rows_valid, 0, "positive_ids vs valid")
    tensors = [ids, rows_valid]
    if self.mode == "embeddings":
      if positive_embeddings is None:
        raise ValueError("CrossBatchNegatives(mode='embeddings').update needs positive_embeddings")
      # Written into a variable: a later read is a leaf (no gradient path to the push).
      emb = _tensors.as_float32(positive_embeddings, "positive_embeddings")
      _tensors.check_rank(emb, 2, "positive_embeddings")
      _tensors.check_same_dim(ids, 0, emb, 0, "positive_ids vs positive_embeddings")
      if emb.shape[1] != self.embedding_dim:
        raise ValueError(
          f"positive_embeddings have d = {emb.shape[1]}, the memory embedding_dim = "
          f"{self.embedding_dim}"
        )
      tensors.append(emb)
    if self.cross_replica:
      tensors = cross_replica_lib.all_gather_rows(tensors)
    ids, rows_valid = tensors[0], tensors[1]
    emb = tensors[2] if len(tensors) > 2 else None
    if ids.shape[0] != self.batch_size:
      raise ValueError(
        f"a push has batch_size = {self.batch_size} rows, got positive_ids of shape "
        f"{tuple(ids.shape)}"
      )
    first = base.first_occurrence_mask(ids, rows_valid)
    num_draws = ops.sum(ops.cast(rows_valid, "float32"))
    num_distinct = ops.sum(ops.cast(first, "float32"))
    slot_ids, slot_filled, slot_emb = ids, first, emb
    if self.slots_per_batch < self.batch_size:
      rows, slot_filled = self._subsample(first, rows_valid, seed)
      slot_ids = ops.take(ids, rows)
      if emb is not None:
        slot_emb = ops.take(emb, rows, axis=0)
    slot_ids = ops.where(slot_filled, slot_ids, 0)  # empty slots hold id 0 (log Q is read)
    num_kept = ops.sum(ops.cast(slot_filled, "float32"))
    pushed = self.num_pushed.value
    index = ops.expand_dims(
      cross_batch_core.write_slots(ops, pushed, self.num_batches, self.slots_per_batch), 1
    )
    self.ids.assign(ops.scatter_update(self.ids.value, index, slot_ids))
    self.filled.assign(ops.scatter_update(self.filled.value, index, ops.cast(slot_filled, "int32")))
    if slot_emb is not None:
      assert self.embeddings is not None  # the state of the embeddings mode
      self.embeddings.assign(ops.scatter_update(self.embeddings.value, index, slot_emb))
    block = ops.reshape(ops.mod(pushed, self.num_batches), (1, 1))
    for variable, value in (
      (self.push_draws, num_draws),
      (self.push_distinct, num_distinct),
      (self.push_kept, num_kept),
    ):
      variable.assign(ops.scatter_update(variable.value, block, ops.reshape(value, (1,))))
    self.num_pushed.assign(pushed + 1)

  def _subsample(
    self, first: Tensor, rows_valid: Tensor, seed: Optional[Seed]
  ) -> Tuple[Tensor, Tensor]:
    """(rows int32 [S], kept bool [S]): the in-batch ``k_b`` rule with k_b = S (keys z[rank(r)],
    rank = the row's index among the valid rows; ``in_batch.in_batch_pool``)."""
    b = self.batch_size
    keys = in_batch.random_keys(b, self.seed_generator if seed is None else seed)
    valid_int = ops.cast(rows_valid, "int32")
    rank = ops.cumsum(valid_int) - valid_int
    row_keys = ops.take(keys, ops.minimum(rank, b - 1))
    return negatives_core.subsample_first_occurrences(
      ops, first, row_keys, self.slots_per_batch, _INT32_MIN
    )

  # ---------------------------------------------------------------------------- saving
  def _own_variables(self) -> List[keras.Variable]:
    return self._trainable_variables + self._non_trainable_variables + [self.seed_generator.state]

  def save_own_variables(self, store: MutableMapping[str, Any]) -> None:
    """The memory and the subsample generator's state (so a restored run draws on)."""
    for i, v in enumerate(self._own_variables()):
      store[f"{i}"] = v

  def load_own_variables(self, store: Mapping[str, Any]) -> None:
    variables = self._own_variables()
    if len(store.keys()) != len(variables):
      raise ValueError(
        f"Layer '{self.name}' expects {len(variables)} variables, the file holds "
        f"{len(store.keys())}"
      )
    for i, v in enumerate(variables):
      v.assign(store[f"{i}"])

  def get_config(self) -> Dict[str, Any]:
    return {
      **super().get_config(),
      "frequency_estimator": (
        keras.saving.serialize_keras_object(self.frequency_estimator)
        if callable(getattr(self.frequency_estimator, "get_config", None))
        else self.frequency_estimator  # the object itself (from_config in this process)
      ),
      "num_batches": self.num_batches,
      "batch_size": self.batch_size,
      "slots_per_batch": self.slots_per_batch,
      "mode": self.mode,
      "embedding_dim": self.embedding_dim,
      "convention": self.convention,
      "cross_replica": self.cross_replica,
      "seed": self.seed,
    }

  @classmethod
  def from_config(cls, config: Mapping[str, Any]) -> "CrossBatchNegatives":
    config = dict(config)
    if isinstance(config["frequency_estimator"], dict):
      config["frequency_estimator"] = keras.saving.deserialize_keras_object(
        config["frequency_estimator"]
      )
    return cls(**config)
