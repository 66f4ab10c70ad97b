"""Worker subprocesses of the benchmark scripts: a worker answers on stdout with lines
'@@ JSON' (anything else a library prints there is passed over), the parent reads them back."""

from __future__ import annotations

import json
import sys
from typing import List, Optional

__all__ = ["REPLY", "reply_line", "parse_reply", "worker_command"]

REPLY = "@@"


def reply_line(obj) -> str:
  """The line (no newline) that carries ``obj`` back to the parent."""
  return f"{REPLY} {json.dumps(obj)}"


def parse_reply(line: str) -> Optional[dict]:
  """The object of a reply line; None for any other line."""
  if line.startswith(REPLY + " "):
    return json.loads(line[len(REPLY) + 1 :])
  return None


def worker_command(module: str, spec: dict, flag: Optional[str] = "--_worker") -> List[str]:
  """``python -m MODULE [FLAG] JSON(spec)``: a worker of this interpreter."""
  return [sys.executable, "-m", module] + ([flag] if flag else []) + [json.dumps(spec)]
