"""SASRec (Kang & McAuley, 2018) in Keras 3 (``keras`` / ``keras.ops`` only: JAX, TensorFlow,
PyTorch), the twin of the tf-keras `models.sasrec.SASRec`:

  x_0[t]  = E_in[item_t] * scale + P[t + max_len - L]    scale = sqrt(d) (pre_ln) or 1 (reference)
  x_0     = dropout(x_0) * m                              m[t] = 1 at non-padding positions
  x_b     = block_b(x_{b-1}) * m                          `sasrec_blocks` (pre_ln or reference)
  H       = LN(x_L) * m                                   hidden states [B, L, d]
  s(t, i) = <H[t], E_out[i]> / temperature                E_out separate, or E_in (tie_embeddings)

Same architecture options, sublayer names and initialisers (seeded the same way; Keras 3's
random streams) as the tf-keras model: with the same weights both give the same hidden states
(tests/models/keras3/test_sasrec.py copies them across). Shapes are static, so the encoder
compiles whole under ``jax.jit``. It runs on the padded [B, L] grid, or, given the batch's
`sasrec_ops.Tokens` (``encode(..., tokens=)``; a training batch's "token_rows" / "token_slots",
computed on the host by `sasrec_ops.token_index`: the tf-keras model's ``pack_tokens``), with
every per-token layer on the packed non-padding tokens and only the attention core on the grid:
the same function, ~40 % less per-token work at ML-1M's padding. Dropout is
`models.keras3.dropout.Dropout` (Keras's layer with a 16-bit keep mask: half the random bits, the
JAX step's dominant cost otherwise), its seed state among the model's variables (a checkpoint of
``model.variables`` resumes it).

Query-model interface (`models.queries`, static shapes):
  ``training_queries(batch)`` -> `TrainingQueries` of all B L positions (padding included,
  ``valid`` marks the real ones; the encoder packed when the batch has "token_rows");
  ``query_embeddings`` / ``serving_queries`` -> H at the last position [B, d];
  ``item_embeddings(ids)``; ``all_item_embeddings()``; ``call`` -> scores of every item
  [B, num_items + 1] (column 0 padding).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import keras
from keras import ops

from models.keras3 import sasrec_ops
from models.keras3.dropout import Dropout
from models.keras3.sasrec_blocks import ReferenceBlock, TransformerBlock
from models.sasrec_settings import BLOCK_STYLES

__all__ = ["BLOCK_STYLES", "SASRec", "TrainingQueries"]


class TrainingQueries(NamedTuple):
  """All A = B L positions of a batch, row-major: queries [A, d], positive_ids int32 [A] (0 at
  padding), sequence_ids int32 [A] (the row of each position), valid bool [A]."""

  queries: object
  positive_ids: object
  sequence_ids: object
  valid: object


@keras.saving.register_keras_serializable(package="tfrs_logq_models")
class SASRec(keras.Model):
  """Self-attentive sequential recommender (module docstring); arguments as the tf-keras
  `models.sasrec.SASRec` (num_items, max_len, embedding_dim, num_blocks, num_heads, dropout,
  temperature, seed, block_style, tie_embeddings, attention_blocks)."""

  def __init__(
    self,
    num_items: int,
    max_len: int = 200,
    embedding_dim: int = 128,
    num_blocks: int = 2,
    num_heads: int = 1,
    dropout: float = 0.5,
    temperature: float = 1.0,
    seed: int = 0,
    block_style: str = "pre_ln",
    tie_embeddings: bool = False,
    attention_blocks: int = 1,
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
    if (
      isinstance(attention_blocks, bool)
      or int(attention_blocks) != attention_blocks
      or attention_blocks < 1
    ):
      raise ValueError(f"attention_blocks must be an int >= 1, got {attention_blocks!r}")
    self.num_items, self.max_len, self.embedding_dim = int(num_items), int(max_len), embedding_dim
    self.num_blocks, self.num_heads, self.rate = num_blocks, num_heads, float(dropout)
    self.temperature, self.seed = float(temperature), int(seed)
    self.block_style, self.tie_embeddings = block_style, bool(tie_embeddings)
    self.attention_blocks = int(attention_blocks)
    init = lambda i: keras.initializers.TruncatedNormal(stddev=0.02, seed=self.seed * 100 + i)
    self.input_embedding = keras.layers.Embedding(
      num_items + 1, embedding_dim, embeddings_initializer=init(1), name="input_item_embedding"
    )
    self.position_embedding = keras.layers.Embedding(
      max_len, embedding_dim, embeddings_initializer=init(2), name="position_embedding"
    )
    self.output_embedding = (
      self.input_embedding
      if self.tie_embeddings
      else keras.layers.Embedding(
        num_items + 1, embedding_dim, embeddings_initializer=init(3), name="output_item_embedding"
      )
    )
    block = TransformerBlock if block_style == "pre_ln" else ReferenceBlock
    self.blocks = [
      block(embedding_dim, num_heads, dropout, self.seed * 100 + 10 * (i + 1), name=f"block_{i}")
      for i in range(num_blocks)
    ]
    self.final_norm = keras.layers.LayerNormalization(
      epsilon=1e-6 if block_style == "pre_ln" else 1e-5, name="final_norm"
    )
    self.input_dropout = Dropout(dropout, seed=self.seed * 100 + 9, name="input_dropout")
    self.input_scale = math.sqrt(embedding_dim) if block_style == "pre_ln" else 1.0
    self.build((None, self.max_len))

  def build(self, input_shape=None):
    if self.built:
      return
    for table in (self.input_embedding, self.position_embedding, self.output_embedding):
      if not table.built:
        table.build()
    for block in self.blocks:
      block.build()
    self.final_norm.build((None, self.embedding_dim))
    self.built = True

  def build_all(self):
    """Every variable exists from construction (kept for the tf-keras model's interface)."""
    return self

  # ------------------------------------------------------------------------------- the encoder
  def encode(self, inputs, training=False, tokens: Optional[sasrec_ops.Tokens] = None):
    """Hidden states H [B, L, d] of left-padded item ids int [B, L] (L <= max_len, static);
    ``tokens`` (`sasrec_ops.token_index` of these ids): the per-token layers on packed rows."""
    inputs = ops.convert_to_tensor(inputs)
    if len(inputs.shape) != 2:
      raise ValueError(f"SASRec inputs must be [batch, length], got shape {inputs.shape}")
    length = inputs.shape[1]
    if length is None:
      raise ValueError("SASRec inputs need a static length")
    if length > self.max_len:
      raise ValueError(f"sequence length {length} > max_len {self.max_len}")
    if "int" not in keras.backend.standardize_dtype(inputs.dtype):
      raise TypeError(f"SASRec inputs must be integer item ids, got {inputs.dtype}")
    ids = ops.cast(inputs, "int32")
    valid = ops.not_equal(ids, 0)
    if tokens is not None:
      return self._encode_packed(ids, valid, tokens, training)
    mask = ops.cast(valid, "float32")[..., None]
    positions = ops.arange(self.max_len - length, self.max_len, dtype="int32")
    x = self.input_embedding(ids) * self.input_scale + self.position_embedding(positions)[None]
    x = self.input_dropout(x, training=training) * mask
    biases = sasrec_ops.attention_biases(valid, self.attention_blocks)
    for block in self.blocks:
      x = block.run_block(x, biases, mask, training=training)
    # H in float32 whatever the compute dtype (--mixed_precision=bfloat16)
    return ops.cast(self.final_norm(x), "float32") * mask

  def _encode_packed(self, ids, valid, tokens, training):
    """`encode` with the per-token layers on the packed rows (module docstring)."""
    length = ids.shape[1]
    tokens = sasrec_ops.Tokens(
      ops.cast(ops.convert_to_tensor(tokens.rows), "int32"),
      ops.cast(ops.convert_to_tensor(tokens.slots), "int32"),
    )
    if None not in tuple(ids.shape) + tuple(tokens.slots.shape) and tuple(
      tokens.slots.shape
    ) != tuple(ids.shape):
      raise ValueError(
        f"token slots {tuple(tokens.slots.shape)} do not match the inputs {tuple(ids.shape)}"
      )
    flat = ops.concatenate([ops.reshape(ids, (-1,)), ops.zeros((1,), "int32")], axis=0)
    token_ids = ops.take(flat, tokens.rows, axis=0)  # [C]; fillers: 0
    positions = tokens.rows % length + (self.max_len - length)
    x = self.input_embedding(token_ids) * self.input_scale + self.position_embedding(positions)
    x = self.input_dropout(x, training=training)
    biases = sasrec_ops.attention_biases(valid, self.attention_blocks)
    for block in self.blocks:
      x = block.run_block(x, biases, None, training=training, tokens=tokens)
    return sasrec_ops.to_grid(ops.cast(self.final_norm(x), "float32"), tokens)

  # --------------------------------------------------------------------- query-model interface
  def query_embeddings(self, features, training=False):
    """Query of each sequence: H at the last (right-most) position, [B, d]. ``features``: ids
    [B, L] or a dict with them under "history" (or "inputs")."""
    if isinstance(features, dict):
      features = features["history"] if "history" in features else features["inputs"]
    return self.encode(features, training=training)[:, -1, :]

  def serving_queries(self, history, user_ids=None):
    """Serving queries [B, d] of left-padded histories int [B, max_len] (user ids unused)."""
    del user_ids
    return self.query_embeddings(history, training=False)

  def item_embeddings(self, item_ids):
    """Rows of the output table E_out for ``item_ids`` (any shape) -> [..., d]."""
    return ops.cast(self.output_embedding(ops.cast(item_ids, "int32")), "float32")

  def all_item_embeddings(self):
    """The full output table [num_items + 1, d] (row 0 = padding)."""
    return self.output_embedding.embeddings

  def training_queries(self, batch, training=True) -> TrainingQueries:
    """The A = B L positions of a {"inputs", "targets"} [B, L] batch (static shapes); with
    "token_rows" and "token_slots" in the batch (`sasrec_ops.with_token_index`) the encoder runs
    packed."""
    h = self.encode(batch["inputs"], training=training, tokens=sasrec_ops.batch_tokens(batch))
    targets = ops.cast(ops.convert_to_tensor(batch["targets"]), "int32")
    b, l = targets.shape
    rows = ops.repeat(ops.arange(b, dtype="int32"), l)
    pos = ops.reshape(targets, (-1,))
    return TrainingQueries(
      ops.reshape(h, (-1, self.embedding_dim)), pos, rows, ops.not_equal(pos, 0)
    )

  def call(self, inputs, training=False):
    """Scores of every item for every sequence's last position: [B, num_items + 1]."""
    q = self.query_embeddings(inputs, training=training)
    return ops.matmul(q, ops.transpose(self.all_item_embeddings())) / self.temperature

  def get_config(self):
    return {
      **super().get_config(),
      "num_items": self.num_items,
      "max_len": self.max_len,
      "embedding_dim": self.embedding_dim,
      "num_blocks": self.num_blocks,
      "num_heads": self.num_heads,
      "dropout": self.rate,
      "temperature": self.temperature,
      "seed": self.seed,
      "block_style": self.block_style,
      "tie_embeddings": self.tie_embeddings,
      "attention_blocks": self.attention_blocks,
    }
