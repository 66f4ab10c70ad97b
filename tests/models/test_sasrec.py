"""SASRec: shapes, causality (future items never change earlier outputs), padding, XLA parity,
the query-model interface, the reference block against a numpy oracle of its description, and
the execution paths (token compaction, blocked causal attention, XLA with bucketed token
capacities) against the plain padded full-grid encoder."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

from models import TrainingQueries
from models.sasrec import SASRec


def _model(**kw):
  args = dict(
    num_items=30, max_len=12, embedding_dim=16, num_blocks=2, num_heads=2, dropout=0.0, seed=1
  )
  args.update(kw)
  return SASRec(**args).build_all()


def _batch(rng, b=4, l=12, n=30):
  x = rng.integers(1, n + 1, size=(b, l))
  lengths = rng.integers(2, l + 1, size=b)
  for i, m in enumerate(lengths):
    x[i, : l - m] = 0
  return x.astype(np.int64)


def test_shapes_and_separate_output_table():
  m = _model()
  x = _batch(np.random.default_rng(0))
  assert m.encode(x).shape == (4, 12, 16)
  assert m.query_embeddings(x).shape == (4, 16)
  assert m(x).shape == (4, 31)
  assert m.all_item_embeddings().shape == (31, 16)
  assert m.input_embedding.embeddings is not m.output_embedding.embeddings
  assert not np.allclose(
    m.input_embedding.embeddings.numpy(), m.output_embedding.embeddings.numpy()
  )


def test_defaults_are_the_papers_academic_setup():
  m = SASRec(num_items=10)
  assert (m.embedding_dim, m.num_blocks, m.num_heads, m.rate, m.max_len) == (128, 2, 1, 0.5, 200)


def test_causality_future_items_do_not_change_earlier_outputs():
  m = _model()
  x = _batch(np.random.default_rng(1))
  x[:, 3:] = np.maximum(x[:, 3:], 1)  # positions 3.. are real items
  h = m.encode(x).numpy()
  y = x.copy()
  y[:, 8:] = (y[:, 8:] % 30) + 1  # change only positions >= 8
  h2 = m.encode(y).numpy()
  np.testing.assert_allclose(h[:, :8], h2[:, :8], atol=1e-5)
  assert not np.allclose(h[:, 8:], h2[:, 8:], atol=1e-3)


def test_padding_is_zero_and_extra_left_padding_changes_nothing():
  m = _model(max_len=16)
  seq = np.array([[0, 0, 0, 5, 7, 9, 11, 2]], np.int64)
  h = m.encode(seq).numpy()
  np.testing.assert_array_equal(h[0, :3], 0.0)
  longer = np.concatenate([np.zeros((1, 8), np.int64), seq], axis=1)  # L = 16
  h_long = m.encode(longer).numpy()
  np.testing.assert_allclose(h_long[0, 8:], h[0], atol=1e-5)
  # Padding items' embeddings do not leak: changing the padding row changes nothing.
  table = m.input_embedding.embeddings
  table.assign(tf.tensor_scatter_nd_update(table, [[0]], tf.ones([1, 16]) * 3.0))
  np.testing.assert_allclose(m.encode(seq).numpy(), h, atol=1e-5)


def test_training_queries_gather_non_padding_targets():
  m = _model()
  x = _batch(np.random.default_rng(2))
  t = np.where(x > 0, (x % 30) + 1, 0)
  out = m.training_queries({"inputs": x, "targets": t}, training=False)
  assert isinstance(out, TrainingQueries)
  q, pos, seq = out
  assert q.shape[0] == int((t > 0).sum()) == pos.shape[0] == seq.shape[0]
  assert pos.dtype == tf.int64 and seq.dtype == tf.int64
  np.testing.assert_array_equal(pos.numpy(), t[t > 0])
  np.testing.assert_array_equal(seq.numpy(), np.nonzero(t > 0)[0])  # the row of each position
  h = m.encode(x).numpy()
  np.testing.assert_allclose(q.numpy(), h[t > 0], atol=1e-6)


def test_serving_queries_are_the_last_position_and_ignore_user_ids():
  m = _model()
  x = _batch(np.random.default_rng(8))
  last = m.encode(x).numpy()[:, -1]
  np.testing.assert_allclose(m.serving_queries(x).numpy(), last, atol=1e-6)
  np.testing.assert_allclose(m.serving_queries(x, user_ids=np.arange(4)).numpy(), last, atol=1e-6)
  np.testing.assert_allclose(
    m.query_embeddings({"history": x, "user_id": np.zeros(4)}).numpy(), last, atol=1e-6
  )


def test_stateless_dropout_is_seeded_and_xla_matches():
  m = _model(dropout=0.5)
  x = _batch(np.random.default_rng(3))
  seed = tf.constant([3, 4], tf.int64)
  a = m.encode(x, training=True, seed=seed).numpy()
  b = m.encode(x, training=True, seed=seed).numpy()
  c = m.encode(x, training=True, seed=tf.constant([3, 5], tf.int64)).numpy()
  np.testing.assert_array_equal(a, b)
  assert not np.allclose(a, c)
  xla = _model(dropout=0.5, jit_compile=True)
  xla.set_weights(m.get_weights())
  np.testing.assert_allclose(xla.encode(x).numpy(), m.encode(x).numpy(), atol=1e-4)
  # XLA's stateless RNG is a different generator: masks differ from the eager ones but are
  # still a pure function of the seed.
  xa = xla.encode(x, training=True, seed=seed).numpy()
  np.testing.assert_array_equal(xla.encode(x, training=True, seed=seed).numpy(), xa)
  assert not np.allclose(xla.encode(x, training=True, seed=tf.constant([3, 5], tf.int64)), xa)


def test_bad_inputs_raise():
  m = _model()
  with pytest.raises(ValueError, match="batch, length"):
    m.encode(np.zeros([12], np.int64))
  with pytest.raises(ValueError, match="max_len"):
    m.encode(np.zeros([1, 13], np.int64))
  with pytest.raises(TypeError, match="integer"):
    m.encode(np.zeros([1, 12], np.float32))
  with pytest.raises(ValueError, match="divisible"):
    SASRec(10, embedding_dim=10, num_heads=3).build_all()
  with pytest.raises(ValueError, match="dropout"):
    SASRec(10, dropout=1.0)


def test_packed_tokens_path_equals_padded_path():
  packed = _model(pack_tokens=True)
  padded = _model(pack_tokens=False)
  padded.set_weights(packed.get_weights())
  x = _batch(np.random.default_rng(4))
  np.testing.assert_allclose(packed.encode(x).numpy(), padded.encode(x).numpy(), atol=1e-5)
  t = np.where(x > 0, (x % 30) + 1, 0)

  def grads(m):
    with tf.GradientTape() as tape:
      q, pos, _ = m.training_queries({"inputs": x, "targets": t}, training=False)
      loss = tf.reduce_sum(q * m.item_embeddings(pos))
    return [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, m.trainable_variables)]

  for a, b in zip(grads(packed), grads(padded)):
    np.testing.assert_allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("pack_tokens", [True, False])
def test_static_shape_training_queries_keep_every_position(pack_tokens):
  """static_shapes: all B * L positions row-major (padding: positive id 0, query 0, row id); the
  non-padding ones are the dynamic queries; compiled by XLA (the packed encoder then runs its
  per-token layers on every token) the hidden states are the same."""
  m = _model(pack_tokens=pack_tokens)
  x = _batch(np.random.default_rng(5))
  t = np.where(x > 0, (x % 30) + 1, 0)
  batch = {"inputs": tf.constant(x), "targets": tf.constant(t)}
  q, pos, seq = m.training_queries(batch, training=False, static_shapes=True)
  assert q.shape == (x.size, 16)
  np.testing.assert_array_equal(pos.numpy(), t.reshape(-1))
  np.testing.assert_array_equal(seq.numpy(), np.repeat(np.arange(x.shape[0]), x.shape[1]))
  q_dyn, _, _ = m.training_queries(batch, training=False)
  np.testing.assert_allclose(q.numpy()[t.reshape(-1) > 0], q_dyn.numpy(), atol=1e-5)
  np.testing.assert_array_equal(q.numpy()[x.reshape(-1) == 0], 0.0)
  compiled = tf.function(
    lambda b: m.training_queries(b, training=False, static_shapes=True)[0], jit_compile=True
  )(batch)
  np.testing.assert_allclose(compiled.numpy(), q.numpy(), atol=1e-5)
  np.testing.assert_allclose(
    tf.function(m.encode, jit_compile=True)(x).numpy(), m.encode(x).numpy(), atol=1e-5
  )


def _np_layer_norm(x, ln):
  g, b = ln.gamma.numpy(), ln.beta.numpy()
  mu = x.mean(-1, keepdims=True)
  var = ((x - mu) ** 2).mean(-1, keepdims=True)
  return (x - mu) / np.sqrt(var + ln.epsilon) * g + b


def _np_reference_encoder(m, x):
  """Numpy forward of block_style="reference" (no dropout), written from the original SASRec
  block's description as gSASRec-pytorch builds it (the logQ paper's code), not from the layer:

    x_0  = E_in[item] + P[position]  (unscaled; padding rows zeroed)
    per block (weights: W_q, b_q on LN1(x); W_k, W_v on the raw x; heads split the d columns):
      z    = LN1(x)
      a    = softmax over keys j <= t with item_j != 0 of <z_t W_q, x_j W_k> / sqrt(d_head),
             times x_j W_v                       (no output projection)
      h    = LN2(a + z)
      f    = relu(h W_1 + b_1) W_2 + b_2         (SASRec's point-wise FFN, Eq. 4 of the paper)
      x    = (h + f) * m                         (m = 1 at non-padding positions)
    H = LN(x) * m
  """
  d, heads = m.embedding_dim, m.num_heads
  dh = d // heads
  valid = x != 0
  keep = valid[..., None].astype(np.float64)
  l = x.shape[1]
  emb = m.input_embedding.embeddings.numpy().astype(np.float64)
  pos_table = m.position_embedding.embeddings.numpy().astype(np.float64)
  hidden = (emb[x] + pos_table[m.max_len - l :][None]) * keep

  def dense(layer, v):
    return v @ layer.kernel.numpy() + layer.bias.numpy()

  for blk in m.blocks:
    z = _np_layer_norm(hidden, blk.ln1)
    queries = dense(blk.query, z)
    keys_values = dense(blk.kv, hidden)
    keys, values = keys_values[..., :d], keys_values[..., d:]
    attended = np.zeros_like(hidden)
    for b in range(x.shape[0]):
      for t in range(l):
        allowed = [j for j in range(t + 1) if valid[b, j]]
        for hd in range(heads):
          cols = slice(hd * dh, (hd + 1) * dh)
          if not allowed:
            continue  # padding query: zeroed below
          logits = np.array([queries[b, t, cols] @ keys[b, j, cols] for j in allowed]) / np.sqrt(dh)
          weights = np.exp(logits - logits.max())
          weights /= weights.sum()
          attended[b, t, cols] = sum(w * values[b, j, cols] for w, j in zip(weights, allowed))
    h = _np_layer_norm(attended + z, blk.ln2)
    f = dense(blk.ffn2, np.maximum(dense(blk.ffn1, h), 0.0))
    hidden = (h + f) * keep
  return _np_layer_norm(hidden, m.final_norm) * keep


@pytest.mark.parametrize(
  "heads,pack_tokens,blocks", [(1, True, 3), (2, True, 1), (2, False, 4), (1, False, 1)]
)
def test_reference_block_matches_numpy(heads, pack_tokens, blocks):
  m = _model(
    block_style="reference", num_heads=heads, pack_tokens=pack_tokens, attention_blocks=blocks
  )
  for v in m.trainable_variables:  # move off the init (zero biases, unit LayerNorm gains)
    v.assign(v + tf.random.stateless_normal(v.shape, [3, len(v.name)], stddev=0.1))
  x = _batch(np.random.default_rng(5))
  np.testing.assert_allclose(m.encode(x).numpy(), _np_reference_encoder(m, x), atol=2e-4)


def test_reference_block_causal_xla_parity_and_unscaled_inputs():
  m = _model(block_style="reference")
  assert m.input_scale == 1.0 and m.pack_tokens and m.attention_blocks == 2
  x = _batch(np.random.default_rng(6))
  x[:, 3:] = np.maximum(x[:, 3:], 1)
  h = m.encode(x).numpy()
  y = x.copy()
  y[:, 8:] = (y[:, 8:] % 30) + 1
  np.testing.assert_allclose(h[:, :8], m.encode(y).numpy()[:, :8], atol=1e-5)
  mx = _model(block_style="reference", jit_compile=True)
  mx.set_weights(m.get_weights())
  np.testing.assert_allclose(mx.encode(x).numpy(), h, atol=1e-4)
  with pytest.raises(ValueError, match="block_style"):
    SASRec(10, block_style="post_ln")


def test_tied_embeddings_score_with_the_input_table():
  m = _model(tie_embeddings=True)
  assert m.all_item_embeddings() is m.input_embedding.embeddings
  x = _batch(np.random.default_rng(7))
  q = m.query_embeddings(x).numpy()
  np.testing.assert_allclose(
    m(x).numpy(), q @ m.input_embedding.embeddings.numpy().T, rtol=1e-5, atol=1e-5
  )
  assert len(m.trainable_variables) == len(_model().trainable_variables) - 1
  assert SASRec.from_config(m.get_config()).tie_embeddings


# ------------------------------------------------------------------------------ execution paths
def _batches(l):
  """Two [5, l] batches: mixed lengths with a full row and two all-padding rows; all rows full."""
  rng = np.random.default_rng(l)
  mixed = _batch(rng, b=5, l=l)
  mixed[1] = rng.integers(1, 31, size=l)
  mixed[[2, 4]] = 0
  return [mixed, rng.integers(1, 31, size=(5, l)).astype(np.int64)]


def _outputs_and_grads(m, x, weights):
  """Eval-mode H [B, L, d] and the gradient of sum(H * weights) w.r.t. every variable."""
  with tf.GradientTape() as tape:
    h = m.encode(x)
    loss = tf.reduce_sum(h * weights)
  grads = tape.gradient(
    loss, m.trainable_variables, unconnected_gradients=tf.UnconnectedGradients.ZERO
  )  # E_out: unused
  return h.numpy(), [tf.convert_to_tensor(g).numpy() for g in grads]


@pytest.mark.parametrize("block_style", ["pre_ln", "reference"])
@pytest.mark.parametrize("jit_compile", [False, True])
def test_every_execution_path_equals_the_padded_full_grid_path(block_style, jit_compile):
  """pack_tokens x attention_blocks (x XLA with bucketed token capacities) compute the same
  function and gradients as the padded path on the full L x L grid; odd L = 11 leaves remainder
  blocks (3 blocks: 4, 4, 3 queries; 20 blocks: one query each); all-full and all-padding rows
  included. Gradients agree to float32 rounding of their largest entry."""
  l = 11
  plain = _model(block_style=block_style, max_len=l, pack_tokens=False, attention_blocks=1)
  batches = _batches(l)
  rng = np.random.default_rng(9)
  weights = [rng.normal(size=x.shape + (16,)).astype(np.float32) for x in batches]
  expected = [_outputs_and_grads(plain, x, w) for x, w in zip(batches, weights)]
  for pack_tokens in (False, True):
    for blocks in (1, 3) if jit_compile else (1, 3, 20):
      if not (pack_tokens or blocks > 1):  # XLA on the padded full grid: tested above
        continue
      m = _model(
        block_style=block_style,
        max_len=l,
        pack_tokens=pack_tokens,
        attention_blocks=blocks,
        jit_compile=jit_compile,
      )
      m.set_weights(plain.get_weights())
      for x, w, (h0, g0) in zip(batches, weights, expected):
        h, g = _outputs_and_grads(m, x, w)
        where = f"pack_tokens={pack_tokens} attention_blocks={blocks}"
        np.testing.assert_allclose(h, h0, atol=1e-5, err_msg=where)
        np.testing.assert_array_equal(h[x == 0], 0.0)
        for a, b in zip(g, g0):
          np.testing.assert_allclose(a, b, atol=1e-5 * max(1.0, np.abs(b).max()), err_msg=where)


def test_unknown_length_falls_back_to_the_full_grid():
  m = _model(attention_blocks=4, pack_tokens=False)
  x = _batch(np.random.default_rng(10))
  traced = tf.function(m.encode, input_signature=[tf.TensorSpec([None, None], tf.int64)])
  np.testing.assert_allclose(traced(x).numpy(), m.encode(x).numpy(), atol=1e-5)


def test_xla_compilations_are_bounded_by_the_token_buckets():
  """Batches with many different token counts T compile at most 8 encoder shapes (one per
  capacity bucket) and give the uncompiled outputs."""
  m = _model(block_style="reference", jit_compile=True)
  eager = _model(block_style="reference")
  eager.set_weights(m.get_weights())
  rng = np.random.default_rng(12)
  counts = set()
  for _ in range(14):
    x = rng.integers(1, 31, size=(4, 12)).astype(np.int64)
    lengths = rng.integers(0, 13, size=4)
    x[np.arange(12)[None] < 12 - lengths[:, None]] = 0
    counts.add(int((x != 0).sum()))
    np.testing.assert_allclose(m.encode(x).numpy(), eager.encode(x).numpy(), atol=1e-5)
  assert len(counts) > 8
  assert m._encode_xla.experimental_get_tracing_count() <= 8


@pytest.mark.parametrize("block_style", ["pre_ln", "reference"])
def test_training_dropout_is_deterministic_on_every_path(block_style):
  """Same seed -> same output, another seed -> another, for the padded, packed and XLA-packed
  encoders. The XLA-packed encoder draws the masks of the packed one: the stateless draws are
  prefix-consistent and the capacity's filler rows come last."""
  x = _batch(np.random.default_rng(13))
  s1, s2 = tf.constant([3, 4], tf.int64), tf.constant([3, 5], tf.int64)
  out = {}
  for pack_tokens, jit_compile in [(False, False), (True, False), (True, True)]:
    m = _model(
      block_style=block_style,
      dropout=0.5,
      pack_tokens=pack_tokens,
      jit_compile=jit_compile,
      attention_blocks=3,
    )
    a = m.encode(x, training=True, seed=s1).numpy()
    np.testing.assert_array_equal(m.encode(x, training=True, seed=s1).numpy(), a)
    assert not np.allclose(m.encode(x, training=True, seed=s2).numpy(), a, atol=1e-3)
    assert not np.allclose(m.encode(x, training=False).numpy(), a, atol=1e-3)
    np.testing.assert_array_equal(a[x == 0], 0.0)
    out[pack_tokens, jit_compile] = a
  np.testing.assert_allclose(out[True, True], out[True, False], atol=1e-4)


def test_set_execution_validates_and_round_trips_in_the_config():
  m = _model(attention_blocks=2, pack_tokens=False)
  config = m.get_config()
  assert (config["attention_blocks"], config["pack_tokens"]) == (2, False)
  assert m.set_execution(attention_blocks=5).attention_blocks == 5 and not m.pack_tokens
  with pytest.raises(ValueError, match="attention_blocks"):
    m.set_execution(attention_blocks=0)
  with pytest.raises(TypeError, match="attention_blocks"):
    m.set_execution(attention_blocks=2.0)
  with pytest.raises(TypeError, match="pack_tokens"):
    m.set_execution(pack_tokens=1)
  with pytest.raises(ValueError, match="attention_blocks"):
    SASRec(10, attention_blocks=0)
  # Switching paths on a built model (its per-token layers were built on packed rows).
  x = _batch(np.random.default_rng(14))
  packed = _model(block_style="reference", jit_compile=True)
  h = packed.encode(x).numpy()
  packed.set_execution(pack_tokens=False, attention_blocks=1)
  np.testing.assert_allclose(packed.encode(x).numpy(), h, atol=1e-5)


@pytest.mark.parametrize("pack", [False, True])
def test_encoder_inside_an_xla_step_does_not_nest_its_jit_function(pack):
  """Inside a program XLA compiles (--jit_compile_step), the jit_compile encoder is traced in
  place: a nested jit function would be recompiled at every step."""
  model = _model(jit_compile=True)
  model.set_execution(pack_tokens=pack)
  x = tf.constant(_batch(np.random.default_rng(3)))
  expected = model.encode(x).numpy()  # builds the nested jit function

  def nested(*args, **kwargs):
    raise AssertionError("nested jit function called")

  model._encode_xla = nested
  with pytest.raises(AssertionError, match="nested"):  # outside XLA it is used
    model.encode(x)
  out = tf.function(model.encode, jit_compile=True)(x)
  np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)
