"""Training of the demo's models: every row x seed of a `DemoConfig` side by side in one graph
(`Trainer`), each loss composed from the library (`eval.demo`'s docstring, Model)."""

import numpy as np

from eval.demo.config import DemoConfig, RowSpec
from eval.demo.metrics import log_softmax

__all__ = ["Trainer", "initial_weights"]


def initial_weights(user_rows: int, num_items: int, dim: int, seed: int):
  """(user table [user_rows, dim], item table [num_items, dim + 1]) float32: N(0, 0.1²) from
  ``default_rng([seed, 2])``, the user table first, and a zero bias column. Same seed -> same
  initial weights for every row (paired)."""
  rng = np.random.default_rng([seed, 2])
  user = rng.normal(scale=0.1, size=(user_rows, dim)).astype(np.float32)
  items = np.zeros((num_items, dim + 1), np.float32)
  items[:, :-1] = rng.normal(scale=0.1, size=(num_items, dim))
  return user, items


class Trainer:
  """All rows x seeds in one graph; ``train(num_steps)`` advances every model."""

  def __init__(self, cfg: DemoConfig, streams):
    import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
    from tfrs_logq.tf_keras import (
      compiled,
      frequency,
      full_softmax,
      losses,
      negatives,
    )

    import tensorflow as tf

    self._tf, self._losses, self._negatives = tf, losses, negatives
    self._full_softmax = full_softmax
    self.cfg = cfg
    self.step = 0
    self._data = []
    for stream in streams:
      counts = np.bincount(stream.items.ravel(), minlength=cfg.num_items)
      self._data.append(
        dict(
          features=tf.constant(stream.user_features, tf.float32),
          users=tf.constant(stream.users, tf.int32),
          items=tf.constant(stream.items.astype(np.int64)),
          estimator=frequency.ExactCounts(cfg.num_items, counts=counts, accumulate=False),
        )
      )
    self.models = []  # (row index, seed index, user variable, item variable, sampler)
    user_rows = cfg.feature_dim if cfg.user_tower == "features" else cfg.train_users
    for r, row in enumerate(cfg.rows):
      for s, seed in enumerate(cfg.seeds):
        user, items = initial_weights(user_rows, cfg.num_items, cfg.embedding_dim, seed)
        self.models.append(
          (
            r,
            s,
            tf.Variable(user),
            tf.Variable(items),
            self._sampler(row, self._data[s]["estimator"]),
          )
        )
    self._variables = [v for m in self.models for v in m[2:4]]
    schedule = tf.keras.optimizers.schedules.CosineDecay(cfg.learning_rate, cfg.steps, alpha=0.01)
    self._optimizer = tf.keras.optimizers.Adam(schedule)
    self._optimizer.build(self._variables)
    self._train = compiled.compile_function(self._train_steps)

  def _sampler(self, row: RowSpec, estimator):
    neg, k = self._negatives, self.cfg.num_negatives
    if row.source == "full":
      return None
    if row.source == "in_batch":
      return neg.InBatchNegatives(
        estimator, num_negatives=k, cross_replica=False, convention=row.convention
      )
    if row.source == "uniform":
      return neg.UniformNegatives(None, k, id_range=(0, self.cfg.num_items))
    k_b = max(k // 2, 1)
    return neg.MixedNegatives(
      neg.InBatchNegatives(estimator, num_negatives=k_b, cross_replica=False),
      neg.UniformNegatives(None, max(k - k_b, 1), id_range=(0, self.cfg.num_items)),
      convention=row.convention,
    )

  def _queries(self, user_var, data, users):
    tf = self._tf
    if self.cfg.user_tower == "features":
      x = tf.matmul(tf.gather(data["features"], users), user_var)
    else:
      x = tf.gather(user_var, users)
    return tf.concat([x, tf.ones_like(x[:, :1])], axis=1)

  def _loss(self, model, step):
    """Mean loss of one model on its seed's batch ``step`` (composed from the library)."""
    tf = self._tf
    r, s, user_var, item_var, sampler = model
    row, data = self.cfg.rows[r], self._data[s]
    ids = data["items"][step]
    query = self._queries(user_var, data, data["users"][step])
    if sampler is None:  # full softmax over the whole catalog
      return tf.reduce_mean(self._full_softmax.full_softmax_loss(query, ids, item_var).loss)
    seed = tf.stack([tf.constant(self.cfg.seeds[s], tf.int64), tf.cast(step, tf.int64)])
    scored = sampler.score(query, ids, tf.gather(item_var, ids), seed=seed, item_table=item_var)
    out = self._losses.sampled_softmax_loss(**scored.loss_kwargs(), correction=row.correction)
    return tf.reduce_mean(out.loss)

  def _train_steps(self, start, num_steps):
    """Steps start .. start + num_steps - 1 as one graph loop (`tf.while_loop`)."""
    tf = self._tf

    def one_step(step):
      with tf.GradientTape() as tape:
        total = tf.add_n([self._loss(m, step) for m in self.models])
      grads = tape.gradient(total, self._variables)
      self._optimizer.apply_gradients(zip(grads, self._variables))
      return (step + 1,)

    tf.while_loop(lambda step: step < start + num_steps, one_step, (start,))

  def batch_losses(self, step: int) -> np.ndarray:
    """Mean loss of every model (order of ``self.models``) on batch ``step``, eagerly."""
    return np.array([float(self._loss(m, self._tf.constant(step))) for m in self.models])

  def train(self, num_steps: int):
    tf = self._tf
    if num_steps > 0:
      self._train(tf.constant(self.step), tf.constant(num_steps))
      self.step += num_steps

  def log_probs(self, model, user_features=None, users=None) -> np.ndarray:
    """log P̂(.|u) [U, D] of one model for held-out features or training-user ids."""
    _, _, user_var, item_var, _ = model
    table = user_var.numpy().astype(np.float64)
    x = user_features @ table if self.cfg.user_tower == "features" else table[users]
    q = np.concatenate([x, np.ones((x.shape[0], 1))], axis=1)
    return log_softmax(q @ item_var.numpy().astype(np.float64).T)
