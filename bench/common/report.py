"""Reporting pieces of the benchmark scripts: the one-line summary each prints last
(bench/README.md), text and markdown tables, GiB of a kB count, the JSON file of a run, the
command and the commit that produced it."""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import subprocess
from typing import Any, Optional, Sequence

__all__ = [
  "summary_line",
  "ruled",
  "markdown_header",
  "markdown_row",
  "gib",
  "write_json",
  "command",
  "commit",
]

ROOT = pathlib.Path(__file__).resolve().parents[2]


def summary_line(parts: Sequence[str], head: str = "", note: str = "") -> str:
  """'summary: HEAD: PART; PART (NOTE)' (head and note optional)."""
  text = "summary: " + (f"{head}: " if head else "") + "; ".join(parts)
  return f"{text} ({note})" if note else text


def ruled(header: str) -> list:
  """A text table's header line and the rule of dashes under it."""
  return [header, "-" * len(header)]


def markdown_header(columns: Sequence[str]) -> list:
  """The header and separator lines of a markdown table."""
  return [markdown_row(columns), "|" + "---|" * len(columns)]


def markdown_row(cells: Sequence[str]) -> str:
  return "| " + " | ".join(cells) + " |"


def gib(kib: Optional[float]) -> str:
  """A kB count in GiB, 2 decimals ('-' for None)."""
  return "-" if kib is None else f"{kib / 2**20:.2f}"


def write_json(out_dir: str, name: str, obj: Any, indent: int = 2) -> str:
  """Writes ``obj`` to OUT_DIR/NAME (numpy scalars as floats); returns the path."""
  os.makedirs(out_dir, exist_ok=True)
  path = os.path.join(out_dir, name)
  with open(path, "w") as f:
    json.dump(obj, f, indent=indent, default=float)
  return path


def command(module: str, argv: Sequence[str]) -> str:
  """'python -m MODULE ARGV' (the arguments shell-quoted): the command line of a run."""
  return f"python -m {module} " + shlex.join(argv)


def commit(full: bool = False, dirty: str = "-dirty") -> Optional[str]:
  """This checkout's HEAD (short, or the whole hash with ``full``), followed by ``dirty`` when
  tracked files differ from it (read-only: GIT_OPTIONAL_LOCKS=0 keeps `git status` from
  refreshing the index); None without git."""

  def git(*args: str) -> str:
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0")
    run = subprocess.run(
      ["git", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30, check=True
    )
    return run.stdout.strip()

  try:
    head = git("rev-parse", *([] if full else ["--short"]), "HEAD")
    changed = git("status", "--porcelain", "--untracked-files=no")
  except (OSError, subprocess.SubprocessError):
    return None
  return head + (dirty if changed else "")
