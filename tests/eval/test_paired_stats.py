"""eval.paired_stats: Student's t (against scipy.stats.t, a test-only dependency, and a numeric
integral of the density), mean ± s.e. = sample sd / sqrt(n), and the paired difference over seeds
(mean, s.e., half-width t_{1-(1-c)/2, n-1} · s.e., interval, positive seeds, verdict), on scalars
and element-wise on arrays, against numpy oracles written from the definitions."""

import math

import numpy as np
import pytest
from scipy import stats

from eval import paired_stats as ps


def _t_density_integral(q, df):
  """P(0 < T < q) by Simpson's rule on Γ((ν+1)/2) / (√(νπ) Γ(ν/2)) (1 + x²/ν)^(−(ν+1)/2)."""
  x = np.linspace(0.0, q, 20001)
  log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
  f = np.exp(log_c - (df + 1) / 2 * np.log1p(x * x / df))
  h = x[1] - x[0]
  return h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())


def test_t_quantile_matches_scipy_and_the_integral_of_the_density():
  for df in (1, 2, 3, 4, 9, 29, 30, 31, 200, 2.5, 1e4):
    for p in (0.6, 0.95, 0.975, 0.995):
      q = ps.t_quantile(p, df)
      np.testing.assert_allclose(q, stats.t.ppf(p, df), rtol=1e-9)
      np.testing.assert_allclose(ps.t_quantile(1 - p, df), -q, rtol=1e-12)  # symmetry
      np.testing.assert_allclose(_t_density_integral(q, df), p - 0.5, atol=1e-9)
    for t in (-30.0, -1.5, 0.0, 0.3, 4.0):
      np.testing.assert_allclose(ps.t_cdf(t, df), stats.t.cdf(t, df), rtol=1e-9, atol=1e-300)
  assert abs(ps.t_quantile(0.975, 2) - 4.3027) < 1e-4  # the textbook value
  # the far tail keeps its relative precision
  np.testing.assert_allclose(ps.t_quantile(1 - 1e-10, 3), stats.t.ppf(1 - 1e-10, 3), rtol=1e-9)
  np.testing.assert_allclose(ps.t_cdf(-200.0, 1), stats.t.cdf(-200.0, 1), rtol=1e-9)


def test_t_critical_is_the_two_sided_quantile_for_every_df():
  for confidence in (0.9, 0.95, 0.99):
    for df in (1, 2, 5, 30, 39, 100):
      np.testing.assert_allclose(
        ps.t_critical(confidence, df), stats.t.ppf(1 - (1 - confidence) / 2, df), rtol=1e-9
      )
  # beyond any table: t_{0.975, 39} is 2.02, not the normal 1.96
  assert ps.t_critical(0.95, 39) == pytest.approx(2.0227, abs=1e-4)


def test_bad_arguments_raise_errors_naming_them():
  for call, word in (
    (lambda: ps.t_quantile(1.0, 3), "p"),
    (lambda: ps.t_quantile(0.5, 0), "df"),
    (lambda: ps.t_cdf(1.0, -1), "df"),
    (lambda: ps.t_cdf(1.0, math.inf), "df"),
    (lambda: ps.t_critical(95, 3), "confidence"),
    (lambda: ps.paired_difference([1.0, 2.0], [1.0]), "same number of seeds"),
    (lambda: ps.paired_difference([[1.0, 2.0]], [[1.0]]), "one shape"),
    (lambda: ps.mean_se([[1.0, 2.0], [3.0]]), "values"),
    (lambda: ps.mean_se(3.0), "seed axis"),
  ):
    with pytest.raises(ValueError, match=word):
      call()
  with pytest.raises(TypeError, match="df"):
    ps.t_quantile(0.9, "3")
  with pytest.raises(TypeError, match="both be mappings"):
    ps.paired_difference({0: 1.0}, [1.0])
  with pytest.raises(TypeError, match="values"):
    ps.mean_se({0: 1.0})


def _oracle_mean_se(v):
  """mean = Σ v / n, s = sqrt(Σ (v − mean)² / (n − 1)), s.e. = s / √n, along axis 0."""
  v = np.asarray(v, np.float64)
  n = v.shape[0]
  mean = v.sum(axis=0) / n
  s = np.sqrt(((v - mean) ** 2).sum(axis=0) / (n - 1))
  return mean, s, s / np.sqrt(n)


def test_mean_se_is_sample_sd_over_root_n_on_scalars_and_arrays():
  rng = np.random.default_rng(3)
  for shape in ((5,), (4, 7), (3, 2, 3)):
    v = rng.normal(size=shape)
    got = ps.mean_se(v.tolist())
    mean, s, se = _oracle_mean_se(v)
    assert got["n"] == shape[0]
    for key, want in (("mean", mean), ("std", s), ("se", se)):
      np.testing.assert_allclose(got[key], want, rtol=1e-12)
      assert np.shape(got[key]) == shape[1:]
    if len(shape) == 1:  # per-seed scalars give plain floats (JSON-ready)
      assert all(type(got[k]) is float for k in ("mean", "std", "se"))


def test_one_value_has_no_spread_and_none_has_no_mean():
  assert ps.mean_se([0.25]) == dict(n=1, mean=0.25, std=None, se=None)  # None, not a fake 0
  one = ps.mean_se([[1.0, 2.0]])
  assert one["se"] is None and one["std"] is None
  np.testing.assert_array_equal(one["mean"], [1.0, 2.0])
  assert ps.mean_se([]) == dict(n=0, mean=None, std=None, se=None)


def _oracle_pair(first, second, confidence):
  """d_s = first[s] − second[s] over the common seeds: mean, s.e., t_{1-(1-c)/2, n-1} · s.e."""
  seeds = sorted(set(first) & set(second))
  d = np.array([np.subtract(first[s], second[s]) for s in seeds], np.float64)
  mean, _, se = _oracle_mean_se(d)
  half = stats.t.ppf(1 - (1 - confidence) / 2, len(seeds) - 1) * se
  return seeds, d, mean, se, half


def test_paired_difference_uses_only_the_seeds_present_in_both():
  rng = np.random.default_rng(5)
  for confidence in (0.95, 0.9):
    for shift, verdict in ((0.05, "ahead"), (-0.05, "behind"), (0.0, "within noise")):
      base = {s: rng.uniform(0.1, 0.4) for s in range(6)}
      first = {s: v + shift + rng.normal(0, 0.002) for s, v in base.items() if s != 4}
      first[9] = 5.0  # a seed second lacks: left out
      second = {s: v for s, v in base.items() if s != 2}
      got = ps.paired_difference(first, second, confidence)
      seeds, d, mean, se, half = _oracle_pair(first, second, confidence)
      assert got["seeds"] == seeds == [0, 1, 3, 5] and got["n"] == 4
      np.testing.assert_allclose(got["differences"], d, rtol=1e-12)
      np.testing.assert_allclose(got["mean"], mean, rtol=1e-12)
      np.testing.assert_allclose(got["se"], se, rtol=1e-12)
      np.testing.assert_allclose(got["half_width"], half, rtol=1e-9)
      np.testing.assert_allclose(got["ci"], [mean - half, mean + half], rtol=1e-9)
      np.testing.assert_allclose(got["t"], half / se, rtol=1e-9)
      assert got["positive"] == int((d > 0).sum()) and got["confidence"] == confidence
      if shift:
        assert got["verdict"] == verdict
      else:  # noise only: the verdict follows the oracle's interval
        low, high = mean - half, mean + half
        assert got["verdict"] == ("ahead" if low > 0 else "behind" if high < 0 else "within noise")


def test_paired_difference_of_arrays_is_element_wise_along_the_seed_axis():
  rng = np.random.default_rng(8)
  n = 5
  b = rng.uniform(0.1, 0.4, size=(n, 4))
  a = b + np.array([0.05, -0.05, 0.0, 0.0]) + rng.normal(0, 0.002, size=(n, 4))
  a[:, 2] = b[:, 2] + np.array([0.01, -0.01, 0.005, -0.004, 0.0])  # straddles 0
  a[1, 3] = np.nan  # an empty bin on one seed
  got = ps.paired_difference(a.tolist(), b.tolist())  # sequences: paired by position
  _, d, mean, se, half = _oracle_pair(dict(enumerate(a)), dict(enumerate(b)), 0.95)
  assert got["seeds"] == list(range(n)) and got["n"] == n
  for key, want in (("mean", mean), ("se", se), ("half_width", half)):
    np.testing.assert_allclose(got[key], want, rtol=1e-9)
    assert got[key].shape == (4,)
  np.testing.assert_allclose(got["ci"], [mean - half, mean + half], rtol=1e-9)
  np.testing.assert_array_equal(got["positive"], (d > 0).sum(axis=0))
  assert list(got["verdict"]) == ["ahead", "behind", "within noise", "undefined"]
  # a curve: [seeds, points, ...] the same way
  curve = ps.paired_difference(a.reshape(n, 2, 2), b.reshape(n, 2, 2))
  np.testing.assert_allclose(curve["half_width"], half.reshape(2, 2), rtol=1e-9)


def test_equivalent_when_the_interval_holds_zero_inside_the_margin():
  """verdict "equivalent" iff low <= 0 <= high and -m < low and high < m (the margin m never
  changes ahead / behind); margins broadcast element-wise; bad margins raise."""
  rng = np.random.default_rng(3)
  b = rng.uniform(0.2, 0.3, size=6)
  tight = b + rng.normal(0, 0.0005, size=6)  # interval ~ +-0.0005 around ~0
  loose = b + rng.normal(0, 0.01, size=6)  # interval ~ +-0.01
  ahead = b + 0.02 + rng.normal(0, 0.0005, size=6)  # interval inside (0.0, 0.05): ahead
  for first, margin in ((tight, 0.005), (loose, 0.005), (ahead, 0.05), (tight, 0.0), (tight, None)):
    got = ps.paired_difference(first.tolist(), b.tolist(), margin=margin)
    _, _, mean, _, half = _oracle_pair(dict(enumerate(first)), dict(enumerate(b)), 0.95)
    low, high = mean - half, mean + half
    m = -1.0 if margin is None else margin
    want = (
      "ahead"
      if low > 0
      else "behind"
      if high < 0
      else "equivalent"
      if (-m < low and high < m)
      else "within noise"
    )
    assert got["verdict"] == want and got["margin"] == margin
  assert ps.paired_difference(tight.tolist(), b.tolist(), margin=0.005)["verdict"] == (
    ps.EQUIVALENT
  )
  assert ps.paired_difference(loose.tolist(), b.tolist(), margin=0.005)["verdict"] == (
    ps.WITHIN_NOISE
  )
  assert ps.paired_difference(ahead.tolist(), b.tolist(), margin=0.05)["verdict"] == ps.AHEAD
  arrays = ps.paired_difference(
    np.stack([tight, loose], 1), np.stack([b, b], 1), margin=[0.005, 0.5]
  )
  assert list(arrays["verdict"]) == [ps.EQUIVALENT, ps.EQUIVALENT]
  np.testing.assert_array_equal(arrays["margin"], [0.005, 0.5])
  for bad in (-0.1, np.nan, np.inf, [0.1, 0.2, 0.3]):
    with pytest.raises(ValueError, match="margin"):
      ps.paired_difference(np.stack([tight, loose], 1), np.stack([b, b], 1), margin=bad)


def test_relative_margin_is_a_fraction_of_the_reference_mean():
  """m = fraction · |mean(reference)|; None (no equivalence verdict) for fraction <= 0 or no
  reference value."""
  assert ps.relative_margin(0.02, [0.3, -0.1, 0.4]) == pytest.approx(0.02 * 0.2)
  assert ps.relative_margin(0.1, [-0.5]) == pytest.approx(0.05)
  assert ps.relative_margin(0.0, [0.3]) is None and ps.relative_margin(0.02, []) is None


def test_one_common_seed_gives_no_interval_and_none_no_statistic():
  got = ps.paired_difference({0: 0.30, 1: 0.25}, {1: 0.20, 3: 0.5})
  assert got["n"] == 1 and got["seeds"] == [1]
  assert got["mean"] == pytest.approx(0.05) and got["positive"] == 1
  assert got["se"] is None and got["half_width"] is None and got["ci"] is None
  assert got["verdict"] == ps.ONE_SEED == "one seed: no interval"
  arrays = ps.paired_difference([[1.0, 2.0]], [[2.0, 1.0]])
  assert arrays["half_width"] is None
  np.testing.assert_array_equal(arrays["positive"], [0, 1])
  assert list(arrays["verdict"]) == [ps.ONE_SEED] * 2
  none = ps.paired_difference({0: 1.0}, {1: 1.0})
  assert (none["n"], none["mean"], none["positive"], none["verdict"]) == (
    0,
    None,
    0,
    ps.NO_COMMON_SEED,
  )


def test_independent_difference_is_welchs_interval():
  rng = np.random.default_rng(5)
  for n_a, n_b in ((3, 3), (2, 6), (5, 3)):
    a = rng.normal(0.38, 0.01, n_a)
    b = rng.normal(0.37, 0.004, n_b)
    got = ps.independent_difference(list(a), list(b), confidence=0.9)
    ref = stats.ttest_ind(a, b, equal_var=False)
    low, high = ref.confidence_interval(0.9)
    assert got["df"] == pytest.approx(ref.df, rel=1e-10)
    assert got["ci"] == pytest.approx([low, high], rel=1e-9)
    assert got["mean"] / got["se"] == pytest.approx(ref.statistic, rel=1e-10)
    assert (got["n_first"], got["n_second"]) == (n_a, n_b)
  # Seeds are not paired: a mapping's keys are ignored.
  by_seed = ps.independent_difference({0: 1.0, 1: 3.0}, {7: 1.0, 9: 2.0, 4: 0.5})
  assert by_seed["mean"] == pytest.approx(2.0 - 3.5 / 3)
  assert ps.independent_difference([1.0, 2.0], [5.0, 6.0])["verdict"] == "behind"
  one = ps.independent_difference([0.4], [0.37, 0.38, 0.39])
  assert one["verdict"] == ps.ONE_SEED and one["ci"] is None
  assert one["mean"] == pytest.approx(0.02)
  flat = ps.independent_difference([1.0, 1.0], [0.5, 0.5])
  assert flat["ci"] == [0.5, 0.5] and flat["verdict"] == "ahead"
  assert ps.independent_difference([], [1.0])["verdict"] == ps.NO_COMMON_SEED
  with pytest.raises(ValueError, match="one number per run"):
    ps.independent_difference([[1.0, 2.0]], [[1.0, 2.0]])


def test_prediction_interval_covers_one_more_run():
  v = [0.365, 0.386, 0.384]
  got = ps.prediction_interval(v)
  m, s = np.mean(v), np.std(v, ddof=1)
  half = stats.t.ppf(0.975, 2) * s * np.sqrt(1 + 1 / 3)
  assert got["ci"] == pytest.approx([m - half, m + half], rel=1e-10)
  # Coverage: one more draw of the same normal falls inside 95 % of the time.
  rng = np.random.default_rng(0)
  inside = 0
  for _ in range(4000):
    x = rng.normal(size=4)
    low, high = ps.prediction_interval(list(x[:3]))["ci"]
    inside += low <= x[3] <= high
  assert 0.94 < inside / 4000 < 0.96
  assert ps.prediction_interval([0.4])["ci"] is None
