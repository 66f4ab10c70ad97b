"""Fast, strict readers for the text formats of the datasets.

Each reader parses with numpy (no per-token Python work on the happy path). When the fast parse
fails, a line-by-line scan finds the first bad line and raises `DataFormatError` naming the file
and the 1-based line number. Missing files raise `FileNotFoundError` naming the path.
"""

from __future__ import annotations

import io
import pathlib
import re
from typing import Optional

import numpy as np

from train.data.records import DataFormatError


def _read_text(path) -> str:
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f"data file not found: {path}")
  return path.read_bytes().decode("latin-1")


def _split_lines(text: str) -> list:
  lines = text.split("\n")
  if lines and lines[-1] == "":
    lines.pop()  # trailing newline
  return [l[:-1] if l.endswith("\r") else l for l in lines]


def read_id_lines(path, *, num_items: Optional[int] = None, allow_empty: bool = False) -> list:
  """Reads one whitespace-separated sequence of integer ids per line (gSASRec input.txt).

  Args:
    path: the file.
    num_items: when given, every id must lie in 1..num_items.
    allow_empty: whether a line may hold no id.

  Returns:
    list of int64 arrays, one per line, in file order.

  Raises:
    FileNotFoundError: the file is missing.
    DataFormatError: a token is not an integer, an id is out of range, or a line is empty.
  """
  lines = _split_lines(_read_text(path))
  out = []
  for k, line in enumerate(lines):
    tokens = line.split()
    if not tokens and not allow_empty:
      raise DataFormatError(path, k + 1, "empty line (expected space-separated item ids)")
    try:
      out.append(np.array(tokens, dtype=np.int64))
    except (ValueError, OverflowError):
      bad = next(t for t in tokens if not _is_int(t))
      raise DataFormatError(path, k + 1, f"{bad!r} is not an integer item id") from None
  if num_items is not None and out:
    lens = np.array([a.size for a in out])
    flat = np.concatenate(out) if lens.sum() else np.zeros(0, np.int64)
    bad = np.flatnonzero((flat < 1) | (flat > num_items))
    if bad.size:
      line = int(np.searchsorted(np.cumsum(lens), bad[0], side="right"))
      raise DataFormatError(path, line + 1, f"item id {flat[bad[0]]} outside 1..{num_items}")
  return out


def read_single_ids(path, *, num_items: Optional[int] = None) -> np.ndarray:
  """Reads exactly one integer id per line (gSASRec output.txt); int64 [num_lines]."""
  seqs = read_id_lines(path, num_items=num_items)
  for k, s in enumerate(seqs):
    if s.size != 1:
      raise DataFormatError(path, k + 1, f"expected exactly one item id, found {s.size}")
  return np.array([s[0] for s in seqs], dtype=np.int64)


def _is_int(token: str) -> bool:
  """True when `token` is a decimal integer that fits in int64."""
  try:
    return -(2**63) <= int(token) < 2**63
  except ValueError:
    return False


def _is_float(token: str) -> bool:
  try:
    float(token)
    return True
  except ValueError:
    return False


_RATING_DTYPE = np.dtype(
  [("user", np.int64), ("item", np.int64), ("rating", np.float64), ("timestamp", np.int64)]
)


def read_ratings(path) -> dict:
  """Reads raw MovieLens ratings: `user::item::rating::timestamp` (ratings.dat) or
  whitespace/tab separated `user item rating timestamp` (u.data). The separator is detected
  from the first non-blank line (`::` anywhere in it means the ML-1M format). Blank lines are
  ignored.

  Returns:
    dict of equally long arrays: user (int64), item (int64), rating (float64),
    timestamp (int64), in file order.

  Raises:
    FileNotFoundError: the file is missing.
    DataFormatError: a line without exactly 4 fields, a non-integer id or timestamp, a
      non-numeric rating, or a file without any rating.
  """
  text = _read_text(path)
  match = re.search(r"\S[^\n]*", text)  # the first non-blank line
  if match is None:
    raise DataFormatError(path, None, "no ratings found (empty file)")
  if "::" in match.group(0):
    text = text.replace("::", "\t")
  try:
    arr = np.loadtxt(io.StringIO(text), dtype=_RATING_DTYPE, comments=None, ndmin=1)
  except ValueError:
    _raise_first_bad_rating_line(path, text)
    raise  # the scan found nothing: re-raise numpy's own error
  if arr.shape[0] == 0:
    raise DataFormatError(path, None, "no ratings found (empty file)")
  return {name: np.ascontiguousarray(arr[name]) for name in _RATING_DTYPE.names}


def _raise_first_bad_rating_line(path, text: str) -> None:
  for k, line in enumerate(_split_lines(text)):
    fields = line.split()
    if not fields:
      continue
    if len(fields) != 4:
      raise DataFormatError(
        path,
        k + 1,
        f"expected 4 fields (user, item, rating, timestamp), found {len(fields)}: {line.strip()!r}",
      )
    for name, tok in zip(("user", "item", "timestamp"), (fields[0], fields[1], fields[3])):
      if not _is_int(tok):
        raise DataFormatError(path, k + 1, f"{name} {tok!r} is not an integer")
    if not _is_float(fields[2]):
      raise DataFormatError(path, k + 1, f"rating {fields[2]!r} is not a number")
