r"""The MIDX adaptive sampler on the Keras 3 path: query-dependent proposal Q(i|z) (keras.ops).

The Keras 3 twin of ``tfrs_logq.tf_keras.negatives.MIDXSampler`` (Chen et al., Theorem 2; formulas
in
``tfrs_logq.core.midx``, shared with it)::

    s^l_k(z)   = <z^l, c^l_k> / T                (pq: halves of z; rq: z^1 = z^2 = z)
    Q(i|z)     = exp(s^1_{k_1(i)} + s^2_{k_2(i)}) / Z(z)
    Z(z)       = sum_{k1,k2} |Omega_{k1,k2}| exp(s^1_{k1} + s^2_{k2})

``sample`` draws a cell from softmax(s^1_{k1} + s^2_{k2} + log|Omega_{k1,k2}|) over the K^2
cells (empty cells: probability 0), then an item uniformly inside it, and returns the exact
log Q(i|z) of the drawn id: O(A K d + A K^2 + A S) per batch, independent of N.

State (non-trainable Keras variables, saved with the weights / in ``.keras`` files): codebooks,
item codes, items sorted by cell, cell counts and offsets (int32), the refresh count. They are
created by ``build_index`` (the first ``refresh``, or the constructor when ``num_items`` and
``dim`` are given: needed to load weights into a fresh sampler, and to create the state before
a compiled ``model.fit``). ``refresh`` runs eagerly (between steps: ``MIDXRefreshCallback``),
not inside a compiled function.

Randomness: the draws use the layer's ``keras.random.SeedGenerator`` (it advances inside a
compiled JAX step) or an explicit integer ``seed`` (a pure function of it); k-means seeds are
derived from (``seed``, refresh count), so refreshes are reproducible on each backend.
"""

import numbers
import warnings
from typing import Any, Callable, Dict, Optional, Tuple

import keras
import numpy as np
from keras import ops

from tfrs_logq.core import midx as midx_core
from tfrs_logq.keras3 import _tensors
from tfrs_logq.keras3._tensors import Seed, Tensor
from tfrs_logq.keras3.negatives import midx_index
from tfrs_logq.keras3.negatives.base import Negatives
from tfrs_logq.keras3.negatives.sampler import NegativeSampler
from tfrs_logq.keras3.negatives.scoring import ScoredCandidates, embed_ids, score_negatives

__all__ = ["MIDXSampler", "MIDXRefreshCallback"]

_INT32_MAX = 2**31 - 1


@keras.saving.register_keras_serializable(package="tfrs_logq")
class MIDXSampler(keras.layers.Layer, NegativeSampler):
  """Samples S negatives per query from the MIDX proposal Q(i|z) (module docstring).

  Usage:
    sampler = MIDXSampler(num_codewords=64, quantizer="pq", id_offset=1, seed=7,
                          num_items=n, dim=d, num_negatives=128)
    sampler.refresh(item_table[1:])               # every N steps (MIDXRefreshCallback)
    ids, log_q = sampler.sample(query, 128)       # int32 [A, S], float32 [A, S]
    scored = sampler.score(query, pos_ids, pos_emb, item_table=item_table)
    loss = tlk.sampled_softmax_loss(**scored.loss_kwargs(), correction="corrected")

  Ids are item rows + ``id_offset`` (``id_offset=1`` with ``refresh(table[1:])``: the padding
  id 0 is never drawn). Arguments as ``tfrs_logq.tf_keras.negatives.MIDXSampler`` (same checks, same
  errors); ``candidate_embedder`` (ids -> embeddings) is not part of the config. ``jit_compile``
  is accepted for the tf-keras signature (Keras 3 compiles the whole step); ``sample_negatives``
  and ``score`` are the samplers' common protocol.
  """

  def __init__(
    self,
    num_codewords: int = 64,
    quantizer: str = "pq",
    *,
    num_items: Optional[int] = None,
    dim: Optional[int] = None,
    temperature: float = 1.0,
    id_offset: int = 0,
    seed: int = 0,
    kmeans_iterations: int = 10,
    kmeans_max_points: Optional[int] = 262144,
    chunk_size: int = 16384,
    num_negatives: Optional[int] = None,
    candidate_embedder: Optional[Callable] = None,
    jit_compile: bool = False,
    **kwargs: Any,
  ) -> None:
    super().__init__(**kwargs)
    num_codewords, id_offset, num_negatives = midx_core.check_sampler_args(
      num_codewords,
      quantizer,
      temperature,
      id_offset,
      kmeans_iterations,
      kmeans_max_points,
      num_negatives,
      num_items,
      dim,
    )
    if candidate_embedder is not None and not callable(candidate_embedder):
      raise TypeError("candidate_embedder must be callable (ids -> embeddings) or None")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
      raise ValueError(f"seed must be an int, got {seed!r}")
    self.num_codewords: int = num_codewords
    self.quantizer: str = quantizer
    self.temperature: float = float(temperature)
    self.id_offset: int = id_offset
    self.seed: int = int(seed)
    self.kmeans_iterations: int = int(kmeans_iterations)
    self.kmeans_max_points: Optional[int] = (
      None if kmeans_max_points is None else int(kmeans_max_points)
    )
    self.chunk_size: int = int(chunk_size)
    self.num_negatives: Optional[int] = num_negatives
    self.candidate_embedder: Optional[Callable] = candidate_embedder
    self.jit_compile: bool = bool(jit_compile)
    self.num_items: Optional[int] = None
    self.dim: Optional[int] = None
    self._index_built: bool = False
    self.seed_generator: keras.random.SeedGenerator = keras.random.SeedGenerator(self.seed)
    self.built = True
    if num_items is not None:
      self.build_index(num_items, dim)  # type: ignore[arg-type]  # None: check_index_shape raises

  # ----------------------------------------------------------------------------------- index
  def build_index(self, num_items: int, dim: int) -> None:
    """Creates the codebooks, the inverted index and the refresh count for N items of dim d."""
    if self._index_built:
      if (num_items, dim) != (self.num_items, self.dim):
        raise ValueError(
          f"MIDXSampler index is built for num_items={self.num_items}, "
          f"dim={self.dim}; got num_items={num_items}, dim={dim}"
        )
      return
    num_items, dim = midx_core.check_index_shape(self.quantizer, num_items, dim)
    if num_items >= _INT32_MAX:
      raise ValueError(f"num_items must be < 2**31 - 1 (int32 state), got {num_items}")
    k = self.num_codewords
    d1, d2 = midx_core.split_dims(self.quantizer, dim)

    def weight(name: str, shape: Tuple[int, ...], dtype: str) -> keras.Variable:
      return self.add_weight(
        name=name, shape=shape, dtype=dtype, initializer="zeros", trainable=False
      )

    self.codebook_1 = weight("codebook_1", (k, d1), "float32")
    self.codebook_2 = weight("codebook_2", (k, d2), "float32")
    self.item_codes = weight("item_codes", (num_items, 2), "int32")
    self.sorted_items = weight("sorted_items", (num_items,), "int32")
    self.cell_offsets = weight("cell_offsets", (k * k,), "int32")
    self.cell_counts = weight("cell_counts", (k * k,), "int32")
    self.num_refreshes = weight("num_refreshes", (), "int32")
    self.num_items, self.dim = num_items, dim
    self._index_built = True

  def refresh(self, item_embeddings: Tensor) -> int:
    """Rebuilds both codebooks (k-means) and the inverted multi-index from embeddings [N, d].

    Eager only (concrete values). Seeds: (``seed``, refresh count), so repeated refreshes are
    deterministic. Returns the new refresh count (Python int).
    """
    emb = ops.convert_to_tensor(item_embeddings)
    if _tensors.dtype_of(emb) not in _tensors.FLOAT_DTYPES:
      raise TypeError(f"item_embeddings must be floating point, got {_tensors.dtype_of(emb)}")
    if len(emb.shape) != 2 or emb.shape[0] is None or emb.shape[1] is None:
      raise ValueError(
        f"item_embeddings must have a static shape [num_items, dim], got {tuple(emb.shape)}"
      )
    if emb.shape[0] == 0:
      raise ValueError("item_embeddings is empty (num_items = 0)")
    self.build_index(int(emb.shape[0]), int(emb.shape[1]))
    value = _tensors.concrete(emb)
    refreshes = _tensors.concrete(self.num_refreshes)
    if value is None or refreshes is None:
      raise ValueError(
        "MIDXSampler.refresh runs eagerly (between training steps, e.g. "
        "MIDXRefreshCallback), not inside a compiled function"
      )
    if not np.all(np.isfinite(value)):
      raise ValueError("MIDXSampler.refresh: item_embeddings contain NaN or inf")
    count = int(refreshes)
    index = midx_index.build_index(
      ops.cast(emb, "float32"),
      self.num_codewords,
      self.quantizer,
      (self.seed, count),
      num_iterations=self.kmeans_iterations,
      max_points=self.kmeans_max_points,
      chunk_size=self.chunk_size,
    )
    for variable, new in zip(
      (
        self.codebook_1,
        self.codebook_2,
        self.item_codes,
        self.sorted_items,
        self.cell_counts,
        self.cell_offsets,
      ),
      index,
    ):
      variable.assign(ops.cast(new, variable.dtype))
    self.num_refreshes.assign(count + 1)
    return count + 1

  # -------------------------------------------------------------------------------- proposal
  def _check_ready(self) -> None:
    if not self._index_built:
      raise ValueError(midx_core.NOT_REFRESHED)
    count = _tensors.concrete(self.num_refreshes)
    if count is not None and int(count) < 1:
      raise ValueError(midx_core.NOT_REFRESHED)

  def _check_queries(self, query_embeddings: Tensor) -> Tensor:
    z = ops.convert_to_tensor(query_embeddings)
    if _tensors.dtype_of(z) not in _tensors.FLOAT_DTYPES:
      raise TypeError(f"query_embeddings must be floating point, got {_tensors.dtype_of(z)}")
    if len(z.shape) != 2:
      raise ValueError(f"query_embeddings must have shape [A, dim], got {tuple(z.shape)}")
    if z.shape[1] is not None and z.shape[1] != self.dim:
      raise ValueError(f"query_embeddings have dim {z.shape[1]}, the index has dim {self.dim}")
    if z.shape[0] == 0:
      raise ValueError("query_embeddings is an empty batch (A = 0)")
    value = _tensors.concrete(z)
    if value is not None and not np.all(np.isfinite(value)):
      raise ValueError("query_embeddings contain NaN or inf")
    return ops.cast(z, "float32")

  def _proposal(self, z: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """(s^1, s^2, joint [A, K^2], log Z [A, 1]) (``core.midx.proposal``)."""
    return midx_core.proposal(
      ops, z, self.codebook_1, self.codebook_2, self.cell_counts, self.quantizer, self.temperature
    )

  def _seeds(self, seed: Optional[Seed]) -> Tuple[Seed, ...]:
    """(first-code seed, item seed, second-code seed): the layer's SeedGenerator (seed None) or
    three ints from ``seed``."""
    if seed is None:
      return self.seed_generator, self.seed_generator, self.seed_generator
    if isinstance(seed, keras.random.SeedGenerator):
      return seed, seed, seed
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
      raise ValueError(f"seed must be None, an int or a keras.random.SeedGenerator, got {seed!r}")
    return tuple(midx_index.derive_seed(int(seed), 1, j) for j in (0, 1, 2))

  def sample(
    self, query_embeddings: Tensor, num_samples: int, seed: Optional[Seed] = None
  ) -> Tuple[Tensor, Tensor]:
    """Draws S iid items per query from Q(.|z) and returns their exact log Q(i|z).

    Args:
      query_embeddings: float [A, d], A >= 1 (no gradient flows through sampling).
      num_samples: S >= 1 (Python int).
      seed: None (the layer's SeedGenerator), an int (the draw is a pure function of it) or a
        ``keras.random.SeedGenerator``.

    Returns:
      (ids int32 [A, S] in [id_offset, id_offset + N), log_q float32 [A, S]).
    """
    self._check_ready()
    num_samples = midx_core.check_int(num_samples, "num_samples", 1)
    z = self._check_queries(query_embeddings)
    cell_seed, item_seed, second_seed = self._seeds(seed)
    s1, s2, joint, log_z = self._proposal(z)
    # A cell in two exact stages, k1 then k2 | k1: categorical draws over K classes, not K^2
    # (a draw over C classes costs A S C on some backends: JAX's Gumbel noise).
    k = self.num_codewords
    first = midx_core.first_code_logits(ops, joint, k)  # [A, K]
    k1 = ops.cast(
      keras.random.categorical(first, num_samples, dtype="int32", seed=cell_seed), "int32"
    )
    second = midx_core.second_code_logits(ops, joint, k1, k)  # [A, S, K]
    k2 = keras.random.categorical(ops.reshape(second, (-1, k)), 1, dtype="int32", seed=second_seed)
    k2 = ops.reshape(ops.cast(k2, "int32"), ops.shape(k1))
    cells = k1 * k + k2
    log_q = midx_core.code_log_q(ops, s1, s2, log_z, k1, k2)
    bits = keras.random.randint(ops.shape(cells), 0, _INT32_MAX, dtype="int32", seed=item_seed)
    rows = midx_core.items_in_cells(
      ops, cells, bits, self.cell_counts, self.cell_offsets, self.sorted_items
    )
    return rows + self.id_offset, log_q

  def call(
    self, query_embeddings: Tensor, num_samples: Optional[int] = None
  ) -> Tuple[Tensor, Tensor]:
    """``sample(query_embeddings, num_samples or num_negatives)``."""
    return self.sample(query_embeddings, num_samples or self._num_negatives())

  def log_prob(self, query_embeddings: Tensor, ids: Tensor) -> Tensor:
    """Exact log Q(i|z) of given ids [A] or [A, M] (e.g. the positives, for Q'), float32."""
    self._check_ready()
    assert self.num_items is not None  # _check_ready: the index is built
    z = self._check_queries(query_embeddings)
    ids = self._as_int_ids(ids)
    if len(ids.shape) not in (1, 2):
      raise ValueError(f"ids must have shape [A] or [A, M], got {tuple(ids.shape)}")
    if ids.shape[0] is not None and z.shape[0] is not None and ids.shape[0] != z.shape[0]:
      raise ValueError(f"ids has {ids.shape[0]} rows, query_embeddings has {z.shape[0]}")
    rows = ops.cast(ids, "int32") - self.id_offset
    value = _tensors.concrete(rows)
    if value is not None and value.size and (value.min() < 0 or value.max() >= self.num_items):
      raise ValueError(f"ids out of range [{self.id_offset}, {self.id_offset + self.num_items})")
    vector = len(ids.shape) == 1
    if vector:
      rows = ops.expand_dims(rows, 1)
    s1, s2, _, log_z = self._proposal(z)
    codes = ops.take(self.item_codes, rows, axis=0)  # [A, M, 2]
    out = midx_core.code_log_q(ops, s1, s2, log_z, codes[..., 0], codes[..., 1])
    return out[:, 0] if vector else out

  @staticmethod
  def _as_int_ids(ids: Tensor) -> Tensor:
    ids = ops.convert_to_tensor(ids)
    if _tensors.dtype_of(ids) not in _tensors.INT_DTYPES:
      raise TypeError(f"ids must be integers, got {_tensors.dtype_of(ids)}")
    return ids

  def proposal_log_probs(self, query_embeddings: Tensor) -> Tensor:
    """log Q(i|z) of every item, float32 [A, N] (O(A N): diagnostics and tests)."""
    self._check_ready()
    z = self._check_queries(query_embeddings)
    ids = ops.arange(self.num_items, dtype="int32") + self.id_offset
    return self.log_prob(z, ops.broadcast_to(ids, (z.shape[0], self.num_items)))

  # ------------------------------------------------------------------------------- negatives
  def _num_negatives(self) -> int:
    if self.num_negatives is None:
      raise ValueError(
        "MIDXSampler.score / sample_negatives need num_negatives (constructor "
        "argument or attribute)"
      )
    return self.num_negatives

  def _embed(
    self, ids: Tensor, candidate_embedder: Optional[Callable], item_table: Optional[Tensor]
  ) -> Tensor:
    return embed_ids(
      ids,
      candidate_embedder=candidate_embedder or self.candidate_embedder,
      item_table=item_table,
      owner="MIDXSampler",
    )

  def negatives(
    self,
    query_embeddings: Tensor,
    num_samples: Optional[int] = None,
    *,
    candidate_embedder: Optional[Callable] = None,
    item_table: Optional[Tensor] = None,
    positive_ids: Optional[Tensor] = None,
    seed: Optional[Seed] = None,
  ) -> Negatives:
    """S negatives per query, embedded: Negatives(ids int32 [A, S], embeddings [A, S, d],
    log_q [A, S], valid None, positive_log_q = log Q(p|z) [A] when ``positive_ids`` is given),
    ready for ``score_negatives``. S: ``num_samples`` or ``num_negatives``."""
    ids, log_q = self.sample(query_embeddings, num_samples or self._num_negatives(), seed=seed)
    emb = self._embed(ids, candidate_embedder, item_table)
    positive_log_q = None
    if positive_ids is not None:
      positive_ids = _tensors.as_ids(positive_ids, "positive_ids")
      _tensors.check_rank(positive_ids, 1, "positive_ids")
      positive_log_q = self.log_prob(query_embeddings, positive_ids)
    return Negatives(ids=ids, embeddings=emb, log_q=log_q, positive_log_q=positive_log_q)

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
  ) -> Negatives:
    """`negatives` with ``num_negatives`` per query, embedded by ``candidate_embedder`` or the
    rows of ``item_table``; ``positive_log_q = log Q(p|z)`` (``sequence_ids`` and ``valid`` are
    not needed: every query draws from its own proposal)."""
    del positive_embeddings, sequence_ids, valid
    return self.negatives(
      query_embeddings,
      self._num_negatives(),
      item_table=item_table,
      positive_ids=positive_ids,
      seed=seed,
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
    **deprecated: Any,
  ) -> ScoredCandidates:
    """``num_negatives`` MIDX negatives per query scored by ``score_negatives``:
    negative_log_q = log Q(d|z) [A, S], positive_log_q = log Q(p|z) [A], accidental hits
    masked (the arguments of ``sampled_softmax_loss``). ``sequence_ids`` and ``valid`` are not
    needed (every query draws from its own proposal; padding rows are dropped by the loss's
    weights). ``candidate_embedder=`` still works, with a DeprecationWarning: give it to the
    constructor (or pass ``item_table``)."""
    del sequence_ids, valid
    candidate_embedder = deprecated.pop("candidate_embedder", None)
    if deprecated:
      raise TypeError(f"MIDXSampler.score got unexpected arguments {sorted(deprecated)}")
    if candidate_embedder is not None:
      warnings.warn(
        "MIDXSampler.score(candidate_embedder=...) is deprecated: give it to the constructor "
        "(MIDXSampler(..., candidate_embedder=...)) or pass item_table",
        DeprecationWarning,
        stacklevel=2,
      )
    if not temperature > 0:
      raise ValueError(f"temperature must be > 0, got {temperature!r}")
    negs = self.negatives(
      query_embeddings,
      self._num_negatives(),
      candidate_embedder=candidate_embedder,
      item_table=item_table,
      positive_ids=positive_ids,
      seed=seed,
    )
    return score_negatives(
      query_embeddings, positive_ids, positive_embeddings, negs, temperature=temperature
    )

  def get_config(self) -> Dict[str, Any]:
    return {
      **super().get_config(),
      "num_codewords": self.num_codewords,
      "quantizer": self.quantizer,
      "num_items": self.num_items,
      "dim": self.dim,
      "temperature": self.temperature,
      "id_offset": self.id_offset,
      "seed": self.seed,
      "kmeans_iterations": self.kmeans_iterations,
      "kmeans_max_points": self.kmeans_max_points,
      "chunk_size": self.chunk_size,
      "num_negatives": self.num_negatives,
      "jit_compile": self.jit_compile,
    }


class MIDXRefreshCallback(keras.callbacks.Callback):
  """Refreshes a sampler from ``embeddings_fn()`` before training batches 0, N, 2N, ... of
  ``model.fit`` (counted across epochs). On JAX the model's state is synced first, so
  ``embeddings_fn`` reads the current weights and the step after sees the new index."""

  def __init__(self, sampler: MIDXSampler, embeddings_fn: Callable, every_n_steps: int) -> None:
    super().__init__()
    self.every_n_steps = midx_core.check_int(every_n_steps, "every_n_steps", 1)
    if not callable(embeddings_fn):
      raise TypeError("embeddings_fn must be callable (returns item embeddings [num_items, d])")
    self.sampler = sampler
    self.embeddings_fn = embeddings_fn
    self._step = 0

  def on_train_batch_begin(self, batch: int, logs: Optional[Dict[str, Any]] = None) -> None:
    del batch, logs
    if self._step % self.every_n_steps == 0:
      sync = getattr(self.model, "jax_state_sync", None)
      if sync is not None:
        sync()
      self.sampler.refresh(self.embeddings_fn())
      if hasattr(self.model, "_jax_state_synced"):
        self.model._jax_state_synced = True  # re-read state
    self._step += 1
