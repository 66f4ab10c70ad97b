"""train.data.epoch_seed: the data seed of epoch e of run seed s is s * 1_000_003 + e (both
binaries' per-epoch stream)."""

from train import data as data_lib


def test_epoch_seed_formula():
  assert data_lib.epoch_seed(0, 0) == 0
  assert data_lib.epoch_seed(3, 2) == 3 * 1_000_003 + 2
  assert data_lib.epoch_seed(1, 0) != data_lib.epoch_seed(0, 1)
  assert isinstance(data_lib.epoch_seed(2, 5), int)
