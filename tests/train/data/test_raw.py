"""Raw MovieLens (u.data / ratings.dat): parsing, 5-core, leave-one-out and temporal splits.

References are plain-Python re-implementations (dicts and sorted lists), independent of the
numpy code under test.
"""

import collections

import numpy as np
import pytest

from train import data as D
from train.data.readers import read_ratings


def _python_rows(path, sep=None):
  rows = []
  for line in path.read_text().splitlines():
    if line.strip():
      u, i, r, t = line.split(sep)
      rows.append((int(u), int(i), float(r), int(t)))
  return rows


def _python_core(rows, k, iterate):
  keep = list(rows)
  while True:
    uc = collections.Counter(r[0] for r in keep)
    ic = collections.Counter(r[1] for r in keep)
    new = [r for r in keep if uc[r[0]] >= k and ic[r[1]] >= k]
    done = len(new) == len(keep)
    keep = new
    if done or not iterate:
      return keep


def _python_sequences(rows):
  """user -> items ordered by (timestamp, file order), with ids renumbered by sorted rank."""
  umap = {u: n + 1 for n, u in enumerate(sorted({r[0] for r in rows}))}
  imap = {i: n + 1 for n, i in enumerate(sorted({r[1] for r in rows}))}
  per_user = collections.defaultdict(list)
  for line_no, (u, i, _, t) in enumerate(rows):
    per_user[umap[u]].append((t, line_no, imap[i]))
  return {u: [x[2] for x in sorted(v)] for u, v in per_user.items()}, len(imap)


@pytest.fixture(scope="module")
def udata(data_dir):
  return data_dir / "ml-100k" / "u.data"


@pytest.fixture(scope="module")
def rows(udata):
  return _python_rows(udata)


def test_read_u_data_matches_python(udata, rows):
  r = read_ratings(udata)
  assert r["user"].shape == (100000,)
  assert len(np.unique(r["user"])) == 943 and len(np.unique(r["item"])) == 1682
  np.testing.assert_array_equal(r["user"], [x[0] for x in rows])
  np.testing.assert_array_equal(r["item"], [x[1] for x in rows])
  np.testing.assert_array_equal(r["rating"], [x[2] for x in rows])
  np.testing.assert_array_equal(r["timestamp"], [x[3] for x in rows])


def test_ratings_dat_double_colon_format_equals_tab_format(tmp_path, rows):
  sub = rows[:3000]
  dat = tmp_path / "ratings.dat"
  dat.write_text("".join(f"{u}::{i}::{int(r)}::{t}\n" for u, i, r, t in sub))
  tab = tmp_path / "u.data"
  tab.write_text("".join(f"{u}\t{i}\t{int(r)}\t{t}\n" for u, i, r, t in sub))
  a = D.load("movielens_raw", dat, min_count=2)
  b = D.load("movielens_raw", tmp_path, min_count=2)  # folder: ratings.dat is found first
  c = D.load("movielens_raw", tab, min_count=2)
  assert a.metadata["source"] == b.metadata["source"] == str(dat)
  assert [s.tolist() for s in a.train_sequences] == [s.tolist() for s in c.train_sequences]
  np.testing.assert_array_equal(a.test.targets, c.test.targets)


def test_five_core_iterated_matches_python_and_holds(udata, rows):
  r = read_ratings(udata)
  for iterate in (True, False):
    mask = D.k_core_mask(r["user"], r["item"], min_count=5, iterate=iterate)
    ref = _python_core(rows, 5, iterate)
    assert mask.sum() == len(ref)
    assert [rows[k] for k in np.flatnonzero(mask)] == ref
  mask = D.k_core_mask(r["user"], r["item"], min_count=5, iterate=True)
  _, ucount = np.unique(r["user"][mask], return_counts=True)
  _, icount = np.unique(r["item"][mask], return_counts=True)
  assert ucount.min() >= 5 and icount.min() >= 5
  assert mask.sum() < 100000  # ml-100k has items with < 5 ratings


def test_k_core_iteration_matters_on_a_chain():
  # k = 3. One pass keeps only user 3's two ratings of item 7 (users 1, 2 and items 8, 9
  # have < 3); user 3 is then left with 2 < 3 ratings, so iterating removes everything.
  users = np.array([1, 1, 2, 2, 3, 3, 3])
  items = np.array([7, 8, 8, 9, 7, 9, 7])
  once = D.k_core_mask(users, items, min_count=3, iterate=False)
  fixed = D.k_core_mask(users, items, min_count=3, iterate=True)
  ref_once = _python_core(list(zip(users, items)), 3, False)
  ref_fixed = _python_core(list(zip(users, items)), 3, True)
  assert once.sum() == len(ref_once) and fixed.sum() == len(ref_fixed)
  assert once.sum() == 2 and fixed.sum() == 0


def test_leave_one_out_matches_python_reference(udata, rows):
  d = D.load("movielens_raw", udata)
  seqs, num_items = _python_sequences(_python_core(rows, 5, True))
  assert d.num_items == num_items and d.num_users == len(seqs)
  assert d.metadata["iterate_core"] is True
  for k, u in enumerate(d.test.user_ids):
    full = seqs[u]
    assert d.test.targets[k] == full[-1] and d.test.inputs[k].tolist() == full[:-1]
  for k, u in enumerate(d.val.user_ids):
    full = seqs[u]
    assert d.val.targets[k] == full[-2] and d.val.inputs[k].tolist() == full[:-2]
  for s, u in zip(d.train_sequences, d.user_ids):
    assert s.tolist() == seqs[u][:-2]
  counts = collections.Counter(i for u in seqs for i in seqs[u][:-2])
  assert d.item_counts.tolist() == [counts.get(i, 0) for i in range(num_items + 1)]
  # timestamps parallel the training sequences, non-decreasing.
  assert all(np.all(np.diff(t) >= 0) for t in d.timestamps)
  d.validate()


def test_leave_one_out_ties_keep_file_order(tmp_path):
  lines = [
    "1\t10\t5\t100",
    "1\t11\t5\t100",
    "1\t12\t5\t50",
    "1\t13\t5\t100",
    "2\t10\t5\t1",
    "2\t11\t5\t1",
    "2\t12\t5\t1",
  ]
  path = tmp_path / "u.data"
  path.write_text("\n".join(lines) + "\n")
  d = D.load("movielens_raw", path, min_count=1)
  # user 1 by (time, line): 12 (t=50), 10, 11, 13 -> renumbered 3, 1, 2, 4
  assert d.test.inputs[0].tolist() == [3, 1, 2] and d.test.targets[0] == 4
  assert d.val.targets[0] == 2 and d.train_sequences[0].tolist() == [3, 1]
  assert d.test.targets[1] == 3 and d.val.targets[1] == 2


def test_sampled_validation_users_follow_gsasrec(udata):
  d = D.load("movielens_raw", udata, num_val_users=100, val_seed=7)
  chosen = np.random.RandomState(7).choice(943, 100, replace=False)
  np.testing.assert_array_equal(d.val.user_ids, np.sort(chosen[chosen >= 1]))
  val = set(d.val.user_ids.tolist())
  for s, u, inp in zip(d.train_sequences, d.user_ids, d.test.inputs):
    expected = inp[:-1] if u in val else inp  # test input = items[:-1]
    assert s.tolist() == expected.tolist()


def test_temporal_split_properties(udata, rows):
  d = D.load("movielens_raw", udata, split="temporal")
  core = _python_core(rows, 5, True)
  n_total = len(core)
  n_eval = round(0.1 * n_total)
  meta = d.metadata
  assert meta["boundaries"]["num_val"] == meta["boundaries"]["num_test"] == n_eval
  # Sizes: ~10% each, exactly after adding the dropped queries back.
  dropped = meta["dropped_queries"]
  assert d.val.num_queries + dropped["val_unseen_target"] + dropped["val_empty_history"] == n_eval
  assert (
    d.test.num_queries + dropped["test_unseen_target"] + dropped["test_empty_history"] == n_eval
  )
  assert d.num_train_interactions == n_total - 2 * n_eval
  assert d.val.num_queries > 0.9 * n_eval and d.test.num_queries > 0.9 * n_eval
  # Time order of the periods.
  train_max = max(int(t.max()) for t in d.timestamps)
  assert train_max <= d.val.timestamps.min()
  assert d.val.timestamps.max() <= d.test.timestamps.min()
  assert np.all(np.diff(d.val.timestamps) >= 0) and np.all(np.diff(d.test.timestamps) >= 0)
  # Unseen targets and empty histories were dropped.
  assert np.all(d.item_counts[d.val.targets] > 0) and np.all(d.item_counts[d.test.targets] > 0)
  assert min(s.size for s in d.test.inputs) >= 1
  d.validate()


def test_temporal_inputs_are_all_earlier_interactions(udata, rows):
  d = D.load("movielens_raw", udata, split="temporal")
  core = _python_core(rows, 5, True)
  umap = {u: n + 1 for n, u in enumerate(sorted({r[0] for r in core}))}
  imap = {i: n + 1 for n, i in enumerate(sorted({r[1] for r in core}))}
  order = sorted(range(len(core)), key=lambda k: (core[k][3], k))  # global (time, file order)
  history = collections.defaultdict(list)
  by_event = {}
  for rank, k in enumerate(order):
    u, i, _, t = core[k]
    by_event[(umap[u], imap[i])] = (list(history[umap[u]]), t, rank)
    history[umap[u]].append(imap[i])
  n_eval = round(0.1 * len(core))
  for split, lo, hi in (
    (d.val, len(core) - 2 * n_eval, len(core) - n_eval),
    (d.test, len(core) - n_eval, len(core)),
  ):
    for q in range(0, split.num_queries, 37):
      hist, t, rank = by_event[(split.user_ids[q], split.targets[q])]
      assert split.inputs[q].tolist() == hist  # includes validation-period items for test
      assert split.timestamps[q] == t and lo <= rank < hi
  # Training sequences hold exactly each user's training-period events.
  train_events = collections.defaultdict(list)
  for k in order[: len(core) - 2 * n_eval]:
    train_events[umap[core[k][0]]].append(imap[core[k][1]])
  assert {int(u): s.tolist() for u, s in zip(d.user_ids, d.train_sequences)} == train_events


def test_temporal_keeps_cold_queries_when_asked(udata):
  d = D.load(
    "movielens_raw",
    udata,
    split="temporal",
    temporal_fraction=0.2,
    drop_unseen_targets=False,
    drop_empty_history=False,
  )
  n_eval = d.metadata["boundaries"]["num_test"]
  assert d.val.num_queries == d.test.num_queries == n_eval
  assert min(s.size for s in d.val.inputs) == 0  # some user's first interaction
  assert np.any(d.item_counts[d.test.targets] == 0)
  seen_users = set(d.user_ids.tolist())
  assert any(u not in seen_users for u in d.test.user_ids)  # users unseen in training
  with pytest.raises(ValueError, match="fraction"):
    D.load("movielens_raw", udata, split="temporal", temporal_fraction=0.6)


@pytest.mark.parametrize(
  "content, line_no, message",
  [
    ("1\t2\t3\t4\n1\t2\t3\n", 2, "expected 4 fields"),
    ("1\t2\t3\t4\n\n1\t2\t3\t4\t5\n", 3, "expected 4 fields"),
    ("1\t2\t3\t4\nx\t2\t3\t4\n", 2, "user 'x' is not an integer"),
    ("1\t2\t3\t4\n1\t2.5\t3\t4\n", 2, "item '2.5' is not an integer"),
    ("1::2::3::4\n1::2::high::4\n", 2, "rating 'high' is not a number"),
    ("1::2::3::4\n1::2::3::4\n1::2::3::1e9\n", 3, "timestamp '1e9' is not an integer"),
  ],
)
def test_malformed_ratings_name_file_and_line(tmp_path, content, line_no, message):
  path = tmp_path / "ratings.dat"
  path.write_text(content)
  with pytest.raises(D.DataFormatError) as err:
    D.load("movielens_raw", path)
  assert f"{path}, line {line_no}: " in str(err.value) and message in str(err.value)


def test_missing_or_empty_ratings(tmp_path):
  with pytest.raises(FileNotFoundError, match="no ratings file"):
    D.load("movielens_raw", tmp_path)
  with pytest.raises(FileNotFoundError, match="missing.dat"):
    D.load("movielens_raw", tmp_path / "missing.dat")
  (tmp_path / "u.data").write_text("\n")
  with pytest.raises(D.DataFormatError, match="no ratings"):
    D.load("movielens_raw", tmp_path)
  (tmp_path / "u.data").write_text("1\t2\t3\t4\n")
  with pytest.raises(ValueError, match="no interaction left after 5-core"):
    D.load("movielens_raw", tmp_path)
