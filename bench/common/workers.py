"""Worker subprocesses of the benchmark scripts: a worker answers on stdout with lines
'@@ JSON' (anything else a library prints there is passed over), the parent reads them back."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any, List, Optional, Tuple

__all__ = ["REPLY", "reply_line", "parse_reply", "worker_command", "run_worker"]

REPLY = "@@"


def reply_line(obj: Any) -> str:
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


def run_worker(command: List[str], **kwargs: Any) -> Tuple[int, Optional[dict]]:
  """Runs a worker to its end (``kwargs``: subprocess.run's, e.g. env, stderr, timeout); returns
  (its exit status, its last reply or None)."""
  proc = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False, **kwargs)
  replies = [r for r in map(parse_reply, proc.stdout.splitlines()) if r is not None]
  return proc.returncode, replies[-1] if replies else None
