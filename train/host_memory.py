"""How the host's C allocator hands memory to TensorFlow: keep freed buffers instead of unmapping.

TensorFlow on the CPU allocates its tensors with the C library's malloc. A SASRec step allocates
and frees hundreds of buffers of 1-200 MiB (activations, attention grids, gradients). With
glibc's defaults the large ones are mmap'd and unmapped again, and the top of the heap is
trimmed back to the kernel, so every step faults the same pages in again and zeroes them, as
*system* time in every step (`getrusage`; measured in docs/training.md, `--host_allocator`).

``retain`` (the binary's default, ``--host_allocator``) sets, with ``mallopt`` at start-up:

    M_MMAP_THRESHOLD = 32 MiB    buffers below this come from the heap (reused, not unmapped)
    M_TRIM_THRESHOLD = 1 GiB     free memory at the top of the heap is kept up to this
    M_TOP_PAD        = 512 MiB   the heap grows in large steps
    M_ARENA_MAX      = 1         one heap for all threads

Setting any of the first three turns glibc's adaptive threshold off, so they are set together (one
alone makes it worse: with only M_TOP_PAD the step took 0.85 s). Measured in one run
(`python -m bench.step --configs=sequence+reference+xla+malloc_default,
sequence+reference+xla`): see docs/benchmarks.md. The price is resident memory: freed
buffers stay mapped. glibc gives every thread that meets a locked heap a heap of its own (up to
8 per core), and with the three settings above each of those heaps keeps its freed buffers: the
ML-1M SASRec step (XLA encoder) peaked at 3.18 GiB with them and 2.36 GiB with one heap, at the
same speed (1.03x / 1.04x min / median, same run, the heap is locked for the allocation only;
TensorFlow's threads allocate hundreds of buffers per step, not millions; `python -m bench.step`
token ``malloc_arenas``). ``default`` leaves the
allocator alone. Non-glibc platforms (macOS, musl) are left alone whatever the setting.

This is a property of the process, not of the model: the application sets it once, before the
first step (`configure`); the library never touches it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

HOST_ALLOCATORS = ("retain", "default")

# glibc's mallopt parameter numbers (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

RETAIN = {
  "mmap_threshold": 32 << 20,
  "trim_threshold": 1 << 30,
  "top_pad": 512 << 20,
  "arena_max": 1,
}
"""The ``retain`` settings (bytes, and a count of heaps; module docstring). 32 MiB is glibc's
largest mmap threshold."""


def _glibc():
  """The process's glibc, or None (another C library, or no mallopt)."""
  try:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    version = libc.gnu_get_libc_version
  except (OSError, AttributeError):
    return None
  version.restype = ctypes.c_char_p
  if not version() or not hasattr(libc, "mallopt"):
    return None
  return libc


def configure(host_allocator: str, *, one_heap: bool = True) -> bool:
  """Applies ``host_allocator`` (``retain`` | ``default``) to this process's malloc.

  ``one_heap=False`` leaves glibc's per-thread heaps under ``retain`` (M_ARENA_MAX unset; for
  measuring what the cap saves, `python -m bench.step` token ``malloc_arenas``).

  Returns True when the settings were applied, False when there was nothing to do
  (``default``, or not glibc).

  Raises:
    ValueError: unknown ``host_allocator``.
    OSError: glibc refused one of the settings.
  """
  if host_allocator not in HOST_ALLOCATORS:
    raise ValueError(f"host_allocator must be one of {HOST_ALLOCATORS}, got {host_allocator!r}")
  if host_allocator == "default":
    return False
  libc = _glibc()
  if libc is None:
    logging.info("host_allocator=retain: not glibc, the allocator is left alone")
    return False
  settings = [
    (_M_MMAP_THRESHOLD, RETAIN["mmap_threshold"]),
    (_M_TRIM_THRESHOLD, RETAIN["trim_threshold"]),
    (_M_TOP_PAD, RETAIN["top_pad"]),
  ]
  if one_heap:
    settings.append((_M_ARENA_MAX, RETAIN["arena_max"]))
  for param, value in settings:
    if libc.mallopt(ctypes.c_int(param), ctypes.c_int(value)) != 1:
      raise OSError(f"mallopt({param}, {value}) was refused by glibc")
  return True


def release_free_memory() -> bool:
  """Returns the heap's free memory to the kernel now (glibc ``malloc_trim(0)``).

  Under ``retain`` freed buffers stay resident; after a warm-up (tracing, XLA compilation) that
  includes the compilers' garbage. Calling this once after the warm-up leaves resident only what
  is in use, so the peak that follows is the step's own. Returns False where not glibc.
  """
  libc = _glibc()
  if libc is None or not hasattr(libc, "malloc_trim"):
    return False
  libc.malloc_trim(ctypes.c_size_t(0))
  return True
