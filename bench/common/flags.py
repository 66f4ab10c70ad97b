"""Command-line flags of the benchmark scripts from one table: ``{name: (default, help)}``, the
default giving the kind (bench/README.md)."""

from __future__ import annotations

import argparse
from typing import Any, Callable, List, Mapping, Optional, Tuple

__all__ = ["add_flags", "csv", "listed"]


def csv(text: str) -> List[str]:
  """The non-empty items of a comma-separated flag."""
  return [t for t in text.split(",") if t]


def listed(kind: Callable[[str], Any]) -> Callable[[str], List[Any]]:
  """The type of a comma-separated flag whose every item is a ``kind`` (an empty item is an
  error, as ``kind("")`` is)."""
  return lambda text: [kind(x) for x in text.split(",")]


def add_flags(
  parser: argparse.ArgumentParser,
  flags: Mapping[str, Tuple[Any, Optional[str]]],
  dashes: bool = False,
) -> None:
  """Adds ``--NAME`` per entry (``--NA-ME`` with ``dashes``). The default gives the kind: ``...``
  a required flag, False a switch, a list comma-separated items (str: `csv`, else `listed` of its
  first item's type), an int, float or str that type."""
  for name, (default, text) in flags.items():
    flag = "--" + (name.replace("_", "-") if dashes else name)
    if default is ...:
      parser.add_argument(flag, required=True, help=text)
    elif default is False:
      parser.add_argument(flag, action="store_true", help=text)
    elif isinstance(default, list):
      kind = type(default[0]) if default else str
      parser.add_argument(
        flag, default=default, type=csv if kind is str else listed(kind), help=text
      )
    elif isinstance(default, (int, float)):
      parser.add_argument(flag, default=default, type=type(default), help=text)
    else:
      parser.add_argument(flag, default=default, help=text)
