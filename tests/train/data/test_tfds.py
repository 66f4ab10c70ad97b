"""TFDS MovieLens reader, offline through tfds.testing.mock_data."""

import numpy as np
import pytest

from train import data as D

# isort: split
import tensorflow as tf  # after train.data (which imports tfrs_logq first)
import tensorflow_datasets as tfds


def _rows(data_dir, n=20000):
  arr = np.loadtxt(data_dir / "ml-100k" / "u.data", dtype=np.int64, max_rows=n)
  return arr


@pytest.mark.parametrize("split", ["leave_one_out", "temporal"])
def test_tfds_equals_raw_reader_on_the_same_ratings(data_dir, tmp_path, split):
  rows = _rows(data_dir)
  path = tmp_path / "u.data"
  path.write_text("".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in rows))
  raw = D.load("movielens_raw", path, split=split)

  def as_dataset(builder, *args, **kwargs):
    del args, kwargs
    assert builder.name == "movielens"
    return tf.data.Dataset.from_tensor_slices(
      {
        "user_id": [str(u).encode() for u in rows[:, 0]],
        "movie_id": [str(i).encode() for i in rows[:, 1]],
        "user_rating": rows[:, 2].astype(np.float32),
        "timestamp": rows[:, 3],
      }
    )

  with tfds.testing.mock_data(as_dataset_fn=as_dataset):
    got = D.load(
      "tfds", tfds_name="movielens/100k-ratings", data_dir=str(tmp_path / "tfds"), split=split
    )
  assert got.num_items == raw.num_items and got.num_users == raw.num_users
  assert [s.tolist() for s in got.train_sequences] == [s.tolist() for s in raw.train_sequences]
  for a, b in ((got.val, raw.val), (got.test, raw.test)):
    np.testing.assert_array_equal(a.targets, b.targets)
    np.testing.assert_array_equal(a.user_ids, b.user_ids)
    assert [s.tolist() for s in a.inputs] == [s.tolist() for s in b.inputs]
  np.testing.assert_array_equal(
    got.metadata["item_original_ids"], raw.metadata["item_original_ids"]
  )
  assert got.metadata["source"] == "tfds:movielens/100k-ratings"


def test_tfds_random_mock_with_string_ids():
  with tfds.testing.mock_data(num_examples=60):
    data = D.load("tfds", tfds_name="movielens/1m-ratings", min_count=1)
  assert data.metadata["num_interactions"] == 60
  total = data.num_train_interactions + data.val.num_queries + data.test.num_queries
  assert total == 60
  data.validate()


def test_tfds_bad_name_and_missing_dataset(tmp_path):
  with pytest.raises(ValueError, match="movielens"):
    D.load("tfds", tfds_name="mnist")
  with pytest.raises(FileNotFoundError, match="movielens/100k-ratings"):
    D.load("tfds", data_path=str(tmp_path))
