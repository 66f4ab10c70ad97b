"""Readers for the data users hold: a sequence file and an interactions table.

    data = load("sequences", "sports/sequences.txt")                      # leave-one-out
    data = load("interactions", "clicks.csv", split="temporal")           # needs timestamps

Sequence file: one line per user, ``user item item ...`` separated by spaces or tabs, oldest
first (the layout of the sequential-recommendation literature's preprocessed Amazon files).

Interactions table: CSV or TSV, one interaction per line, ``user,item[,timestamp]``. The
separator is the first line's: a tab if it holds one, else a comma, else whitespace. The first
line is a header when its first two fields name columns (``user``/``user_id``/``userid``/
``uid`` and ``item``/``item_id``/``itemid``/``iid``/``movie_id``..., any case) or, with three
fields, when the third is not an integer. Without a timestamp column, file order is time order
(stable), and the temporal split is refused.

Ids may be any strings: users and items are renumbered 1..n (integers in numeric order when
every id is an integer, else in string order) and ``metadata["item_original_ids"][i - 1]`` is
the original id of item i (``user_original_ids`` likewise); exports write the item map
(``train.export``). Then the split of ``train.data.splits``: leave-one-out (last item test,
second to last validation; ``num_val_users`` = gSASRec-style sampled validation users) or the
global temporal split. ``min_count`` > 1 applies a k-core filter first (default 1: none).

Malformed input raises `DataFormatError` naming the file and the 1-based line: a line with too
few or too many fields, an empty field, a non-integer timestamp, a user listed on two lines of a
sequence file. Nothing is dropped silently: blank lines, and sequence-file users with no item,
are skipped and counted in ``metadata["skipped"]`` (the binaries log it).
"""

from __future__ import annotations

import logging
from typing import Optional

import numpy as np

from train.data.readers import _is_int, _read_text, _split_lines
from train.data.records import DataFormatError, SequenceData
from train.data.splits import build_sequence_data

__all__ = ["load_interactions", "load_sequences", "read_interactions", "read_sequences"]

_USER_NAMES = {"user", "user_id", "userid", "uid", "users", "customer", "customer_id"}
_ITEM_NAMES = {
  "item",
  "item_id",
  "itemid",
  "iid",
  "items",
  "movie",
  "movie_id",
  "movieid",
  "product",
  "product_id",
  "asin",
}


def _codes(tokens: list) -> tuple:
  """(codes int64 [n], originals list) with originals sorted numerically when every token is an
  integer, else as strings; codes index originals."""
  if all(_is_int(t) for t in set(tokens)):
    originals, codes = np.unique(np.array([int(t) for t in tokens], np.int64), return_inverse=True)
    return codes.astype(np.int64), [int(v) for v in originals]
  originals, codes = np.unique(np.array(tokens, dtype=object).astype(str), return_inverse=True)
  return codes.astype(np.int64), [str(v) for v in originals]


def read_sequences(path) -> dict:
  """Parses a sequence file (module docstring).

  Returns:
    dict(user=[str per interaction], item=[str ...], position=int64 [n] (index in the user's
    line), skipped=dict(blank_lines, users_without_items)).
  """
  users, items, positions = [], [], []
  seen = {}
  skipped = dict(blank_lines=0, users_without_items=0)
  for k, line in enumerate(_split_lines(_read_text(path))):
    tokens = line.split()
    if not tokens:
      skipped["blank_lines"] += 1
      continue
    user = tokens[0]
    if user in seen:
      raise DataFormatError(
        path,
        k + 1,
        f"user {user!r} already has a line (line "
        f"{seen[user]}): a sequence file holds one line per user",
      )
    seen[user] = k + 1
    if len(tokens) == 1:
      skipped["users_without_items"] += 1
      continue
    users.extend([user] * (len(tokens) - 1))
    items.extend(tokens[1:])
    positions.extend(range(len(tokens) - 1))
  if not users:
    raise DataFormatError(path, None, "no interaction found (expected lines 'user item item ...')")
  return dict(user=users, item=items, position=np.array(positions, np.int64), skipped=skipped)


def _separator(first_line: str) -> Optional[str]:
  if "\t" in first_line:
    return "\t"
  if "," in first_line:
    return ","
  return None  # whitespace


def _is_header(fields: list) -> bool:
  names = [f.strip().strip('"').lower() for f in fields]
  if len(names) >= 2 and names[0] in _USER_NAMES and names[1] in _ITEM_NAMES:
    return True
  return len(names) == 3 and not _is_int(names[2])


def read_interactions(path) -> dict:
  """Parses an interactions table (module docstring).

  Returns:
    dict(user=[str ...], item=[str ...], timestamp=int64 [n] or None, header=bool,
    skipped=dict(blank_lines)).
  """
  lines = _split_lines(_read_text(path))
  first = next((l for l in lines if l.strip()), None)
  if first is None:
    raise DataFormatError(path, None, "no interaction found (empty file)")
  sep = _separator(first)
  split = (lambda l: l.split(sep)) if sep else (lambda l: l.split())
  width = len(split(first))
  if width not in (2, 3):
    raise DataFormatError(
      path,
      lines.index(first) + 1,
      f"expected 2 or 3 fields (user, item[, timestamp]), found {width}: {first.strip()!r}",
    )
  header = _is_header(split(first))
  users, items, stamps = [], [], []
  skipped = dict(blank_lines=0)
  start = lines.index(first) + (1 if header else 0)
  skipped["blank_lines"] = sum(1 for l in lines[:start] if not l.strip())
  for k in range(start, len(lines)):
    line = lines[k]
    if not line.strip():
      skipped["blank_lines"] += 1
      continue
    fields = [f.strip() for f in split(line)]
    if len(fields) != width:
      raise DataFormatError(
        path,
        k + 1,
        f"expected {width} fields like the first line, found {len(fields)}: {line.strip()!r}",
      )
    for name, value in zip(("user", "item", "timestamp"), fields):
      if not value:
        raise DataFormatError(path, k + 1, f"empty {name} field: {line.strip()!r}")
    if width == 3 and not _is_int(fields[2]):
      raise DataFormatError(path, k + 1, f"timestamp {fields[2]!r} is not an integer")
    users.append(fields[0])
    items.append(fields[1])
    if width == 3:
      stamps.append(int(fields[2]))
  if not users:
    raise DataFormatError(path, None, "no interaction found (only a header)")
  return dict(
    user=users,
    item=items,
    header=header,
    skipped=skipped,
    timestamp=np.array(stamps, np.int64) if width == 3 else None,
  )


def _build(
  name: str,
  path,
  users: list,
  items: list,
  timestamps: np.ndarray,
  *,
  fmt: str,
  skipped: dict,
  split: str,
  min_count: int,
  **split_kwargs,
) -> SequenceData:
  ucodes, uoriginals = _codes(users)
  icodes, ioriginals = _codes(items)
  data = build_sequence_data(
    name,
    ucodes,
    icodes,
    timestamps,
    split=split,
    min_count=min_count,
    metadata=dict(source=str(path), format=fmt, skipped=skipped),
    **split_kwargs,
  )
  # build_sequence_data renumbered the codes that survived the k-core filter in code order:
  # map its originals (codes) back to the file's ids.
  meta = data.metadata
  meta["user_original_ids"] = [uoriginals[c] for c in meta["user_original_ids"]]
  meta["item_original_ids"] = [ioriginals[c] for c in meta["item_original_ids"]]
  if any(skipped.values()):
    logging.warning(
      "%s: skipped %s",
      path,
      ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in skipped.items() if v),
    )
  return data


def load_sequences(
  data_path,
  *,
  split: str = "leave_one_out",
  name: str = "sequences",
  min_count: int = 1,
  **split_kwargs,
) -> SequenceData:
  """A sequence file as `SequenceData` (module docstring). The order within a line is time
  order, so only ``split="leave_one_out"`` is possible (a global time split needs timestamps).

  split_kwargs: ``num_val_users``, ``val_seed`` (`train.data.splits.leave_one_out`).
  """
  if split != "leave_one_out":
    raise ValueError(
      f"a sequence file has no timestamps: only split='leave_one_out', got "
      f"{split!r} (use an interactions table with a timestamp column)"
    )
  r = read_sequences(data_path)
  return _build(
    name,
    data_path,
    r["user"],
    r["item"],
    r["position"],
    fmt="sequences",
    skipped=r["skipped"],
    split=split,
    min_count=min_count,
    **split_kwargs,
  )


def load_interactions(
  data_path,
  *,
  split: str = "leave_one_out",
  name: str = "interactions",
  min_count: int = 1,
  **split_kwargs,
) -> SequenceData:
  """An interactions table as `SequenceData` (module docstring).

  split_kwargs: ``num_val_users``, ``val_seed`` (leave-one-out), ``temporal_fraction``,
  ``drop_unseen_targets``, ``drop_empty_history`` (temporal; `train.data.splits`).
  """
  r = read_interactions(data_path)
  if r["timestamp"] is None:
    if split == "temporal":
      raise DataFormatError(
        data_path, None, "the temporal split needs a timestamp column (user,item,timestamp)"
      )
    timestamps = np.zeros(len(r["user"]), np.int64)  # file order breaks the ties
  else:
    timestamps = r["timestamp"]
  return _build(
    name,
    data_path,
    r["user"],
    r["item"],
    timestamps,
    fmt="interactions",
    skipped=r["skipped"],
    split=split,
    min_count=min_count,
    **split_kwargs,
  )
