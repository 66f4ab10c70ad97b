"""``python -m bench.analysis COMMAND [flags]``: the analysis of finished runs, one command each.

    table1    the Table 1 report of a folder of runs: rows over seeds, paired differences, plots
    phases    a launch's whole runs, their wall-clock split by phase (time to converge), arm by arm
    compare   two arms on paired seeds, row by row: mean ± s.e., A − B with its 95 % interval and
              verdict (launcher / reproduce trees, paper_loop trees, seed<s>/metrics.json folders)
    band      one run's learning curve against a band of runs' 95 % prediction interval, by epoch
    patience  the epoch a shorter early-stopping patience selects, from runs' own curves

``python -m bench.analysis COMMAND --help`` gives a command's flags (each takes --out, the folder
of its report). The last line of each is a one-line summary.
"""

from __future__ import annotations

import importlib
import sys
from typing import Optional, Sequence

__all__ = ["COMMANDS", "main"]

COMMANDS = {
  name: f"bench.analysis.{name}" for name in ("table1", "phases", "compare", "band", "patience")
}


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = list(sys.argv[1:] if argv is None else argv)
  if not args or args[0] in ("-h", "--help"):
    print(__doc__)
    return 0 if args else 2
  if args[0] not in COMMANDS:
    print(f"error: unknown command {args[0]!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
    return 2
  return importlib.import_module(COMMANDS[args[0]]).main(args[1:]) or 0
