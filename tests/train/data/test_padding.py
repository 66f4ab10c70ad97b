"""train.data.padding: the one history encoding (last max_len items, left-padded with 0)."""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

from train import data as D


def _oracle(history, length):
  """[0] * (L - m) + the last m = min(n, L) items, written from the definition."""
  items = list(history)[-length:] if length else []
  return [0] * (length - len(items)) + items


def test_left_pad_keeps_the_last_items_right_aligned():
  rng = np.random.default_rng(0)
  histories = [rng.integers(1, 50, size=n) for n in (0, 1, 3, 7, 12)]
  for length in (1, 5, 12, 20):
    got = D.left_pad(histories, length)
    assert got.dtype == np.int64 and got.shape == (5, length)
    assert got.tolist() == [_oracle(h.tolist(), length) for h in histories]
  widest = D.left_pad(histories)  # default: nothing is cut
  assert widest.shape == (5, 12) and widest.tolist() == [_oracle(h.tolist(), 12) for h in histories]
  assert D.left_pad([[], []]).tolist() == [[0], [0]]


def test_left_pad_rejects_bad_input():
  with pytest.raises(ValueError, match="max_len"):
    D.left_pad([[1, 2]], 0)
  with pytest.raises(TypeError, match="integer ids"):
    D.left_pad([[1.5, 2.0]], 3)


def test_fit_length_reencodes_a_left_padded_batch_of_any_width():
  histories = [[4, 5, 6, 7, 8, 9], [3], []]
  for width in (6, 9):
    batch = D.left_pad(histories, width)
    for length in (2, 4, 6, 10):
      got = D.fit_length(tf.constant(batch), length).numpy()
      assert got.tolist() == [_oracle(h, length) for h in histories]


def test_eval_arrays_inputs_are_the_same_encoding():
  data = D.load("synthetic", num_users=30, num_items=40, min_len=3, max_len=15)
  arrays = D.eval_arrays(data.test, max_len=8)
  np.testing.assert_array_equal(arrays["inputs"], D.left_pad(data.test.inputs, 8))
