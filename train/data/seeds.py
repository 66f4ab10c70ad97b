"""The seed of an epoch's training stream, one formula for both binaries.

    epoch_seed(seed, epoch) = seed * 1_000_003 + epoch

Epoch e (0-based) of a run with ``--seed=seed`` reads the batches of
``sasrec_train_dataset(..., seed=epoch_seed(seed, e))`` (or the two-tower pipeline's), so a run
resumed at epoch e replays the same stream, and `python -m train` and `python -m train.keras3`
see the same batches for the same (seed, epoch). 1_000_003 (a prime above any epoch count) keeps
the epochs of different seeds apart.
"""

from __future__ import annotations

__all__ = ["EPOCH_SEED_STRIDE", "epoch_seed"]

EPOCH_SEED_STRIDE = 1_000_003


def epoch_seed(seed: int, epoch: int) -> int:
  """seed * 1_000_003 + epoch: the data seed of epoch ``epoch`` (0-based) of run ``seed``."""
  return int(seed) * EPOCH_SEED_STRIDE + int(epoch)
