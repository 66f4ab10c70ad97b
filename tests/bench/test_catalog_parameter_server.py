"""bench/catalog/parameter_server.py, the parameter-server side of bench/catalog_size.py: the socket
byte counters and the other processes' memory it reads, its memory projection, and the bench
itself at a tiny size (both sides, a 2-ps cluster of processes)."""

import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest

from bench.catalog import parameter_server as catalog_ps
from bench.common import memory

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_socket_bytes_counts_what_this_process_sends_and_receives_over_tcp():
  server = socket.create_server(("127.0.0.1", 0))
  client = socket.create_connection(server.getsockname())
  peer, _ = server.accept()
  try:
    before = catalog_ps.socket_bytes([os.getpid()])[os.getpid()]
    client.sendall(b"x" * 100_000)
    got = 0
    while got < 100_000:
      got += len(peer.recv(65536))
    after = catalog_ps.socket_bytes([os.getpid()])[os.getpid()]
  finally:
    for s in (client, peer, server):
      s.close()
  # Both ends are this process: 100 kB sent by one socket and received by the other.
  assert after[1] - before[1] >= 100_000 and after[0] - before[0] >= 100_000


def test_memory_of_another_process_and_of_one_gone():
  proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  try:
    rss = memory.status_kib("VmRSS", proc.pid)  # read first: the peak, read after, is >= it
    assert memory.status_kib("VmHWM", proc.pid) >= rss > 0  # even while the child still grows
  finally:
    proc.kill()
    proc.wait()
  assert memory.status_kib("VmRSS", proc.pid) == 0


def test_memory_projection_is_the_line_through_the_two_largest_sizes():
  kib, slope = catalog_ps.project_memory([(1e4, 500.0), (1e6, 1500.0), (1e5, 600.0)], target=1e7)
  assert slope == pytest.approx(900.0 / 9e5)
  assert kib == pytest.approx(1500.0 + slope * 9e6)


def test_bench_at_a_tiny_size_writes_both_sides(tmp_path):
  out = tmp_path / "out"
  proc = subprocess.run(
    [
      sys.executable,
      "bench/catalog_size.py",
      "--parameter_server",
      "--sizes=2000",
      "--num_users=200",
      "--buckets=4096",
      "--batch_size=16",
      "--num_negatives=16",
      "--passes=1",
      "--steps=2",
      "--warmup=1",
      f"--out={out}",
    ],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=600,
    env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.strip().splitlines()[-1].startswith("summary: parameter server vs one")
  md = (out / "catalog_size_ps.md").read_text()
  assert "python bench/catalog_size.py --parameter_server --sizes=2000" in md
  assert "| 2e3 | one process |" in md and "| 2e3 | parameter server (2 shards) |" in md
  png = out / "catalog_size_ps.png"
  assert "![catalog_size_ps.png](catalog_size_ps.png)" in md
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
  results = json.loads((out / "catalog_size_ps.json").read_text())
  one, ps = results["one 2000"], results["ps 2000"]
  assert len(one["times"]) == len(ps["times"]) == 2
  assert ps["shards"] == 2 and ps["measured_bytes"] > ps["computed_bytes"] > 0
  assert set(ps["servers"]) == {"ps 0", "ps 1", "worker 0"}
  assert all(m["peak_kib"] >= m["rss_kib"] > 0 for m in ps["servers"].values())
