"""TensorBoard scalars of both binaries (`python -m train`, `python -m train.keras3`), written
from Python numbers whatever the framework (`train.epochs` writes them):

    per step s (the global step after it):  train/loss, train/mean_weight
    per epoch (at its last step):           val/recall@k, val/ndcg@k (k = 10, 20),
                                            test/... (with --test_curve), train/epoch_loss

into ``model_dir/tensorboard`` with ``tf.summary``; where TensorFlow is not installed (the
binary runs without it), with the ``tensorboard`` package's own event writer (scalar
``simple_value`` summaries, which TensorBoard shows the same way); with neither, the writer is a
no-op and says so once. ``directory=None`` (a non-chief worker) is a silent no-op.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Mapping, Optional

__all__ = ["SummaryWriter"]


class SummaryWriter:
  """``scalars(step, {tag: value})`` into ``directory`` (module docstring); ``epoch(step,
  metrics, epoch_loss)`` writes an epoch's tags; ``flush()``."""

  def __init__(self, directory: Optional[str]):
    self.directory = directory
    self._tf = self._writer = self._events = None
    if directory is None:
      return
    try:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
    except ImportError:
      tf = None
    if tf is not None:
      self._tf = tf
      os.makedirs(directory, exist_ok=True)
      self._writer = tf.summary.create_file_writer(directory)
      return
    try:
      # pylint: disable=g-import-not-at-top
      from tensorboard.compat.proto import event_pb2, summary_pb2
      from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
      logging.warning(
        "neither TensorFlow nor TensorBoard is importable: no TensorBoard summaries in %s",
        directory,
      )
      return
    os.makedirs(directory, exist_ok=True)
    self._protos = (event_pb2, summary_pb2)
    self._events = EventFileWriter(directory)
    logging.info(
      "TensorFlow is not importable: TensorBoard summaries in %s written by the "
      "tensorboard package",
      directory,
    )

  def scalars(self, step: int, values: Mapping[str, float]) -> None:
    if self._events is not None:
      event_pb2, summary_pb2 = self._protos
      self._events.add_event(
        event_pb2.Event(
          wall_time=time.time(),
          step=int(step),
          summary=summary_pb2.Summary(
            value=[
              summary_pb2.Summary.Value(tag=tag, simple_value=float(value))
              for tag, value in values.items()
            ]
          ),
        )
      )
      return
    if self._writer is None:
      return
    with self._writer.as_default(step=int(step)):
      for tag, value in values.items():
        self._tf.summary.scalar(tag, float(value))

  def epoch(self, step: int, metrics: Mapping[str, float], epoch_loss: float) -> None:
    """An epoch's validation (and ``test_*``) metrics, without the query counts, and its mean
    loss, at the epoch's last global step."""
    values = {
      (f"test/{k[5:]}" if k.startswith("test_") else f"val/{k}"): v
      for k, v in metrics.items()
      if not k.endswith("num_queries")
    }
    values["train/epoch_loss"] = epoch_loss
    self.scalars(step, values)
    self.flush()

  def flush(self) -> None:
    if self._writer is not None:
      self._writer.flush()
    if self._events is not None:
      self._events.flush()
