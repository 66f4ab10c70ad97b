"""Refresh hooks of the MIDX sampler: rebuild its index from the current item embeddings every N
steps.

The index (codebooks, inverted multi-index) goes stale as the item table trains; these hooks call
``MIDXSampler.refresh(embeddings_fn())`` at steps 0, N, 2N, ... of a custom loop
(`RefreshEveryNSteps`) or of ``model.fit`` (`MIDXRefreshCallback`). Both are exported from
`tfrs_logq.tf_keras.negatives.midx`.
"""

from typing import Any, Callable, Dict, Optional, Protocol

from tfrs_logq.tf_keras.negatives.midx_index import check_int

import tensorflow as tf


class Refreshable(Protocol):
  """What the hooks need of a sampler: ``MIDXSampler.refresh`` (named structurally, since midx
  imports this module and importing it back, even for types only, would be an import circle)."""

  def refresh(self, item_embeddings: tf.Tensor) -> tf.Tensor: ...


__all__ = ["RefreshEveryNSteps", "MIDXRefreshCallback"]


class RefreshEveryNSteps:
  """Refreshes a MIDXSampler from ``embeddings_fn()`` at steps 0, N, 2N, ... of a training loop.

  In a custom loop (eager or inside tf.function): ``hook(step)`` refreshes when step % N == 0 and
  returns whether it did (bool tensor). ``embeddings_fn`` returns the current item embeddings
  [num_items, d] (e.g. ``lambda: model.item_table[1:]`` with ``id_offset=1``) and is only evaluated
  on refresh steps. For ``model.fit`` use ``MIDXRefreshCallback``.
  """

  def __init__(
    self, sampler: Refreshable, embeddings_fn: Callable[[], tf.Tensor], every_n_steps: int
  ) -> None:
    every_n_steps = check_int(every_n_steps, "every_n_steps", 1)
    if not callable(embeddings_fn):
      raise TypeError("embeddings_fn must be callable (returns item embeddings [num_items, d])")
    self.sampler = sampler
    self.embeddings_fn = embeddings_fn
    self.every_n_steps = every_n_steps

  def __call__(self, step: tf.Tensor) -> tf.Tensor:
    step = tf.convert_to_tensor(step)
    due = tf.equal(tf.math.floormod(tf.cast(step, tf.int64), self.every_n_steps), 0)
    if tf.executing_eagerly():
      if bool(due):
        self.sampler.refresh(tf.stop_gradient(self.embeddings_fn()))
      return due

    def do_refresh() -> tf.Tensor:
      with tf.control_dependencies([self.sampler.refresh(tf.stop_gradient(self.embeddings_fn()))]):
        return tf.constant(True)

    return tf.cond(due, do_refresh, lambda: tf.constant(False))


class MIDXRefreshCallback(tf.keras.callbacks.Callback):
  """Keras callback: refreshes the sampler before training batches 0, N, 2N, ... (counted across
  epochs)."""

  def __init__(
    self, sampler: Refreshable, embeddings_fn: Callable[[], tf.Tensor], every_n_steps: int
  ) -> None:
    super().__init__()
    self._hook = RefreshEveryNSteps(sampler, embeddings_fn, every_n_steps)
    self._step = 0

  def on_train_batch_begin(self, batch: int, logs: Optional[Dict[str, Any]] = None) -> None:
    del batch, logs
    self._hook(self._step)
    self._step += 1
