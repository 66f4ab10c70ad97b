"""``--profile`` of python -m bench.step: the pieces of our step, timed in a side's worker."""

from __future__ import annotations

import copy
import time

__all__ = ["Profiler", "time_pieces"]


class Profiler:
  """Times the pieces of our step (bench/README.md, `--profile`) through the model / objective
  interfaces (no internals)."""

  PIECES = ("step", "encoder_fwd", "encoder_fwd_bwd", "loss_fwd_bwd", "estimator", "optimizer")

  def __init__(self, trainer, batches):
    import tensorflow as tf

    self.tf, self.trainer, self.batches = tf, trainer, batches
    model, objective, step = trainer.model, trainer.objective, trainer.step
    variables = model.trainable_variables
    seed = tf.constant([1, 2], tf.int64)
    queries = lambda out: out[0]  # TrainingQueries(queries, ...) or a tuple

    @tf.function
    def encoder_fwd(batch):
      return tf.reduce_sum(queries(model.training_queries(batch, training=True, seed=seed)))

    @tf.function
    def encoder_fwd_bwd(batch):
      with tf.GradientTape() as tape:
        q = queries(model.training_queries(batch, training=True, seed=seed))
        loss = tf.reduce_sum(q * tf.random.stateless_normal(tf.shape(q), [5, 6]))
      return [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables) if g is not None]

    frozen = _FixedQueries(model, batches, seed)
    loss_objective = copy.copy(objective)
    loss_objective.model = frozen

    def loss_fwd_bwd_fn(batch, i):
      frozen.index = i
      with tf.GradientTape() as tape:
        terms = loss_objective(batch, step, training=True)
      grads = tape.gradient(terms["loss"], [frozen.last] + variables)
      return [tf.convert_to_tensor(g) for g in grads if g is not None]

    loss_fns = [tf.function(lambda b, i=i: loss_fwd_bwd_fn(b, i)) for i in range(len(batches))]

    estimator = trainer.estimator
    positives = [tf.boolean_mask(b["targets"], b["targets"] != 0) for b in batches]
    has_estimator = estimator is not None and type(estimator).__name__ != "ExactCounts"
    estimator_update = tf.function(lambda i: estimator.update(positives[i]))

    @tf.function
    def grads_of_step(batch):
      with tf.GradientTape() as tape:
        terms = objective(batch, step, training=True)
      return tape.gradient(terms["loss"], variables)

    grads = [grads_of_step(b) for b in batches]
    shadow = [tf.Variable(v) for v in variables]
    optimizer = tf.keras.optimizers.Adam(1e-3)
    optimizer.build(shadow)
    apply = tf.function(
      lambda g: optimizer.apply_gradients([(gi, v) for gi, v in zip(g, shadow) if gi is not None])
    )
    self.fns = dict(
      step=lambda i: trainer.train_step(batches[i]),
      encoder_fwd=lambda i: encoder_fwd(batches[i]),
      encoder_fwd_bwd=lambda i: encoder_fwd_bwd(batches[i]),
      loss_fwd_bwd=lambda i: loss_fns[i](batches[i]),
      estimator=estimator_update if has_estimator else None,
      optimizer=lambda i: apply(grads[i]),
    )
    self.cursor = 0
    self.round(len(batches))  # tracing, one per batch shape

  def round(self, n: int) -> dict:
    numpy = lambda t: t.numpy() if hasattr(t, "numpy") else t
    return time_pieces(self, n, lambda out: self.tf.nest.map_structure(numpy, out))


def time_pieces(owner, n: int, wait) -> dict:
  """{piece: [seconds]} of ``n`` interleaved rounds over ``owner.batches`` (from
  ``owner.cursor``) of every piece in ``owner.fns`` (None: skipped); ``wait(out)`` blocks until
  a piece's output is computed (TensorFlow: .numpy(); JAX: block_until_ready)."""
  times = {p: [] for p in Profiler.PIECES}
  for _ in range(n):
    i = owner.cursor % len(owner.batches)
    owner.cursor += 1
    for piece in Profiler.PIECES:
      if owner.fns[piece] is None:
        continue
      start = time.perf_counter()
      wait(owner.fns[piece](i))
      times[piece].append(time.perf_counter() - start)
  return times


class _FixedQueries:
  """A query model whose training queries are fixed: the real model's for batch ``index`` with the
  same arguments, computed once (eagerly, outside the traced step) and held in a variable, so a
  traced objective sees a constant encoder; everything else is the real model."""

  def __init__(self, model, batches, seed):
    self._model, self._batches, self._seed = model, batches, seed
    self._cache = {}
    self.index, self.last = 0, None

  def __getattr__(self, name):
    return getattr(self._model, name)

  def training_queries(self, batch, training=True, seed=None, **kwargs):
    import tensorflow as tf

    key = (self.index, repr(sorted(kwargs.items())))
    if key not in self._cache:
      with tf.init_scope():
        out = self._model.training_queries(
          self._batches[self.index], training=True, seed=self._seed, **kwargs
        )
        self._cache[key] = (tf.Variable(out[0]), out)
    self.last, out = self._cache[key]
    rest = tuple(out)[1:]
    return type(out)(self.last, *rest) if hasattr(out, "_fields") else (self.last,) + rest
