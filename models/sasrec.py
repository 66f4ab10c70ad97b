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

Execution (the same function in eval mode; only the work and the dropout masks' layout change):

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

import tfrs_logq  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

from tfrs_logq import _static_shapes

from models.queries import TrainingQueries

__all__ = ["SASRec", "TransformerBlock", "ReferenceBlock", "CausalSelfAttention", "BLOCK_STYLES"]

_NEG_INF = -1e9
BLOCK_STYLES = ("pre_ln", "reference")
_TOKEN_BUCKETS = 8            # compiled token capacities per batch shape (module docstring)
_BLOCK_SALT = 100_000         # attention-dropout salt of query block i: salt + i * _BLOCK_SALT


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


# ----------------------------------------------------------------------------- causal attention
class _AttentionMask(NamedTuple):
  """The query blocks of blocked causal attention: ``blocks[i] = (a, b, bias)``, bias
  [B, b - a, b] = 0 where key j <= query t and item_j != 0, else -1e9 (a = 0, b = None: the full
  grid)."""
  blocks: Tuple[Tuple[int, Optional[int], tf.Tensor], ...]


def _block_bounds(length: Optional[int], num_blocks: int):
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


def _attention_mask(valid, num_blocks: int) -> _AttentionMask:
  """The biases of the query blocks of a [B, L] non-padding mask ``valid``."""
  length = valid.shape[1]
  blocks = []
  for a, b in _block_bounds(length, num_blocks):
    if b is None:
      l = tf.shape(valid)[1]
      causal = tf.linalg.band_part(tf.ones([l, l], tf.bool), -1, 0)            # j <= t
      keys = valid
    else:
      causal = tf.linalg.band_part(tf.ones([b, b], tf.bool), -1, 0)[a:b]      # [b - a, b]
      keys = valid[:, :b]
    allowed = tf.logical_and(causal[None], keys[:, None, :])                   # [B, n, b]
    blocks.append((a, b, tf.where(allowed, 0.0, _NEG_INF)))
  return _AttentionMask(tuple(blocks))


def _causal_attention(q, k, v, mask: _AttentionMask, num_heads: int, rate, training, seed, salt):
  """softmax_j(<q_t, k_j> / sqrt(d_head) + bias[t, j]) v_j per head, block by block.

  q, k, v: [B, L, d] -> context [B, L, d]; query block i ([a, b)) reads keys and values [0, b).
  Batched matmuls on [B, (H,) L, d_head] (one head: no transposes at all).
  """
  b_, l_ = tf.shape(q)[0], tf.shape(q)[1]
  dim = q.shape[-1]
  h, dh = num_heads, dim // num_heads
  q = q * (1.0 / math.sqrt(dh))
  if h > 1:                                                         # [B, H, L, dh]
    q, k, v = (tf.transpose(tf.reshape(t, [b_, l_, h, dh]), [0, 2, 1, 3]) for t in (q, k, v))
  outs = []
  for i, (a, b, bias) in enumerate(mask.blocks):
    qi, ki, vi = (q, k, v) if b is None else (q[..., a:b, :], k[..., :b, :], v[..., :b, :])
    logits = tf.matmul(qi, ki, transpose_b=True) + (bias[:, None] if h > 1 else bias)
    attn = _dropout(tf.nn.softmax(logits, axis=-1), rate, training, seed, salt + _BLOCK_SALT * i)
    outs.append(tf.matmul(attn, vi))
  ctx = outs[0] if len(outs) == 1 else tf.concat(outs, axis=-2)
  if h > 1:
    ctx = tf.transpose(ctx, [0, 2, 1, 3])
  return tf.reshape(ctx, [b_, l_, dim])


# ------------------------------------------------------------------------------ token compaction
class _Tokens(NamedTuple):
  """Where the C packed rows live on the [B, L] grid (module docstring, token compaction).

  rows: int32 [C], flat grid slot (b * L + t) of each packed row (filler rows: 0);
  slots: int32 [B * L], packed row of each grid slot, C for padding slots (a zero row);
  live: float [C, 1], 1 for the T token rows, 0 for filler rows; None when C = T.
  """
  rows: tf.Tensor
  slots: tf.Tensor
  live: Optional[tf.Tensor]


def _token_index(valid, buckets: Optional[int] = None):
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


def _make_tokens(rows, slots, count=None) -> _Tokens:
  """`_Tokens` of a `_token_index` (``count``: rows from ``count`` on are filler rows)."""
  live = None
  if count is not None:
    live = tf.cast(tf.range(tf.shape(rows)[0]) < count, tf.float32)[:, None]
  return _Tokens(rows, slots, live)


def _to_grid(x, tokens: Optional[_Tokens], grid_shape):
  """Packed rows x [C, k] -> [B, L, k] (padding slots 0; ``tokens`` None: all B L rows, in
  row-major order). Filler rows are zeroed first, so they neither land anywhere nor get a
  gradient."""
  shape = tf.concat([grid_shape, tf.shape(x)[1:]], 0)
  if tokens is None:
    return tf.reshape(x, shape)
  rows, slots, live = tokens

  @tf.custom_gradient
  def gather(x):
    xz = x if live is None else x * live
    y = tf.gather(tf.pad(xz, [[0, 1], [0, 0]]), slots)                 # row C: zeros

    def grad(dy):
      g = tf.gather(dy, rows)
      return g if live is None else g * live
    return y, grad
  return tf.reshape(gather(x), shape)


def _from_grid(g, tokens: Optional[_Tokens]):
  """[B, L, k] -> the packed rows [C, k] (inverse of `_to_grid`; filler rows read slot 0)."""
  flat = tf.reshape(g, [-1, g.shape[-1] if g.shape[-1] is not None else tf.shape(g)[-1]])
  if tokens is None:
    return flat
  rows, slots, live = tokens

  @tf.custom_gradient
  def gather(flat):
    def grad(dy):
      dz = dy if live is None else dy * live
      return tf.gather(tf.pad(dz, [[0, 1], [0, 0]]), slots)
    return tf.gather(flat, rows), grad
  return gather(flat)


class CausalSelfAttention(tf.keras.layers.Layer):
  """Multi-head causal self-attention with a key-padding mask.

  softmax_j( <Q_t, K_j> / sqrt(d_head) + mask[t, j] ) V_j,  mask = 0 where j <= t and item_j != 0,
  else -1e9 (a finite value, so fully-masked rows of padding queries stay finite; they are zeroed by
  the caller). Computed block by block over the queries (`_causal_attention`).
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
    return _causal_attention(qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:], mask,
                             self.num_heads, self.rate, training, seed, salt)


def _padded_call(block, x, attention_mask, mask, training, seed, salt):
  """A block on the padded grid x [B, L, d]: its per-token layers on the B L rows (always
  rank 2, whichever path built them), padding re-zeroed."""
  shape = tf.shape(x)
  flat = tf.reshape(x, [-1, x.shape[-1]])
  out = block.call_packed(flat, None, shape[:2], attention_mask, training=training, seed=seed,
                          salt=salt)
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
    self.ffn1 = tf.keras.layers.Dense(dim, activation="relu", kernel_initializer=glorot(seed + 2),
                                      name="ffn1")
    self.ffn2 = tf.keras.layers.Dense(dim, kernel_initializer=glorot(seed + 3), name="ffn2")

  def call(self, x, attention_mask, mask, training=False, seed=None, salt=0):
    """x [B, L, d], mask [B, L, 1] (1 at non-padding positions) -> [B, L, d]."""
    return _padded_call(self, x, attention_mask, mask, training, seed, salt)

  def call_packed(self, x, tokens, grid_shape, attention_mask, training=False, seed=None, salt=0):
    """Same block on the packed tokens x [C, d] (`_Tokens`); only the attention core runs on
    the [B, L] grid."""
    grid = _to_grid(self.attention.qkv(self.ln1(x)), tokens, grid_shape)      # [B, L, 3d]
    ctx = self.attention.core(grid, attention_mask, training=training, seed=seed,
                              salt=salt * 10 + 1)
    return self._residual_ffn(x, self.attention.out(_from_grid(ctx, tokens)), training, seed,
                              salt)

  def _residual_ffn(self, x, a, training, seed, salt):
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

  def call(self, x, attention_mask, mask, training=False, seed=None, salt=0):
    """x [B, L, d], mask [B, L, 1] (1 at non-padding positions) -> [B, L, d]."""
    return _padded_call(self, x, attention_mask, mask, training, seed, salt)

  def call_packed(self, x, tokens, grid_shape, attention_mask, training=False, seed=None, salt=0):
    """Same block on the packed tokens x [C, d] (`_Tokens`); only the attention core runs on
    the [B, L] grid."""
    z = self.ln1(x)
    grid = _to_grid(tf.concat([self.query(z), self.kv(x)], -1), tokens, grid_shape)  # [B, L, 3d]
    d = self.dim
    ctx = _causal_attention(grid[..., :d], grid[..., d:2 * d], grid[..., 2 * d:], attention_mask,
                            self.num_heads, self.rate, training, seed, salt * 10 + 1)
    return self._ffn(_from_grid(ctx, tokens) + z, training, seed, salt)

  def _ffn(self, a_plus_z, training, seed, salt):
    hidden = self.ln2(a_plus_z)
    f = _dropout(tf.nn.relu(self.ffn1(hidden)), self.rate, training, seed, salt * 10 + 3)
    f = _dropout(self.ffn2(f), self.rate, training, seed, salt * 10 + 4)
    return hidden + f


# Execution defaults (the run config's flags read these: one definition).
DEFAULT_PACK_TOKENS = True
DEFAULT_ATTENTION_BLOCKS = 2


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
    jit_compile: compile the encoder with XLA.
    seed: initialiser seed (all weights are seeded: same seed, same initial model).
    pack_tokens: run the per-token layers on the non-padding tokens only (module docstring,
      token compaction; with ``jit_compile`` on a bucketed token capacity).
    attention_blocks: query blocks of the blocked causal attention (module docstring; 1 = the
      full L x L grid). Default 2: on a 2-core CPU under XLA the fastest of 1, 2, 4 for ML-1M
      batches (128 x 200); more blocks shrink the work but the smaller batched matmuls run
      at a lower rate.
    block_style: ``"pre_ln"`` (the module docstring's pre-LayerNorm blocks, inputs scaled by
      sqrt(d)) or ``"reference"`` (`ReferenceBlock`: the original SASRec block as the logQ
      paper's gSASRec-pytorch code builds it, unscaled inputs; for faithful reproductions).
    tie_embeddings: score with the input item table (E_out = E_in, gSASRec's
      ``reuse_item_embeddings``) instead of a separate output table.
  """

  def __init__(self, num_items: int, max_len: int = 200, embedding_dim: int = 128,
               num_blocks: int = 2, num_heads: int = 1, dropout: float = 0.5,
               temperature: float = 1.0, jit_compile: bool = False, seed: int = 0,
               pack_tokens: bool = DEFAULT_PACK_TOKENS, block_style: str = "pre_ln",
               tie_embeddings: bool = False, attention_blocks: int = DEFAULT_ATTENTION_BLOCKS,
               **kwargs):
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
    self.pack_tokens, self.attention_blocks = True, 1
    self.set_execution(pack_tokens=pack_tokens, attention_blocks=attention_blocks)
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
    self._encode_xla = None

  def set_execution(self, pack_tokens: Optional[bool] = None,
                    attention_blocks: Optional[int] = None):
    """Changes how the encoder runs (not what it computes in eval mode; the dropout masks'
    layout changes): ``pack_tokens`` and ``attention_blocks`` as in the constructor; None keeps
    the current value. Takes effect for functions traced afterwards."""
    if pack_tokens is not None:
      if not isinstance(pack_tokens, bool):
        raise TypeError(f"pack_tokens must be a bool, got {pack_tokens!r}")
      self.pack_tokens = pack_tokens
    if attention_blocks is not None:
      if isinstance(attention_blocks, bool) or not isinstance(attention_blocks, int):
        raise TypeError(f"attention_blocks must be an int, got {attention_blocks!r}")
      if attention_blocks < 1:
        raise ValueError(f"attention_blocks must be >= 1, got {attention_blocks}")
      self.attention_blocks = attention_blocks
    self._encode_xla = None
    return self

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
    in_xla = _static_shapes.in_xla_context()
    if self.pack_tokens and in_xla:
      return self._encode_packed(inputs, training=training, seed=seed)   # all tokens
    # Inside a program XLA already compiles (e.g. --jit_compile_step) the encoder is part of it:
    # a nested jit function would be recompiled at every call of the outer program.
    if self.jit_compile_encoder and self.final_norm.built and not in_xla:
      if self._encode_xla is None:
        self._encode_xla = tf.function(self._encode_compiled, jit_compile=True)
      kwargs = dict(training=bool(training))
      if seed is not None and training:
        kwargs["seed"] = tf.cast(seed, tf.int64)
      if self.pack_tokens:
        # The token index has a data-dependent size: computed here, outside XLA, and padded to
        # one of _TOKEN_BUCKETS capacities.
        rows, slots, count = _token_index(tf.not_equal(inputs, 0), _TOKEN_BUCKETS)
        return self._encode_xla(inputs, rows, slots, count, **kwargs)
      return self._encode_xla(inputs, **kwargs)
    if self.pack_tokens:
      rows, slots, _ = _token_index(tf.not_equal(inputs, 0))
      return self._encode_packed(inputs, _make_tokens(rows, slots), training=training, seed=seed)
    return self._encode(inputs, training=training, seed=seed)

  def _encode_compiled(self, inputs, rows=None, slots=None, count=None, training=False,
                       seed=None):
    """The body of the XLA-compiled encoder (packed when ``rows`` is given)."""
    if rows is None:
      return self._encode(inputs, training=training, seed=seed)
    return self._encode_packed(inputs, _make_tokens(rows, slots, count), training=training,
                               seed=seed)

  def _embed(self, ids, positions, length, training, seed):
    """dropout(E_in[ids] * scale + P[positions + max_len - L]) (the per-token input layer)."""
    x = self.input_embedding(ids) * self.input_scale
    x = x + self.position_embedding(positions + tf.cast(self.max_len - length, positions.dtype))
    return _dropout(x, self.rate, training, seed, 0)

  def _encode(self, inputs, training=False, seed=None):
    """The padded path: every layer on all B L positions, padding re-zeroed after each block."""
    return self._encode_packed(inputs, None, training=training, seed=seed, padded=True)

  def _encode_packed(self, inputs, tokens: Optional[_Tokens] = None, training=False, seed=None,
                     padded=False):
    """The encoder with every per-token layer (embeddings, LayerNorms, projections, FFN) applied
    to the packed tokens of ``tokens`` ([C, d]); attention runs on the [B, L] grid. Same function
    as the padded path (dropout masks are drawn per packed row, so they differ from the padded
    path's).

    ``tokens`` None: the per-token layers run on all B L positions (row-major, [B L, d]); padding
    keys stay masked in attention and padding outputs are zeroed; ``padded`` also zeroes the
    padding rows after the input layer and after every block (the padded path; without it, the
    static-shape path of XLA / TPU, where nothing may depend on where the padding is)."""
    l = tf.shape(inputs)[1]
    valid = tf.not_equal(inputs, 0)
    grid_shape = tf.shape(inputs)
    keep = None
    if tokens is None:
      ids = tf.reshape(inputs, [-1])
      # Learned positions aligned to the right end (left padding): the last slot gets max_len - 1.
      positions = tf.tile(tf.range(l), [grid_shape[0]])
      if padded:
        keep = tf.reshape(tf.cast(valid, tf.float32), [-1, 1])
    else:
      ids = tf.gather(tf.reshape(inputs, [-1]), tokens.rows)
      positions = tokens.rows % l
    zero = (lambda x: x) if keep is None else (lambda x: x * keep)
    x = zero(self._embed(ids, positions, l, training, seed))
    attention_mask = _attention_mask(valid, self.attention_blocks)
    for i, block in enumerate(self.blocks):
      x = zero(block.call_packed(x, tokens, grid_shape, attention_mask, training=training,
                                 seed=seed, salt=i + 1))
    out = _to_grid(self.final_norm(x), tokens, grid_shape)
    return out * tf.cast(valid, out.dtype)[..., None] if tokens is None else out

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
      h = (self._encode_packed(tf.cast(batch["inputs"], tf.int64), training=training, seed=seed)
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
                tie_embeddings=self.tie_embeddings, attention_blocks=self.attention_blocks)
