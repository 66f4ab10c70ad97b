"""Common interface of the streaming estimators of Q(d), the per-draw sampling probability.

Q(d) is the per-draw probability that one negative slot holds item d; it sums to 1 over the
catalog (one meaning throughout tfrs_logq). Every estimator is a Keras layer with

* ``update(ids, valid=None)``: called once per training step with the step's candidate ids (int
  or string, any rank >= 1, flattened); ``valid`` (bool, same shape) leaves out padding entries of
  a static-shape batch. Under a ``tf.distribute`` strategy, when called in replica context
  (inside ``strategy.run`` / ``model.fit``), the ids of all replicas are gathered with
  ``ReplicaContext.all_gather`` (in replica order, identical on every replica; an all-reduce of
  per-replica blocks inside XLA, see ``tfrs_logq.tf_keras._static_shapes``) and every replica
  applies the identical, deterministic update to its own copy of the state, so the state stays
  identical and estimates the *global* batch. An empty (global) batch, or one without a valid entry,
  is a documented no-op: nothing changes, not even the step counter.
* ``log_q(ids) -> float32, same shape as ids``: log Q(d), always finite (each estimator documents
  its floor for ids never seen).
* ``log_q_prime(ids, positive_ids)``: log Q'(d) = log Q(d) − log(1 − Q(p)) with the usual
  broadcasting (e.g. ids [A, N] or [N] against positive ids [A, 1]). log(1 − Q(p)) is computed
  stably from log Q(p) (``tfrs_logq.tf_keras.log_q.log1mexp``), with 1 − Q(p) floored at
  ``MIN_ONE_MINUS_Q`` (1e-6, as everywhere in tfrs_logq) so that a positive holding the whole
  stream never yields +inf.
* ``call(ids)`` is ``log_q(ids)``.

State lives in non-trainable variables created in ``__init__`` (construct the layer inside
``strategy.scope()`` when distributing) with ``aggregation=NONE`` (each replica writes its own
copy, no ``merge_call``, so the update also runs inside an XLA-compiled replica function), and is
updated with scatter ops only (no ``tf.lookup`` tables), so it is saved by ``tf.train.Checkpoint``
and in SavedModels.

Parameter servers. Under ``tf.distribute.ParameterServerStrategy`` (no replica context with
more than one replica per worker: each worker's step updates the shared state on the ps with its
own batch) a large state variable may be partitioned (a ShardedVariable); its slots are read with
``tfrs_logq.tf_keras.sharded.gather_rows``, so the estimate equals the whole-variable one. Updates
from concurrent workers interleave: ``ExactCounts`` and the count-min sketch's standard update
without decay are scatter-adds and assign-adds (every update counts, in any order); the hash array,
the conservative and the decayed count-min updates read, then write, so concurrent steps can
overwrite each other's cells (an approximation of the stream, not a failure).

Static shapes. The hash-array and count-min updates group the step's slots by `tf.unique`, or,
when ``valid`` is given or the update is compiled by XLA (``tf.function(jit_compile=True)``, TPU),
by a stable sort (``tfrs_logq.tf_keras._static_shapes``): every intermediate then has the size of
the batch, and the same value is scattered to every copy of a slot, so both paths give the same
state. Exact counts need no grouping (an integer scatter-add).

Input checks (``validate_ids=True``): integer ids must be >= 0 and, when ``num_items`` is
declared, < num_items (``tf.errors.InvalidArgumentError`` at run time, raised before any state
changes); non-integer, non-string dtypes raise TypeError; scalars raise ValueError.
"""

import numbers
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from tfrs_logq.tf_keras import _static_shapes
from tfrs_logq.tf_keras import log_q as log_q_lib
from tfrs_logq.tf_keras.frequency import hashing

import numpy as np
import tensorflow as tf

__all__ = ["FrequencyEstimator", "MIN_ONE_MINUS_Q"]

# The floor of 1 − Q(p) in log Q' (the package's one value, ``tfrs_logq.tf_keras.log_q``).
MIN_ONE_MINUS_Q = log_q_lib.MIN_ONE_MINUS_Q


def _log1m_exp(log_p: tf.Tensor) -> tf.Tensor:
  """log(1 − exp(log_p)) for log_p <= 0, stable, with 1 − p floored at MIN_ONE_MINUS_Q."""
  return log_q_lib.log1mexp(tf.cast(log_p, tf.float32), MIN_ONE_MINUS_Q)


def _positive_int(value: object, name: str) -> int:
  """``value`` as a Python int >= 1; Python and numpy integers are accepted, bools and
  non-integral numbers are not (ValueError naming the argument)."""
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
    raise ValueError(f"{name} must be a positive integer, got {value!r}")
  if int(value) < 1:
    raise ValueError(f"{name} must be a positive integer, got {value!r}")
  return int(value)


def _int(value: object, name: str) -> int:
  """``value`` as a Python int (Python or numpy integer; ValueError otherwise)."""
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Integral, np.integer)):
    raise ValueError(f"{name} must be an integer, got {value!r}")
  return int(value)


class FrequencyEstimator(tf.keras.layers.Layer):
  """Streaming estimate of Q(d), the per-draw probability of item d (sums to 1 over the catalog).

  ``update(ids)`` counts one step's candidate ids (all replicas' ids under ``tf.distribute``),
  ``log_q(ids)`` returns log Q(d) (float32, finite), and

      log Q'(d) = log Q(d) − log(1 − Q(p))          (``log_q_prime(ids, positive_ids)``)

  with 1 − Q(p) floored at ``MIN_ONE_MINUS_Q``. Base class: id handling, cross-replica
  gathering, log Q' and the Keras plumbing. Subclasses implement ``_update_keys(keys, valid)``
  (1-D int64 keys of the global batch, may be empty; ``valid`` None or bool of the same shape,
  False entries not counted) and ``_log_q_keys(keys)`` (int64 keys of any shape -> float32
  log Q), and may override ``log_one_minus_q`` when they can compute it more exactly.
  """

  supports_strings = True

  def __init__(
    self, num_items: Optional[int] = None, validate_ids: bool = True, **kwargs: Any
  ) -> None:
    kwargs.setdefault("trainable", False)
    kwargs.setdefault("dtype", "float32")
    super().__init__(**kwargs)
    self.num_items = None if num_items is None else _positive_int(num_items, "num_items")
    self.validate_ids = bool(validate_ids)

  # ---- state helpers -------------------------------------------------------------------------
  def _state(
    self, name: str, shape: List[int], dtype: tf.DType, initial: Union[float, np.ndarray] = 0
  ) -> tf.Variable:
    return self.add_weight(
      name=name,
      shape=shape,
      dtype=dtype,
      trainable=False,
      initializer=tf.keras.initializers.Constant(initial),
      synchronization=tf.VariableSynchronization.ON_WRITE,
      aggregation=tf.VariableAggregation.NONE,
    )

  # ---- id handling ---------------------------------------------------------------------------
  def _keys(self, ids: tf.Tensor, *, flatten: bool) -> tf.Tensor:
    """Validated int64 keys of ids (strings hashed), optionally flattened to 1-D."""
    keys, checks = self._keys_and_checks(ids, flatten=flatten)
    with tf.control_dependencies(checks):
      return tf.identity(keys)

  def _keys_and_checks(
    self, ids: tf.Tensor, *, flatten: bool
  ) -> Tuple[tf.Tensor, List[tf.Operation]]:
    """int64 keys and the list of assertion ops that must pass before they are used."""
    if isinstance(ids, (tf.RaggedTensor, tf.SparseTensor)):
      raise TypeError(
        f"{self.name}: ids must be a dense tensor; pass ragged.flat_values / sparse.values"
      )
    ids = tf.convert_to_tensor(ids)
    if ids.dtype == tf.string and not self.supports_strings:
      raise TypeError(
        f"{type(self).__name__} indexes a counts table and needs integer ids in "
        "[0, num_items); map strings to integers first (e.g. "
        "tf.keras.layers.StringLookup)"
      )
    keys = hashing.ids_to_keys(ids)
    checks = []
    if ids.dtype != tf.string and self.validate_ids:
      checks.append(
        tf.debugging.assert_non_negative(keys, message=f"{self.name}: item ids must be >= 0")
      )
      if self.num_items is not None:
        checks.append(
          tf.debugging.assert_less(
            keys,
            tf.constant(self.num_items, tf.int64),
            message=f"{self.name}: item ids must be < num_items={self.num_items}",
          )
        )
    if flatten:
      if keys.shape.rank is None or keys.shape.rank == 0:
        raise ValueError(
          f"{self.name}.update expects ids of known rank >= 1, got shape {keys.shape}"
        )
      keys = tf.reshape(keys, [-1])
    return keys, [c for c in checks if c is not None]

  # ---- public interface ----------------------------------------------------------------------
  def update(self, ids: tf.Tensor, valid: Optional[tf.Tensor] = None) -> None:
    """Counts one training step's candidate ids (gathered across replicas when distributed).

    Args:
      ids: int or string ids, any rank >= 1.
      valid: optional bool, same shape as ``ids``: False entries (padding of a static-shape
        batch) are not counted.
    """
    keys, checks = self._keys_and_checks(ids, flatten=True)
    if valid is not None:
      valid = tf.convert_to_tensor(valid)
      if valid.dtype != tf.bool:
        raise TypeError(f"{self.name}.update: valid must be bool, got {valid.dtype.name}")
      ids_shape = tf.convert_to_tensor(ids).shape
      if not valid.shape.is_compatible_with(ids_shape):
        raise ValueError(f"{self.name}.update: valid {valid.shape} does not match ids {ids_shape}")
      valid = tf.reshape(valid, [-1])
      checks.append(
        tf.debugging.assert_equal(
          tf.size(valid), tf.size(keys), message="valid must have the shape of ids"
        )
      )
    # Every op of the update (not only those fed by `keys`, whose size may be constant-folded)
    # waits for the input checks, so a failed check leaves the state untouched.
    with tf.control_dependencies(checks):
      keys = tf.identity(keys)
      if tf.distribute.has_strategy() and not tf.distribute.in_cross_replica_context():
        ctx = tf.distribute.get_replica_context()
        if ctx is not None and ctx.num_replicas_in_sync > 1:
          keys, valid = self._all_gather(ctx, keys, valid)
      self._update_keys(keys, valid)

  @staticmethod
  def _all_gather(
    ctx: tf.distribute.ReplicaContext, keys: tf.Tensor, valid: Optional[tf.Tensor]
  ) -> Tuple[tf.Tensor, Optional[tf.Tensor]]:
    """The global batch's keys (and mask): an all-reduce of blocks inside XLA (no merge_call)."""
    if _static_shapes.in_xla_context():
      gather = lambda x: _static_shapes.all_gather_by_all_reduce(ctx, x)
    else:
      gather = lambda x: ctx.all_gather(x, axis=0)
    if valid is None:
      return gather(keys), None
    return gather(keys), tf.cast(gather(tf.cast(valid, tf.int64)), tf.bool)

  def log_q(self, ids: tf.Tensor) -> tf.Tensor:
    """log Q(d), float32, same shape as ids."""
    return self._log_q_keys(self._keys(ids, flatten=False))

  def log_one_minus_q(self, ids: tf.Tensor) -> tf.Tensor:
    """log(1 − Q(d)), float32, stable, with 1 − Q floored at MIN_ONE_MINUS_Q."""
    return _log1m_exp(self.log_q(ids))

  def log_q_prime(self, ids: tf.Tensor, positive_ids: tf.Tensor) -> tf.Tensor:
    """log Q'(d) = log Q(d) − log(1 − Q(p)), broadcasting ids against positive_ids."""
    return self.log_q(ids) - self.log_one_minus_q(positive_ids)

  def call(self, ids: tf.Tensor) -> tf.Tensor:
    return self.log_q(ids)

  def get_config(self) -> Dict[str, Any]:
    config = super().get_config()
    config.update(num_items=self.num_items, validate_ids=self.validate_ids)
    return config

  # ---- subclass hooks ------------------------------------------------------------------------
  def _update_keys(self, keys: tf.Tensor, valid: Optional[tf.Tensor] = None) -> None:
    raise NotImplementedError

  def _log_q_keys(self, keys: tf.Tensor) -> tf.Tensor:
    raise NotImplementedError


def _num_counted(keys: tf.Tensor, valid: Optional[tf.Tensor]) -> tf.Tensor:
  """Number of ids the step counts, int64 (the valid ones)."""
  if valid is None:
    return tf.size(keys, out_type=tf.int64)
  return tf.reduce_sum(tf.cast(valid, tf.int64))


def _static(valid: Optional[tf.Tensor]) -> bool:
  """Group by sorting (static shapes) when a mask is given or XLA compiles the update."""
  return valid is not None or _static_shapes.in_xla_context()


def _group(indices: tf.Tensor, valid: Optional[tf.Tensor] = None) -> Tuple[tf.Tensor, tf.Tensor]:
  """Multiplicity of each id of a 1-D int64 tensor (deterministic).

  Returns ``(ids, counts int32)``. Dynamic path: the distinct ids, each once, with counts >= 1.
  Static path (``valid`` given or XLA): all ids sorted, each with the number of valid entries of
  its value (copies of one id carry the same count; 0 when none of them is valid).
  """
  if not _static(valid):
    distinct, _, counts = tf.unique_with_counts(indices, out_idx=tf.int32)
    return distinct, counts
  runs = _static_shapes.sorted_runs(indices)
  weights = (
    tf.ones_like(runs.run) if valid is None else tf.cast(tf.gather(valid, runs.order), tf.int32)
  )
  return runs.keys, _static_shapes.run_total(runs, weights)


def _group_slots(
  keys: tf.Tensor,
  slots_fn: Callable[[tf.Tensor], tf.Tensor],
  valid: Optional[tf.Tensor] = None,
) -> Tuple[tf.Tensor, tf.Tensor]:
  """Slots hit by a batch and how often (collisions of distinct ids add up). Deterministic.

  ``slots_fn`` maps keys [u] to slots [m, u]. Dynamic path: ids are de-duplicated first, so the
  hash functions run once per distinct id, then the slots of all hash functions are grouped;
  returns ``(slots [s] int64, counts [s] int32)`` with distinct slots. Static path (``valid``
  given or XLA): every entry's m slots, sorted, each with its slot's total count (copies of one
  slot carry the same count, 0 when no valid entry hits it), so a scatter of per-slot values
  writes the same value to every copy.
  """
  if not _static(valid):
    distinct, id_counts = _group(keys)
    slots = slots_fn(distinct)
    m = tf.shape(slots)[0]
    slots_u, segment = tf.unique(tf.reshape(slots, [-1]), out_idx=tf.int32)
    counts = tf.math.unsorted_segment_sum(tf.tile(id_counts, [m]), segment, tf.size(slots_u))
    return slots_u, counts
  slots = slots_fn(keys)
  m = tf.shape(slots)[0]
  weights = (
    tf.ones([tf.size(slots)], tf.int32) if valid is None else tf.tile(tf.cast(valid, tf.int32), [m])
  )
  runs = _static_shapes.sorted_runs(tf.reshape(slots, [-1]))
  return runs.keys, _static_shapes.run_total(runs, tf.gather(weights, runs.order))
