"""Backend-neutral pieces of the Keras 3 SASRec (`models.keras3.sasrec`): ``keras.ops`` only.

The Keras 3 twin of `models.sasrec_ops` on the padded [B, L] grid (static shapes, so the whole
encoder compiles under ``jax.jit`` / ``tf.function`` / torch): the key-padding causal masks of
blocked causal attention and the attention itself. Token compaction (`models.sasrec_ops`'s packed
path) has data-dependent shapes and is not part of this front; dropout is Keras's
(``keras.layers.Dropout``, seeded per layer, its state in the model's variables).

    bias[t, j] = 0 where key j <= query t and item_j != 0, else -1e9   (finite: padding queries'
                                                                        rows stay finite)
    context_t  = sum_j softmax_j(<q_t, k_j> / sqrt(d_head) + bias[t, j]) v_j   per head
"""

from __future__ import annotations

import math
from typing import List, Optional, Tuple

import numpy as np
from keras import ops

__all__ = ["NEG_INF", "block_bounds", "attention_biases", "causal_attention"]

NEG_INF = -1e9


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
    causal = np.tril(np.ones((end, end), bool))[a:end]                    # [n, end]: j <= t
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
  if h > 1:                                                                # [B, H, L, dh]
    q, k, v = (ops.transpose(ops.reshape(t, (-1, l_, h, dh)), (0, 2, 1, 3)) for t in (q, k, v))
  outs = []
  for a, b, bias in biases:
    qi, ki, vi = (q, k, v) if b is None else (q[..., a:b, :], k[..., :b, :], v[..., :b, :])
    logits = ops.matmul(qi, ops.swapaxes(ki, -1, -2)) + (bias[:, None] if h > 1 else bias)
    attn = ops.softmax(logits, axis=-1)
    if dropout is not None:
      attn = dropout(attn, training=training)
    outs.append(ops.matmul(attn, vi))
  ctx = outs[0] if len(outs) == 1 else ops.concatenate(outs, axis=-2)
  if h > 1:
    ctx = ops.transpose(ctx, (0, 2, 1, 3))
  del b_
  return ops.reshape(ctx, (-1, l_, dim))
