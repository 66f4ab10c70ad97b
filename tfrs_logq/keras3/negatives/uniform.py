r"""Uniform negatives on the Keras 3 path: k draws (with replacement) per batch, sequence or query.

The catalog D is an id range [lo, hi) or a table of distinct ids; every slot is an independent
uniform draw, so for every layout (``tfrs_logq.core.negatives``)::

    log Q(d) = -log |D|

Layouts (``per``, those of the tf-keras ``UniformNegatives``): ``"batch"``, k ids shared
by every query ([k]); ``"sequence"``, k ids per distinct ``sequence_ids`` value, shared by that
sequence's queries (SASRec positions; ``sequence_ids=None``: every query is its own sequence);
``"query"``, k fresh ids per query. The per-sequence and per-query layouts return [A, k] ids
(static shapes: A sets are drawn, a sequence's queries all take the set numbered by the rank of
the sequence among the distinct valid ones in order of first occurrence, a query's set is its
rank among the valid queries), so with ``valid`` the draws do not depend on where the padding
queries are. Randomness: the layer's ``keras.random.SeedGenerator`` (it advances inside a
compiled JAX step).

``block(ids, candidate_embedder, num_sequences=None)`` embeds drawn ids as one block of
``scoring.score_blocks`` (so that the [A, k, d] embeddings of shared draws are never formed):

    "batch"                               ("shared",   E[ids]            [k, d])
    "sequence", rows a [B, L] grid        ("sequence", E[ids[b L]]       [B, k, d])
    otherwise                             ("query",    E[ids]            [A, k, d])

where the A = B L rows are given row-major (sequence b's rows are b L .. b L + L - 1, so they
share the draws of its first row: ``sequence_ids`` = row // L).
"""

import numbers
import warnings
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import keras
import numpy as np
from keras import ops

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import negatives as negatives_core
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3._tensors import Seed, Tensor
from tfrs_logq.keras3.negatives import base, scoring
from tfrs_logq.keras3.negatives.sampler import NegativeSampler

__all__ = ["UNIFORM_PER", "UniformNegatives"]

UNIFORM_PER = core_checks.UNIFORM_PER


def _per(per: str, per_query: bool) -> str:
  if per not in UNIFORM_PER:
    raise ValueError(f"per must be one of {UNIFORM_PER}, got {per!r}")
  if per_query:
    if per not in ("batch", "query"):
      raise ValueError(f"per_query=True means per='query', got per={per!r}")
    return "query"
  return per


def _positive_int(value: object, name: str) -> int:
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
    raise ValueError(f"{name} must be a positive int, got {value!r}")
  return int(value)


@keras.saving.register_keras_serializable(package="tfrs_logq")
class UniformNegatives(keras.layers.Layer, NegativeSampler):
  """k_u uniform draws (with replacement) from an id range or an id table; log Q = -log |D|.

  The tf-keras ``UniformNegatives`` with the same arguments, as a sampler of the shared protocol
  (``sample_negatives`` / ``score``); ``call(num_queries=None, sequence_ids=None, valid=None)``
  returns the int32 ids alone: [k_u] (per ``"batch"``) or [A, k_u] (``"sequence"``,
  ``"query"``; A = ``num_queries``, or the length of ``sequence_ids`` / ``valid``).

  Args:
    candidate_embedder: callable or Keras layer mapping int ids [m] (or [A, k]) to embeddings,
      or None to embed from the ``item_table`` given to ``score`` / ``sample_negatives``. The
      model owns it: it is not part of the layer's config.
    num_negatives: k_u, a positive Python or numpy int (bool and float raise).
    id_range: (lo, hi): the catalog is lo <= id < hi (Python or numpy ints).
    candidate_ids: alternatively a 1-D table of distinct integer ids.
    per: ``"batch"`` | ``"sequence"`` | ``"query"`` (module docstring).
    jit_compile: accepted for the tf-keras signature; Keras 3 compiles the whole step (the
      backend's jit), so there is no separate scoring path to compile.
    static_shapes: the Keras 3 path always has static shapes: None or True (False raises).
    seed: seed of the layer's ``keras.random.SeedGenerator`` (the draws of calls without a
      ``seed``; the tf-keras sampler takes its stateless seed per call instead).

  ``UniformNegatives(num_negatives, id_range, ...)`` (k first, the former Keras 3 form) and
  ``per_query=True`` still work, with a DeprecationWarning.
  """

  def __init__(
    self,
    candidate_embedder: Optional[Callable] = None,
    num_negatives: Optional[int] = None,
    *,
    id_range: Optional[Tuple[int, int]] = None,
    candidate_ids: Optional[Sequence[int]] = None,
    per: str = "batch",
    jit_compile: bool = False,
    static_shapes: Optional[bool] = None,
    seed: Optional[int] = None,
    **kwargs: Any,
  ) -> None:
    per_query = bool(kwargs.pop("per_query", False))
    if per_query:
      warnings.warn(
        "UniformNegatives(per_query=True) is deprecated: use per='query'",
        DeprecationWarning,
        stacklevel=2,
      )
    if isinstance(candidate_embedder, numbers.Integral) and not isinstance(
      candidate_embedder, bool
    ):
      warnings.warn(
        "UniformNegatives(num_negatives, id_range, ...) is deprecated: use "
        "UniformNegatives(candidate_embedder, num_negatives, id_range=..., ...) as on tf-keras",
        DeprecationWarning,
        stacklevel=2,
      )
      if num_negatives is not None:  # the former second positional argument
        if id_range is not None:
          raise TypeError("UniformNegatives got id_range twice")
        id_range = num_negatives  # type: ignore[assignment]
      candidate_embedder, num_negatives = None, candidate_embedder
    super().__init__(**kwargs)
    if candidate_embedder is not None and not callable(candidate_embedder):
      raise TypeError("candidate_embedder must be callable (ids -> embeddings) or None")
    if num_negatives is None:
      raise TypeError("UniformNegatives needs num_negatives")
    self.num_negatives = _positive_int(num_negatives, "num_negatives")
    if (id_range is None) == (candidate_ids is None):
      raise ValueError("give exactly one of id_range=(lo, hi) or candidate_ids")
    if static_shapes is not None and not static_shapes:
      raise ValueError("static_shapes=False: the Keras 3 path has static shapes only")
    self.candidate_embedder = candidate_embedder
    self.per = _per(per, per_query)
    self.jit_compile = bool(jit_compile)
    self.static_shapes = None if static_shapes is None else True
    self.seed = seed
    self.id_range, table = core_checks.check_catalog(id_range, candidate_ids)
    if self.id_range is not None:
      self.candidate_ids = None
      self.catalog_size = self.id_range[1] - self.id_range[0]
    else:
      assert table is not None  # check_catalog returns one of the two
      self.candidate_ids = [int(v) for v in table]
      self.catalog_size = int(table.size)
    self.seed_generator = keras.random.SeedGenerator(seed)
    self.built = True

  @property
  def per_query(self) -> bool:
    return self.per == "query"

  @property
  def shared(self) -> bool:
    """True when the draws are shared by every query (per ``"batch"``)."""
    return self.per == "batch"

  def log_q(self, ids: Tensor) -> Tensor:
    """log Q(d) = -log |D| for every id (float32, shape of ids)."""
    return ops.full(ops.shape(ids), negatives_core.uniform_log_q(self.catalog_size), "float32")

  def _draw(self, shape: Tuple[int, ...], seed: Optional[Seed] = None) -> Tensor:
    seed = self.seed_generator if seed is None else seed
    if self.id_range is not None:
      lo, hi = self.id_range
      return keras.random.randint(shape, lo, hi, dtype="int32", seed=seed)
    rows = keras.random.randint(shape, 0, self.catalog_size, dtype="int32", seed=seed)
    return ops.take(ops.convert_to_tensor(np.asarray(self.candidate_ids, np.int32)), rows)

  def call(
    self,
    num_queries: Optional[int] = None,
    sequence_ids: Optional[Tensor] = None,
    valid: Optional[Tensor] = None,
    seed: Optional[Seed] = None,
  ) -> Tensor:
    """The draws (class docstring); ``seed``: an int or a ``keras.random.SeedGenerator`` instead
    of the layer's generator."""
    if self.shared:
      return self._draw((self.num_negatives,), seed)
    if sequence_ids is not None:
      sequence_ids = _tensors.as_ids(sequence_ids, "sequence_ids")
      _tensors.check_rank(sequence_ids, 1, "sequence_ids")
    if valid is not None:
      valid = ops.cast(ops.convert_to_tensor(valid), "bool")
      _tensors.check_rank(valid, 1, "valid")
    for given in (sequence_ids, valid):
      if num_queries is None and given is not None:
        num_queries = given.shape[0]
    if num_queries is None:
      raise ValueError(f"per={self.per!r} draws negatives per query: pass num_queries")
    a = int(num_queries)
    for name, given in (("sequence_ids", sequence_ids), ("valid", valid)):
      if given is not None and given.shape[0] not in (None, a):
        raise ValueError(f"{name} must have one entry per query ({a}), got {given.shape[0]}")
    draws = self._draw((a, self.num_negatives), seed)
    if self.per == "sequence" and sequence_ids is not None:
      _, segment = base.first_occurrence_segments(sequence_ids, valid)
      return ops.take(draws, segment, axis=0)
    if valid is not None:
      rank = ops.cumsum(ops.cast(valid, "int32")) - ops.cast(valid, "int32")
      return ops.take(draws, ops.minimum(rank, a - 1), axis=0)
    return draws

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
    """The step's draws, embedded: Negatives(ids [k_u] or [A, k_u], embeddings [k_u, d] or
    [A, k_u, d], log_q [k_u] (= -log |D|), positive_log_q [A]); per-query layouts materialise
    [A, k_u, d] (a model that scores per-sequence draws on a [B, L] grid uses ``block``)."""
    del query_embeddings, positive_embeddings
    pos_ids = _tensors.as_ids(positive_ids, "positive_ids")
    _tensors.check_rank(pos_ids, 1, "positive_ids")
    if self.shared:
      ids = self(seed=seed)
    else:
      ids = self(num_queries=pos_ids.shape[0], sequence_ids=sequence_ids, valid=valid, seed=seed)
    embeddings = scoring.embed_ids(
      ids,
      candidate_embedder=self.candidate_embedder,
      item_table=item_table,
      owner="UniformNegatives",
    )
    return base.Negatives(
      ids=ids,
      embeddings=embeddings,
      log_q=self.log_q(ids if self.shared else ids[0]),
      positive_log_q=self.log_q(pos_ids),
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
  ) -> scoring.ScoredCandidates:
    """``score_negatives`` of `sample_negatives` (accidental hits masked per row): float32
    positive_scores [A], negative_scores [A, k_u], negative_log_q [k_u], valid_mask [A, k_u],
    positive_log_q [A]."""
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

  def block(
    self, ids: Tensor, candidate_embedder: Callable, num_sequences: Optional[int] = None
  ) -> Tuple[str, Tensor]:
    """(layout, embeddings) of ``ids`` (this layer's draws) for ``score_blocks`` (module
    docstring); ``num_sequences`` = B when the A rows of per-``"sequence"`` draws are a
    row-major [B, A / B] grid (else the block is per query)."""
    if self.shared:
      layout, rows = "shared", ids
    elif self.per == "sequence" and num_sequences is not None:
      a, k = ids.shape
      if a % int(num_sequences):
        raise ValueError(f"{a} rows are not a grid of num_sequences={num_sequences} sequences")
      layout = "sequence"
      rows = ops.reshape(ids, (int(num_sequences), a // int(num_sequences), k))[:, 0]
    else:
      layout, rows = "query", ids
    embeddings = _tensors.as_float32(candidate_embedder(rows), "candidate_embedder(ids)")
    _tensors.check_rank(embeddings, 2 if layout == "shared" else 3, "candidate_embedder(ids)")
    return layout, embeddings

  def get_config(self) -> Dict[str, Any]:
    """The layer's config: every argument but ``candidate_embedder`` (the model's layer)."""
    return {
      **super().get_config(),
      "num_negatives": self.num_negatives,
      "id_range": None if self.id_range is None else list(self.id_range),
      "candidate_ids": self.candidate_ids,
      "per": self.per,
      "jit_compile": self.jit_compile,
      "static_shapes": self.static_shapes,
      "seed": self.seed,
    }
