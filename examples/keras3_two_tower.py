r"""Keras 3 two-tower on MovieLens-100K with mixed negatives and the corrected logQ.

    python examples/keras3_two_tower.py --backend jax --seed 0
    python examples/keras3_two_tower.py --backend tensorflow --seed 0
    python examples/keras3_two_tower.py --backend tf_keras --seed 0     # the tf-keras path

Data: ``u.data`` of MovieLens-100K (``--data``); every user's last rating (by time) is the
test target, the others are training pairs (user, item). Model: user and item id embeddings,
s = <u, i> / temperature. Loss: ``Retrieval(correction="corrected")`` over mixed negatives, the
batch's positives plus ``--num_uniform`` uniform draws shared by the batch, with
log Q(d) = log(#d / N) from an ``ExactCounts`` table of the training counts (the paper's
"unigram" convention, for both blocks). Keras 3 backends train with ``model.fit`` and a
``compute_loss`` override (the keras-rs pattern) and retrieve with keras-rs's
``BruteForceRetrieval``; ``--backend tf_keras`` trains the same model with
``tfrs_logq.tf_keras.Retrieval`` (tf-keras) and retrieves by exact top-k. Metrics: the
project's definitions (``tfrs_logq.core.ranking``): the user's training items are filtered out of
the ranking, then Recall@k and NDCG@k of the held-out item. The last line is a one-line JSON
summary.
"""

import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "ml-100k" / "u.data"
BACKENDS = ("jax", "tensorflow", "torch", "tf_keras")


def parse_args(argv=None):
  parser = argparse.ArgumentParser(
    description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
  )
  parser.add_argument(
    "--backend",
    choices=BACKENDS,
    default="jax",
    help="Keras 3 backend, or tf_keras for the tf-keras path",
  )
  parser.add_argument("--data", type=pathlib.Path, default=DEFAULT_DATA, help="u.data path")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--epochs", type=int, default=8)
  parser.add_argument("--batch_size", type=int, default=256)
  parser.add_argument("--embedding_dim", type=int, default=32)
  parser.add_argument("--num_uniform", type=int, default=256, help="k_u uniform negatives")
  parser.add_argument("--temperature", type=float, default=0.1)
  parser.add_argument("--learning_rate", type=float, default=0.01)
  parser.add_argument(
    "--correction",
    default="corrected",
    choices=("none", "standard", "standard_no_positive", "corrected"),
  )
  parser.add_argument("--ks", type=int, nargs="+", default=[10, 20, 50])
  return parser.parse_args(argv)


def load_movielens(path: pathlib.Path):
  """(train_users, train_items, test_users, test_items, history per user, num_users, num_items):
  leave-last-out by timestamp (ties: the later row in the file)."""
  if not path.is_file():
    raise FileNotFoundError(f"MovieLens-100K u.data not found at {path} (use --data)")
  raw = np.loadtxt(path, dtype=np.int64)
  users, items, times = raw[:, 0], raw[:, 1], raw[:, 3]
  order = np.lexsort((np.arange(len(raw)), times, users))
  users, items = users[order], items[order]
  last = np.r_[users[1:] != users[:-1], True]
  history = {}
  for u, i in zip(users[~last], items[~last]):
    history.setdefault(int(u), []).append(int(i))
  return (
    users[~last],
    items[~last],
    users[last],
    items[last],
    [np.array(history.get(int(u), []), np.int64) for u in users[last]],
    int(users.max()),
    int(items.max()),
  )


def evaluate(user_vectors, item_vectors, test_items, histories, ks, retrieve):
  """Recall@k / NDCG@k (tfrs_logq.core.ranking) after filtering each user's training items."""
  from tfrs_logq.core import ranking

  fetch = max(ks) + max(len(h) for h in histories)
  ids, scores = retrieve(user_vectors, item_vectors, fetch)
  ids, _ = ranking.filter_rated(ids, scores, histories, max(ks), targets=test_items)
  return {
    name: round(value, 4) for name, value in ranking.retrieval_metrics(ids, test_items, ks).items()
  }


def run_keras3(args, data, counts):
  import keras
  import keras_rs
  from keras import ops

  import tfrs_logq.keras3 as tlk

  train_u, train_i, test_u, test_i, histories, num_users, num_items = data
  keras.utils.set_random_seed(args.seed)

  class TwoTower(keras.Model):
    """User / item towers; loss: corrected logQ over in-batch + shared uniform negatives."""

    def __init__(self, **kwargs):
      super().__init__(**kwargs)
      self.users = keras.layers.Embedding(num_users + 1, args.embedding_dim, name="users")
      self.items = keras.layers.Embedding(num_items + 1, args.embedding_dim, name="items")
      self.uniform = tlk.negatives.UniformNegatives(
        args.num_uniform, id_range=(1, num_items + 1), seed=args.seed, name="uniform"
      )
      self.task = tlk.Retrieval(
        correction=args.correction,
        temperature=args.temperature,
        loss="mean",
        frequency_estimator=tlk.frequency.ExactCounts(num_items + 1, counts=counts),
        update_frequency="never",
        name="task",
      )

    def call(self, inputs):
      return self.users(inputs["user"]), self.items(inputs["item"])

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
      query, positives = y_pred
      uniform_ids = self.uniform()
      candidates = ops.concatenate([positives, self.items(uniform_ids)], axis=0)
      ids = ops.concatenate([ops.cast(x["item"], "int32"), uniform_ids])
      return self.task(query, candidates, candidate_ids=ids)

  model = TwoTower(name="two_tower")
  model.compile(optimizer=keras.optimizers.Adam(args.learning_rate))
  start = time.time()
  history = model.fit(
    {"user": train_u.astype("int32"), "item": train_i.astype("int32")},
    batch_size=args.batch_size,
    epochs=args.epochs,
    shuffle=True,
    verbose=0,
  )
  train_s = time.time() - start

  def retrieve(user_vectors, item_vectors, k):
    index = keras_rs.layers.BruteForceRetrieval(
      candidate_embeddings=item_vectors,
      candidate_ids=np.arange(1, num_items + 1),
      k=k,
      return_scores=True,
    )
    scores, ids = index(user_vectors)
    return np.asarray(ops.convert_to_numpy(ids)), np.asarray(ops.convert_to_numpy(scores))

  user_vectors = ops.convert_to_numpy(model.users(test_u.astype("int32")))
  item_vectors = ops.convert_to_numpy(model.items(np.arange(1, num_items + 1, dtype="int32")))
  result = evaluate(user_vectors, item_vectors, test_i, histories, args.ks, retrieve)
  return result, float(history.history["loss"][-1]), train_s


def run_tf_keras(args, data, counts):
  from tfrs_logq.tf_keras import retrieval

  import tensorflow as tf

  train_u, train_i, test_u, test_i, histories, num_users, num_items = data
  tf.keras.utils.set_random_seed(args.seed)
  users = tf.keras.layers.Embedding(num_users + 1, args.embedding_dim)
  items = tf.keras.layers.Embedding(num_items + 1, args.embedding_dim)
  log_q_table = tf.constant(np.log(np.maximum(counts, 1) / counts.sum()), tf.float32)
  task = retrieval.Retrieval(
    correction=args.correction,
    temperature=args.temperature,
    loss=tf.keras.losses.CategoricalCrossentropy(
      from_logits=True, reduction=tf.keras.losses.Reduction.SUM_OVER_BATCH_SIZE
    ),
  )
  optimizer = tf.keras.optimizers.Adam(args.learning_rate)
  users(tf.constant([1])), items(tf.constant([1]))
  variables = users.trainable_variables + items.trainable_variables

  @tf.function
  def step(u, i):
    uniform_ids = tf.random.uniform([args.num_uniform], 1, num_items + 1, dtype=tf.int64)
    ids = tf.concat([i, uniform_ids], 0)
    with tf.GradientTape() as tape:
      candidates = tf.concat([items(i), items(uniform_ids)], 0)
      loss = task(
        users(u),
        candidates,
        candidate_ids=ids,
        candidate_log_sampling_probability=tf.gather(log_q_table, ids),
        compute_metrics=False,
      )
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss

  dataset = (
    tf.data.Dataset.from_tensor_slices((train_u, train_i))
    .shuffle(len(train_u), seed=args.seed, reshuffle_each_iteration=True)
    .batch(args.batch_size)
  )
  start = time.time()
  for _ in range(args.epochs):
    for u, i in dataset:
      loss = step(u, i)
  train_s = time.time() - start

  def retrieve(user_vectors, item_vectors, k):
    scores, idx = tf.math.top_k(tf.matmul(user_vectors, item_vectors, transpose_b=True), k=k)
    return idx.numpy() + 1, scores.numpy()

  user_vectors = users(tf.constant(test_u)).numpy()
  item_vectors = items(tf.constant(np.arange(1, num_items + 1))).numpy()
  result = evaluate(user_vectors, item_vectors, test_i, histories, args.ks, retrieve)
  return result, float(loss.numpy()), train_s


def main(argv=None):
  args = parse_args(argv)
  if args.backend == "tf_keras":
    import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
  else:
    os.environ["KERAS_BACKEND"] = args.backend
  data = load_movielens(args.data)
  counts = np.bincount(data[1], minlength=data[6] + 1)
  runner = run_tf_keras if args.backend == "tf_keras" else run_keras3
  result, last_loss, train_s = runner(args, data, counts)
  summary = dict(
    backend=args.backend,
    seed=args.seed,
    correction=args.correction,
    epochs=args.epochs,
    train_seconds=round(train_s, 1),
    last_loss=round(last_loss, 4),
    **result,
  )
  print(json.dumps(summary))
  return summary


if __name__ == "__main__":
  sys.exit(0 if main() else 1)
