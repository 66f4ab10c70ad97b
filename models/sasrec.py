"""SASRec (Kang & McAuley, 2018) in tf.keras (Keras 2), fast on CPU.

Architecture (the gSASRec / logQ-paper academic setup is the default):

  x_0[t]  = E_in[item_t] * sqrt(d) + P[t]            item embedding (row 0 = padding) + learned position
  x_0     = dropout(x_0) * m                          m[t] = 1 for non-padding positions, else 0
  block b (pre-LayerNorm, causal):
    h     = x + dropout(CausalAttention(LN(x)))       attention over keys j <= t that are not padding
    x'    = (h + dropout(FFN(LN(h)))) * m             FFN(z) = W2 dropout(relu(W1 z + b1)) + b2
  H       = LN(x_L)                                   hidden states [B, L, d]
  s(t, i) = <H[t], E_out[i]> / temperature            a SEPARATE output item-embedding table E_out

Every non-padding position t predicts the item at t + 1 (the "targets" of the data pipeline), so the
training queries are H gathered at the A non-padding positions ([A, d]); the serving query of a sequence
is H at its last position (sequences are left-padded, so that is index L - 1).

Dropout is *stateless* (``tf.nn.experimental.stateless_dropout``) and keyed by a ``seed`` tensor that
the caller derives from (run seed, global step, replica): a resumed run replays exactly the masks an
uninterrupted run would have drawn.
"""

from __future__ import annotations

import math

import tfrs_logq  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

from tfrs_logq import _static_shapes

from models.queries import TrainingQueries

__all__ = ["SASRec", "TransformerBlock", "ReferenceBlock", "CausalSelfAttention", "BLOCK_STYLES"]

_NEG_INF = -1e9
BLOCK_STYLES = ("pre_ln", "reference")


def _dropout(x, rate, training, seed, salt):
  """Stateless inverted dropout; ``seed`` is an int64 [2] tensor, ``salt`` a distinct int per site.

  Fast mask: one 32-bit Philox draw gives 4 random bytes u (4x fewer draws than one float per
  element); an element is kept when u >= r = round(256 * rate) and scaled by 256 / (256 - r), so
  the effective rate is r / 256 (exactly 0.5 for the default 0.5).
  """
  if not training or rate <= 0.0:
    return x
  if seed is None:
    return tf.nn.dropout(x, rate)
  s = _static_shapes.stateless_seed(                    # the same masks with and without XLA
      tf.cast(seed, tf.int64) + tf.constant([0, 1_000_003], tf.int64) * salt)
  threshold = min(max(int(round(256 * rate)), 1), 255)
  n = tf.size(x)
  words = tf.random.stateless_uniform([(n + 3) // 4], seed=s, minval=None, maxval=None,
                                      dtype=tf.int32)
  u = tf.reshape(tf.bitcast(words, tf.uint8), [-1])[:n]
  keep = tf.reshape(u >= threshold, tf.shape(x))
  return tf.where(keep, x * (256.0 / (256 - threshold)), tf.zeros_like(x))


class CausalSelfAttention(tf.keras.layers.Layer):
  """Multi-head causal self-attention with a key-padding mask.

  softmax_j( <Q_t, K_j> / sqrt(d_head) + mask[t, j] ) V_j,  mask = 0 where j <= t and item_j != 0,
  else -1e9 (a finite value, so fully-masked rows of padding queries stay finite; they are zeroed by
  the caller).
  """

  def __init__(self, dim: int, num_heads: int, dropout: float, seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    if dim % num_heads:
      raise ValueError(f"embedding dim {dim} is not divisible by num_heads {num_heads}")
    self.dim, self.num_heads, self.rate = dim, num_heads, dropout
    glorot = tf.keras.initializers.GlorotUniform
    self.qkv = tf.keras.layers.Dense(3 * dim, kernel_initializer=glorot(seed), name="qkv")
    self.out = tf.keras.layers.Dense(dim, kernel_initializer=glorot(seed + 1), name="out")

  def call(self, x, bias, training=False, seed=None, salt=0):
    return self.out(self.core(self.qkv(x), bias, training=training, seed=seed, salt=salt))

  def core(self, qkv, bias, training=False, seed=None, salt=0):
    """Attention context [B, L, d] from the projected [B, L, 3d] queries/keys/values."""
    b, l = tf.shape(qkv)[0], tf.shape(qkv)[1]
    h, dh = self.num_heads, self.dim // self.num_heads
    qkv = tf.reshape(qkv, [b, l, 3, h, dh])
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]           # [B, L, H, dh]
    logits = tf.einsum("bthd,bshd->bhts", q, k) * (1.0 / math.sqrt(dh)) + bias
    attn = tf.nn.softmax(logits, axis=-1)
    attn = _dropout(attn, self.rate, training, seed, salt)
    return tf.reshape(tf.einsum("bhts,bshd->bthd", attn, v), [b, l, self.dim])


class TransformerBlock(tf.keras.layers.Layer):
  """Pre-LN block: x + Attn(LN(x)), then + FFN(LN(.)), both with dropout, padding re-zeroed."""

  def __init__(self, dim: int, num_heads: int, dropout: float, seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    self.rate = dropout
    glorot = tf.keras.initializers.GlorotUniform
    self.ln1 = tf.keras.layers.LayerNormalization(epsilon=1e-6, name="ln_attention")
    self.attention = CausalSelfAttention(dim, num_heads, dropout, seed, name="attention")
    self.ln2 = tf.keras.layers.LayerNormalization(epsilon=1e-6, name="ln_ffn")
    self.ffn1 = tf.keras.layers.Dense(dim, activation="relu", kernel_initializer=glorot(seed + 2),
                                      name="ffn1")
    self.ffn2 = tf.keras.layers.Dense(dim, kernel_initializer=glorot(seed + 3), name="ffn2")

  def call(self, x, bias, mask, training=False, seed=None, salt=0):
    a = self.attention(self.ln1(x), bias, training=training, seed=seed, salt=salt * 10 + 1)
    x = x + _dropout(a, self.rate, training, seed, salt * 10 + 2)
    f = self.ffn1(self.ln2(x))
    f = _dropout(f, self.rate, training, seed, salt * 10 + 3)
    f = self.ffn2(f)
    x = x + _dropout(f, self.rate, training, seed, salt * 10 + 4)
    return x * mask

  def call_packed(self, x, index, full_shape, bias, training=False, seed=None, salt=0):
    """Same block on the T non-padding tokens x [T, d] only (index [T, 2] = their (row, t));
    just the attention core runs on the full [B, L] grid."""
    qkv = self.attention.qkv(self.ln1(x))                                    # [T, 3d]
    grid = tf.scatter_nd(index, qkv, tf.concat([full_shape, tf.shape(qkv, out_type=tf.int64)[1:]], 0))
    ctx = self.attention.core(grid, bias, training=training, seed=seed, salt=salt * 10 + 1)
    a = self.attention.out(tf.gather_nd(ctx, index))
    x = x + _dropout(a, self.rate, training, seed, salt * 10 + 2)
    f = self.ffn1(self.ln2(x))
    f = _dropout(f, self.rate, training, seed, salt * 10 + 3)
    f = self.ffn2(f)
    return x + _dropout(f, self.rate, training, seed, salt * 10 + 4)


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
    dense = lambda units, i, name: tf.keras.layers.Dense(units, kernel_initializer=init(i),
                                                         name=name)
    self.ln1 = tf.keras.layers.LayerNormalization(epsilon=1e-5, name="ln_attention")
    self.ln2 = tf.keras.layers.LayerNormalization(epsilon=1e-5, name="ln_ffn")
    self.query = dense(dim, 0, "query")
    self.kv = dense(2 * dim, 1, "key_value")
    self.ffn1 = dense(dim, 2, "ffn1")
    self.ffn2 = dense(dim, 3, "ffn2")

  def call(self, x, bias, mask, training=False, seed=None, salt=0):
    b, l = tf.shape(x)[0], tf.shape(x)[1]
    h, dh = self.num_heads, self.dim // self.num_heads
    z = self.ln1(x)
    q = tf.reshape(self.query(z), [b, l, h, dh])
    kv = tf.reshape(self.kv(x), [b, l, 2, h, dh])
    logits = tf.einsum("bthd,bshd->bhts", q, kv[:, :, 0]) * (1.0 / math.sqrt(dh)) + bias
    attn = tf.nn.softmax(logits, axis=-1)
    attn = _dropout(attn, self.rate, training, seed, salt * 10 + 1)
    a = tf.reshape(tf.einsum("bhts,bshd->bthd", attn, kv[:, :, 1]), [b, l, self.dim])
    hidden = self.ln2(a + z)
    f = _dropout(tf.nn.relu(self.ffn1(hidden)), self.rate, training, seed, salt * 10 + 3)
    f = _dropout(self.ffn2(f), self.rate, training, seed, salt * 10 + 4)
    return (hidden + f) * mask


class SASRec(tf.keras.Model):
  """Self-attentive sequential recommender with a separate output item-embedding table.

  Args:
    num_items: catalog size; item ids are 1..num_items, 0 is padding.
    max_len: sequence length L (inputs are left-padded to it).
    embedding_dim: d (default 128, the paper's academic setup).
    num_blocks: transformer blocks (default 2).
    num_heads: attention heads (default 1).
    dropout: dropout rate everywhere (default 0.5).
    temperature: scores are <q, c> / temperature.
    jit_compile: compile the encoder with XLA (then the padded path is used).
    seed: initialiser seed (all weights are seeded: same seed, same initial model).
    pack_tokens: run the per-token layers on non-padding tokens only (faster on CPU).
    block_style: ``"pre_ln"`` (the module docstring's pre-LayerNorm blocks, inputs scaled by
      sqrt(d)) or ``"reference"`` (`ReferenceBlock`: the original SASRec block as the logQ
      paper's gSASRec-pytorch code builds it, unscaled inputs; for faithful reproductions).
    tie_embeddings: score with the input item table (E_out = E_in, gSASRec's
      ``reuse_item_embeddings``) instead of a separate output table.
  """

  def __init__(self, num_items: int, max_len: int = 200, embedding_dim: int = 128,
               num_blocks: int = 2, num_heads: int = 1, dropout: float = 0.5,
               temperature: float = 1.0, jit_compile: bool = False, seed: int = 0,
               pack_tokens: bool = True, block_style: str = "pre_ln",
               tie_embeddings: bool = False, **kwargs):
    super().__init__(**kwargs)
    if num_items < 1:
      raise ValueError(f"num_items must be >= 1, got {num_items}")
    if max_len < 1 or embedding_dim < 1 or num_blocks < 0 or num_heads < 1:
      raise ValueError("max_len, embedding_dim, num_heads must be >= 1 and num_blocks >= 0")
    if not 0.0 <= dropout < 1.0:
      raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    if temperature <= 0:
      raise ValueError(f"temperature must be > 0, got {temperature}")
    if block_style not in BLOCK_STYLES:
      raise ValueError(f"block_style must be one of {BLOCK_STYLES}, got {block_style!r}")
    self.block_style = block_style
    self.num_items, self.max_len, self.embedding_dim = num_items, max_len, embedding_dim
    self.num_blocks, self.num_heads, self.rate = num_blocks, num_heads, dropout
    self.temperature = float(temperature)
    self.seed = int(seed)
    init = lambda i: tf.keras.initializers.TruncatedNormal(stddev=0.02, seed=self.seed * 100 + i)
    self.input_embedding = tf.keras.layers.Embedding(
        num_items + 1, embedding_dim, embeddings_initializer=init(1), name="input_item_embedding")
    self.position_embedding = tf.keras.layers.Embedding(
        max_len, embedding_dim, embeddings_initializer=init(2), name="position_embedding")
    self.tie_embeddings = bool(tie_embeddings)
    self.output_embedding = (self.input_embedding if self.tie_embeddings else
                             tf.keras.layers.Embedding(num_items + 1, embedding_dim,
                                                       embeddings_initializer=init(3),
                                                       name="output_item_embedding"))
    block = TransformerBlock if block_style == "pre_ln" else ReferenceBlock
    self.blocks = [block(embedding_dim, num_heads, dropout, self.seed * 100 + 10 * (i + 1),
                         name=f"block_{i}")
                   for i in range(num_blocks)]
    self.final_norm = tf.keras.layers.LayerNormalization(
        epsilon=1e-6 if block_style == "pre_ln" else 1e-5, name="final_norm")
    self.input_scale = math.sqrt(embedding_dim) if block_style == "pre_ln" else 1.0
    self.jit_compile_encoder = bool(jit_compile)
    # Skipping padding in the per-token layers needs dynamic shapes, which XLA cannot compile.
    # The reference blocks run on the padded grid only.
    self.pack_tokens = (bool(pack_tokens) and not self.jit_compile_encoder
                        and block_style == "pre_ln")
    self._encode_xla = None

  def build_all(self):
    """Creates every variable (a forward pass on a dummy batch and the output table)."""
    self(tf.zeros([1, self.max_len], tf.int64))
    return self

  def encode(self, inputs, training=False, seed=None):
    """Hidden states H [B, L, d] of left-padded ``inputs`` int [B, L] (L <= max_len).

    With ``jit_compile=True`` (and every variable built) the encoder runs as one XLA cluster.
    """
    inputs = tf.convert_to_tensor(inputs)
    if inputs.shape.rank != 2:
      raise ValueError(f"SASRec inputs must be [batch, length], got shape {inputs.shape}")
    if inputs.shape[1] is not None and inputs.shape[1] > self.max_len:
      raise ValueError(f"sequence length {inputs.shape[1]} > max_len {self.max_len}")
    if not inputs.dtype.is_integer:
      raise TypeError(f"SASRec inputs must be integer item ids, got {inputs.dtype}")
    inputs = tf.cast(inputs, tf.int64)
    if self.pack_tokens and _static_shapes.in_xla_context():
      return self._encode_packed(inputs, training=training, seed=seed, all_tokens=True)
    if self.jit_compile_encoder and self.final_norm.built:
      if self._encode_xla is None:
        self._encode_xla = tf.function(self._encode, jit_compile=True, reduce_retracing=True)
      if seed is None or not training:
        return self._encode_xla(inputs, training=bool(training))
      return self._encode_xla(inputs, training=bool(training), seed=tf.cast(seed, tf.int64))
    return self._encode(inputs, training=training, seed=seed)

  def _encode(self, inputs, training=False, seed=None):
    if self.pack_tokens:
      return self._encode_packed(inputs, training=training, seed=seed)
    l = tf.shape(inputs)[1]
    valid = tf.not_equal(inputs, 0)                                 # [B, L]
    mask = tf.cast(valid, tf.float32)[..., None]                    # [B, L, 1]
    x = self.input_embedding(inputs) * self.input_scale
    # Learned positions, aligned to the right end (left padding): the last slot gets max_len - 1.
    x = x + self.position_embedding(tf.range(self.max_len - l, self.max_len))[None]
    x = _dropout(x, self.rate, training, seed, 0) * mask
    causal = tf.linalg.band_part(tf.ones([l, l], tf.bool), -1, 0)   # j <= t
    allowed = tf.logical_and(causal[None], valid[:, None, :])       # [B, L(t), L(j)]
    bias = tf.where(allowed, 0.0, _NEG_INF)[:, None]                # [B, 1, L, L]
    for i, block in enumerate(self.blocks):
      x = block(x, bias, mask, training=training, seed=seed, salt=i + 1)
    return self.final_norm(x) * mask

  def _encode_packed(self, inputs, training=False, seed=None, all_tokens=False):
    """The encoder with every per-token layer (embeddings, LayerNorms, projections, FFN) applied
    to the T non-padding tokens only; attention runs on the [B, L, L] grid. Same function as the
    padded path (dropout masks are drawn per token, so they differ from the padded path's).

    ``all_tokens`` (static shapes, XLA): the per-token layers run on all T = B * L tokens, in the
    same [T, d] layout the packed layers were built for; padding keys stay masked in attention
    and padding outputs are zeroed, as in the padded path."""
    l = tf.shape(inputs)[1]
    valid = tf.not_equal(inputs, 0)
    if all_tokens:
      b = tf.shape(inputs, out_type=tf.int64)[0]
      l64 = tf.cast(l, tf.int64)
      index = tf.stack([tf.repeat(tf.range(b), l64), tf.tile(tf.range(l64), [b])], axis=1)
    else:
      index = tf.where(valid)                                                # [T, 2] int64
    full_shape = tf.shape(inputs, out_type=tf.int64)
    x = self.input_embedding(tf.gather_nd(inputs, index)) * self.input_scale
    x = x + self.position_embedding(index[:, 1] + tf.cast(self.max_len - l, tf.int64))
    x = _dropout(x, self.rate, training, seed, 0)
    causal = tf.linalg.band_part(tf.ones([l, l], tf.bool), -1, 0)
    allowed = tf.logical_and(causal[None], valid[:, None, :])
    bias = tf.where(allowed, 0.0, _NEG_INF)[:, None]
    for i, block in enumerate(self.blocks):
      x = block.call_packed(x, index, full_shape, bias, training=training, seed=seed, salt=i + 1)
    x = self.final_norm(x)
    out = tf.scatter_nd(index, x, tf.concat([full_shape, tf.shape(x, out_type=tf.int64)[1:]], 0))
    return out * tf.cast(valid, out.dtype)[..., None] if all_tokens else out

  def query_embeddings(self, features, training=False, seed=None):
    """Query of each sequence: H at the last (right-most) position, [B, d].

    ``features``: left-padded item ids [B, L], or a dict with them under "history" (or "inputs";
    other keys such as "user_id" are ignored).
    """
    if isinstance(features, dict):
      features = features["history"] if "history" in features else features["inputs"]
    return self.encode(features, training=training, seed=seed)[:, -1, :]

  def serving_queries(self, history, user_ids=None):
    """Serving queries [B, d] of left-padded histories int [B, max_len] (user ids unused)."""
    del user_ids
    return self.query_embeddings(history, training=False)

  def item_embeddings(self, item_ids):
    """Rows of the output table E_out for ``item_ids`` (any shape) -> [..., d]."""
    return self.output_embedding(tf.cast(item_ids, tf.int64))

  def all_item_embeddings(self):
    """The full output table [num_items + 1, d] (row 0 = padding)."""
    if not self.output_embedding.built:
      self.output_embedding(tf.zeros([1], tf.int64))
    self.built = True
    return self.output_embedding.embeddings

  def training_queries(self, batch, training=True, seed=None,
                       static_shapes=False) -> TrainingQueries:
    """Queries and positives of a {"inputs", "targets"} [B, L] batch at non-padding targets.

    Returns ``TrainingQueries(queries [A, d], positive_ids [A] int64, sequence_ids [A] int64)``
    with A = #(targets != 0), in row-major order; ``sequence_ids`` is each query's row. With
    ``static_shapes`` (XLA / TPU) all A = B * L positions are returned, row-major, padding
    included (positive id 0, query 0), and no encoder op depends on where the padding is.
    """
    if static_shapes:
      h = (self._encode_packed(tf.cast(batch["inputs"], tf.int64), training=training, seed=seed,
                               all_tokens=True)
           if self.pack_tokens else self.encode(batch["inputs"], training=training, seed=seed))
      targets = tf.cast(batch["targets"], tf.int64)
      b, l = tf.shape(targets)[0], tf.shape(targets)[1]
      rows = tf.repeat(tf.range(tf.cast(b, tf.int64)), l)
      return TrainingQueries(tf.reshape(h, [b * l, self.embedding_dim]),
                             tf.reshape(targets, [-1]), rows)
    h = self.encode(batch["inputs"], training=training, seed=seed)
    targets = tf.cast(batch["targets"], tf.int64)
    index = tf.where(tf.not_equal(targets, 0))                      # [A, 2]
    return TrainingQueries(tf.gather_nd(h, index), tf.gather_nd(targets, index), index[:, 0])

  def call(self, inputs, training=False):
    """Scores of every item for every sequence's last position: [B, num_items + 1] (column 0 padding)."""
    q = self.query_embeddings(inputs, training=training)
    return tf.matmul(q, self.all_item_embeddings(), transpose_b=True) / self.temperature

  def get_config(self):
    return dict(num_items=self.num_items, max_len=self.max_len, embedding_dim=self.embedding_dim,
                num_blocks=self.num_blocks, num_heads=self.num_heads, dropout=self.rate,
                temperature=self.temperature, jit_compile=self.jit_compile_encoder, seed=self.seed,
                pack_tokens=self.pack_tokens, block_style=self.block_style,
                tie_embeddings=self.tie_embeddings)
