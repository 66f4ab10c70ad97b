"""train.summaries: the TFRecord framing's CRC against the CRC-32C check value and the tensorboard
package's own implementation; the events TensorFlow's reader reads back (tags, steps, values, the
scalars plugin); writing them imports no TensorFlow."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest
from tensorboard_events import read_scalars

from train import summaries

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_crc32c_check_value_and_the_tensorboard_packages_mask():
  from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

  # the CRC-32C (Castagnoli) check value of "123456789" is 0xE3069283, unmasked: undo the mask
  masked = summaries.masked_crc32c(b"123456789")
  rotated = (masked - 0xA282EAD8) & 0xFFFFFFFF
  assert ((rotated << 15) | (rotated >> 17)) & 0xFFFFFFFF == 0xE3069283
  rng = np.random.default_rng(0)
  for n in (0, 1, 8, 100, 1000):
    data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    assert summaries.masked_crc32c(data) == masked_crc32c(data), n


def test_tensorflows_reader_reads_the_steps_and_the_epoch(tmp_path):
  writer = summaries.SummaryWriter(str(tmp_path / "tb"))
  writer.scalars(1, {"train/loss": 2.5, "train/mean_weight": 0.75})
  writer.scalars(2, {"train/loss": 1.25, "train/mean_weight": 0.5})
  writer.epoch(2, {"ndcg@10": 0.125, "num_queries": 7, "test_ndcg@10": 0.0625}, epoch_loss=1.875)
  writer.close()
  found, plugins = read_scalars(tmp_path / "tb")
  assert found == {
    "train/loss": {1: 2.5, 2: 1.25},
    "train/mean_weight": {1: 0.75, 2: 0.5},
    "val/ndcg@10": {2: 0.125},
    "test/ndcg@10": {2: 0.0625},
    "train/epoch_loss": {2: 1.875},
  }
  assert plugins == {"scalars"}
  # a second writer (a resumed run) adds a file beside the first
  summaries.SummaryWriter(str(tmp_path / "tb")).scalars(3, {"train/loss": 1.0})
  assert len(list((tmp_path / "tb").glob("events.out.tfevents.*"))) == 2
  summaries.SummaryWriter(None).scalars(1, {"x": 1.0})  # a non-chief worker: nothing


def test_writing_imports_no_tensorflow(tmp_path):
  script = (
    "import sys\n"
    "from train import summaries\n"
    f"w = summaries.SummaryWriter({str(tmp_path / 'tb')!r})\n"
    "w.scalars(1, {'train/loss': 1.0}); w.flush()\n"
    "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\n"
  )
  proc = subprocess.run(
    [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  found, _ = read_scalars(tmp_path / "tb")
  assert found == {"train/loss": {1: pytest.approx(1.0)}}
