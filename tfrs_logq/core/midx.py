r"""The MIDX proposal and its inverted multi-index (Chen et al., Theorem 2), any array backend.

Index, from item embeddings q_i (i = 0..N-1) and two codebooks C^1, C^2 of K codewords:

    pq (product):  q_i = [q_i^1, q_i^2] (first d//2 dims, the rest), C^l k-means of the q^l
    rq (residual): C^1 k-means of q_i, C^2 k-means of the residuals q_i - c^1_{k_1(i)} (both R^d)
    codes          k_l(i) = argmin_k ||x_i^l - c^l_k||             (``core.kmeans``)
    cells          Omega_c = {i : k_1(i) K + k_2(i) = c},  c = 0..K^2-1
    counts         |Omega_c|;  offsets = exclusive cumsum of the counts
    sorted_items   item rows sorted by cell (stable: ascending rows inside a cell)

Proposal, for a query z (scores divided by the temperature T, as everywhere in tfrs_logq)::

    s^l_k(z) = <z^l, c^l_k> / T                    (pq: z^1, z^2 the halves of z; rq: z^1 = z^2 = z)
    log w_c  = log |Omega_c|   (-inf for an empty cell: probability exactly 0)
    joint_c  = s^1_{k1} + s^2_{k2} + log w_c,      c = k1 K + k2             [A, K^2]
    log Z(z) = LSE_c joint_c
    log Q(i|z) = s^1_{k_1(i)} + s^2_{k_2(i)} - log Z(z)

Sampling draws a cell c from softmax(joint) (= P^1(k1|z) P^2(k2|k1,z)), then an item uniformly
inside it: ``sorted_items[offset_c + (u mod |Omega_c|)]`` for a uniform random integer u >= 0.
The fronts draw c and u with their own random ops and keep the index in their own variables;
the argument checks (plain Python) are shared too.
"""

import numbers
from typing import Optional, Tuple

from tfrs_logq.core.ops import Ops, Tensor

__all__ = [
  "QUANTIZERS",
  "NOT_REFRESHED",
  "check_int",
  "check_sampler_args",
  "check_index_shape",
  "split_dims",
  "split_query",
  "index_from_codes",
  "codeword_scores",
  "cell_log_weights",
  "cell_logits",
  "proposal",
  "code_log_q",
  "cell_codes",
  "first_code_logits",
  "second_code_logits",
  "items_in_cells",
]

QUANTIZERS = ("pq", "rq")
NOT_REFRESHED = "MIDXSampler: call refresh(item_embeddings) before sampling (the index is empty)"


# ----------------------------------------------------------------------------------- arguments
def check_int(value: object, name: str, minimum: int) -> int:
  """``int(value)`` for a Python / numpy integer >= ``minimum`` (not bool); ValueError
  otherwise (floats such as 8.0 are rejected too)."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
    raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
  return int(value)


def check_sampler_args(
  num_codewords: int,
  quantizer: str,
  temperature: float,
  id_offset: int,
  kmeans_iterations: int,
  kmeans_max_points: Optional[int],
  num_negatives: Optional[int],
  num_items: Optional[int],
  dim: Optional[int],
) -> Tuple[int, int, Optional[int]]:
  """The MIDX sampler's constructor checks (same errors on both fronts).

  Returns:
    (num_codewords, id_offset, num_negatives or None) as Python ints.
  """
  num_codewords = check_int(num_codewords, "num_codewords", 1)
  if quantizer not in QUANTIZERS:
    raise ValueError(f"quantizer must be one of {QUANTIZERS}, got {quantizer!r}")
  if not temperature > 0:
    raise ValueError(f"temperature must be > 0, got {temperature!r}")
  id_offset = check_int(id_offset, "id_offset", 0)
  if kmeans_iterations < 0:
    raise ValueError(f"kmeans_iterations must be >= 0, got {kmeans_iterations}")
  if kmeans_max_points is not None and kmeans_max_points < 1:
    raise ValueError(f"kmeans_max_points must be >= 1 or None, got {kmeans_max_points}")
  if num_negatives is not None:
    if (
      isinstance(num_negatives, bool)
      or not isinstance(num_negatives, numbers.Integral)
      or num_negatives < 1
    ):
      raise ValueError(f"num_negatives must be None or an int >= 1, got {num_negatives!r}")
    num_negatives = int(num_negatives)
  if (num_items is None) != (dim is None):
    raise ValueError("give both num_items and dim (to build the index now) or neither")
  return num_codewords, id_offset, num_negatives


def check_index_shape(quantizer: str, num_items: int, dim: int) -> Tuple[int, int]:
  """(num_items, dim) as Python ints: num_items >= 1, dim >= 2 for pq (>= 1 for rq)."""
  num_items = check_int(num_items, "num_items", 1)
  if (
    isinstance(dim, bool)
    or not isinstance(dim, numbers.Integral)
    or dim < 1
    or (quantizer == "pq" and dim < 2)
  ):
    raise ValueError(
      f"dim must be an int >= {2 if quantizer == 'pq' else 1} for quantizer="
      f"{quantizer!r}, got {dim!r}"
    )
  return num_items, int(dim)


def split_dims(quantizer: str, dim: int) -> Tuple[int, int]:
  """(d1, d2): the sub-vector sizes of z^1, z^2 (pq: d//2 and d - d//2; rq: d and d)."""
  if quantizer == "pq":
    return dim // 2, dim - dim // 2
  return dim, dim


def split_query(quantizer: str, z: Tensor, dim: int) -> Tuple[Tensor, Tensor]:
  """(z^1, z^2) of z [A, d]: pq splits the dimensions at d//2; rq uses z for both."""
  if quantizer == "pq":
    d1 = dim // 2
    return z[:, :d1], z[:, d1:]
  return z, z


# --------------------------------------------------------------------------------------- index
def index_from_codes(
  ops: Ops, k1: Tensor, k2: Tensor, num_codewords: int, dtype: str
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
  """The inverted multi-index of the codes k1, k2 (int [N]).

  Returns:
    (item_codes int32 [N, 2], sorted_items [N], cell_counts [K^2], cell_offsets [K^2]), the last
    three of ``dtype`` (int64 on the tf-keras path, int32 on the Keras 3 path).
  """
  k = num_codewords
  cell = ops.cast(k1, dtype) * k + ops.cast(k2, dtype)
  counts = ops.segment_sum(ops.ones_like(cell), cell, num_segments=k * k)
  sorted_items = ops.cast(ops.argsort(cell), dtype)
  offsets = ops.cumsum(counts) - counts
  codes = ops.stack([ops.cast(k1, "int32"), ops.cast(k2, "int32")], axis=1)
  return codes, sorted_items, counts, offsets


# ------------------------------------------------------------------------------------ proposal
def codeword_scores(
  ops: Ops,
  z: Tensor,
  codebook_1: Tensor,
  codebook_2: Tensor,
  quantizer: str,
  temperature: float,
) -> Tuple[Tensor, Tensor]:
  """s^1 [A, K], s^2 [A, K]: <z^l, c^l_k> / T."""
  if quantizer == "pq":
    d1 = codebook_1.shape[-1]
    z1, z2 = z[:, :d1], z[:, d1:]
  else:
    z1 = z2 = z
  s1 = ops.matmul(z1, ops.transpose(codebook_1)) / temperature
  s2 = ops.matmul(z2, ops.transpose(codebook_2)) / temperature
  return s1, s2


def cell_log_weights(ops: Ops, cell_counts: Tensor) -> Tensor:
  """log |Omega_c| (float32 [K^2]), -inf for an empty cell."""
  counts = ops.cast(cell_counts, "float32")
  return ops.where(counts > 0, ops.log(ops.maximum(counts, 1.0)), float("-inf"))


def cell_logits(ops: Ops, s1: Tensor, s2: Tensor, log_weights: Tensor) -> Tuple[Tensor, Tensor]:
  """(joint [A, K^2] = s^1_{k1} + s^2_{k2} + log w_{k1 K + k2}, log Z [A, 1])."""
  k = s1.shape[-1]
  joint = ops.reshape(ops.expand_dims(s1, 2) + ops.expand_dims(s2, 1), (-1, k * k))
  joint = joint + log_weights
  return joint, ops.logsumexp(joint, axis=1, keepdims=True)


def proposal(
  ops: Ops,
  z: Tensor,
  codebook_1: Tensor,
  codebook_2: Tensor,
  cell_counts: Tensor,
  quantizer: str,
  temperature: float,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
  """(s^1, s^2, joint, log Z) of queries z [A, d] (no gradient flows into the proposal)."""
  z = ops.stop_gradient(ops.cast(z, "float32"))
  s1, s2 = codeword_scores(ops, z, codebook_1, codebook_2, quantizer, temperature)
  joint, log_z = cell_logits(ops, s1, s2, cell_log_weights(ops, cell_counts))
  return s1, s2, joint, log_z


def code_log_q(ops: Ops, s1: Tensor, s2: Tensor, log_z: Tensor, k1: Tensor, k2: Tensor) -> Tensor:
  """log Q(i|z) = s^1_{k1} + s^2_{k2} - log Z of items with codes k1, k2 (int [A, M]). [A, M]."""
  return (
    ops.take_along_axis(s1, ops.cast(k1, "int32"), axis=-1)
    + ops.take_along_axis(s2, ops.cast(k2, "int32"), axis=-1)
    - log_z
  )


def first_code_logits(ops: Ops, joint: Tensor, num_codewords: int) -> Tensor:
  """log P(k1|z) + log Z = LSE_{k2} joint[k1 K + k2]: [A, K^2] -> [A, K] (the first stage of an
  exact two-stage draw of a cell: k1 from these logits, then k2 | k1)."""
  return ops.logsumexp(ops.reshape(joint, (-1, num_codewords, num_codewords)), axis=-1)


def second_code_logits(ops: Ops, joint: Tensor, k1: Tensor, num_codewords: int) -> Tensor:
  """log P(k2 | k1, z) + const = joint[k1 K + k2] of drawn first codes k1 (int [A, S]):
  [A, S, K] (P(k1, k2) = P(k1) P(k2 | k1): the two stages draw a cell exactly)."""
  grid = ops.reshape(joint, (-1, num_codewords, num_codewords))  # [A, K, K]
  rows = ops.expand_dims(ops.cast(k1, "int32"), -1)  # [A, S, 1]
  return ops.take_along_axis(grid, rows, axis=1)  # [A, S, K]


def cell_codes(cells: Tensor, num_codewords: int) -> Tuple[Tensor, Tensor]:
  """(k1, k2) = (c // K, c mod K) of cells c."""
  return cells // num_codewords, cells % num_codewords


def items_in_cells(
  ops: Ops,
  cells: Tensor,
  bits: Tensor,
  cell_counts: Tensor,
  cell_offsets: Tensor,
  sorted_items: Tensor,
) -> Tensor:
  """Item rows ``sorted_items[offset_c + (u mod |Omega_c|)]`` of sampled cells c (non-empty) and
  uniform random integers u >= 0 (``bits``, the shape of ``cells``)."""
  count = ops.take(cell_counts, cells)
  position = ops.take(cell_offsets, cells) + ops.mod(bits, ops.maximum(count, 1))
  return ops.take(sorted_items, position)
