"""The execution machinery of SASRec (`models.sasrec`): stateless dropout, blocked causal attention
and token compaction, as functions of tensors (the same function in eval mode; only the work and
the dropout masks' layout change).

Dropout is *stateless* (`stateless_dropout`, like ``tf.nn.experimental.stateless_dropout``) and
keyed by a ``seed`` tensor that the caller derives from (run seed, global step, replica): a
resumed run replays exactly the masks an uninterrupted run would have drawn.

Execution (`models.sasrec.SASRec`'s ``attention_blocks`` and ``pack_tokens``):

* Blocked causal attention (``attention_blocks`` = k): the query axis is cut into k static blocks
  [a_i, b_i) (sizes differ by at most 1 when k does not divide L); block i attends to the keys
  [0, b_i) only, since keys j > t are masked anyway. QK^T, softmax, dropout and attn V then cover
  sum_i (b_i - a_i) b_i ~ L^2 (k + 1) / (2k) entries instead of L^2. Each block draws its
  attention-dropout mask with its own salt. k = 1 (or a length unknown when tracing) is the
  full L x L grid.
* Token compaction (``pack_tokens``): every per-token layer (embeddings, LayerNorms, projections,
  FFN, dropout on tokens) runs on the T non-padding tokens [T, d]; only the attention core runs
  on the [B, L] grid, the tokens being moved there and back by gathers (a row gather whose
  gradient is the inverse gather). Under XLA (``jit_compile``) the shapes must be static: the
  token index is computed outside the compiled encoder and padded to a capacity C = T rounded
  up to a multiple of ceil(B L / 8) (at most 8 compiled shapes per batch shape); the C - T
  filler rows are zeroed before they reach the grid or the output, so they add nothing and get
  zero gradient. Inside a whole-step XLA program (``static_shapes``) nothing can depend on where
  the padding is: the per-token layers then run on all B L tokens.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Tuple

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import _static_shapes

import tensorflow as tf

__all__ = [
  "TOKEN_BUCKETS",
  "stateless_dropout",
  "AttentionMask",
  "block_bounds",
  "attention_mask",
  "causal_attention",
  "Tokens",
  "token_index",
  "make_tokens",
  "to_grid",
  "from_grid",
]

_NEG_INF = -1e9
TOKEN_BUCKETS = 8  # compiled token capacities per batch shape (module docstring)
_BLOCK_SALT = 100_000  # attention-dropout salt of query block i: salt + i * _BLOCK_SALT


def stateless_dropout(x, rate, training, seed, salt):
  """Stateless inverted dropout; ``seed`` is an int64 [2] tensor, ``salt`` a distinct int per site.

  Fast mask: one 32-bit Philox draw gives 4 random bytes u (4x fewer draws than one float per
  element); an element is kept when u >= r = round(256 * rate) and scaled by 256 / (256 - r), so
  the effective rate is r / 256 (exactly 0.5 for the default 0.5).
  """
  if not training or rate <= 0.0:
    return x
  if seed is None:
    return tf.nn.dropout(x, rate)
  s = _static_shapes.stateless_seed(  # the same masks with and without XLA
    tf.cast(seed, tf.int64) + tf.constant([0, 1_000_003], tf.int64) * salt
  )
  threshold = min(max(int(round(256 * rate)), 1), 255)
  n = tf.size(x)
  words = tf.random.stateless_uniform(
    [(n + 3) // 4], seed=s, minval=None, maxval=None, dtype=tf.int32
  )
  u = tf.reshape(tf.bitcast(words, tf.uint8), [-1])[:n]
  keep = tf.reshape(u >= threshold, tf.shape(x))
  return tf.where(keep, x * (256.0 / (256 - threshold)), tf.zeros_like(x))


# ----------------------------------------------------------------------------- causal attention
class AttentionMask(NamedTuple):
  """The query blocks of blocked causal attention: ``blocks[i] = (a, b, bias)``, bias
  [B, b - a, b] = 0 where key j <= query t and item_j != 0, else -1e9 (a = 0, b = None: the full
  grid)."""

  blocks: Tuple[Tuple[int, Optional[int], tf.Tensor], ...]


def block_bounds(length: Optional[int], num_blocks: int):
  """[(a_i, b_i)] of ``num_blocks`` query blocks of a static ``length`` (sizes differ by <= 1,
  the larger first); [(0, None)] (the full grid) when the length is unknown or one block."""
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


def attention_mask(valid, num_blocks: int) -> AttentionMask:
  """The biases of the query blocks of a [B, L] non-padding mask ``valid``."""
  length = valid.shape[1]
  blocks = []
  for a, b in block_bounds(length, num_blocks):
    if b is None:
      l = tf.shape(valid)[1]
      causal = tf.linalg.band_part(tf.ones([l, l], tf.bool), -1, 0)  # j <= t
      keys = valid
    else:
      causal = tf.linalg.band_part(tf.ones([b, b], tf.bool), -1, 0)[a:b]  # [b - a, b]
      keys = valid[:, :b]
    allowed = tf.logical_and(causal[None], keys[:, None, :])  # [B, n, b]
    blocks.append((a, b, tf.where(allowed, 0.0, _NEG_INF)))
  return AttentionMask(tuple(blocks))


def causal_attention(q, k, v, mask: AttentionMask, num_heads: int, rate, training, seed, salt):
  """softmax_j(<q_t, k_j> / sqrt(d_head) + bias[t, j]) v_j per head, block by block.

  q, k, v: [B, L, d] -> context [B, L, d]; query block i ([a, b)) reads keys and values [0, b).
  Batched matmuls on [B, (H,) L, d_head] (one head: no transposes at all).
  """
  b_, l_ = tf.shape(q)[0], tf.shape(q)[1]
  dim = q.shape[-1]
  h, dh = num_heads, dim // num_heads
  q = q * (1.0 / math.sqrt(dh))
  if h > 1:  # [B, H, L, dh]
    q, k, v = (tf.transpose(tf.reshape(t, [b_, l_, h, dh]), [0, 2, 1, 3]) for t in (q, k, v))
  outs = []
  for i, (a, b, bias) in enumerate(mask.blocks):
    qi, ki, vi = (q, k, v) if b is None else (q[..., a:b, :], k[..., :b, :], v[..., :b, :])
    # logits and softmax in float32 whatever the compute dtype (bfloat16: --mixed_precision)
    logits = tf.cast(tf.matmul(qi, ki, transpose_b=True), tf.float32) + tf.cast(
      bias[:, None] if h > 1 else bias, tf.float32
    )
    attn = stateless_dropout(
      tf.nn.softmax(logits, axis=-1), rate, training, seed, salt + _BLOCK_SALT * i
    )
    outs.append(tf.matmul(tf.cast(attn, vi.dtype), vi))
  ctx = outs[0] if len(outs) == 1 else tf.concat(outs, axis=-2)
  if h > 1:
    ctx = tf.transpose(ctx, [0, 2, 1, 3])
  return tf.reshape(ctx, [b_, l_, dim])


# ------------------------------------------------------------------------------ token compaction
class Tokens(NamedTuple):
  """Where the C packed rows live on the [B, L] grid (module docstring, token compaction).

  rows: int32 [C], flat grid slot (b * L + t) of each packed row (filler rows: 0);
  slots: int32 [B * L], packed row of each grid slot, C for padding slots (a zero row);
  live: float [C, 1], 1 for the T token rows, 0 for filler rows; None when C = T.
  """

  rows: tf.Tensor
  slots: tf.Tensor
  live: Optional[tf.Tensor]


def token_index(valid, buckets: Optional[int] = None):
  """``(rows [C] int32, slots [B * L] int32, count T int32)`` of a [B, L] non-padding mask.

  buckets: None -> C = T; else C = T rounded up to a multiple of ceil(B L / buckets), at least
  that and at most B L (so at most ``buckets`` distinct C per batch shape); rows T.. are 0.
  """
  flat = tf.reshape(valid, [-1])
  n = tf.size(flat)
  rows = tf.cast(tf.where(flat)[:, 0], tf.int32)
  count = tf.size(rows)
  capacity = count
  if buckets:
    quantum = (n + buckets - 1) // buckets
    capacity = tf.minimum(tf.maximum((count + quantum - 1) // quantum, 1) * quantum, n)
    rows = tf.pad(rows, [[0, capacity - count]])
  slots = tf.where(flat, tf.cumsum(tf.cast(flat, tf.int32), exclusive=True), capacity)
  return rows, slots, count


def make_tokens(rows, slots, count=None) -> Tokens:
  """`Tokens` of a `token_index` (``count``: rows from ``count`` on are filler rows)."""
  live = None
  if count is not None:
    live = tf.cast(tf.range(tf.shape(rows)[0]) < count, tf.float32)[:, None]
  return Tokens(rows, slots, live)


def to_grid(x, tokens: Optional[Tokens], grid_shape):
  """Packed rows x [C, k] -> [B, L, k] (padding slots 0; ``tokens`` None: all B L rows, in
  row-major order). Filler rows are zeroed first, so they neither land anywhere nor get a
  gradient."""
  shape = tf.concat([grid_shape, tf.shape(x)[1:]], 0)
  if tokens is None:
    return tf.reshape(x, shape)
  rows, slots, live = tokens

  @tf.custom_gradient
  def gather(x):
    xz = x if live is None else x * tf.cast(live, x.dtype)
    y = tf.gather(tf.pad(xz, [[0, 1], [0, 0]]), slots)  # row C: zeros

    def grad(dy):
      g = tf.gather(dy, rows)
      return g if live is None else g * tf.cast(live, g.dtype)

    return y, grad

  return tf.reshape(gather(x), shape)


def from_grid(g, tokens: Optional[Tokens]):
  """[B, L, k] -> the packed rows [C, k] (inverse of `to_grid`; filler rows read slot 0)."""
  flat = tf.reshape(g, [-1, g.shape[-1] if g.shape[-1] is not None else tf.shape(g)[-1]])
  if tokens is None:
    return flat
  rows, slots, live = tokens

  @tf.custom_gradient
  def gather(flat):
    def grad(dy):
      dz = dy if live is None else dy * tf.cast(live, dy.dtype)
      return tf.gather(tf.pad(dz, [[0, 1], [0, 0]]), slots)

    return tf.gather(flat, rows), grad

  return gather(flat)
