"""train/host_memory.py: the retain setting keeps freed buffers mapped; bad values are refused."""

import subprocess
import sys
import textwrap

import pytest

from train import host_memory

# A child process mallocs 16 MiB, touches it, frees it, and prints the resident-set drop (KiB).
# glibc's defaults serve 16 MiB with mmap (the adaptive threshold starts at 128 KiB) and unmap
# it on free: the drop is ~16 MiB. Under retain it comes from the heap and stays mapped.
_CHILD = textwrap.dedent("""
    import ctypes, sys
    from train import host_memory
    applied = host_memory.configure(sys.argv[1])
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    def rss():
      return int([l for l in open("/proc/self/status") if l.startswith("VmRSS")][0].split()[1])
    n = 16 << 20
    p = libc.malloc(ctypes.c_size_t(n))
    ctypes.memset(p, 1, n)
    before = rss()
    libc.free(ctypes.c_void_p(p))
    kept = before - rss()
    if len(sys.argv) > 2:
      host_memory.release_free_memory()
    print(applied, kept, before - rss())
""")


def _rss_drop_after_free(setting, release=False):
  argv = [sys.executable, "-c", _CHILD, setting] + (["release"] if release else [])
  out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()
  return out[0] == "True", int(out[1 if not release else 2])


@pytest.mark.skipif(host_memory._glibc() is None, reason="mallopt is glibc's (not this libc)")
def test_retain_keeps_a_freed_16_mib_buffer_mapped_default_unmaps_it():
  applied, drop = _rss_drop_after_free("default")
  assert not applied and drop > 12 * 1024  # unmapped: the pages left the process
  applied, drop = _rss_drop_after_free("retain")
  assert applied and drop < 1024  # kept for the next allocation


# A child process applies a setting, lets 4 threads malloc 1 MiB each (glibc gives a new thread a
# heap of its own while under the cap, 8 per core by default) and prints its heap count, read from
# malloc_info's XML.
_HEAPS_CHILD = textwrap.dedent("""
    import ctypes, os, sys, tempfile, threading
    from train import host_memory
    host_memory.configure(sys.argv[1], one_heap=sys.argv[2] == "1")
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.fopen.restype = ctypes.c_void_p
    held = []
    def work():
      p = libc.malloc(ctypes.c_size_t(1 << 20))
      ctypes.memset(p, 1, 1 << 20)
      held.append(p)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    path = os.path.join(tempfile.mkdtemp(), "info.xml")
    f = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(f))
    libc.fclose(ctypes.c_void_p(f))
    print(open(path).read().count("<heap nr="))
""")


def _heaps(setting, one_heap):
  out = subprocess.run(
    [sys.executable, "-c", _HEAPS_CHILD, setting, "1" if one_heap else "0"],
    capture_output=True,
    text=True,
    check=True,
  ).stdout
  return int(out.split()[-1])


@pytest.mark.skipif(host_memory._glibc() is None, reason="mallopt is glibc's (not this libc)")
def test_retain_gives_all_threads_one_heap():
  assert _heaps("retain", one_heap=True) == 1
  assert _heaps("retain", one_heap=False) >= 2  # glibc's per-thread heaps, as by default
  assert _heaps("default", one_heap=True) >= 2


@pytest.mark.skipif(host_memory._glibc() is None, reason="malloc_trim is glibc's (not this libc)")
def test_release_free_memory_returns_what_retain_kept():
  applied, drop = _rss_drop_after_free("retain", release=True)
  assert applied and drop > 12 * 1024  # the kept 16 MiB left after malloc_trim


def test_unknown_setting_is_refused():
  with pytest.raises(ValueError, match="host_allocator"):
    host_memory.configure("tcmalloc")


def test_default_does_nothing():
  assert host_memory.configure("default") is False


def test_binary_flag_offers_both_settings():
  from train.config import RunConfig

  assert RunConfig().host_allocator == "retain"
  with pytest.raises(ValueError):
    RunConfig.create(host_allocator="jemalloc")
