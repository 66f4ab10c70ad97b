"""MIDX adaptive negative sampler: inverted multi-index with query-dependent proposal Q(i|z).

Paper: Chen et al., "Adaptive Sampled Softmax with Inverted Multi-Index: Methods, Theory and
Applications", Theorem 2 / Eq. (6), with B = 2 codebooks of K codewords.

Index (rebuilt by ``refresh`` from the current item embeddings; built in midx_index.py): codebooks
C^1, C^2 of K codewords (product or residual quantization), codes (k_1(i), k_2(i)) and the cells
Omega_{k1,k2} = {i : k_1(i) = k1, k_2(i) = k2}, items stored sorted by cell.

Proposal (Theorem 2, scores divided by the temperature T as everywhere in tfrs_logq):
  s^1_k(z) = <z^1, c^1_k> / T,   s^2_k(z) = <z^2, c^2_k> / T      (rq: z^1 = z^2 = z)
  Q(i|z) = exp(s^1_{k1(i)} + s^2_{k2(i)}) / Z(z),
  Z(z)   = sum_{k1,k2} |Omega_{k1,k2}| exp(s^1_{k1} + s^2_{k2})
         = P^1(k1|z) * P^2(k2|k1,z) * 1/|Omega_{k1,k2}|   with
  P^1(k1|z) = psi_{k1} exp(s^1_{k1}) / sum_k psi_k exp(s^1_k),
  psi_{k1} = sum_{k'} |Omega_{k1,k'}| exp(s^2_{k'}),
  P^2(k2|k1,z) = |Omega_{k1,k2}| exp(s^2_{k2}) / psi_{k1}.
Empty cells have weight |Omega| = 0, hence probability exactly 0 (log-weight -inf), and a codeword
k1 whose cells are all empty has psi_{k1} = 0. Sampling draws the cell (k1, k2) from the joint
P^1(k1) P^2(k2|k1) (identical to drawing k1 then k2 | k1) over the A x K^2 log-weights
s^1_{k1} + s^2_{k2} + log|Omega_{k1,k2}|, then an item uniformly inside the cell as a gather
sorted_items[offset_c + u mod count_c]. Cost per batch: O(A K d + A K^2 + A S), independent of N.
Returned log Q(i|z) = s^1_{k1} + s^2_{k2} - log Z(z) is exact for the proposal actually sampled.

The formulas (index, proposal, log Q, the item inside a cell) are ``tfrs_logq.core.midx``'s,
shared with the Keras 3 twin ``tfrs_logq.keras3.negatives.MIDXSampler``.

Randomness is stateless: every ``sample`` call derives its seed from (seed, draw counter
[, replica id]) where the counter is a saved non-trainable variable, so runs are reproducible and
resume identically from a checkpoint.
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

from tfrs_logq.tf_keras import accidental_hits
from tfrs_logq.tf_keras.negatives import midx_index, scoring
from tfrs_logq.tf_keras.negatives.base import ItemTable, Negatives, as_ids, check_rank
from tfrs_logq.tf_keras.negatives.sampler import NegativeSampler

import tensorflow as tf

from tfrs_logq.core import midx as midx_core
from tfrs_logq.core.ops import tf_ops

__all__ = ["MIDXSampler", "RefreshEveryNSteps", "MIDXRefreshCallback"]

_NOT_REFRESHED = midx_core.NOT_REFRESHED


class MIDXSampler(tf.keras.layers.Layer, NegativeSampler):
  """Samples negatives from the MIDX proposal Q(i|z) (Theorem 2 of the MIDX paper).

  Q(i|z) = exp(s^1_{k1(i)}(z) + s^2_{k2(i)}(z)) / Z(z),
  Z(z) = sum_{k1,k2} |Omega_{k1,k2}| exp(s^1_{k1}(z) + s^2_{k2}(z)),
  with s^l_k(z) = <z^l, c^l_k> / temperature (see the module docstring for the index).

  Usage:
    sampler = MIDXSampler(num_codewords=64, quantizer="pq", id_offset=1, seed=7,
                          num_negatives=128)
    sampler.refresh(item_table[1:])               # every N steps (see ``RefreshEveryNSteps``)
    ids, log_q = sampler.sample(query_emb, 128)   # int64 [A, S], float32 [A, S]
    scored = sampler.score(query_emb, pos_ids, pos_emb, item_table=item_table)  # NegativeSampler

  Ids returned are item_row + ``id_offset``: with ``id_offset=1`` and ``refresh(table[1:])``, id 0
  (padding) is never sampled.

  The codebooks, the inverted index and the draw counter are non-trainable variables (they are saved
  by ``tf.train.Checkpoint`` / Keras weights). They are created by ``build_index`` (called by the
  first ``refresh``, or in the constructor when ``num_items`` and ``dim`` are given, which is needed
  to restore a checkpoint into a fresh sampler before the first refresh).
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
    """Configures the sampler.

    Args:
      num_codewords: K, codewords per codebook (K^2 cells). >= 1.
      quantizer: "pq" (product) or "rq" (residual).
      num_items: optional N; with ``dim`` builds the index variables now.
      dim: optional embedding dimension d (>= 2 for "pq").
      temperature: T > 0; scores are <z, c> / T (match the loss temperature).
      id_offset: added to item rows to form ids (1 when id 0 is padding).
      seed: integer seed of k-means and sampling.
      kmeans_iterations: Lloyd iterations per codebook and refresh.
      kmeans_max_points: codebooks are learned on at most this many random items (all are assigned).
      chunk_size: rows per k-means distance block.
      num_negatives: S, negatives per query drawn by `score` / `sample_negatives` (None: only
        ``sample`` / ``negatives`` with an explicit S work).
      candidate_embedder: optional callable ids [m] -> [m, d] used by `score` /
        `sample_negatives` (not part of the config); without it they embed from the
        ``item_table`` passed to the call (row i = id i).
      jit_compile: score through XLA-compiled table paths in `score`.
      **kwargs: tf.keras.layers.Layer arguments (name, ...).
    """
    kwargs.setdefault("trainable", False)
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
    self.num_negatives = num_negatives
    self.candidate_embedder = candidate_embedder
    self.jit_compile = bool(jit_compile)
    self.num_codewords = num_codewords
    self.quantizer = quantizer
    self.temperature = float(temperature)
    self.id_offset = id_offset
    self.seed = int(seed)
    self.kmeans_iterations = int(kmeans_iterations)
    self.kmeans_max_points = kmeans_max_points
    self.chunk_size = int(chunk_size)
    self.num_items: Optional[int] = None
    self.dim: Optional[int] = None
    self._index_built = False
    self._refresh_fn = tf.function(self._refresh_impl)  # one graph per sampler (static shapes)
    if num_items is not None:
      self.build_index(num_items, dim)  # type: ignore[arg-type]  # None: check_index_shape raises

  # ----------------------------------------------------------------------------------------- index
  def build_index(self, num_items: int, dim: int) -> None:
    """Creates the codebooks, the inverted index and the counters for N items of dimension d."""
    if self._index_built:
      if (num_items, dim) != (self.num_items, self.dim):
        raise ValueError(
          f"MIDXSampler index is built for num_items={self.num_items}, "
          f"dim={self.dim}; got num_items={num_items}, dim={dim}"
        )
      return
    num_items, dim = midx_core.check_index_shape(self.quantizer, num_items, dim)
    k = self.num_codewords
    d1, d2 = midx_index.split_dims(self.quantizer, dim)
    once = tf.VariableAggregation.ONLY_FIRST_REPLICA

    def weight(name: str, shape: List[int], dtype: tf.DType) -> tf.Variable:
      return self.add_weight(
        name=name, shape=shape, dtype=dtype, initializer="zeros", trainable=False, aggregation=once
      )

    self.codebook_1 = weight("codebook_1", [k, d1], tf.float32)
    self.codebook_2 = weight("codebook_2", [k, d2], tf.float32)
    self.item_codes = weight("item_codes", [num_items, 2], tf.int32)  # (k1(i), k2(i))
    self.sorted_items = weight("sorted_items", [num_items], tf.int64)  # item rows sorted by cell
    self.cell_offsets = weight("cell_offsets", [k * k], tf.int64)  # start of cell c in
    # sorted_items
    self.cell_counts = weight("cell_counts", [k * k], tf.int64)  # |Omega_c|
    self.num_refreshes = weight("num_refreshes", [], tf.int64)
    self.num_draws = weight("num_draws", [], tf.int64)
    self.num_items, self.dim = num_items, dim
    self._index_built = True
    self.built = True

  def refresh(self, item_embeddings: tf.Tensor) -> tf.Tensor:
    """Rebuilds both codebooks (k-means) and the inverted multi-index from item embeddings [N, d].

    pq: C^l = kmeans({q_i^l}); rq: C^1 = kmeans({q_i}), C^2 = kmeans({q_i - c^1_{k1(i)}}).
    k_l(i) = nearest codeword; items sorted by cell k1 * K + k2 (stable), offsets = exclusive cumsum
    of counts. Every item lands in exactly one cell. Seeds depend on (seed, refresh count), so
    repeated refreshes are deterministic. Works eagerly and inside tf.function (once the index is
    built).

    Returns:
      The new refresh count (int64 scalar).
    """
    emb = tf.convert_to_tensor(item_embeddings)
    if not emb.dtype.is_floating:
      raise TypeError(f"item_embeddings must be floating point, got {emb.dtype.name}")
    if emb.shape.rank != 2 or emb.shape[0] is None or emb.shape[1] is None:
      raise ValueError(
        f"item_embeddings must have a static shape [num_items, dim], got {emb.shape}"
      )
    if emb.shape[0] == 0:
      raise ValueError("item_embeddings is empty (num_items = 0)")
    self.build_index(int(emb.shape[0]), int(emb.shape[1]))
    emb = tf.cast(emb, tf.float32)
    tf.debugging.assert_all_finite(emb, "MIDXSampler.refresh: item_embeddings contain NaN or inf")
    return self._refresh_fn(emb)

  def _refresh_impl(self, emb: tf.Tensor) -> tf.Tensor:
    seed = tf.stack([tf.constant(self.seed, tf.int64), self.num_refreshes * 2])
    index = midx_index.build_index(
      emb,
      self.num_codewords,
      self.quantizer,
      seed,
      num_iterations=self.kmeans_iterations,
      max_points=self.kmeans_max_points,
      chunk_size=self.chunk_size,
    )
    self.codebook_1.assign(index.codebook_1)
    self.codebook_2.assign(index.codebook_2)
    self.item_codes.assign(index.item_codes)
    self.sorted_items.assign(index.sorted_items)
    self.cell_counts.assign(index.cell_counts)
    self.cell_offsets.assign(index.cell_offsets)
    return self.num_refreshes.assign_add(1)

  # -------------------------------------------------------------------------------------- proposal
  def _check_ready(self) -> None:
    if not self._index_built:
      raise ValueError(_NOT_REFRESHED)

  def _check_queries(self, query_embeddings: tf.Tensor) -> tf.Tensor:
    z = tf.convert_to_tensor(query_embeddings)
    if not z.dtype.is_floating:
      raise TypeError(f"query_embeddings must be floating point, got {z.dtype.name}")
    if z.shape.rank != 2:
      raise ValueError(f"query_embeddings must have shape [A, dim], got {z.shape}")
    if z.shape[1] is not None and z.shape[1] != self.dim:
      raise ValueError(f"query_embeddings have dim {z.shape[1]}, the index has dim {self.dim}")
    if z.shape[0] == 0:
      raise ValueError("query_embeddings is an empty batch (A = 0)")
    z = tf.cast(z, tf.float32)  # no gradient flows into the proposal (core.midx.proposal)
    deps = [
      tf.debugging.assert_positive(self.num_refreshes, message=_NOT_REFRESHED),
      tf.debugging.assert_positive(tf.shape(z)[0], message="query_embeddings is an empty batch"),
      tf.debugging.assert_all_finite(z, "query_embeddings contain NaN or inf"),
    ]
    with tf.control_dependencies(deps):
      return tf.identity(z)

  def _cell_logits(self, z: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """(s1, s2, joint [A, K*K] = s^1_{k1} + s^2_{k2} + log|Omega_{k1,k2}|, log Z [A, 1])."""
    return midx_core.proposal(
      tf_ops(),
      z,
      self.codebook_1,
      self.codebook_2,
      self.cell_counts,
      self.quantizer,
      self.temperature,
    )

  def sample(
    self, query_embeddings: tf.Tensor, num_samples: int, seed: Optional[tf.Tensor] = None
  ) -> Tuple[tf.Tensor, tf.Tensor]:
    """Draws S iid items per query from Q(.|z) and returns their exact log Q(i|z).

    Cell c = (k1, k2) ~ P^1(k1|z) P^2(k2|k1,z) (joint over K^2 log-weights, empty cells excluded),
    then i ~ Uniform(Omega_c) by gather; log Q(i|z) = s^1_{k1} + s^2_{k2} - log Z(z).

    Args:
      query_embeddings: float [A, d], A >= 1 (no gradient flows through sampling).
      num_samples: S >= 1 (python int).
      seed: optional shape-[2] integer seed; when given the draw is a pure function of it and the
        draw counter is not advanced. Otherwise the seed is (sampler seed, draw counter, replica
        id).

    Returns:
      (ids int64 [A, S] in [id_offset, id_offset + N), log_q float32 [A, S]).
    """
    self._check_ready()
    num_samples = midx_index.check_int(num_samples, "num_samples", 1)
    z = self._check_queries(query_embeddings)
    if seed is None:
      seed = self._next_seed()
    else:
      seed = tf.cast(tf.convert_to_tensor(seed), tf.int64)
      if seed.shape != [2]:
        raise ValueError(f"seed must have shape [2], got {seed.shape}")
    cell_seed, item_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    s1, s2, joint, log_z = self._cell_logits(z)
    cells = tf.random.stateless_categorical(joint, num_samples, seed=cell_seed, dtype=tf.int64)
    k1, k2 = midx_core.cell_codes(cells, self.num_codewords)
    log_q = midx_core.code_log_q(tf_ops(), s1, s2, log_z, k1, k2)
    bits = tf.random.stateless_uniform(
      tf.shape(cells), seed=item_seed, minval=None, maxval=None, dtype=tf.int64
    )
    ids = (
      midx_core.items_in_cells(
        tf_ops(), cells, bits, self.cell_counts, self.cell_offsets, self.sorted_items
      )
      + self.id_offset
    )
    return ids, log_q

  def negatives(
    self,
    query_embeddings: tf.Tensor,
    num_samples: int,
    candidate_embedder: Callable[[tf.Tensor], tf.Tensor],
    positive_ids: Optional[tf.Tensor] = None,
    seed: Optional[tf.Tensor] = None,
  ) -> Negatives:
    """Samples S negatives per query and embeds them: the `Negatives` record of the step.

    Args:
      query_embeddings: float [A, d].
      num_samples: S >= 1.
      candidate_embedder: callable mapping int64 ids [k] to embeddings [k, d'] (id table or tower).
      positive_ids: optional int [A]; gives ``positive_log_q = log Q(p|z)`` under the same proposal,
        needed by the corrected loss (log Q'(d) = log Q(d|z) - log(1 - Q(p|z))).
      seed: optional shape-[2] stateless seed (see ``sample``).

    Returns:
      Negatives(ids int64 [A, S], embeddings [A, S, d'], log_q float32 [A, S],
                positive_log_q float32 [A] or None).
    """
    ids, log_q = self.sample(query_embeddings, num_samples, seed=seed)
    emb = scoring.embed_ids(ids, candidate_embedder=candidate_embedder)
    positive_log_q = None
    if positive_ids is not None:
      positive_ids = as_ids(positive_ids, "positive_ids")
      check_rank(positive_ids, 1, "positive_ids")
      positive_log_q = self.log_prob(query_embeddings, positive_ids)
    return Negatives(ids=ids, embeddings=emb, log_q=log_q, positive_log_q=positive_log_q)

  def _next_seed(self) -> tf.Tensor:
    """(seed, counter * replicas + replica id); advances the saved draw counter."""
    counter = self.num_draws.assign_add(1) - 1
    ctx = tf.distribute.get_replica_context()
    if ctx is not None and ctx.num_replicas_in_sync > 1:
      replica = tf.cast(ctx.replica_id_in_sync_group, tf.int64)
      counter = counter * ctx.num_replicas_in_sync + replica
    return tf.stack([tf.constant(self.seed, tf.int64), counter * 2 + 1])

  def call(self, query_embeddings: tf.Tensor, num_samples: int) -> Tuple[tf.Tensor, tf.Tensor]:
    """Same as ``sample(query_embeddings, num_samples)``."""
    return self.sample(query_embeddings, num_samples)

  def log_prob(self, query_embeddings: tf.Tensor, ids: tf.Tensor) -> tf.Tensor:
    """Exact log Q(i|z) of given ids (e.g. the positives, for the corrected loss's Q').

    Args:
      query_embeddings: float [A, d].
      ids: int [A] or [A, M] in [id_offset, id_offset + N).

    Returns:
      float32 with the shape of ``ids``: s^1_{k1(i)} + s^2_{k2(i)} - log Z(z).
    """
    self._check_ready()
    assert self.num_items is not None  # _check_ready raised if the index is not built
    z = self._check_queries(query_embeddings)
    ids = tf.convert_to_tensor(ids)
    if not ids.dtype.is_integer:
      raise TypeError(f"ids must be integers, got {ids.dtype.name}")
    if ids.shape.rank not in (1, 2):
      raise ValueError(f"ids must have shape [A] or [A, M], got {ids.shape}")
    if ids.shape[0] is not None and z.shape[0] is not None and ids.shape[0] != z.shape[0]:
      raise ValueError(f"ids has {ids.shape[0]} rows, query_embeddings has {z.shape[0]}")
    rows = tf.cast(ids, tf.int64) - self.id_offset
    checks = [
      tf.debugging.assert_equal(
        tf.reduce_all((rows >= 0) & (rows < self.num_items)),
        True,
        message=f"ids out of range [{self.id_offset}, {self.id_offset + self.num_items})",
      ),
      tf.debugging.assert_equal(
        tf.shape(ids)[0],
        tf.shape(z)[0],
        message="ids and query_embeddings differ in their number of rows",
      ),
    ]
    with tf.control_dependencies(checks):
      rows = tf.identity(rows)
    vector = ids.shape.rank == 1
    if vector:
      rows = rows[:, tf.newaxis]
    s1, s2, _, log_z = self._cell_logits(z)
    codes = tf.gather(self.item_codes, rows)  # [A, M, 2]
    out = midx_core.code_log_q(tf_ops(), s1, s2, log_z, codes[..., 0], codes[..., 1])
    return out[:, 0] if vector else out

  def proposal_log_probs(self, query_embeddings: tf.Tensor) -> tf.Tensor:
    """log Q(i|z) for every item, float32 [A, N] (O(A N): for diagnostics and tests, not
    training)."""
    self._check_ready()
    ids = tf.range(self.num_items, dtype=tf.int64) + self.id_offset
    z = tf.convert_to_tensor(query_embeddings)
    a = tf.shape(z)[0]
    return self.log_prob(z, tf.tile(ids[tf.newaxis, :], [a, 1]))

  def get_config(self) -> Dict[str, Any]:
    config = super().get_config()
    config.update(
      num_codewords=self.num_codewords,
      quantizer=self.quantizer,
      num_items=self.num_items,
      dim=self.dim,
      temperature=self.temperature,
      id_offset=self.id_offset,
      seed=self.seed,
      kmeans_iterations=self.kmeans_iterations,
      kmeans_max_points=self.kmeans_max_points,
      chunk_size=self.chunk_size,
      num_negatives=self.num_negatives,
      jit_compile=self.jit_compile,
    )
    return config

  # ------------------------------------------------------------------------- NegativeSampler API
  def _num_negatives(self) -> int:
    if self.num_negatives is None:
      raise ValueError(
        "MIDXSampler.score / sample_negatives need num_negatives (constructor "
        "argument or attribute)"
      )
    return self.num_negatives

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
    """`negatives` with ``num_negatives`` per query, embedded by ``candidate_embedder`` or the
    rows of ``item_table``; ``positive_log_q = log Q(p|z)`` (``valid`` is not needed: every
    query draws from its own proposal)."""
    del positive_embeddings, sequence_ids, valid
    ids, log_q = self.sample(query_embeddings, self._num_negatives(), seed=seed)
    emb = scoring.embed_ids(ids, candidate_embedder=self.candidate_embedder, item_table=item_table)
    return Negatives(
      ids=ids,
      embeddings=emb,
      log_q=log_q,
      positive_log_q=self.log_prob(query_embeddings, positive_ids),
    )

  def score(
    self,
    query_embeddings: tf.Tensor,
    positive_ids: tf.Tensor,
    positive_embeddings: tf.Tensor,
    *,
    temperature: float = 1.0,
    seed: Optional[tf.Tensor] = None,
    sequence_ids: Optional[tf.Tensor] = None,
    item_table: Optional[ItemTable] = None,
    valid: Optional[tf.Tensor] = None,
  ) -> scoring.ScoredCandidates:
    """`NegativeSampler.score` for S = ``num_negatives`` per-query MIDX negatives.

    The [A, S] negatives are scored by `scoring.per_query_scores` (one [A, V] matmul + gather when
    ``item_table`` is given and V <= 0.4 S d); negative_log_q = log Q(d|z) [A, S],
    positive_log_q = log Q(p|z) [A]; accidental hits masked. ``valid`` is not needed (every
    query draws from its own proposal; padding rows are dropped by the caller).
    """
    del sequence_ids, valid
    if not temperature > 0:
      raise ValueError(f"temperature must be > 0, got {temperature!r}")
    inv_t = 1.0 / float(temperature)
    query, pos_ids, pos_emb = scoring.check_queries(
      query_embeddings, positive_ids, positive_embeddings
    )
    ids, log_q = self.sample(query, self._num_negatives(), seed=seed)
    assert self.num_items is not None  # sample raised if the index is not built
    scores = (
      scoring.per_query_scores(
        query,
        ids,
        item_table=item_table,
        candidate_embedder=self.candidate_embedder,
        num_rows=self.num_items + self.id_offset,
        jit_compile=self.jit_compile,
      )
      * inv_t
    )
    return scoring.ScoredCandidates(
      tf.reduce_sum(query * pos_emb, axis=-1) * inv_t,
      scores,
      log_q,
      accidental_hits.accidental_hit_mask(pos_ids, ids),
      self.log_prob(query, pos_ids),
    )


# The refresh hooks live in midx_refresh.py; re-exported here (the public path is midx).
from tfrs_logq.tf_keras.negatives.midx_refresh import (  # noqa: E402
  MIDXRefreshCallback,
  RefreshEveryNSteps,
)
