"""Synthetic generator: reproducibility, Zipf prior, and draws that follow the known softmax.

Statistical checks use Pearson's chi-square with a 6-sigma bound, df + 6 sqrt(2 df), on
fixed seeds: a correct sampler passes with overwhelming probability; a wrong distribution
(missing prior, wrong temperature, no mask) gives statistics orders of magnitude larger.
"""

import numpy as np
import pytest

from train import data as D
from train.data.synthetic import SyntheticCatalog, SyntheticConfig


def _chi_square_ok(counts, probs, min_expected=5.0):
  counts = np.asarray(counts, np.float64)
  expected = counts.sum() * np.asarray(probs, np.float64)
  keep = expected >= min_expected  # pool the tail into one cell
  obs = np.append(counts[keep], counts[~keep].sum())
  exp = np.append(expected[keep], expected[~keep].sum())
  obs, exp = obs[exp > 0], exp[exp > 0]
  stat = float(((obs - exp) ** 2 / exp).sum())
  df = obs.size - 1
  return stat <= df + 6 * np.sqrt(2 * df), stat, df


def _np_softmax_reference(cat, user, prev=0, history=()):
  cfg = cat.config
  x, y = cat.user_factors[user], cat.item_factors[1:]
  z = (y @ x + cfg.transition_weight * (y @ cat.item_factors[prev])) / cfg.temperature
  z = z + np.log(cat.popularity[1:])
  w = np.exp(z - z.max())
  for h in history:
    w[h - 1] = 0.0
  return np.concatenate([[0.0], w / w.sum()])


def test_reproducible_with_seed():
  kw = dict(num_users=120, num_items=80, min_len=5, max_len=12)
  a, b = D.load("synthetic", seed=3, **kw), D.load("synthetic", seed=3, **kw)
  c = D.load("synthetic", seed=4, **kw)
  assert [s.tolist() for s in a.train_sequences] == [s.tolist() for s in b.train_sequences]
  np.testing.assert_array_equal(a.test.targets, b.test.targets)
  assert [s.tolist() for s in a.train_sequences] != [s.tolist() for s in c.train_sequences]
  a.validate()
  lengths = np.array([s.size for s in a.test.inputs]) + 1
  assert lengths.min() >= 5 and lengths.max() <= 12 and a.num_items == 80
  # No repeats by default: the held-out targets never sit in their input.
  assert all(t not in set(i.tolist()) for i, t in zip(a.test.inputs, a.test.targets))
  assert all(
    np.unique(np.append(i, t)).size == i.size + 1 for i, t in zip(a.test.inputs, a.test.targets)
  )


def test_popularity_is_zipf_over_a_permutation_of_ranks():
  cat = SyntheticCatalog(SyntheticConfig(num_users=3, num_items=500, zipf_exponent=1.2))
  assert cat.popularity[0] == 0 and np.isclose(cat.popularity.sum(), 1.0)
  assert sorted(cat.ranks[1:].tolist()) == list(range(1, 501))
  ref = cat.ranks[1:].astype(float) ** -1.2
  np.testing.assert_allclose(cat.popularity[1:], ref / ref.sum(), rtol=1e-12)
  # log pi is linear in log rank with slope -a.
  slope = np.polyfit(np.log(cat.ranks[1:]), np.log(cat.popularity[1:]), 1)[0]
  assert abs(slope + 1.2) < 1e-9


def test_empirical_item_frequency_follows_zipf_when_users_are_flat():
  # Huge temperature removes the user term; with repeats, draws are iid from pi.
  data = D.load(
    "synthetic",
    seed=1,
    num_users=300,
    num_items=200,
    min_len=40,
    max_len=40,
    temperature=1e6,
    allow_repeats=True,
    timestamps=False,
  )
  pi = D.synthetic_catalog(data).popularity
  counts = np.zeros(201)
  for s in data.test.inputs:
    np.add.at(counts, s, 1)
  np.add.at(counts, data.test.targets, 1)
  ok, stat, df = _chi_square_ok(counts[1:], pi[1:])
  assert ok, (stat, df)
  # The same counts are far from uniform (the test can fail).
  assert not _chi_square_ok(counts[1:], np.full(200, 1 / 200))[0]
  assert data.timestamps is None and data.test.timestamps is None


def test_default_data_is_popularity_skewed():
  data = D.load("synthetic", seed=0, num_users=400, num_items=300)
  pi = D.synthetic_catalog(data).popularity
  np.testing.assert_array_equal(data.metadata["true_popularity"], pi)
  ranks_pi = np.argsort(np.argsort(-pi[1:]))
  ranks_emp = np.argsort(np.argsort(-data.item_counts[1:]))
  spearman = np.corrcoef(ranks_pi, ranks_emp)[0, 1]
  assert spearman > 0.6, spearman


@pytest.mark.parametrize(
  "transition_weight, allow_repeats", [(0.0, False), (1.5, False), (0.0, True), (1.5, True)]
)
def test_draws_follow_the_known_softmax(transition_weight, allow_repeats):
  cfg = SyntheticConfig(
    num_users=4,
    num_items=25,
    min_len=2,
    max_len=2,
    dim=4,
    temperature=0.7,
    zipf_exponent=1.0,
    transition_weight=transition_weight,
    allow_repeats=allow_repeats,
    seed=5,
  )
  cat = SyntheticCatalog(cfg)
  user, n = 2, 30000
  seqs = cat.sample_sequences(np.full(n, user), np.full(n, 2), np.random.default_rng(9))
  first = np.array([s[0] for s in seqs])
  second = np.array([s[1] for s in seqs])
  p1 = cat.next_item_probs([user])[0]
  np.testing.assert_allclose(p1, _np_softmax_reference(cat, user), rtol=1e-10, atol=1e-15)
  ok, stat, df = _chi_square_ok(np.bincount(first, minlength=26)[1:], p1[1:])
  assert ok, (stat, df)
  # Second draw given the most frequent first item: masked (no repeats) + transition term.
  top = int(np.bincount(first).argmax())
  p2 = cat.next_item_probs(
    [user], previous_items=[top], histories=[[top]] if not allow_repeats else None
  )[0]
  ref2 = _np_softmax_reference(cat, user, prev=top, history=() if allow_repeats else (top,))
  np.testing.assert_allclose(p2, ref2, rtol=1e-10, atol=1e-15)
  counts2 = np.bincount(second[first == top], minlength=26)[1:]
  ok, stat, df = _chi_square_ok(counts2, p2[1:])
  assert ok, (stat, df)
  if not allow_repeats:
    assert counts2[top - 1] == 0
  # Sanity: the unconditional softmax is rejected for the second draw when it differs.
  if transition_weight or not allow_repeats:
    assert not _chi_square_ok(counts2, p1[1:])[0]


def test_temporal_split_of_synthetic_data():
  data = D.load(
    "synthetic",
    split="temporal",
    seed=2,
    num_users=300,
    num_items=150,
    min_len=10,
    max_len=20,
    temporal_fraction=0.1,
  )
  assert max(int(t.max()) for t in data.timestamps) <= data.val.timestamps.min()
  assert data.val.timestamps.max() <= data.test.timestamps.min()
  data.validate()
  with pytest.raises(ValueError, match="timestamps=True"):
    D.load(
      "synthetic",
      split="temporal",
      timestamps=False,
      num_users=10,
      num_items=20,
      min_len=3,
      max_len=5,
    )


def test_bad_configs_and_non_synthetic_catalog(tmp_path):
  with pytest.raises(ValueError, match="without repeats"):
    D.load("synthetic", num_items=10, min_len=5, max_len=11)
  with pytest.raises(ValueError, match="min_len"):
    D.load("synthetic", min_len=0)
  with pytest.raises(ValueError, match="user ids"):
    SyntheticCatalog(
      SyntheticConfig(num_users=3, num_items=10, min_len=2, max_len=5)
    ).next_item_probs([4])
  path = tmp_path / "u.data"
  path.write_text("1\t1\t1\t1\n1\t2\t1\t2\n")
  with pytest.raises(ValueError, match="not generated synthetically"):
    D.synthetic_catalog(D.load("movielens_raw", path, min_count=1))
