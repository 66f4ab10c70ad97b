"""Two arms compared on paired seeds (`bench/seed_runs_compare.py`, `bench/table1_factor.py`):
their command-line arguments --a, --b, --names and --margin, defined and checked once.

The margin m is relative to arm B's mean: the equivalence band of a metric is ± m · mean(B)."""

from __future__ import annotations

import argparse
from typing import List

__all__ = ["add_arguments", "checked_names"]


def add_arguments(parser: argparse.ArgumentParser, arm: str) -> None:
  """--a and --b (``arm`` says what an arm's folder holds), --names and --margin."""
  parser.add_argument("--a", required=True, help=f"arm A: {arm}")
  parser.add_argument("--b", required=True, help="arm B (the reference of the margin)")
  parser.add_argument("--names", default="A,B", help="the arms' names, comma-separated")
  parser.add_argument(
    "--margin",
    type=float,
    default=0.02,
    help="relative equivalence margin (0.02 = ± 2 %% of B's mean)",
  )


def checked_names(parser: argparse.ArgumentParser, args: argparse.Namespace) -> List[str]:
  """The two arms' names; a usage error (parser.error) for another count of names, an empty
  name or a margin that is not > 0."""
  names = args.names.split(",")
  if len(names) != 2 or not all(names):
    parser.error(f"--names needs two names, got {args.names!r}")
  if not args.margin > 0:
    parser.error(f"--margin must be > 0, got {args.margin}")
  return names
