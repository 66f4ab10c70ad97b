"""Runs the Keras 3 LazyAdam on one backend (KERAS_BACKEND) and writes the results to an npz.

    KERAS_BACKEND=jax python lazy_adam_worker.py OUT.npz

Spawned by test_lazy_adam.py in a fresh Keras-3-only process per backend; asserts nothing.
"""

import os
import sys
import tempfile

import keras
import lazy_adam_cases as cases
import numpy as np
from keras import ops

import tfrs_logq.keras3 as tlk


def _np(x):
  return np.asarray(ops.convert_to_numpy(x))


def run_apply(out):
  """Seven optimizer.apply steps on a table (matched by the pattern) and a dense weight."""
  table, dense, g_table, g_dense = cases.case()
  t = keras.Variable(table, name="embeddings")
  w = keras.Variable(dense, name="kernel")
  opt = tlk.LazyAdam(cases.LR, cases.B1, cases.B2, cases.EPS)
  opt.build([t, w])
  for step in range(cases.STEPS):
    opt.apply([ops.convert_to_tensor(g_table[step]), ops.convert_to_tensor(g_dense[step])], [t, w])
  out["apply/table"], out["apply/dense"] = _np(t), _np(w)
  out["apply/m"], out["apply/v"] = _np(opt._momentums[0]), _np(opt._velocities[0])
  out["apply/k"] = _np(opt.row_counts(t))
  out["apply/dense_has_counts"] = np.array(opt.row_counts(w) is not None)


class _Recording(tlk.LazyAdam):
  seen = []

  def update_step(self, gradient, variable, learning_rate):
    self.seen.append(type(gradient).__name__)
    return super().update_step(gradient, variable, learning_rate)


def _model():
  ids = keras.Input((4,), dtype="int32")
  emb = keras.layers.Embedding(cases.ROWS, cases.DIM, name="items")
  out = keras.layers.Dense(2, name="head")(ops.sum(emb(ids), axis=1))
  return keras.Model(ids, out, name="m"), emb


def run_fit(out, tmp):
  """train_on_batch (jit on JAX) through an Embedding; .keras and get_config round trips."""
  keras.utils.set_random_seed(0)
  model, emb = _model()
  opt = _Recording(cases.LR)
  model.compile(opt, loss="mse", jit_compile=keras.backend.backend() == "jax")
  before = _np(emb.embeddings).copy()
  xs = np.array([[1, 2, 2, 3], [3, 4, 1, 1]], np.int32)
  model.train_on_batch(xs, np.ones((2, 2), np.float32))
  model.train_on_batch(xs[:1], np.ones((1, 2), np.float32))
  out["fit/moved"] = np.any(_np(emb.embeddings) != before, axis=1)
  out["fit/k"] = _np(opt.row_counts(emb.embeddings))
  out["fit/grad_types"] = np.array(sorted(set(opt.seen)))
  config = opt.get_config()
  again = tlk.LazyAdam.from_config(config)
  out["config/equal"] = np.array(again.get_config() == config)
  out["config/pattern"] = np.array(again.table_pattern)
  # .keras round trip: the counts come back with the optimizer.
  plain_model, plain_emb = _model()
  plain_model.set_weights(model.get_weights())
  plain = tlk.LazyAdam(cases.LR, table_pattern="items/embeddings$")
  plain_model.compile(plain, loss="mse")
  plain_model.train_on_batch(xs, np.ones((2, 2), np.float32))
  path = os.path.join(tmp, "m.keras")
  plain_model.save(path)
  loaded = keras.saving.load_model(path)
  out["save/class"] = np.array(type(loaded.optimizer).__name__)
  out["save/pattern"] = np.array(loaded.optimizer.table_pattern)
  out["save/k"] = _np(plain.row_counts(plain_emb.embeddings))
  out["save/k_loaded"] = _np(loaded.optimizer.row_counts(loaded.get_layer("items").embeddings))
  out["save/variables_equal"] = np.array(
    all(np.array_equal(_np(a), _np(b)) for a, b in zip(plain.variables, loaded.optimizer.variables))
  )
  try:
    tlk.LazyAdam(amsgrad=True)
    out["amsgrad"] = np.array("")
  except ValueError as e:
    out["amsgrad"] = np.array(str(e))


def main():
  out = {"backend": np.array(keras.backend.backend())}
  run_apply(out)
  with tempfile.TemporaryDirectory() as tmp:
    run_fit(out, tmp)
  np.savez(sys.argv[1], **out)


if __name__ == "__main__":
  main()
