"""What `python -m train.keras3` adds to `train.config.RunConfig` (--backend) and which of its
settings the Keras 3 path does not have (a bad-input error naming the setting).

Imports neither keras nor TensorFlow: `select_backend` sets ``KERAS_BACKEND`` from the command
line before keras is imported (Keras reads it once, on import).
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "backend_from_argv", "check_supported",
           "select_backend"]

BACKENDS = ("jax", "tensorflow", "torch")
DEFAULT_BACKEND = "jax"

# setting -> (the values the Keras 3 path supports, why the others are not there)
_SUPPORTED = {
    "model": (("sasrec",), "the Keras 3 path trains SASRec (models.keras3)"),
    "loss": (("sampled_softmax", "full_softmax", "bce", "gbce"),
             "the Keras 3 binary trains these losses"),
    "table_optimizer": (("adam", "lazy_adam"), "the Keras 3 binary has Adam and LazyAdam"),
    "strategy": (("default",), "tf.distribute strategies are for python -m train"),
}
_ZERO = {"cpu_replicas": "tf.distribute's logical CPUs are for python -m train"}


def backend_from_argv(argv: Optional[Sequence[str]] = None) -> str:
  """The --backend that ``argv`` (default sys.argv) gives (last one wins), else the default;
  an unknown name is returned as given (the flag parser reports it)."""
  argv = list(sys.argv if argv is None else argv)[1:]
  name = DEFAULT_BACKEND
  for k, arg in enumerate(argv):
    if arg == "--":
      break
    if arg in ("--backend", "-backend") and k + 1 < len(argv):
      name = argv[k + 1]
    elif arg.startswith(("--backend=", "-backend=")):
      name = arg.split("=", 1)[1]
  return name


def select_backend(argv: Optional[Sequence[str]] = None) -> str:
  """Sets KERAS_BACKEND from --backend (before keras is imported); returns the name."""
  name = backend_from_argv(argv)
  if name in BACKENDS:
    os.environ["KERAS_BACKEND"] = name
  return name


def check_supported(cfg) -> None:
  """Raises ValueError for a setting the Keras 3 path does not have."""
  for name, (values, why) in _SUPPORTED.items():
    if getattr(cfg, name) not in values:
      raise ValueError(f"--{name}={getattr(cfg, name)} is not available in python -m "
                       f"train.keras3 ({why}); use one of {', '.join(values)}")
  for name, why in _ZERO.items():
    if getattr(cfg, name):
      raise ValueError(f"--{name}={getattr(cfg, name)} is not available in python -m "
                       f"train.keras3 ({why})")
  if cfg.tpu is not None:
    raise ValueError("--tpu is not available in python -m train.keras3 (TPUStrategy is for "
                     "python -m train)")
