"""SASRec (Kang & McAuley, 2018) in tf.keras (Keras 2), fast on CPU.

Architecture (the gSASRec / logQ-paper academic setup is the default):

  x_0[t]  = E_in[item_t] * sqrt(d) + P[t]        item embedding (row 0 = padding) + learned position
  x_0     = dropout(x_0) * m                     m[t] = 1 for non-padding positions, else 0
  block b (pre-LayerNorm, causal):
    h     = x + dropout(CausalAttention(LN(x)))  attention over keys j <= t that are not padding
    x'    = (h + dropout(FFN(LN(h)))) * m        FFN(z) = W2 dropout(relu(W1 z + b1)) + b2
  H       = LN(x_L)                              hidden states [B, L, d]
  s(t, i) = <H[t], E_out[i]> / temperature       a SEPARATE output item-embedding table E_out

Every non-padding position t predicts the item at t + 1 (the "targets" of the data pipeline), so the
training queries are H gathered at the A non-padding positions ([A, d]); the serving query of a
sequence is H at its last position (sequences are left-padded, so that is index L - 1).

Dropout (stateless, keyed by a ``seed`` tensor) and execution (blocked causal attention, token
compaction): `models.sasrec_ops`, whose docstring describes them. The blocks: `models.sasrec_blocks`
(`TransformerBlock`, `ReferenceBlock`, `CausalSelfAttention`, also importable from here).
"""

from __future__ import annotations

import math
from typing import Optional

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import _static_shapes, compiled

import tensorflow as tf

from models import sasrec_ops as ops
from models.queries import TrainingQueries
from models.sasrec_blocks import CausalSelfAttention, ReferenceBlock, TransformerBlock
from models.sasrec_settings import BLOCK_STYLES, DEFAULT_ATTENTION_BLOCKS, DEFAULT_PACK_TOKENS

__all__ = ["SASRec", "TransformerBlock", "ReferenceBlock", "CausalSelfAttention", "BLOCK_STYLES"]


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
    pack_tokens: run the per-token layers on the non-padding tokens only (`models.sasrec_ops`,
      token compaction; with ``jit_compile`` on a bucketed token capacity).
    attention_blocks: query blocks of the blocked causal attention (`models.sasrec_ops`; 1 = the
      full L x L grid). Default 2, the fastest of 1, 2, 4 measured for ML-1M batches (128 x
      200) under XLA (docs/training.md); more blocks shrink the work but the smaller batched
      matmuls run at a lower rate.
    block_style: ``"pre_ln"`` (the module docstring's pre-LayerNorm blocks, inputs scaled by
      sqrt(d)) or ``"reference"`` (`ReferenceBlock`: the original SASRec block as the logQ
      paper's gSASRec-pytorch code builds it, unscaled inputs; for faithful reproductions).
    tie_embeddings: score with the input item table (E_out = E_in, gSASRec's
      ``reuse_item_embeddings``) instead of a separate output table.
  """

  def __init__(
    self,
    num_items: int,
    max_len: int = 200,
    embedding_dim: int = 128,
    num_blocks: int = 2,
    num_heads: int = 1,
    dropout: float = 0.5,
    temperature: float = 1.0,
    jit_compile: bool = False,
    seed: int = 0,
    pack_tokens: bool = DEFAULT_PACK_TOKENS,
    block_style: str = "pre_ln",
    tie_embeddings: bool = False,
    attention_blocks: int = DEFAULT_ATTENTION_BLOCKS,
    **kwargs,
  ):
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
      num_items + 1, embedding_dim, embeddings_initializer=init(1), name="input_item_embedding"
    )
    self.position_embedding = tf.keras.layers.Embedding(
      max_len, embedding_dim, embeddings_initializer=init(2), name="position_embedding"
    )
    self.tie_embeddings = bool(tie_embeddings)
    self.output_embedding = (
      self.input_embedding
      if self.tie_embeddings
      else tf.keras.layers.Embedding(
        num_items + 1, embedding_dim, embeddings_initializer=init(3), name="output_item_embedding"
      )
    )
    block = TransformerBlock if block_style == "pre_ln" else ReferenceBlock
    self.blocks = [
      block(embedding_dim, num_heads, dropout, self.seed * 100 + 10 * (i + 1), name=f"block_{i}")
      for i in range(num_blocks)
    ]
    self.final_norm = tf.keras.layers.LayerNormalization(
      epsilon=1e-6 if block_style == "pre_ln" else 1e-5, name="final_norm"
    )
    self.input_scale = math.sqrt(embedding_dim) if block_style == "pre_ln" else 1.0
    self.jit_compile_encoder = bool(jit_compile)
    self._encode_xla = None

  def set_execution(
    self, pack_tokens: Optional[bool] = None, attention_blocks: Optional[int] = None
  ):
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
      return self._encode_packed(inputs, training=training, seed=seed)  # all tokens
    # Inside a program XLA already compiles (e.g. --jit_compile_step) the encoder is part of it:
    # a nested jit function would be recompiled at every call of the outer program.
    if self.jit_compile_encoder and self.final_norm.built and not in_xla:
      if self._encode_xla is None:
        self._encode_xla = compiled.compile_function(self._encode_compiled, jit_compile=True)
      kwargs = dict(training=bool(training))
      if seed is not None and training:
        kwargs["seed"] = tf.cast(seed, tf.int64)
      if self.pack_tokens:
        # The token index has a data-dependent size: computed here, outside XLA, and padded to
        # one of ops.TOKEN_BUCKETS capacities.
        rows, slots, count = ops.token_index(tf.not_equal(inputs, 0), ops.TOKEN_BUCKETS)
        return self._encode_xla(inputs, rows, slots, count, **kwargs)
      return self._encode_xla(inputs, **kwargs)
    if self.pack_tokens:
      rows, slots, _ = ops.token_index(tf.not_equal(inputs, 0))
      return self._encode_packed(inputs, ops.make_tokens(rows, slots), training=training, seed=seed)
    return self._encode(inputs, training=training, seed=seed)

  def _encode_compiled(self, inputs, rows=None, slots=None, count=None, training=False, seed=None):
    """The body of the XLA-compiled encoder (packed when ``rows`` is given)."""
    if rows is None:
      return self._encode(inputs, training=training, seed=seed)
    return self._encode_packed(
      inputs, ops.make_tokens(rows, slots, count), training=training, seed=seed
    )

  def _embed(self, ids, positions, length, training, seed):
    """dropout(E_in[ids] * scale + P[positions + max_len - L]) (the per-token input layer)."""
    x = self.input_embedding(ids) * self.input_scale
    x = x + self.position_embedding(positions + tf.cast(self.max_len - length, positions.dtype))
    return ops.stateless_dropout(x, self.rate, training, seed, 0)

  def _encode(self, inputs, training=False, seed=None):
    """The padded path: every layer on all B L positions, padding re-zeroed after each block."""
    return self._encode_packed(inputs, None, training=training, seed=seed, padded=True)

  def _encode_packed(
    self, inputs, tokens: Optional[ops.Tokens] = None, training=False, seed=None, padded=False
  ):
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
    attention_mask = ops.attention_mask(valid, self.attention_blocks)
    for i, block in enumerate(self.blocks):
      x = zero(
        block.call_packed(
          x, tokens, grid_shape, attention_mask, training=training, seed=seed, salt=i + 1
        )
      )
    # H in float32 whatever the compute dtype (--mixed_precision=bfloat16): scores, log Q and
    # the loss downstream are float32
    out = tf.cast(ops.to_grid(self.final_norm(x), tokens, grid_shape), tf.float32)
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
    return tf.cast(self.output_embedding(tf.cast(item_ids, tf.int64)), tf.float32)

  def all_item_embeddings(self):
    """The full output table [num_items + 1, d] (row 0 = padding)."""
    if not self.output_embedding.built:
      self.output_embedding(tf.zeros([1], tf.int64))
    self.built = True
    return self.output_embedding.embeddings

  def training_queries(
    self, batch, training=True, seed=None, static_shapes=False
  ) -> TrainingQueries:
    """Queries and positives of a {"inputs", "targets"} [B, L] batch at non-padding targets.

    Returns ``TrainingQueries(queries [A, d], positive_ids [A] int64, sequence_ids [A] int64)``
    with A = #(targets != 0), in row-major order; ``sequence_ids`` is each query's row. With
    ``static_shapes`` (XLA / TPU) all A = B * L positions are returned, row-major, padding
    included (positive id 0, query 0), and no encoder op depends on where the padding is.
    """
    if static_shapes:
      h = (
        self._encode_packed(tf.cast(batch["inputs"], tf.int64), training=training, seed=seed)
        if self.pack_tokens
        else self.encode(batch["inputs"], training=training, seed=seed)
      )
      targets = tf.cast(batch["targets"], tf.int64)
      b, l = tf.shape(targets)[0], tf.shape(targets)[1]
      rows = tf.repeat(tf.range(tf.cast(b, tf.int64)), l)
      return TrainingQueries(
        tf.reshape(h, [b * l, self.embedding_dim]), tf.reshape(targets, [-1]), rows
      )
    h = self.encode(batch["inputs"], training=training, seed=seed)
    targets = tf.cast(batch["targets"], tf.int64)
    index = tf.where(tf.not_equal(targets, 0))  # [A, 2]
    return TrainingQueries(tf.gather_nd(h, index), tf.gather_nd(targets, index), index[:, 0])

  def call(self, inputs, training=False):
    """Scores of every item for every sequence's last position: [B, num_items + 1] (column 0
    padding)."""
    q = self.query_embeddings(inputs, training=training)
    return tf.matmul(q, self.all_item_embeddings(), transpose_b=True) / self.temperature

  def get_config(self):
    return dict(
      num_items=self.num_items,
      max_len=self.max_len,
      embedding_dim=self.embedding_dim,
      num_blocks=self.num_blocks,
      num_heads=self.num_heads,
      dropout=self.rate,
      temperature=self.temperature,
      jit_compile=self.jit_compile_encoder,
      seed=self.seed,
      pack_tokens=self.pack_tokens,
      block_style=self.block_style,
      tie_embeddings=self.tie_embeddings,
      attention_blocks=self.attention_blocks,
    )
