"""What the analysis commands share (besides `bench.common.plot` and `bench.common.report`): their
parsers and the command line that wrote a report, the number formats and markdown tables of their
reports, a metric's paired difference over two sets of runs, the report folder."""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from bench.common.flags import add_flags
from bench.common.report import command, markdown_header, markdown_row
from eval.paired_stats import paired_difference, relative_margin


def parser(
  name: str, doc: str, flags: Mapping[str, Tuple[Any, Optional[str]]], epilog: bool = False
) -> argparse.ArgumentParser:
  """The parser of ``python -m bench.analysis NAME``: described by the first paragraph of ``doc``
  (with ``epilog``: the rest, as written, below the flags); ``flags``: `bench.common.flags`'
  table."""
  head, _, rest = doc.partition("\n\n")
  out = argparse.ArgumentParser(
    prog=f"python -m bench.analysis {name}",
    description=head,
    epilog=rest if epilog else None,
    formatter_class=argparse.RawDescriptionHelpFormatter if epilog else argparse.HelpFormatter,
  )
  add_flags(out, flags)
  return out


def command_line(name: str, argv: Optional[Sequence[str]]) -> str:
  """``python -m bench.analysis NAME ARGS``, ARGS ``argv`` (default: the process's), quoted."""
  return command(f"bench.analysis {name}", sys.argv[1:] if argv is None else list(argv))


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> List[str]:
  """The lines of a markdown table."""
  return markdown_header(header) + [markdown_row([str(c) for c in row]) for row in rows]


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
