"""TFRS-style two-tower retrieval model usable with `tfrs_logq.tf_keras.Retrieval`.

Query tower (history and/or user id):
    h(u)  = sum_{j: hist_j != 0} E_hist[hist_j] / max(1, #{j: hist_j != 0})    mean-pooled history
    x(u)  = concat(h(u), E_user[user_id])   (user part only with ``use_user_id``)
    q(u)  = W_2 relu(W_1 x(u) + b_1) + b_2  (``hidden_dims`` MLP; identity map when empty)
Candidate tower (item id and optional dense item features f_i):
    c(i)  = E_item[i]                       or  W_c concat(E_item[i], f_i) with features
Scores s(u, i) = <q(u), c(i)> / temperature. Item id 0 is padding; user id 0 is the "unknown user"
bucket (what the exported history-only query encoder uses).

``compute_loss`` follows TFRS (``tfrs.Model``): it calls the task with the batch's query and
candidate embeddings, so ``model.fit`` works with
``tfrs_logq.tf_keras.Retrieval(correction=...)`` and in-batch negatives (log Q of each
candidate from an optional frequency estimator).
"""

from __future__ import annotations

from typing import Optional, Sequence

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import compiled

import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs

from models.queries import TrainingQueries

__all__ = ["TwoTower", "QueryTower", "CandidateTower"]


class QueryTower(tf.keras.layers.Layer):
  """Mean-pooled history embeddings (+ user id embedding) followed by an MLP."""

  def __init__(
    self,
    num_items: int,
    num_users: int,
    embedding_dim: int,
    hidden_dims: Sequence[int] = (),
    use_user_id: bool = False,
    use_history: bool = True,
    seed: int = 0,
    **kwargs,
  ):
    super().__init__(**kwargs)
    if not (use_user_id or use_history):
      raise ValueError("the query tower needs the history, the user id, or both")
    if use_user_id and num_users < 1:
      raise ValueError(f"num_users must be >= 1 with use_user_id, got {num_users}")
    self.use_user_id, self.use_history = use_user_id, use_history
    self.num_users = num_users
    init = lambda i: tf.keras.initializers.TruncatedNormal(stddev=0.05, seed=seed * 100 + i)
    self.history_embedding = (
      tf.keras.layers.Embedding(
        num_items + 1, embedding_dim, embeddings_initializer=init(1), name="history_embedding"
      )
      if use_history
      else None
    )
    self.user_embedding = (
      tf.keras.layers.Embedding(
        num_users + 1, embedding_dim, embeddings_initializer=init(2), name="user_embedding"
      )
      if use_user_id
      else None
    )
    glorot = lambda i: tf.keras.initializers.GlorotUniform(seed=seed * 100 + 10 + i)
    self.mlp = [
      tf.keras.layers.Dense(h, activation="relu", kernel_initializer=glorot(i), name=f"hidden_{i}")
      for i, h in enumerate(hidden_dims)
    ]
    self.projection = (
      tf.keras.layers.Dense(embedding_dim, kernel_initializer=glorot(9), name="projection")
      if (hidden_dims or (use_user_id and use_history))
      else None
    )

  def call(self, history=None, user_id=None):
    parts = []
    if self.use_history:
      if history is None:
        raise ValueError("this query tower needs `history` int [B, L]")
      history = tf.cast(history, tf.int64)
      if history.shape.rank != 2:
        raise ValueError(f"history must be [B, L], got {history.shape}")
      mask = tf.cast(tf.not_equal(history, 0), tf.float32)[..., None]
      emb = self.history_embedding(history) * mask
      parts.append(tf.reduce_sum(emb, 1) / tf.maximum(tf.reduce_sum(mask, 1), 1.0))
    if self.use_user_id:
      if user_id is None:
        raise ValueError("this query tower needs `user_id` int [B]")
      user_id = tf.cast(user_id, tf.int64)
      # Users beyond the table (new at serving time) fall into the unknown bucket 0.
      user_id = tf.where(
        (user_id < 0) | (user_id > self.num_users), tf.zeros_like(user_id), user_id
      )
      parts.append(self.user_embedding(user_id))
    x = parts[0] if len(parts) == 1 else tf.concat(parts, axis=-1)
    for layer in self.mlp:
      x = layer(x)
    return self.projection(x) if self.projection is not None else x


class CandidateTower(tf.keras.layers.Layer):
  """Item id embedding, optionally concatenated with fixed dense item features and projected."""

  def __init__(
    self,
    num_items: int,
    embedding_dim: int,
    item_features: Optional[np.ndarray] = None,
    seed: int = 0,
    **kwargs,
  ):
    super().__init__(**kwargs)
    init = tf.keras.initializers.TruncatedNormal(stddev=0.05, seed=seed * 100 + 3)
    self.num_items = num_items
    self.item_embedding = tf.keras.layers.Embedding(
      num_items + 1, embedding_dim, embeddings_initializer=init, name="item_embedding"
    )
    self.item_features = None
    self.projection = None
    if item_features is not None:
      feats = np.asarray(item_features, np.float32)
      if feats.ndim != 2 or feats.shape[0] != num_items + 1:
        raise ValueError(f"item_features must be [num_items + 1, f], got {feats.shape}")
      self.item_features = tf.constant(feats)
      self.projection = tf.keras.layers.Dense(
        embedding_dim,
        kernel_initializer=tf.keras.initializers.GlorotUniform(seed=seed * 100 + 4),
        name="projection",
      )

  def call(self, item_ids):
    item_ids = tf.cast(item_ids, tf.int64)
    emb = self.item_embedding(item_ids)
    if self.projection is None:
      return emb
    return self.projection(tf.concat([emb, tf.gather(self.item_features, item_ids)], -1))


class TwoTower(tfrs.Model):
  """Two-tower retrieval model (module docstring).

  Args:
    num_items: catalog size (ids 1..num_items, 0 padding).
    num_users: number of user ids (1..num_users; 0 = unknown) for the user embedding.
    embedding_dim: d.
    task: a `tfrs_logq.tf_keras.Retrieval` (or `tfrs.tasks.Retrieval`); needed for
      ``compute_loss`` / ``fit`` only.
    frequency_estimator: optional object with ``log_q(ids)``; ``compute_loss`` passes the
      candidates' log Q to the task (``candidate_log_sampling_probability``) and, when
      ``update_estimator``, updates it with the batch's item ids first.
    hidden_dims, use_user_id, use_history: query tower options.
    item_features: optional dense features [num_items + 1, f] of the candidate tower.
    temperature: scores are <q, c> / temperature.
  """

  def __init__(
    self,
    num_items: int,
    num_users: int = 0,
    embedding_dim: int = 64,
    *,
    task=None,
    frequency_estimator=None,
    update_estimator: bool = False,
    hidden_dims: Sequence[int] = (),
    use_user_id: bool = False,
    use_history: bool = True,
    item_features=None,
    temperature: float = 1.0,
    max_len: int = 200,
    seed: int = 0,
    **kwargs,
  ):
    super().__init__(**kwargs)
    if num_items < 1:
      raise ValueError(f"num_items must be >= 1, got {num_items}")
    if temperature <= 0:
      raise ValueError(f"temperature must be > 0, got {temperature}")
    self.num_items, self.num_users = num_items, num_users
    self.embedding_dim, self.max_len = embedding_dim, max_len
    self.temperature = float(temperature)
    self.query_tower = QueryTower(
      num_items,
      num_users,
      embedding_dim,
      hidden_dims,
      use_user_id,
      use_history,
      seed=seed,
      name="query_tower",
    )
    self.candidate_tower = CandidateTower(
      num_items, embedding_dim, item_features, seed=seed, name="candidate_tower"
    )
    self.task = task
    self.frequency_estimator = frequency_estimator
    self.update_estimator = update_estimator

  def build_all(self):
    """Creates every variable with a dummy query and one candidate row (id 0), traced as a
    tf.function, without scoring the catalog. Under ParameterServerStrategy an eager lookup
    of a sharded table (or scoring the catalog) copies the whole table onto the chief; in a
    graph the gather runs on the parameter servers and one row comes back."""

    @compiled.compile_function
    def dummy():
      with tf.name_scope(self.name):  # the variable names of a call (checkpoints, h5)
        query = self.query_embeddings(
          {"history": tf.zeros([1, self.max_len], tf.int64), "user_id": tf.zeros([1], tf.int64)}
        )
        return query, self.item_embeddings(tf.zeros([1], tf.int64))

    dummy()
    self.built = True
    return self

  # -- the interface shared with SASRec (training binary, export) --------------------------------
  def query_embeddings(self, features, training=False, seed=None):
    """q(u) [B, d] from a dict with "history" [B, L] and/or "user_id" [B] (or a history tensor)."""
    if not isinstance(features, dict):
      features = {"history": features}
    return self.query_tower(features.get("history"), features.get("user_id"))

  def item_embeddings(self, item_ids):
    """c(i) for ids of any shape -> [..., d]."""
    ids = tf.cast(item_ids, tf.int64)
    flat = self.candidate_tower(tf.reshape(ids, [-1]))
    return tf.reshape(flat, tf.concat([tf.shape(ids), [self.embedding_dim]], 0))

  def all_item_embeddings(self):
    """[num_items + 1, d] (row 0 = padding)."""
    return self.candidate_tower(tf.range(self.num_items + 1, dtype=tf.int64))

  def training_queries(
    self, batch, training=True, seed=None, static_shapes=False
  ) -> TrainingQueries:
    """``TrainingQueries(queries [B, d], positive_ids [B], sequence_ids = 0..B-1)`` of a batch
    {"history", "user_id", "item_id"} (each pair is its own sequence; the shapes are static
    either way, ``static_shapes`` is accepted for the shared interface)."""
    del static_shapes
    positive_ids = tf.cast(batch["item_id"], tf.int64)
    return TrainingQueries(
      self.query_embeddings(batch, training=training, seed=seed),
      positive_ids,
      tf.range(tf.size(positive_ids, out_type=tf.int64)),
    )

  def serving_queries(self, history, user_ids=None):
    """Serving queries [B, d] of left-padded histories int [B, max_len]; user ids default to 0
    (the unknown-user bucket), as in the exported query encoder."""
    history = tf.cast(history, tf.int64)
    if user_ids is None:
      user_ids = tf.zeros([tf.shape(history)[0]], tf.int64)
    return self.query_embeddings({"history": history, "user_id": user_ids}, training=False)

  def call(self, features, training=False):
    q = self.query_embeddings(features, training=training)
    return tf.matmul(q, self.all_item_embeddings(), transpose_b=True) / self.temperature

  # -- tfrs.Model -------------------------------------------------------------------------------
  def compute_loss(self, features, training=False):
    if self.task is None:
      raise ValueError("TwoTower.compute_loss needs a task (e.g. tfrs_logq.tf_keras.Retrieval)")
    item_ids = tf.cast(features["item_id"], tf.int64)
    query = self.query_embeddings(features, training=training)
    candidates = self.item_embeddings(item_ids)
    kwargs = {}
    if self.frequency_estimator is not None:
      if self.update_estimator and training:
        self.frequency_estimator.update(item_ids)
      kwargs["candidate_log_sampling_probability"] = self.frequency_estimator.log_q(item_ids)
    return self.task(
      query, candidates, candidate_ids=item_ids, compute_metrics=not training, **kwargs
    )
