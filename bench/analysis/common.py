"""What the analysis commands share (besides `bench.common.plot` and `bench.common.report`): their
argument parsers and the command line that wrote a report, the number formats of their tables, a
metric's paired difference over two sets of runs, the report folder."""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any, Dict, Mapping, Optional, Sequence

from bench.common.report import command
from eval.paired_stats import paired_difference, relative_margin


def argument_parser(name: str, doc: str, epilog: bool = False) -> argparse.ArgumentParser:
  """The parser of ``python -m bench.analysis NAME``: described by the first line of ``doc``,
  or with ``epilog`` by its first paragraph, the rest as the epilog."""
  prog = f"python -m bench.analysis {name}"
  if not epilog:
    return argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
  return argparse.ArgumentParser(
    prog=prog,
    description=doc.split("\n\n")[0],
    formatter_class=argparse.RawDescriptionHelpFormatter,
    epilog=doc.split("\n\n", 1)[1],
  )


def command_line(name: str, argv: Optional[Sequence[str]]) -> str:
  """``python -m bench.analysis NAME ARGS``, ARGS ``argv`` (default: the process's), quoted."""
  return command(f"bench.analysis {name}", sys.argv[1:] if argv is None else list(argv))


def signed(x: Optional[float]) -> str:
  return "—" if x is None else f"{x:+.4f}"


def plain(x: Optional[float]) -> str:
  return "—" if x is None else f"{x:.4f}"


def interval(ci: Sequence[float]) -> str:
  """A 95 % interval [low, high], signed."""
  return f"[{signed(ci[0])}, {signed(ci[1])}]"


def mean_se(stats: Mapping[str, Any], digits: int = 4) -> str:
  """``mean ± s.e.`` of `eval.paired_stats.mean_se`'s record; the mean alone for one value, "—"
  for none."""
  if stats["mean"] is None:
    return "—"
  text = f"{stats['mean']:.{digits}f}"
  return text if stats["se"] is None else f"{text} ± {stats['se']:.{digits}f}"


def values(runs: Mapping[Any, dict], metric: str) -> Dict[Any, float]:
  """{seed: the test ``metric``} of the runs that hold it."""
  return {s: float(r["metrics"][metric]) for s, r in runs.items() if metric in r["metrics"]}


def paired(first: Mapping[Any, float], second: Mapping[Any, float], margin: float) -> dict:
  """`eval.paired_stats.paired_difference` first − second on their common seeds, its margin
  ``margin`` (relative) of the second's mean over them."""
  reference = [second[s] for s in sorted(set(first) & set(second))]
  return paired_difference(first, second, margin=relative_margin(margin, reference))


def write(out: pathlib.Path, files: Mapping[str, str]) -> pathlib.Path:
  """Writes {name: text} into the folder ``out`` (made if absent); ``out``."""
  out.mkdir(parents=True, exist_ok=True)
  for name, text in files.items():
    (out / name).write_text(text)
  return out
