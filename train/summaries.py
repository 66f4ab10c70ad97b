"""TensorBoard scalars of both binaries (`python -m train`, `python -m train.keras3`), written
from Python numbers whatever the framework (`train.epochs` writes them):

    per step s (the global step after it):  train/loss, train/mean_weight
    per epoch (at its last step):           val/recall@k, val/ndcg@k (k = 10, 20),
                                            test/... (--test_curve: improving epochs),
                                            train/epoch_loss

into ``model_dir/tensorboard/events.out.tfevents.*``, one file per process, in the format
``tf.summary.scalar`` writes (a float32 scalar tensor with the ``scalars`` plugin's metadata; one
event per step): TensorBoard and ``tf.compat.v1.train.summary_iterator`` read it as they read
tf.summary's. The file is written here, from the ``tensorboard`` package's protocol buffers,
and never through TensorFlow: importing TensorFlow (~9 s on the project's CPU) only for the
summaries was most of the Keras 3 binary's start-up on JAX, and the package's own writer imports
TensorFlow whenever it is installed. The record framing (TFRecord):

    uint64 length | uint32 masked_crc32c(length) | event bytes | uint32 masked_crc32c(bytes)

(little-endian). Without the ``tensorboard`` package the writer is a no-op and says so once;
``directory=None`` (a non-chief worker) is a silent no-op.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import struct
import time
from typing import BinaryIO, Mapping, Optional

__all__ = ["SummaryWriter", "masked_crc32c"]

_FILE_COUNTER = itertools.count()


def _crc32c_table() -> list:
  table = []
  for byte in range(256):
    crc = byte
    for _ in range(8):
      crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli, reflected
    table.append(crc)
  return table


_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
  """CRC-32C of ``data``, masked as TFRecord files mask it: ((crc >> 15 | crc << 17) +
  0xA282EAD8) mod 2^32."""
  crc = 0xFFFFFFFF
  for byte in data:
    crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
  crc ^= 0xFFFFFFFF
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class SummaryWriter:
  """``scalars(step, {tag: value})`` into ``directory`` (module docstring); ``epoch(step,
  metrics, epoch_loss)`` writes an epoch's tags; ``flush()``."""

  def __init__(self, directory: Optional[str]):
    self.directory = directory
    self._file: Optional[BinaryIO] = None
    if directory is None:
      return
    try:
      from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
    except ImportError:
      logging.warning("tensorboard is not importable: no TensorBoard summaries in %s", directory)
      return
    self._pb = (event_pb2, summary_pb2, tensor_pb2, types_pb2)
    self._metadata = summary_pb2.SummaryMetadata(
      plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
    )
    os.makedirs(directory, exist_ok=True)
    name = "events.out.tfevents.%010d.%s.%d.%d.v2" % (
      time.time(),
      socket.gethostname(),
      os.getpid(),
      next(_FILE_COUNTER),
    )
    self._file = open(os.path.join(directory, name), "ab")
    self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))
    self.flush()

  def _write(self, event) -> None:
    data = event.SerializeToString()
    header = struct.pack("<Q", len(data))
    assert self._file is not None
    self._file.write(header + struct.pack("<I", masked_crc32c(header)))
    self._file.write(data + struct.pack("<I", masked_crc32c(data)))

  def scalars(self, step: int, values: Mapping[str, float]) -> None:
    if self._file is None:
      return
    event_pb2, summary_pb2, tensor_pb2, types_pb2 = self._pb
    summary = summary_pb2.Summary(
      value=[
        summary_pb2.Summary.Value(
          tag=tag,
          metadata=self._metadata,
          tensor=tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[float(value)]),
        )
        for tag, value in values.items()
      ]
    )
    self._write(event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))

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
    if self._file is not None:
      self._file.flush()

  def close(self) -> None:
    if self._file is not None:
      self._file.close()
      self._file = None
