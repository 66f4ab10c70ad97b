"""The transformer blocks of SASRec (`models.sasrec`): `CausalSelfAttention`, the pre-LN
`TransformerBlock` and the paper code's `ReferenceBlock`; each runs on the packed tokens
(``call_packed``) or on the padded grid (``call``), through `models.sasrec_ops`."""

from __future__ import annotations

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import tensorflow as tf

from models import sasrec_ops as ops

__all__ = ["CausalSelfAttention", "TransformerBlock", "ReferenceBlock"]


class CausalSelfAttention(tf.keras.layers.Layer):
  """Multi-head causal self-attention with a key-padding mask.

  softmax_j( <Q_t, K_j> / sqrt(d_head) + mask[t, j] ) V_j,  mask = 0 where j <= t and item_j != 0,
  else -1e9 (a finite value, so fully-masked rows of padding queries stay finite; they are zeroed by
  the caller). Computed block by block over the queries (`sasrec_ops.causal_attention`).
  """

  def __init__(self, dim: int, num_heads: int, dropout: float, seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    if dim % num_heads:
      raise ValueError(f"embedding dim {dim} is not divisible by num_heads {num_heads}")
    self.dim, self.num_heads, self.rate = dim, num_heads, dropout
    glorot = tf.keras.initializers.GlorotUniform
    self.qkv = tf.keras.layers.Dense(3 * dim, kernel_initializer=glorot(seed), name="qkv")
    self.out = tf.keras.layers.Dense(dim, kernel_initializer=glorot(seed + 1), name="out")

  def call(self, x, mask, training=False, seed=None, salt=0):
    return self.out(self.core(self.qkv(x), mask, training=training, seed=seed, salt=salt))

  def core(self, qkv, mask, training=False, seed=None, salt=0):
    """Attention context [B, L, d] from the projected [B, L, 3d] queries/keys/values."""
    d = self.dim
    return ops.causal_attention(
      qkv[..., :d],
      qkv[..., d : 2 * d],
      qkv[..., 2 * d :],
      mask,
      self.num_heads,
      self.rate,
      training,
      seed,
      salt,
    )


def _padded_call(block, x, attention_mask, mask, training, seed, salt):
  """A block on the padded grid x [B, L, d]: its per-token layers on the B L rows (always
  rank 2, whichever path built them), padding re-zeroed."""
  shape = tf.shape(x)
  flat = tf.reshape(x, [-1, x.shape[-1]])
  out = block.call_packed(
    flat, None, shape[:2], attention_mask, training=training, seed=seed, salt=salt
  )
  return tf.reshape(out, shape) * mask


class TransformerBlock(tf.keras.layers.Layer):
  """Pre-LN block: x + Attn(LN(x)), then + FFN(LN(.)), both with dropout, padding re-zeroed."""

  def __init__(self, dim: int, num_heads: int, dropout: float, seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    self.rate = dropout
    glorot = tf.keras.initializers.GlorotUniform
    self.ln1 = tf.keras.layers.LayerNormalization(epsilon=1e-6, name="ln_attention")
    self.attention = CausalSelfAttention(dim, num_heads, dropout, seed, name="attention")
    self.ln2 = tf.keras.layers.LayerNormalization(epsilon=1e-6, name="ln_ffn")
    self.ffn1 = tf.keras.layers.Dense(
      dim, activation="relu", kernel_initializer=glorot(seed + 2), name="ffn1"
    )
    self.ffn2 = tf.keras.layers.Dense(dim, kernel_initializer=glorot(seed + 3), name="ffn2")

  def call(self, x, attention_mask, mask, training=False, seed=None, salt=0):
    """x [B, L, d], mask [B, L, 1] (1 at non-padding positions) -> [B, L, d]."""
    return _padded_call(self, x, attention_mask, mask, training, seed, salt)

  def call_packed(self, x, tokens, grid_shape, attention_mask, training=False, seed=None, salt=0):
    """Same block on the packed tokens x [C, d] (`ops.Tokens`); only the attention core runs on
    the [B, L] grid."""
    grid = ops.to_grid(self.attention.qkv(self.ln1(x)), tokens, grid_shape)  # [B, L, 3d]
    ctx = self.attention.core(
      grid, attention_mask, training=training, seed=seed, salt=salt * 10 + 1
    )
    return self._residual_ffn(
      x, self.attention.out(ops.from_grid(ctx, tokens)), training, seed, salt
    )

  def _residual_ffn(self, x, a, training, seed, salt):
    x = x + ops.stateless_dropout(a, self.rate, training, seed, salt * 10 + 2)
    f = self.ffn1(self.ln2(x))
    f = ops.stateless_dropout(f, self.rate, training, seed, salt * 10 + 3)
    f = self.ffn2(f)
    return x + ops.stateless_dropout(f, self.rate, training, seed, salt * 10 + 4)


class ReferenceBlock(tf.keras.layers.Layer):
  """The block of the original SASRec as gSASRec-pytorch (the logQ paper's code base) builds it.

    z    = LN1(x)
    a    = softmax_j(<W_q z_t, W_k x_j> / sqrt(d_head) + mask[t, j]) W_v x_j   (keys/values: raw x,
           attention dropout, no output projection)
    h    = LN2(a + z)
    x'   = (h + dropout(W_2 dropout(relu(W_1 h + b_1)) + b_2)) * m           (SASRec's FFN, Eq. 4)

  All weights are truncated normal (std 0.02, cut at 2 std), biases zero, LayerNorm eps 1e-5.
  """

  def __init__(self, dim: int, num_heads: int, dropout: float, seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    if dim % num_heads:
      raise ValueError(f"embedding dim {dim} is not divisible by num_heads {num_heads}")
    self.dim, self.num_heads, self.rate = dim, num_heads, dropout
    init = lambda i: tf.keras.initializers.TruncatedNormal(stddev=0.02, seed=seed + i)
    dense = lambda units, i, name: tf.keras.layers.Dense(
      units, kernel_initializer=init(i), name=name
    )
    self.ln1 = tf.keras.layers.LayerNormalization(epsilon=1e-5, name="ln_attention")
    self.ln2 = tf.keras.layers.LayerNormalization(epsilon=1e-5, name="ln_ffn")
    self.query = dense(dim, 0, "query")
    self.kv = dense(2 * dim, 1, "key_value")
    self.ffn1 = dense(dim, 2, "ffn1")
    self.ffn2 = dense(dim, 3, "ffn2")

  def call(self, x, attention_mask, mask, training=False, seed=None, salt=0):
    """x [B, L, d], mask [B, L, 1] (1 at non-padding positions) -> [B, L, d]."""
    return _padded_call(self, x, attention_mask, mask, training, seed, salt)

  def call_packed(self, x, tokens, grid_shape, attention_mask, training=False, seed=None, salt=0):
    """Same block on the packed tokens x [C, d] (`ops.Tokens`); only the attention core runs on
    the [B, L] grid."""
    z = self.ln1(x)
    grid = ops.to_grid(tf.concat([self.query(z), self.kv(x)], -1), tokens, grid_shape)  # [B, L, 3d]
    d = self.dim
    ctx = ops.causal_attention(
      grid[..., :d],
      grid[..., d : 2 * d],
      grid[..., 2 * d :],
      attention_mask,
      self.num_heads,
      self.rate,
      training,
      seed,
      salt * 10 + 1,
    )
    return self._ffn(ops.from_grid(ctx, tokens) + z, training, seed, salt)

  def _ffn(self, a_plus_z, training, seed, salt):
    hidden = self.ln2(a_plus_z)
    f = ops.stateless_dropout(
      tf.nn.relu(self.ffn1(hidden)), self.rate, training, seed, salt * 10 + 3
    )
    f = ops.stateless_dropout(self.ffn2(f), self.rate, training, seed, salt * 10 + 4)
    return hidden + f
