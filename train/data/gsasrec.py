"""Reader for any dataset folder in the gSASRec leave-one-out layout.

The logQ paper's code (and gSASRec's) ship MovieLens-1M, Steam and Gowalla this way; `load("ml1m")`
is this reader on <data root>/ml1m, `load("gsasrec", folder)` on any other folder.

Layout of `data_path` (see ../shared/data/README.md):
  dataset_stats.json        {"num_users", "num_items", "num_interactions"}
  train/input.txt           one line per user (user order): items[:-3] for validation users,
                            items[:-2] for the others (oldest first, space separated)
  val/input.txt, output.txt validation users in user order: input items[:-2], target items[-2]
  test/input.txt, output.txt every user: input items[:-1], target items[-1]

The validation users are found from the files themselves (their training line is two items
shorter than their test input) and every line is checked against the others, so a corrupt or
mismatched file raises `DataFormatError` naming the file and line. (For the shipped ML-1M files
they are `numpy.random.RandomState(42).choice(6040, 512, replace=False)` read as 1-based ids.)
Rated-item filtering at evaluation uses each query's input, as in the paper.
"""

from __future__ import annotations

import json
import pathlib
from typing import Optional

import numpy as np

from train.data.readers import read_id_lines, read_single_ids
from train.data.records import DataFormatError, EvalSplit, SequenceData, count_items


def _stats(root: pathlib.Path) -> dict:
  path = root / "dataset_stats.json"
  if not path.is_file():
    raise FileNotFoundError(
      f"data file not found: {path} (expected the gSASRec layout: "
      "dataset_stats.json, train/input.txt, val/{input,output}.txt, "
      "test/{input,output}.txt)"
    )
  try:
    stats = json.loads(path.read_text())
  except json.JSONDecodeError as e:
    raise DataFormatError(path, e.lineno, f"invalid JSON: {e.msg}") from None
  for key in ("num_users", "num_items", "num_interactions"):
    if not isinstance(stats.get(key), int) or stats[key] < 1:
      raise DataFormatError(path, None, f"missing or invalid positive integer {key!r}")
  return stats


def load_gsasrec(data_path, *, name: Optional[str] = None) -> SequenceData:
  """Loads and cross-checks a gSASRec leave-one-out dataset folder (see module docstring).

  Args:
    data_path: the folder.
    name: the dataset's name (default: the folder's name).

  Returns:
    SequenceData with one training sequence per user (user ids 1..num_users), `val` = the
    validation users' queries, `test` = every user's query, item_counts from train/input.txt.
  """
  root = pathlib.Path(data_path)
  if not root.is_dir():
    raise FileNotFoundError(f"gSASRec dataset folder not found: {root}")
  stats = _stats(root)
  name = name or root.resolve().name
  num_users, num_items = stats["num_users"], stats["num_items"]
  paths = {
    k: root / k.split("_")[0] / f"{k.split('_')[1]}.txt"
    for k in ("train_input", "val_input", "val_output", "test_input", "test_output")
  }
  train = read_id_lines(paths["train_input"], num_items=num_items, allow_empty=True)
  test_in = read_id_lines(paths["test_input"], num_items=num_items, allow_empty=False)
  test_out = read_single_ids(paths["test_output"], num_items=num_items)
  val_in = read_id_lines(paths["val_input"], num_items=num_items, allow_empty=False)
  val_out = read_single_ids(paths["val_output"], num_items=num_items)
  for key, got in (
    ("train_input", len(train)),
    ("test_input", len(test_in)),
    ("test_output", len(test_out)),
  ):
    if got != num_users:
      raise DataFormatError(
        paths[key], got, f"{got} lines, but dataset_stats.json says {num_users} users"
      )
  if len(val_in) != len(val_out):
    raise DataFormatError(
      paths["val_output"],
      len(val_out),
      f"{len(val_out)} targets for {len(val_in)} validation inputs",
    )

  val_users = []
  for u in range(num_users):
    extra = test_in[u].size - train[u].size
    if extra not in (1, 2) or not np.array_equal(train[u], test_in[u][: train[u].size]):
      raise DataFormatError(
        paths["train_input"],
        u + 1,
        "training line is not test/input.txt's line minus its last 1 "
        "(or, for validation users, 2) items",
      )
    if extra == 2:
      val_users.append(u)
  if len(val_users) != len(val_in):
    raise DataFormatError(
      paths["val_input"],
      None,
      f"{len(val_in)} lines, but train/input.txt implies {len(val_users)} validation users",
    )
  for k, u in enumerate(val_users):
    if not np.array_equal(val_in[k], test_in[u][:-1]):
      raise DataFormatError(
        paths["val_input"],
        k + 1,
        f"validation input of user {u + 1} is not their test input minus its last item",
      )
    if val_out[k] != test_in[u][-1]:
      raise DataFormatError(
        paths["val_output"],
        k + 1,
        f"validation target of user {u + 1} is not the last item of their test input",
      )
  total = int(sum(s.size for s in test_in)) + num_users
  if total != stats["num_interactions"]:
    raise DataFormatError(
      root / "dataset_stats.json",
      None,
      f"num_interactions={stats['num_interactions']} but the test files hold {total}",
    )
  val_ids = np.array(val_users, np.int64) + 1
  return SequenceData(
    name=name,
    num_items=num_items,
    train_sequences=train,
    val=EvalSplit(val_in, val_out, val_ids),
    test=EvalSplit(test_in, test_out, np.arange(1, num_users + 1, dtype=np.int64)),
    item_counts=count_items(train, num_items),
    metadata=dict(
      source=str(root),
      format="gsasrec",
      split="leave_one_out",
      num_users=num_users,
      num_interactions=total,
      val_user_ids=val_ids,
    ),
  )
