"""train.data: the load() dispatcher and the gSASRec reader (ML-1M real files, small generated
folders in the same layout, corrupt copies), DataConfig.load."""

import json
import pathlib

import numpy as np
import pytest

from train import data as D


@pytest.fixture(scope="module")
def ml1m(data_dir):
  return D.load("ml1m", data_dir / "ml1m")


def _read_lines(path):
  return [[int(t) for t in line.split()] for line in pathlib.Path(path).read_text().splitlines()]


def test_ml1m_sizes_match_stats(ml1m, data_dir):
  stats = json.loads((data_dir / "ml1m" / "dataset_stats.json").read_text())
  assert (ml1m.num_items, ml1m.num_users) == (3416, 6040)
  assert stats["num_users"] == 6040 and stats["num_items"] == 3416
  assert len(ml1m.train_sequences) == 6040
  assert ml1m.test.num_queries == 6040 and ml1m.val.num_queries == 512
  # Every interaction is in the test input or is the test target.
  total = sum(s.size for s in ml1m.test.inputs) + ml1m.test.num_queries
  assert total == stats["num_interactions"] == 999611
  ml1m.validate()
  assert all(s.dtype == np.int64 for s in ml1m.train_sequences)


def test_ml1m_parse_matches_plain_python_reader(ml1m, data_dir):
  root = data_dir / "ml1m"
  train = _read_lines(root / "train" / "input.txt")
  test_in = _read_lines(root / "test" / "input.txt")
  test_out = [l[0] for l in _read_lines(root / "test" / "output.txt")]
  val_out = [l[0] for l in _read_lines(root / "val" / "output.txt")]
  for u in (0, 1, 13, 2999, 6039):
    assert ml1m.train_sequences[u].tolist() == train[u]
    assert ml1m.test.inputs[u].tolist() == test_in[u]
  assert ml1m.test.targets.tolist() == test_out
  assert ml1m.val.targets.tolist() == val_out
  counts = np.zeros(3417, np.int64)
  for line in train:
    for i in line:
      counts[i] += 1
  np.testing.assert_array_equal(ml1m.item_counts, counts)


def test_ml1m_validation_users_are_gsasrec_choice(ml1m):
  chosen = np.random.RandomState(42).choice(6040, 512, replace=False)
  expected = np.sort(chosen[(chosen >= 1) & (chosen <= 6040)])
  np.testing.assert_array_equal(ml1m.val.user_ids, expected)
  np.testing.assert_array_equal(ml1m.test.user_ids, np.arange(1, 6041))
  val_set = set(ml1m.val.user_ids.tolist())
  for k, u in enumerate(ml1m.val.user_ids[:50]):
    full_input = ml1m.test.inputs[u - 1]
    # val user: train = items[:-3], val input = items[:-2], val target = items[-2].
    assert ml1m.val.inputs[k].tolist() == full_input[:-1].tolist()
    assert ml1m.val.targets[k] == full_input[-1]
    assert ml1m.train_sequences[u - 1].tolist() == full_input[:-2].tolist()
  non_val = [u for u in range(1, 200) if u not in val_set]
  for u in non_val:
    assert ml1m.train_sequences[u - 1].tolist() == ml1m.test.inputs[u - 1][:-1].tolist()
  assert ml1m.val.rated is ml1m.val.inputs


def _write_tiny_gsasrec(root, seqs, val_users, num_items):
  """Writes a gSASRec layout for full sequences `seqs` (user order); val_users 0-based."""
  for sub in ("train", "val", "test"):
    (root / sub).mkdir(parents=True)
  fmt = lambda xs: " ".join(map(str, xs)) + "\n"
  (root / "train" / "input.txt").write_text(
    "".join(fmt(s[:-3] if u in val_users else s[:-2]) for u, s in enumerate(seqs))
  )
  (root / "test" / "input.txt").write_text("".join(fmt(s[:-1]) for s in seqs))
  (root / "test" / "output.txt").write_text("".join(f"{s[-1]}\n" for s in seqs))
  (root / "val" / "input.txt").write_text("".join(fmt(seqs[u][:-2]) for u in sorted(val_users)))
  (root / "val" / "output.txt").write_text("".join(f"{seqs[u][-2]}\n" for u in sorted(val_users)))
  (root / "dataset_stats.json").write_text(
    json.dumps(dict(num_users=len(seqs), num_items=num_items, num_interactions=sum(map(len, seqs))))
  )


@pytest.fixture()
def tiny_root(tmp_path):
  rng = np.random.default_rng(0)
  seqs = [
    rng.choice(np.arange(1, 21), size=rng.integers(5, 9), replace=False).tolist() for _ in range(6)
  ]
  root = tmp_path / "tiny"
  _write_tiny_gsasrec(root, seqs, {1, 4}, 20)
  return root, seqs


def test_tiny_gsasrec_roundtrip(tiny_root):
  root, seqs = tiny_root
  d = D.load("ml1m", root)
  np.testing.assert_array_equal(d.val.user_ids, [2, 5])
  assert [s.tolist() for s in d.train_sequences] == [
    s[:-3] if u in (1, 4) else s[:-2] for u, s in enumerate(seqs)
  ]
  assert d.val.targets.tolist() == [seqs[1][-2], seqs[4][-2]]


def test_any_gsasrec_folder_loads_with_its_own_name(tmp_path):
  """A generated folder in the gSASRec layout (as the paper's Steam / Gowalla files come):
  every split is the sequences' suffix the layout prescribes, counts are the training items."""
  rng = np.random.default_rng(3)
  num_items = 40
  seqs = [
    rng.integers(1, num_items + 1, size=rng.integers(4, 12)).tolist()  # repeats allowed
    for _ in range(25)
  ]
  val_users = {0, 3, 7, 8, 20}
  root = tmp_path / "steam_like"
  _write_tiny_gsasrec(root, seqs, val_users, num_items)
  d = D.load("gsasrec", root)
  assert d.name == "steam_like" and d.num_items == num_items and len(d.train_sequences) == 25
  for u, s in enumerate(seqs):
    assert d.train_sequences[u].tolist() == (s[:-3] if u in val_users else s[:-2])
    assert d.test.inputs[u].tolist() == s[:-1] and d.test.targets[u] == s[-1]
  assert d.val.user_ids.tolist() == [u + 1 for u in sorted(val_users)]
  assert d.val.targets.tolist() == [seqs[u][-2] for u in sorted(val_users)]
  counts = np.zeros(num_items + 1, np.int64)
  for u, s in enumerate(seqs):
    for i in s[:-3] if u in val_users else s[:-2]:
      counts[i] += 1
  np.testing.assert_array_equal(d.item_counts, counts)
  # The same folder through the data settings of the binaries; ml1m is the same reader.
  via_config = D.DataConfig(dataset="gsasrec", data_path=str(root)).load()
  np.testing.assert_array_equal(via_config.item_counts, d.item_counts)
  assert D.load("ml1m", root).name == "ml1m"
  with pytest.raises(ValueError, match="needs data_path"):
    D.load("gsasrec")
  with pytest.raises(ValueError, match="data_path"):
    D.DataConfig(dataset="gsasrec")


def _replace_line(path, line_no, text):
  lines = path.read_text().splitlines()
  lines[line_no - 1] = text
  path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
  "rel, line_no, text, message",
  [
    ("train/input.txt", 3, "1 2 x 4", "'x' is not an integer"),
    ("train/input.txt", 2, "1 2 99", "outside 1..20"),
    ("test/output.txt", 4, "3 4", "exactly one item id"),
    ("val/input.txt", 2, "1 2 3", "not their test input"),
    ("val/output.txt", 1, "0", "outside 1..20"),
    ("train/input.txt", 5, "", "training line is not"),
    ("test/input.txt", 6, "", "empty line"),
  ],
)
def test_gsasrec_malformed_line_names_file_and_line(tiny_root, rel, line_no, text, message):
  root, _ = tiny_root
  path = root / rel
  _replace_line(path, line_no, text)
  with pytest.raises(D.DataFormatError) as err:
    D.load("ml1m", root)
  assert str(path) in str(err.value) and f"line {line_no}" in str(err.value)
  assert message in str(err.value)
  assert err.value.line == line_no


def test_gsasrec_missing_files_and_bad_stats(tiny_root):
  root, _ = tiny_root
  (root / "test" / "output.txt").unlink()
  with pytest.raises(FileNotFoundError, match="test/output.txt"):
    D.load("ml1m", root)
  (root / "dataset_stats.json").write_text('{"num_users": 6,\n "num_items": }')
  with pytest.raises(D.DataFormatError, match=r"dataset_stats.json, line 2"):
    D.load("ml1m", root)
  with pytest.raises(FileNotFoundError, match="nowhere"):
    D.load("ml1m", root / "nowhere")


def test_load_rejects_bad_arguments():
  with pytest.raises(ValueError, match="unknown dataset"):
    D.load("imagenet")
  with pytest.raises(ValueError, match="unknown split"):
    D.load("synthetic", split="random")
  with pytest.raises(ValueError, match="no timestamps"):
    D.load("ml1m", split="temporal")


def test_default_data_root_points_at_shared_data(data_dir, monkeypatch):
  monkeypatch.delenv("TFRS_LOGQ_DATA", raising=False)
  assert (
    D.default_data_root().resolve()
    == (pathlib.Path(__file__).resolve().parents[4] / "shared" / "data").resolve()
  )
  monkeypatch.setenv("TFRS_LOGQ_DATA", str(data_dir))
  assert D.default_data_root() == data_dir
