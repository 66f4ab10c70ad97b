"""Resident set size of this process (or another) from /proc/PID/status (Linux), and this
process's peak over a span: `reset_peak_rss` before the span, `peak_rss_kib` after it; the bytes
of a layer's variables (`weights_bytes`)."""

from __future__ import annotations

import math
import pathlib
import re
from typing import Any, Optional, Union

__all__ = ["status_kib", "reset_peak_rss", "peak_rss_kib", "weights_bytes"]


def status_kib(field: str, pid: Union[int, str] = "self") -> int:
  """A kB field of /proc/PID/status (VmRSS: resident now, VmHWM: its peak); 0 if absent (or the
  process is gone)."""
  try:
    text = pathlib.Path(f"/proc/{pid}/status").read_text()
  except OSError:
    return 0
  m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
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


def weights_bytes(layer: Any) -> int:
  """Bytes of a layer's (an estimator's) variables, ``layer.weights``; 0 for None."""
  if layer is None:
    return 0
  return sum(int(math.prod(w.shape)) * w.dtype.size for w in layer.weights)
