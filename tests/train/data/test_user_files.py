"""train.data.user_files: a user's sequence file and interactions table -> SequenceData.

The expected splits come from a plain-Python reading of the description (dicts, sorted lists,
the protocol's slicing), independent of the numpy code under test. Broken files must raise
DataFormatError naming the file and the line.
"""

import collections
import json

import numpy as np
import pytest

from train import data as D
from train.data.user_files import read_interactions


def _python_loo(per_user):
  """{user: [items oldest first]} -> the leave-one-out protocol, every user validated."""
  out = dict(train={}, val={}, test={})
  for u, items in per_user.items():
    if len(items) >= 2:
      out["test"][u] = (items[:-1], items[-1])
    if len(items) >= 3:
      out["val"][u] = (items[:-2], items[-2])
      out["train"][u] = items[:-2]
    else:
      out["train"][u] = items[: max(len(items) - 1, 1)]
  return out


def _as_original(data, ids):
  return [data.metadata["item_original_ids"][i - 1] for i in ids]


def _check_split(data, expected):
  users = data.metadata["user_original_ids"]
  got_train = {
    users[u - 1]: _as_original(data, s) for u, s in zip(data.user_ids, data.train_sequences)
  }
  assert got_train == expected["train"]
  for name in ("val", "test"):
    split = getattr(data, name)
    got = {
      users[u - 1]: (_as_original(data, i), data.metadata["item_original_ids"][t - 1])
      for u, i, t in zip(split.user_ids, split.inputs, split.targets)
    }
    assert got == expected[name], name


def test_sequence_file_string_ids_leave_one_out(tmp_path):
  lines = {
    "alice": ["x", "y", "z", "y"],
    "bob": ["y", "w"],
    "carol": ["q", "x", "w", "z", "z"],
    "dave": ["x"],
  }
  path = tmp_path / "seq.txt"
  path.write_text("\n".join(" ".join([u] + v) for u, v in lines.items()) + "\n")
  data = D.load("sequences", path)
  assert data.num_items == 5 and len(data.train_sequences) == 4
  # Renumbered in string order; the map gives the file's ids back.
  assert data.metadata["item_original_ids"] == ["q", "w", "x", "y", "z"]
  assert data.metadata["user_original_ids"] == ["alice", "bob", "carol", "dave"]
  _check_split(data, _python_loo(lines))
  data.validate()


def test_sequence_file_integer_ids_keep_numeric_order(tmp_path):
  path = tmp_path / "seq.txt"
  path.write_text("10 2 10 30\n9 30 2\n\n")  # a blank last line is skipped and counted
  data = D.load("sequences", path)
  assert data.metadata["item_original_ids"] == [2, 10, 30]  # numeric, not "10" < "2"
  assert data.metadata["user_original_ids"] == [9, 10]
  assert data.metadata["skipped"] == {"blank_lines": 1, "users_without_items": 0}
  _check_split(data, _python_loo({10: [2, 10, 30], 9: [30, 2]}))


def test_sequence_file_sampled_validation_users(tmp_path):
  rng = np.random.RandomState(0)
  lines = {u: [int(i) for i in rng.randint(1, 40, size=rng.randint(3, 9))] for u in range(1, 51)}
  path = tmp_path / "seq.txt"
  path.write_text("".join(f"{u} {' '.join(map(str, v))}\n" for u, v in lines.items()))
  data = D.DataConfig(dataset="sequences", data_path=str(path), val_users=10).load()
  chosen = set(np.random.RandomState(42).choice(50, 10, replace=False).tolist()) - {0}
  users = data.metadata["user_original_ids"]
  assert {users[u - 1] for u in data.val.user_ids} == chosen
  for u, seq in zip(data.user_ids, data.train_sequences):
    n = len(lines[users[u - 1]])
    assert seq.size == (n - 2 if users[u - 1] in chosen else n - 1)
  assert data.test.num_queries == 50


def test_amazon_sports_file(data_dir):
  path = data_dir / "amazon-sports" / "sequences.txt"
  data = D.load("sequences", path)
  per_user = {}
  for line in path.read_text().splitlines():
    u, *items = line.split()
    per_user[int(u)] = [int(i) for i in items]
  assert len(per_user) == 35598 and sum(map(len, per_user.values())) == 296337
  assert data.num_items == 18357 and data.test.num_queries == 35598
  assert data.val.num_queries == 35598  # every user has >= 5 items
  # Spot-check users against the protocol (the whole file is checked by the sizes).
  users = data.metadata["user_original_ids"]
  for k in (0, 1, 17_000, 35_597):
    u = users[data.test.user_ids[k] - 1]
    assert _as_original(data, data.test.inputs[k]) == per_user[u][:-1]
    assert data.metadata["item_original_ids"][data.test.targets[k] - 1] == per_user[u][-1]
  expected = collections.Counter(i for v in per_user.values() for i in v[:-2])
  counts = {
    data.metadata["item_original_ids"][i - 1]: int(c)
    for i, c in enumerate(data.item_counts[1:], start=1)
    if c
  }
  assert counts == dict(expected)


@pytest.mark.parametrize(
  "text, header, sep",
  [
    ("user,item,timestamp\nu1,a,5\nu1,b,3\nu2,a,1\nu1,c,9\nu2,c,2\nu2,b,7\n", True, ","),
    ("u1\ta\t5\nu1\tb\t3\nu2\ta\t1\nu1\tc\t9\nu2\tc\t2\nu2\tb\t7\n", False, "\t"),
    ("userId itemId ts\nu1 a 5\nu1 b 3\nu2 a 1\nu1 c 9\nu2 c 2\nu2 b 7\n", True, " "),
  ],
)
def test_interactions_table_orders_by_timestamp(tmp_path, text, header, sep):
  path = tmp_path / "t.csv"
  path.write_text(text)
  assert read_interactions(path)["header"] is header
  data = D.load("interactions", path)
  # u1: b(3) a(5) c(9); u2: a(1) c(2) b(7)
  _check_split(data, _python_loo({"u1": ["b", "a", "c"], "u2": ["a", "c", "b"]}))


def test_interactions_without_timestamp_keep_file_order(tmp_path):
  path = tmp_path / "t.csv"
  path.write_text("user_id,item_id\n7,b\n7,a\n8,a\n7,c\n8,b\n\n8,c\n")
  data = D.load("interactions", path)
  assert data.metadata["skipped"] == {"blank_lines": 1}
  _check_split(data, _python_loo({7: ["b", "a", "c"], 8: ["a", "b", "c"]}))
  with pytest.raises(D.DataFormatError, match="timestamp column"):
    D.load("interactions", path, split="temporal")


def test_interactions_temporal_split_matches_movielens_reader(tmp_path, data_dir):
  """The same ML-100K ratings as a CSV table: the same temporal split as the raw reader."""
  raw = (data_dir / "ml-100k" / "u.data").read_text().splitlines()
  rows = [l.split("\t") for l in raw]
  path = tmp_path / "ml100k.csv"
  path.write_text("user,item,timestamp\n" + "".join(f"{u},{i},{t}\n" for u, i, _, t in rows))
  ours = D.DataConfig(
    dataset="interactions", data_path=str(path), split="temporal", min_count=5
  ).load()
  ref = D.load("movielens_raw", data_dir / "ml-100k", split="temporal")
  assert ours.num_items == ref.num_items
  assert D.fingerprint(ours)["digest"] == D.fingerprint(ref)["digest"]


@pytest.mark.parametrize(
  "kind, text, line, message",
  [
    ("sequences", "u1 a b\nu2 c\nu1 d e\n", 3, "already has a line"),
    ("sequences", "\n\n", None, "no interaction"),
    ("interactions", "user,item,timestamp\nu1,a,3\nu1,b\nu2,a,4\n", 3, "expected 3 fields"),
    ("interactions", "u1,a,3\nu1,b,soon\n", 2, "timestamp 'soon' is not an integer"),
    ("interactions", "u1,a,3\n,b,4\n", 2, "empty user field"),
    ("interactions", "u1,a,3,4\n", 1, "expected 2 or 3 fields"),
    ("interactions", "user,item\n", None, "only a header"),
    ("interactions", "", None, "empty file"),
  ],
)
def test_broken_files_name_file_and_line(tmp_path, kind, text, line, message):
  path = tmp_path / "broken.txt"
  path.write_text(text)
  with pytest.raises(D.DataFormatError, match=message) as err:
    D.load(kind, path)
  assert err.value.path == str(path) and err.value.line == line
  assert str(path) in str(err.value)


def test_missing_file_and_bad_settings(tmp_path):
  with pytest.raises(FileNotFoundError, match="nope.txt"):
    D.load("sequences", tmp_path / "nope.txt")
  with pytest.raises(ValueError, match="needs data_path"):
    D.DataConfig(dataset="interactions")
  with pytest.raises(ValueError, match="only the leave_one_out"):
    D.DataConfig(dataset="sequences", data_path="x", split="temporal")
  with pytest.raises(ValueError, match="val_users"):
    D.DataConfig(dataset="ml1m", val_users=5)


def test_users_without_items_are_counted_not_silent(tmp_path, caplog):
  path = tmp_path / "seq.txt"
  path.write_text("a 1 2 3\nb\nc 2 3 1\n")
  with caplog.at_level("WARNING"):
    data = D.load("sequences", path)
  assert data.metadata["skipped"]["users_without_items"] == 1
  assert "1 users without items" in caplog.text
  assert data.test.num_queries == 2


def test_export_writes_the_id_maps(tmp_path):
  from train.export import write_id_maps

  path = tmp_path / "seq.txt"
  path.write_text("alice x y z\nbob y x\n")
  data = D.load("sequences", path)
  written = write_id_maps(tmp_path / "export", data)
  items = (tmp_path / "export" / "item_ids.txt").read_text().splitlines()
  assert items == ["x", "y", "z"] and written["item_ids"] == "item_ids.txt"
  assert (tmp_path / "export" / "user_ids.txt").read_text().splitlines() == ["alice", "bob"]
  json.dumps(written)


def test_too_short_for_the_split_names_the_length_it_needs(tmp_path):
  """DataConfig.load (both binaries' reader) refuses data where no training sequence has the 2
  items a model learns from, naming the file, the split and the length it needs."""
  three = tmp_path / "three.csv"
  three.write_text("user,item,t\n1,10,1\n1,11,2\n1,12,3\n2,10,1\n2,12,2\n2,13,3\n")
  config = lambda **kw: D.DataConfig(dataset="interactions", data_path=str(three), **kw)
  with pytest.raises(ValueError) as e:
    config().load()  # every user validates: 3 - 2 = 1 training item each
  assert str(e.value) == (
    f"{three}: no training sequence with >= 2 items under --split=leave_one_out: a user needs "
    ">= 4 interactions (the last is held out as the test target, the one before it as the "
    "validation target); the longest training sequence has 1 item"
  )
  two = tmp_path / "two.csv"
  two.write_text("user,item\n1,10\n1,11\n2,10\n2,12\n")
  with pytest.raises(ValueError, match=r"4 interactions .*; >= 3 for a user outside the --val_"):
    D.DataConfig(dataset="interactions", data_path=str(two), val_users=1).load()
  ten = tmp_path / "ten.csv"  # ten users of one interaction each
  ten.write_text("user,item,t\n" + "".join(f"{u},{u % 3},{u}\n" for u in range(10)))
  with pytest.raises(ValueError, match="temporal: a user needs >= 2 interactions before the"):
    D.DataConfig(dataset="interactions", data_path=str(ten), split="temporal").load()
  # gSASRec protocol: the drawn ids are 0-based, so user 2 never validates and keeps 2 items
  assert np.random.RandomState(42).choice(2, 2, replace=False).tolist() == [1, 0]
  assert sorted(s.size for s in config(val_users=2).load().train_sequences) == [1, 2]
