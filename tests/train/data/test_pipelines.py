"""tf.data pipelines: windows, padding, shift, shuffling, negatives, against Python references."""

import collections

import numpy as np
import pytest

from train import data as D


def _data(lengths=(1, 2, 3, 5, 9, 12, 4, 7), num_items=30, seed=0):
  rng = np.random.default_rng(seed)
  seqs = [rng.integers(1, num_items + 1, size=n) for n in lengths]
  split = D.EvalSplit(
    [s[:-1] for s in seqs if s.size > 1],
    [s[-1] for s in seqs if s.size > 1],
    [u + 1 for u, s in enumerate(seqs) if s.size > 1],
  )
  return D.SequenceData(
    name="toy",
    num_items=num_items,
    train_sequences=seqs,
    val=split,
    test=split,
    item_counts=D.count_items(seqs, num_items),
    user_ids=np.arange(101, 101 + len(seqs)),
  )


def _pad_left(xs, length):
  xs = list(xs)[-length:] if length else []
  return [0] * (length - len(xs)) + xs


def _sasrec_reference(data, max_len):
  rows = []
  for s in data.train_sequences:
    if len(s) < 2:
      continue
    w = list(s[-(max_len + 1) :])  # the last max_len + 1 items
    rows.append((tuple(_pad_left(w[:-1], max_len)), tuple(_pad_left(w[1:], max_len))))
  return rows


def _collect(ds, keys):
  out = collections.defaultdict(list)
  for batch in ds:
    for k in keys:
      out[k].append(batch[k].numpy())
  return {k: np.concatenate(v) for k, v in out.items()}


def test_sasrec_windows_match_reference_in_order():
  data = _data()
  for max_len in (4, 11, 15):
    ds = D.sasrec_train_dataset(
      data, batch_size=3, max_len=max_len, seed=0, shuffle=False, repeat=False
    )
    got = _collect(ds, ["inputs", "targets"])
    assert got["inputs"].dtype == np.int64 and got["targets"].dtype == np.int64
    ref = _sasrec_reference(data, max_len)
    assert [tuple(r) for r in got["inputs"]] == [r[0] for r in ref]
    assert [tuple(r) for r in got["targets"]] == [r[1] for r in ref]
    # Shift: targets[t] is the item after inputs[t]; padding is 0 in both, on the left.
    assert np.array_equal(got["inputs"] == 0, got["targets"] == 0)
    assert np.array_equal(
      got["inputs"][:, 1:][got["inputs"][:, :-1] > 0],
      got["targets"][:, :-1][got["inputs"][:, :-1] > 0],
    )


def test_sasrec_shuffle_is_a_deterministic_permutation_per_epoch():
  data = _data(lengths=tuple(range(2, 40)))
  ref = sorted(_sasrec_reference(data, 8))
  n = len(ref)

  def rows(seed, shuffle=True, repeat=False, take=None):
    ds = D.sasrec_train_dataset(
      data, batch_size=4, max_len=8, seed=seed, shuffle=shuffle, repeat=repeat
    )
    if take:
      ds = ds.take(take)
    got = _collect(ds, ["inputs", "targets"])
    return [(tuple(a), tuple(b)) for a, b in zip(got["inputs"], got["targets"])]

  a, b, c = rows(1), rows(1), rows(2)
  assert sorted(a) == ref and a == b and a != c
  assert a != rows(1, shuffle=False)
  # repeat: batches span epochs; the first 2n rows hold every sequence exactly twice.
  two_epochs = rows(1, repeat=True, take=n // 2)  # n = 38 rows -> 19 batches of 4 = 76
  assert len(two_epochs) == 2 * n
  assert collections.Counter(two_epochs) == collections.Counter(ref * 2)
  assert two_epochs[:n] == a  # epoch 0 is the same permutation as the one-epoch stream


def test_two_tower_pairs_match_reference():
  data = _data()
  for min_history, max_len in ((1, 3), (0, 6)):
    ds = D.two_tower_train_dataset(
      data,
      batch_size=5,
      max_len=max_len,
      seed=0,
      shuffle=False,
      repeat=False,
      min_history=min_history,
    )
    got = _collect(ds, ["user_id", "history", "item_id"])
    ref = [
      (int(u), tuple(_pad_left(s[:j], max_len)), int(s[j]))
      for u, s in zip(data.user_ids, data.train_sequences)
      for j in range(min_history, len(s))
    ]
    assert (
      list(
        zip(got["user_id"].tolist(), map(tuple, got["history"].tolist()), got["item_id"].tolist())
      )
      == ref
    )
  shuffled = D.two_tower_train_dataset(
    data, batch_size=5, max_len=6, seed=4, repeat=False, min_history=0
  )
  first = next(iter(shuffled))
  assert first["history"].shape == (5, 6) and "negatives" not in first
  got = _collect(shuffled, ["user_id", "history", "item_id"])
  assert sorted(
    zip(got["user_id"].tolist(), map(tuple, got["history"].tolist()), got["item_id"].tolist())
  ) == sorted(ref)


def test_eval_arrays_and_rated_filtering():
  data = _data()
  arrays = D.eval_arrays(data.test, max_len=4)
  for q, (inp, tgt) in enumerate(zip(data.test.inputs, data.test.targets)):
    assert arrays["inputs"][q].tolist() == _pad_left(inp, 4)
    assert arrays["targets"][q] == tgt and arrays["history_lengths"][q] == inp.size
    lo, hi = arrays["rated_row_splits"][q : q + 2]
    assert arrays["rated_values"][lo:hi].tolist() == inp.tolist()  # full, not truncated
  np.testing.assert_array_equal(arrays["user_ids"], data.test.user_ids)
  mask = D.rated_mask(data.test, data.num_items, rows=[2, 0])
  for r, q in enumerate([2, 0]):
    expected = np.zeros(data.num_items + 1, bool)
    expected[0] = True
    expected[list(data.test.inputs[q])] = True
    np.testing.assert_array_equal(mask[r], expected)
  batches = list(D.eval_dataset(data.test, batch_size=4, max_len=4))
  assert [b["inputs"].shape[0] for b in batches] == [4, 3]
  np.testing.assert_array_equal(np.concatenate([b["query_index"] for b in batches]), np.arange(7))
  np.testing.assert_array_equal(np.concatenate([b["inputs"] for b in batches]), arrays["inputs"])


def test_pipelines_on_ml1m_windows(data_dir):
  data = D.load("ml1m", data_dir / "ml1m")
  ds = D.sasrec_train_dataset(data, batch_size=128, max_len=200, seed=0, shuffle=False)
  batch = next(iter(ds))
  assert batch["inputs"].shape == (128, 200) and batch["targets"].shape == (128, 200)
  ref = _sasrec_reference(
    D.SequenceData(
      name="x",
      num_items=data.num_items,
      train_sequences=data.train_sequences[:128],
      val=data.val,
      test=data.test,
      item_counts=D.count_items(data.train_sequences[:128], data.num_items),
    ),
    200,
  )
  assert [tuple(r) for r in batch["inputs"].numpy()] == [r[0] for r in ref]
  assert [tuple(r) for r in batch["targets"].numpy()] == [r[1] for r in ref]


def test_pipeline_argument_errors():
  data = _data()
  with pytest.raises(ValueError, match="batch_size"):
    D.sasrec_train_dataset(data, batch_size=0, seed=0)
  with pytest.raises(ValueError, match="max_len"):
    D.two_tower_train_dataset(data, batch_size=2, max_len=0, seed=0)
  with pytest.raises(ValueError, match="min_history"):
    D.two_tower_train_dataset(data, batch_size=2, seed=0, min_history=-1)
  with pytest.raises(ValueError, match=">= 2 items"):
    D.sasrec_train_dataset(_data(lengths=(1, 1)), batch_size=2, seed=0)
  with pytest.raises(ValueError, match="earlier"):
    D.two_tower_train_dataset(_data(lengths=(1, 2)), batch_size=2, seed=0, min_history=2)
  with pytest.raises(ValueError, match="outside"):
    bad = _data()
    bad.train_sequences[0] = np.array([31])
    bad.validate()
  with pytest.raises(ValueError, match="equal in number"):
    D.EvalSplit([np.array([1])], [1, 2], [1])
