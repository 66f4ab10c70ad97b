"""Backend-neutral pieces of the Keras 3 SASRec (`models.keras3.sasrec`): ``keras.ops`` only.

The Keras 3 twin of `models.sasrec_ops` (static shapes, so the whole encoder compiles under
``jax.jit`` / ``tf.function`` / torch): the key-padding causal masks of blocked causal attention,
the attention itself on the padded [B, L] grid, and token packing.

    bias[t, j] = 0 where key j <= query t and item_j != 0, else -1e9   (finite: padding queries'
                                                                        rows stay finite)
    context_t  = sum_j softmax_j(<q_t, k_j> / sqrt(d_head) + bias[t, j]) v_j   per head

Token packing (`Tokens`, the tf-keras ``pack_tokens``): the per-token layers (embeddings,
LayerNorms, projections, FFN, their dropout) run on the T non-padding tokens only, packed into
C >= T rows; only the attention core runs on the [B, L] grid. The index is computed on the host
(`token_index`, numpy, per batch) and C is T rounded up to a multiple of ceil(B L / 8), so a
jitted step compiles at most 8 shapes per batch shape. `to_grid` / `from_grid` move rows between
the two layouts by gathers; real tokens and real grid positions are in bijection, so each one's
gradient is the other gather (no scatter): filler rows (C - T) read zeros, reach no grid position
and get zero gradient; padding positions of the grid read zeros. Dropout is Keras's
(`models.keras3.dropout.Dropout`, seeded per layer, its state in the model's variables); its
masks are drawn per packed row, so in training they differ from the padded path's, and in
inference the packed and padded encoders are the same function.
"""

from __future__ import annotations

import math
from typing import List, NamedTuple, Optional, Tuple

import numpy as np
from keras import ops

__all__ = [
  "NEG_INF",
  "TOKEN_BUCKETS",
  "Tokens",
  "attention_biases",
  "batch_tokens",
  "block_bounds",
  "causal_attention",
  "from_grid",
  "likely_capacities",
  "to_grid",
  "token_index",
  "with_token_index",
]

NEG_INF = -1e9
TOKEN_BUCKETS = 8  # compiled token capacities per batch shape (module docstring)


def block_bounds(length: Optional[int], num_blocks: int) -> List[Tuple[int, Optional[int]]]:
  """[(a_i, b_i)] of ``num_blocks`` query blocks of a static ``length`` (sizes differ by <= 1,
  the larger first; `models.sasrec_ops.block_bounds`); [(0, None)] = the full grid."""
  if length is None or num_blocks <= 1 or length <= 1:
    return [(0, None)]
  k = min(num_blocks, length)
  base, extra = divmod(length, k)
  bounds, a = [], 0
  for i in range(k):
    b = a + base + (1 if i < extra else 0)
    bounds.append((a, b))
    a = b
  return bounds


def attention_biases(valid, num_blocks: int):
  """[(a, b, bias [B, b - a, b])] of the query blocks of a [B, L] bool non-padding mask (static
  L; b None: the full grid, bias [B, L, L])."""
  length = valid.shape[1]
  out = []
  for a, b in block_bounds(length, num_blocks):
    end = length if b is None else b
    causal = np.tril(np.ones((end, end), bool))[a:end]  # [n, end]: j <= t
    keys = valid[:, :end]
    allowed = ops.logical_and(ops.convert_to_tensor(causal)[None], keys[:, None, :])
    out.append((a, b, ops.where(allowed, 0.0, NEG_INF)))
  return out


def causal_attention(q, k, v, biases, num_heads: int, dropout=None, training=False):
  """softmax_j(<q_t, k_j> / sqrt(d_head) + bias[t, j]) v_j per head, block by block.

  q, k, v: [B, L, d] -> context [B, L, d]; query block [a, b) reads keys and values [0, b).
  ``dropout``: a layer applied to the attention probabilities (training only).
  """
  b_, l_, dim = q.shape[0], q.shape[1], q.shape[-1]
  h, dh = num_heads, dim // num_heads
  q = q * (1.0 / math.sqrt(dh))
  if h > 1:  # [B, H, L, dh]
    q, k, v = (ops.transpose(ops.reshape(t, (-1, l_, h, dh)), (0, 2, 1, 3)) for t in (q, k, v))
  outs = []
  for a, b, bias in biases:
    qi, ki, vi = (q, k, v) if b is None else (q[..., a:b, :], k[..., :b, :], v[..., :b, :])
    # logits and softmax in float32 whatever the compute dtype (bfloat16: --mixed_precision)
    logits = ops.cast(ops.matmul(qi, ops.swapaxes(ki, -1, -2)), "float32") + ops.cast(
      bias[:, None] if h > 1 else bias, "float32"
    )
    attn = ops.softmax(logits, axis=-1)
    if dropout is not None:
      attn = dropout(attn, training=training)
    outs.append(ops.matmul(ops.cast(attn, vi.dtype), vi))
  ctx = outs[0] if len(outs) == 1 else ops.concatenate(outs, axis=-2)
  if h > 1:
    ctx = ops.transpose(ctx, (0, 2, 1, 3))
  del b_
  return ops.reshape(ctx, (-1, l_, dim))


# ------------------------------------------------------------------------------ token packing
class Tokens(NamedTuple):
  """The packed layout of a [B, L] batch (`token_index`): ``rows`` int32 [C], the row-major grid
  index of each packed row (B L for the C - T filler rows); ``slots`` int32 [B, L], the packed
  row of each grid position (C at padding)."""

  rows: object
  slots: object


def token_index(inputs, buckets: Optional[int] = TOKEN_BUCKETS, min_capacity: int = 0) -> Tokens:
  """`Tokens` (numpy) of left-padded ids [B, L] (0 = padding), on the host.

  buckets: None -> C = T; else C = T rounded up to a multiple of ceil(B L / buckets), at least
  that and at most B L (at most ``buckets`` distinct C per batch shape).
  min_capacity: C is at least this (at most B L): one capacity for every batch that fits it,
  so one compiled program (an accelerator's run: `train.keras3.trainer`).
  """
  valid = np.asarray(inputs) != 0
  if valid.ndim != 2:
    raise ValueError(f"token_index takes ids [batch, length], got shape {valid.shape}")
  flat = valid.reshape(-1)
  n = flat.size
  rows = np.flatnonzero(flat).astype(np.int32)
  count = rows.size
  capacity = count
  if buckets:
    quantum = -(-n // int(buckets))
    capacity = min(max(-(-count // quantum), 1) * quantum, n)
  capacity = min(max(capacity, int(min_capacity)), n)
  slots = np.full(n, capacity, np.int32)
  slots[rows] = np.arange(count, dtype=np.int32)
  rows = np.concatenate([rows, np.full(capacity - count, n, np.int32)])
  return Tokens(rows, slots.reshape(valid.shape))


def likely_capacities(
  lengths, batch_size: int, max_len: int, buckets: Optional[int] = TOKEN_BUCKETS, z: float = 6.0
) -> list:
  """The token capacities C (`token_index`) that batches of ``batch_size`` rows drawn without
  replacement from sequences of ``lengths`` (their training inputs, before the window) reach,
  except with a probability below the normal tail at ``z`` (z = 6: ~1e-9 a batch): the count
  T = sum of min(length, max_len) over the batch has mean B mu and variance
  B sigma^2 (N - B) / (N - 1); every C of a T in mean +- z sd (within the smallest and largest
  possible T) is listed, ascending, so a run can compile them all at its start."""
  t = np.minimum(np.asarray(lengths, np.int64), int(max_len))
  n_rows, b = t.size, int(batch_size)
  if n_rows == 0 or b <= 0:
    raise ValueError(f"likely_capacities needs sequences and a batch size, got {n_rows}, {b}")
  b = min(b, n_rows)
  ordered = np.sort(t)
  low, high = int(ordered[:b].sum()), int(ordered[-b:].sum())
  mean = b * float(t.mean())
  sd = math.sqrt(max(b * float(t.var()) * (n_rows - b) / max(n_rows - 1, 1), 0.0))
  lo = max(low, int(math.floor(mean - z * sd)))
  hi = min(high, int(math.ceil(mean + z * sd)))
  grid = int(batch_size) * int(max_len)
  if not buckets:
    return list(range(max(lo, 1), hi + 1))
  quantum = -(-grid // int(buckets))
  caps = {
    min(max(-(-count // quantum), 1) * quantum, grid)
    for count in range(lo, hi + 1, max(1, quantum // 2))
  }
  caps.update(min(max(-(-count // quantum), 1) * quantum, grid) for count in (lo, hi))
  return sorted(caps)


def with_token_index(
  batch: dict, buckets: Optional[int] = TOKEN_BUCKETS, min_capacity: int = 0
) -> dict:
  """A {"inputs", "targets", ...} numpy batch plus its `token_index` ("token_rows" [C],
  "token_slots" [B, L]): the packed batch `batch_tokens` reads back."""
  tokens = token_index(batch["inputs"], buckets, min_capacity)
  return dict(batch, token_rows=tokens.rows, token_slots=tokens.slots)


def batch_tokens(batch) -> Optional[Tokens]:
  """The `Tokens` of a `with_token_index` batch; None for a padded batch."""
  if "token_rows" not in batch:
    return None
  return Tokens(batch["token_rows"], batch["token_slots"])


def _with_zero_row(x):
  """x [N, k] -> [N + 1, k], the last row 0 (what filler rows and padding slots read)."""
  return ops.concatenate([x, ops.zeros((1, x.shape[-1]), x.dtype)], axis=0)


def _gather_pair(x, forward, backward):
  """take(x ++ 0, forward) with the gradient take(dy ++ 0, backward): the two indices are
  inverse on the real rows, zero row elsewhere (module docstring)."""

  @ops.custom_gradient
  def gather(x):
    def grad(*args, upstream=None):
      dy = args[0] if upstream is None else upstream
      dy = ops.reshape(dy, (-1, dy.shape[-1]))
      return ops.take(_with_zero_row(dy), backward, axis=0)  # x's shape [N, k]

    return ops.take(_with_zero_row(x), forward, axis=0), grad

  return gather(x)


def to_grid(x, tokens: Optional[Tokens]):
  """Packed rows x [C, k] -> [B, L, k] (padding positions 0); ``tokens`` None: x is the grid."""
  if tokens is None:
    return x
  return _gather_pair(x, tokens.slots, tokens.rows)


def from_grid(g, tokens: Optional[Tokens]):
  """[B, L, k] -> the packed rows [C, k] (filler rows 0); ``tokens`` None: g itself."""
  if tokens is None:
    return g
  flat = ops.reshape(g, (-1, g.shape[-1]))
  return _gather_pair(flat, tokens.rows, ops.reshape(tokens.slots, (-1,)))
