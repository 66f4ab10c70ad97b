"""numpy SASRec batches (train.data.batches): with the "tensorflow" permutation they are the
tf.data pipeline's batches, batch for batch, also past the end of a pass; "numpy" is a seeded
permutation stream of the same windows; bad arguments raise."""

import numpy as np
import pytest

from train import data as D
from train.data import batches

# isort: split
import tensorflow as tf  # noqa: F401  (after train.data, which sets TF_USE_LEGACY_KERAS)


def _data(lengths=(1, 2, 3, 5, 9, 12, 4, 7, 2, 30), num_items=40, seed=0):
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
    user_ids=np.arange(1, len(seqs) + 1),
  )


def _window(seq, max_len):
  """(inputs, targets) of one training sequence, from the SASRec window definition."""
  w = list(seq[-(max_len + 1) :])
  pad = lambda xs: [0] * (max_len - len(xs)) + xs
  return pad(w[:-1]), pad(w[1:])


@pytest.mark.parametrize("batch_size,max_len,num_batches", [(4, 6, 7), (3, 20, 5), (9, 3, 4)])
def test_tensorflow_permutation_gives_the_tf_data_batches(batch_size, max_len, num_batches):
  data = _data()
  ds = D.sasrec_train_dataset(data, batch_size=batch_size, max_len=max_len, seed=11)
  expected = list(ds.take(num_batches).as_numpy_iterator())
  got = list(
    batches.sasrec_batches(
      data,
      batch_size=batch_size,
      max_len=max_len,
      seed=11,
      num_batches=num_batches,
      rng="tensorflow",
    )
  )
  assert len(got) == num_batches  # 9 sequences of >= 2 items: these span several passes
  for g, e in zip(got, expected):
    np.testing.assert_array_equal(g["inputs"], e["inputs"])
    np.testing.assert_array_equal(g["targets"], e["targets"])
    assert g["inputs"].dtype == np.int64


def test_numpy_permutation_stream_is_seeded_and_covers_each_pass():
  data = _data()
  seqs = [s for s in data.train_sequences if s.size >= 2]
  windows = {tuple(map(tuple, _window(s, 5))) for s in seqs}
  a = list(
    batches.sasrec_batches(data, batch_size=3, max_len=5, seed=2, num_batches=6, rng="numpy")
  )
  b = list(
    batches.sasrec_batches(data, batch_size=3, max_len=5, seed=2, num_batches=6, rng="numpy")
  )
  c = list(
    batches.sasrec_batches(data, batch_size=3, max_len=5, seed=3, num_batches=6, rng="numpy")
  )
  rows = [(tuple(i), tuple(t)) for x in a for i, t in zip(x["inputs"], x["targets"])]
  assert all(r in windows for r in rows)
  assert sorted(rows[:9]) == sorted(windows) and sorted(rows[9:18]) == sorted(windows)
  assert all(np.array_equal(x["inputs"], y["inputs"]) for x, y in zip(a, b))
  assert not all(np.array_equal(x["inputs"], y["inputs"]) for x, y in zip(a, c))
  np.testing.assert_array_equal(
    batches.permutation(9, 2, 0, "numpy"), np.random.default_rng([2, 0]).permutation(9)
  )


def test_bad_arguments_raise():
  data = _data()
  with pytest.raises(ValueError, match="shuffle rng"):
    next(batches.sasrec_batches(data, batch_size=2, max_len=4, seed=0, num_batches=1, rng="philox"))
  with pytest.raises(ValueError, match="batch_size"):
    next(batches.sasrec_batches(data, batch_size=0, max_len=4, seed=0, num_batches=1))
  short = _data(lengths=(1, 1))
  with pytest.raises(ValueError, match="no training sequence"):
    next(batches.sasrec_batches(short, batch_size=2, max_len=4, seed=0, num_batches=1))
