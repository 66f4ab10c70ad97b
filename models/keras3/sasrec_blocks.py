"""The transformer blocks of the Keras 3 SASRec (`models.keras3.sasrec`), twins of
`models.sasrec_blocks`: `CausalSelfAttention`, the pre-LN `TransformerBlock` and the paper code's
`ReferenceBlock`, with the same sublayer names (so weights copy one to one) and the same
initialisers (seeded; Keras 3's random streams, not tf-keras's). ``run_block(x, biases, mask,
training, tokens)`` is the block (a plain method: the biases are a list of blocks,
`sasrec_ops.attention_biases`): on the padded grid x [B, L, d] (``tokens`` None; the padding rows
re-zeroed by ``mask`` [B, L, 1]), or on packed tokens x [C, d] (`sasrec_ops.Tokens`; ``mask``
None), where only the attention core goes to the grid and back (`sasrec_ops.to_grid` /
`from_grid`)."""

from __future__ import annotations

import keras
from keras import ops

from models.keras3 import sasrec_ops
from models.keras3.dropout import Dropout

__all__ = ["CausalSelfAttention", "TransformerBlock", "ReferenceBlock"]

_REGISTER = keras.saving.register_keras_serializable(package="tfrs_logq_models")


def _dropout(rate, seed, name):
  return Dropout(rate, seed=seed, name=name)


@_REGISTER
class CausalSelfAttention(keras.layers.Layer):
  """Multi-head causal self-attention with a key-padding mask (`sasrec_ops.causal_attention`):
  ``out(attention(qkv(x)))``, attention dropout on the probabilities."""

  def __init__(self, dim: int, num_heads: int, dropout: float, seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    if dim % num_heads:
      raise ValueError(f"embedding dim {dim} is not divisible by num_heads {num_heads}")
    self.dim, self.num_heads, self.rate, self.seed = dim, num_heads, dropout, seed
    glorot = keras.initializers.GlorotUniform
    self.qkv = keras.layers.Dense(3 * dim, kernel_initializer=glorot(seed), name="qkv")
    self.out = keras.layers.Dense(dim, kernel_initializer=glorot(seed + 1), name="out")
    self.attention_dropout = _dropout(dropout, seed + 5, "attention_dropout")

  def build(self, input_shape=None):
    self.qkv.build((None, self.dim))
    self.out.build((None, self.dim))
    self.built = True

  def core(self, qkv, biases, training=False):
    """Attention context [B, L, d] from the projected [B, L, 3d] queries / keys / values."""
    d = self.dim
    return sasrec_ops.causal_attention(
      qkv[..., :d],
      qkv[..., d : 2 * d],
      qkv[..., 2 * d :],
      biases,
      self.num_heads,
      self.attention_dropout,
      training,
    )

  def attend(self, x, biases, training=False, tokens=None):
    """x [B, L, d] (``tokens`` None) or packed [C, d] -> the same layout."""
    ctx = self.core(sasrec_ops.to_grid(self.qkv(x), tokens), biases, training=training)
    return self.out(sasrec_ops.from_grid(ctx, tokens))

  def get_config(self):
    return {
      **super().get_config(),
      "dim": self.dim,
      "num_heads": self.num_heads,
      "dropout": self.rate,
      "seed": self.seed,
    }


@_REGISTER
class TransformerBlock(keras.layers.Layer):
  """Pre-LN block: x + Attn(LN(x)), then + FFN(LN(.)), both with dropout, padding re-zeroed."""

  def __init__(self, dim: int, num_heads: int, dropout: float, seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    self.dim, self.num_heads, self.rate, self.seed = dim, num_heads, dropout, seed
    glorot = keras.initializers.GlorotUniform
    self.ln1 = keras.layers.LayerNormalization(epsilon=1e-6, name="ln_attention")
    self.attention = CausalSelfAttention(dim, num_heads, dropout, seed, name="attention")
    self.ln2 = keras.layers.LayerNormalization(epsilon=1e-6, name="ln_ffn")
    self.ffn1 = keras.layers.Dense(
      dim, activation="relu", kernel_initializer=glorot(seed + 2), name="ffn1"
    )
    self.ffn2 = keras.layers.Dense(dim, kernel_initializer=glorot(seed + 3), name="ffn2")
    self.drop_attention = _dropout(dropout, seed + 6, "dropout_attention")
    self.drop_hidden = _dropout(dropout, seed + 7, "dropout_hidden")
    self.drop_ffn = _dropout(dropout, seed + 8, "dropout_ffn")

  def build(self, input_shape=None):
    for layer in (self.ln1, self.ln2, self.ffn1, self.ffn2):
      layer.build((None, self.dim))
    self.attention.build()
    self.built = True

  def run_block(self, x, biases, mask, training=False, tokens=None):
    """x [B, L, d], mask [B, L, 1] (1 at non-padding positions) -> [B, L, d]; or packed
    x [C, d] with ``tokens`` (mask None) -> [C, d]."""
    a = self.attention.attend(self.ln1(x), biases, training=training, tokens=tokens)
    x = x + self.drop_attention(a, training=training)
    f = self.drop_hidden(self.ffn1(self.ln2(x)), training=training)
    x = x + self.drop_ffn(self.ffn2(f), training=training)
    return x if mask is None else x * mask

  def get_config(self):
    return {
      **super().get_config(),
      "dim": self.dim,
      "num_heads": self.num_heads,
      "dropout": self.rate,
      "seed": self.seed,
    }


@_REGISTER
class ReferenceBlock(keras.layers.Layer):
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
    self.dim, self.num_heads, self.rate, self.seed = dim, num_heads, dropout, seed
    init = lambda i: keras.initializers.TruncatedNormal(stddev=0.02, seed=seed + i)
    dense = lambda units, i, name: keras.layers.Dense(
      units,
      kernel_initializer=init(i),
      name=name,
    )
    self.ln1 = keras.layers.LayerNormalization(epsilon=1e-5, name="ln_attention")
    self.ln2 = keras.layers.LayerNormalization(epsilon=1e-5, name="ln_ffn")
    self.query = dense(dim, 0, "query")
    self.kv = dense(2 * dim, 1, "key_value")
    self.ffn1 = dense(dim, 2, "ffn1")
    self.ffn2 = dense(dim, 3, "ffn2")
    self.attention_dropout = _dropout(dropout, seed + 5, "attention_dropout")
    self.drop_hidden = _dropout(dropout, seed + 7, "dropout_hidden")
    self.drop_ffn = _dropout(dropout, seed + 8, "dropout_ffn")

  def build(self, input_shape=None):
    for layer in (self.ln1, self.ln2, self.query, self.kv, self.ffn1, self.ffn2):
      layer.build((None, self.dim))
    self.built = True

  def run_block(self, x, biases, mask, training=False, tokens=None):
    """x [B, L, d], mask [B, L, 1] (1 at non-padding positions) -> [B, L, d]; or packed
    x [C, d] with ``tokens`` (mask None) -> [C, d]."""
    z = self.ln1(x)
    d = self.dim
    q, kv = self.query(z), self.kv(x)
    if tokens is not None:  # one gather to the grid for the three
      qkv = sasrec_ops.to_grid(ops.concatenate([q, kv], axis=-1), tokens)
      q, kv = qkv[..., :d], qkv[..., d:]
    ctx = sasrec_ops.causal_attention(
      q, kv[..., :d], kv[..., d:], biases, self.num_heads, self.attention_dropout, training
    )
    hidden = self.ln2(sasrec_ops.from_grid(ctx, tokens) + z)
    f = self.drop_hidden(ops.relu(self.ffn1(hidden)), training=training)
    f = self.drop_ffn(self.ffn2(f), training=training)
    out = hidden + f
    return out if mask is None else out * mask

  def get_config(self):
    return {
      **super().get_config(),
      "dim": self.dim,
      "num_heads": self.num_heads,
      "dropout": self.rate,
      "seed": self.seed,
    }
