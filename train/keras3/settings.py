"""What `python -m train.keras3` adds to `train.config.RunConfig` (--backend) and which of its
settings the Keras 3 path does not have (a bad-input error naming the setting).

Imports neither keras nor TensorFlow: `select_backend` sets ``KERAS_BACKEND`` from the command
line before keras is imported (Keras reads it once, on import), and with --backend=jax and
--cpu_replicas=N > 0 adds ``--xla_force_host_platform_device_count=N`` to ``XLA_FLAGS`` (JAX
reads it once, when its CPU backend starts), so the host CPU is N JAX devices for
--strategy=mirrored (`train.keras3.parallel`).

On jax, compiled programs are kept on disk between runs (JAX's persistent compilation cache,
``JAX_COMPILATION_CACHE_DIR``, set before jax is imported): --compilation_cache=DIR (default: the
caller's ``JAX_COMPILATION_CACHE_DIR``, else ~/.cache/tfrs_logq/jax under ``XDG_CACHE_HOME``;
empty: off). A run whose programs an earlier run compiled (another seed or row of the same
shapes, a resumed chunk, a rerun) loads them instead of compiling: on an accelerator most of a
short run's first minute (docs/results/time_to_converge/).

Data parallelism (--strategy=mirrored, --cpu_replicas > 0) is ``keras.distribution`` on JAX:
`check_supported` refuses it on the other backends ("needs --backend=jax").
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

__all__ = [
  "BACKENDS",
  "DEFAULT_BACKEND",
  "backend_from_argv",
  "check_supported",
  "default_compilation_cache",
  "flag_from_argv",
  "host_device_flags",
  "select_backend",
]

BACKENDS = ("jax", "tensorflow", "torch")
DEFAULT_BACKEND = "jax"

# setting -> (the values the Keras 3 path supports, why the others are not there)
_SUPPORTED = {
  "model": (("sasrec",), "the Keras 3 path trains SASRec (models.keras3)"),
  "loss": (
    ("sampled_softmax", "full_softmax", "bce", "gbce"),
    "the Keras 3 binary trains these losses",
  ),
  "table_optimizer": (("adam", "lazy_adam"), "the Keras 3 binary has Adam and LazyAdam"),
  "strategy": (
    ("default", "mirrored"),
    "the other tf.distribute strategies are for python -m train; mirrored is "
    "keras.distribution.DataParallel on --backend=jax",
  ),
}
_HOST_DEVICES = "--xla_force_host_platform_device_count"
_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"


def flag_from_argv(name: str, default: str, argv: Optional[Sequence[str]] = None) -> str:
  """The value of --``name`` in ``argv`` (default sys.argv; ``--name=v`` or ``--name v``, the
  last one wins, nothing after ``--``), else ``default``; returned as given (the flag parser
  checks it)."""
  argv = list(sys.argv if argv is None else argv)[1:]
  value = default
  for k, arg in enumerate(argv):
    if arg == "--":
      break
    if arg in (f"--{name}", f"-{name}") and k + 1 < len(argv):
      value = argv[k + 1]
    elif arg.startswith((f"--{name}=", f"-{name}=")):
      value = arg.split("=", 1)[1]
  return value


def backend_from_argv(argv: Optional[Sequence[str]] = None) -> str:
  """The --backend that ``argv`` (default sys.argv) gives (last one wins), else the default;
  an unknown name is returned as given (the flag parser reports it)."""
  return flag_from_argv("backend", DEFAULT_BACKEND, argv)


def host_device_flags(xla_flags: str, count: int) -> str:
  """``xla_flags`` with ``--xla_force_host_platform_device_count=count`` (replacing one there)."""
  kept = [f for f in xla_flags.split() if not f.startswith(_HOST_DEVICES + "=")]
  return " ".join(kept + [f"{_HOST_DEVICES}={count}"])


def default_compilation_cache() -> str:
  """The caller's ``JAX_COMPILATION_CACHE_DIR`` if set (empty: off), else
  ``$XDG_CACHE_HOME/tfrs_logq/jax`` (``XDG_CACHE_HOME`` defaults to ~/.cache)."""
  if _CACHE_ENV in os.environ:
    return os.environ[_CACHE_ENV]
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "tfrs_logq", "jax")


def select_backend(argv: Optional[Sequence[str]] = None) -> str:
  """Sets KERAS_BACKEND from --backend (before keras is imported) and, on jax, before jax is
  imported: XLA_FLAGS' host device count N with --cpu_replicas=N > 0, and
  ``JAX_COMPILATION_CACHE_DIR`` from --compilation_cache (removed when it is empty); returns the
  backend's name."""
  name = backend_from_argv(argv)
  if name in BACKENDS:
    os.environ["KERAS_BACKEND"] = name
  replicas = flag_from_argv("cpu_replicas", "0", argv)
  if name == "jax" and replicas.isdigit() and int(replicas) > 0:
    os.environ["XLA_FLAGS"] = host_device_flags(os.environ.get("XLA_FLAGS", ""), int(replicas))
  if name == "jax":
    cache = flag_from_argv("compilation_cache", default_compilation_cache(), argv)
    if cache:
      os.environ[_CACHE_ENV] = os.path.abspath(os.path.expanduser(cache))
    else:
      os.environ.pop(_CACHE_ENV, None)
  return name


def check_supported(cfg, backend: str = DEFAULT_BACKEND) -> None:
  """Raises ValueError for a setting the Keras 3 path does not have (on ``backend``)."""
  for name, (values, why) in _SUPPORTED.items():
    if getattr(cfg, name) not in values:
      raise ValueError(
        f"--{name}={getattr(cfg, name)} is not available in python -m "
        f"train.keras3 ({why}); use one of {', '.join(values)}"
      )
  if backend != "jax" and (cfg.strategy == "mirrored" or cfg.cpu_replicas):
    setting = "--strategy=mirrored" if cfg.strategy == "mirrored" else "--cpu_replicas"
    raise ValueError(
      f"{setting}: data parallelism (keras.distribution.DataParallel) needs "
      f"--backend=jax, got --backend={backend}"
    )
  if cfg.tpu is not None:
    raise ValueError(
      "--tpu is not available in python -m train.keras3 (TPUStrategy is for python -m train)"
    )
