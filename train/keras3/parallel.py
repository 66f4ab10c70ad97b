"""Data parallelism of `python -m train.keras3`: --strategy=mirrored is
``keras.distribution.DataParallel`` on the JAX backend.

    devices      = the N host CPU devices (--cpu_replicas=N > 0; `settings.select_backend` set
                   XLA_FLAGS=--xla_force_host_platform_device_count=N before jax was imported)
                   | every device JAX lists (--cpu_replicas=0)
    distribution = DataParallel(devices)    weights replicated, each global batch split along
                                            its first axis (batch_size / N sequences a device)

`distribution(cfg)` builds it (None without --strategy=mirrored); the trainer sets it globally
before any variable exists. Keras then compiles the step for the **global** batch (GSPMD), so
the loss is the mean over the global batch's real positions, the in-batch pool is the global
batch's deduplicated positives, gathered onto every device (``cross_replica=True``:
``tfrs_logq.keras3.negatives.all_gather_rows``), the random draws (dropout, negatives) are those
of one device, and the gradients are summed over devices: a run equals the single-device run
up to float summation order. The frequency estimator is updated outside the step with the
global batch's positives, as on one device.
"""

from __future__ import annotations

import keras

__all__ = ["distribution"]


def distribution(cfg):
  """``keras.distribution.DataParallel`` of --strategy=mirrored / --cpu_replicas, or None.

  Raises:
    ValueError: not the jax backend; fewer host devices than --cpu_replicas (XLA_FLAGS was not
      set before jax was imported); --batch_size not divisible by the device count.
  """
  if cfg.strategy != "mirrored":
    return None
  if keras.backend.backend() != "jax":
    raise ValueError(
      "--strategy=mirrored: data parallelism (keras.distribution.DataParallel) "
      f"needs --backend=jax, got {keras.backend.backend()}"
    )
  if cfg.cpu_replicas:
    devices = keras.distribution.list_devices("cpu")
    if len(devices) < cfg.cpu_replicas:
      raise ValueError(
        f"--cpu_replicas={cfg.cpu_replicas}: JAX has {len(devices)} CPU "
        "device(s); XLA_FLAGS=--xla_force_host_platform_device_count must be set "
        "before jax is imported (python -m train.keras3 does it)"
      )
    devices = devices[: cfg.cpu_replicas]
  else:
    devices = keras.distribution.list_devices()
  if cfg.batch_size % len(devices):
    raise ValueError(
      f"--batch_size={cfg.batch_size} must be a multiple of the {len(devices)} "
      "data-parallel devices (the global batch is split evenly)"
    )
  return keras.distribution.DataParallel(devices=devices)
