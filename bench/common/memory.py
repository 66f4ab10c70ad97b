"""Resident set size of this process from /proc/self/status (Linux), and its peak over a span:
`reset_peak_rss` before the span, `peak_rss_kib` after it."""

from __future__ import annotations

import pathlib
import re
from typing import Optional

__all__ = ["status_kib", "reset_peak_rss", "peak_rss_kib"]


def status_kib(field: str) -> int:
  """A kB field of /proc/self/status (VmRSS: resident now, VmHWM: its peak); 0 if absent."""
  m = re.search(rf"^{field}:\s+(\d+) kB", pathlib.Path("/proc/self/status").read_text(), re.M)
  return int(m.group(1)) if m else 0


def reset_peak_rss() -> bool:
  """Resets VmHWM to the current RSS (/proc/self/clear_refs = 5); False where not allowed."""
  try:
    pathlib.Path("/proc/self/clear_refs").write_text("5")
    return True
  except OSError:
    return False


def peak_rss_kib(reset: bool) -> Optional[int]:
  """VmHWM since the reset that returned ``reset``; None when it could not be reset."""
  return status_kib("VmHWM") if reset else None
