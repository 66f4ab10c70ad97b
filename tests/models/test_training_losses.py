"""Training losses against independent numpy formulas: full softmax, BCE, gBCE (beta)."""

import numpy as np
import pytest

import tfrs_logq  # noqa: F401
import tensorflow as tf

from models import training_losses as tl


def _np_softplus(x):
  return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


def test_full_softmax_matches_numpy():
  rng = np.random.default_rng(0)
  q = rng.normal(size=(5, 4)).astype(np.float32)
  table = rng.normal(size=(8, 4)).astype(np.float32)
  pos = np.array([1, 3, 7, 2, 2])
  out = tl.full_softmax_loss(q, pos, table, temperature=0.5)
  logits = q @ table[1:].T / 0.5
  ref = np.log(np.exp(logits).sum(1)) - logits[np.arange(5), pos - 1]
  np.testing.assert_allclose(out.loss.numpy(), ref, rtol=1e-5)
  np.testing.assert_array_equal(out.weight.numpy(), 1.0)


def test_full_softmax_rejects_padding_and_out_of_range_ids():
  q, table = np.ones((1, 2), np.float32), np.ones((4, 2), np.float32)
  with pytest.raises(tf.errors.InvalidArgumentError, match="padding"):
    tl.full_softmax_loss(q, [0], table)
  with pytest.raises(tf.errors.InvalidArgumentError, match="num_items"):
    tl.full_softmax_loss(q, [4], table)


def test_gbce_beta_formula():
  # beta = alpha (t (1 - 1/alpha) + 1/alpha), alpha = k / (|I| - 1)
  for k, n, t in [(256, 3417, 0.75), (1, 100, 0.0), (5, 11, 1.0), (3, 31, 0.3)]:
    alpha = k / (n - 1)
    expected = alpha * (t * (1 - 1 / alpha) + 1 / alpha)
    assert tl.gbce_beta(k, n, t) == pytest.approx(expected)
  assert tl.gbce_beta(7, 50, 0.0) == pytest.approx(1.0)     # t = 0: plain BCE
  assert tl.gbce_beta(7, 50, 1.0) == pytest.approx(7 / 49)  # t = 1: beta = alpha
  with pytest.raises(ValueError):
    tl.gbce_beta(1, 10, 1.5)


def test_gbce_and_bce_match_numpy_with_mask():
  rng = np.random.default_rng(1)
  s_p = rng.normal(size=6).astype(np.float32) * 3
  s_n = rng.normal(size=(6, 4)).astype(np.float32) * 3
  valid = rng.random((6, 4)) > 0.3
  beta = 0.4
  out = tl.gbce_loss(s_p, s_n, beta=beta, valid_mask=valid)
  sig = 1 / (1 + np.exp(-s_p.astype(np.float64)))
  sig_n = 1 / (1 + np.exp(-s_n.astype(np.float64)))
  ref = -np.log(sig ** beta) - np.sum(np.where(valid, np.log(1 - sig_n), 0.0), axis=1)
  np.testing.assert_allclose(out.loss.numpy(), ref, rtol=1e-5)
  np.testing.assert_array_equal(out.num_valid.numpy(), valid.sum(1))
  bce = tl.bce_loss(s_p, s_n, valid_mask=valid)
  ref_bce = _np_softplus(-s_p) + np.sum(np.where(valid, _np_softplus(s_n), 0.0), axis=1)
  np.testing.assert_allclose(bce.loss.numpy(), ref_bce, rtol=1e-5)


def test_gbce_is_finite_for_huge_scores():
  out = tl.gbce_loss(np.array([-1e4, 1e4], np.float32), np.array([[1e4], [-1e4]], np.float32),
                     beta=0.5)
  assert np.all(np.isfinite(out.loss.numpy()))
  np.testing.assert_allclose(out.loss.numpy(), [0.5e4 + 1e4, 0.0], rtol=1e-6)


def test_bad_shapes_raise():
  with pytest.raises(ValueError, match=r"\[A\]"):
    tl.bce_loss(np.zeros((2, 1), np.float32), np.zeros((2, 3), np.float32))
  with pytest.raises(TypeError, match="bool"):
    tl.bce_loss(np.zeros(2, np.float32), np.zeros((2, 3), np.float32), np.ones((2, 3)))
