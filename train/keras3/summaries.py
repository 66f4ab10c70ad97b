"""TensorBoard scalars of `python -m train.keras3`, the tags of the tf-keras binary
(`train.trainer`), written from Python numbers whatever the Keras backend:

    per step s (the global step after it):  train/loss, train/mean_weight
    per epoch (at its last step):           val/recall@k, val/ndcg@k (k = 10, 20),
                                            test/... (with --test_curve), train/epoch_loss

into ``model_dir/tensorboard`` with ``tf.summary`` (TensorFlow is installed with the
application: `train.data` reads through tf.data). Where TensorFlow cannot be imported the
writer is a no-op and says so once.
"""

from __future__ import annotations

import logging
import os
from typing import Mapping

__all__ = ["SummaryWriter"]


class SummaryWriter:
  """``scalars(step, {tag: value})`` into ``directory`` (module docstring); ``epoch(step,
  metrics, epoch_loss)`` writes an epoch's tags; ``flush()``."""

  def __init__(self, directory: str):
    self.directory = directory
    try:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
    except ImportError:
      logging.warning("TensorFlow is not importable: no TensorBoard summaries in %s", directory)
      self._tf = self._writer = None
      return
    self._tf = tf
    os.makedirs(directory, exist_ok=True)
    self._writer = tf.summary.create_file_writer(directory)

  def scalars(self, step: int, values: Mapping[str, float]) -> None:
    if self._writer is None:
      return
    with self._writer.as_default(step=int(step)):
      for tag, value in values.items():
        self._tf.summary.scalar(tag, float(value))

  def epoch(self, step: int, metrics: Mapping[str, float], epoch_loss: float) -> None:
    """An epoch's validation (and ``test_*``) metrics, without the query counts, and its mean
    loss, at the epoch's last global step."""
    values = {(f"test/{k[5:]}" if k.startswith("test_") else f"val/{k}"): v
              for k, v in metrics.items() if not k.endswith("num_queries")}
    values["train/epoch_loss"] = epoch_loss
    self.scalars(step, values)
    self.flush()

  def flush(self) -> None:
    if self._writer is not None:
      self._writer.flush()
