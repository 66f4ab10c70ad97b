r"""Paired-seed statistics: Student's t, mean ± standard error, paired differences over seeds.

The one place for the statistics that ``eval.demo`` and ``bench.analysis`` report, in pure
Python and numpy (scipy is not a dependency of the applications). Values come per seed along
axis 0: a sequence of scalars (one metric), or of arrays of one shape (a curve, deciles), in
which case every statistic is taken element-wise and has that shape.

Student's t with nu > 0 degrees of freedom, integer or not (``t_cdf``, ``t_quantile``; relative
error below 1e-12 up to nu = 1e4, about 1e-9 at nu = 1e8):

    P(T > t) = I_{nu / (nu + t^2)}(nu / 2, 1 / 2) / 2   for t >= 0,   P(T <= -t) = P(T > t),

with the regularized incomplete beta function I_x(a, b) = B(x; a, b) / B(a, b), evaluated by its
continued fraction (log B(a, b) from lgamma, by Stirling's series when a is large). The quantile
t_{p, nu} inverts the CDF by bisection to a relative 1e-13; ``t_critical(c, nu)`` =
t_{1 - (1 - c) / 2, nu}.

Mean ± standard error of n values v_1 .. v_n (``mean_se``):

    mean = sum_i v_i / n,   s = sqrt(sum_i (v_i - mean)^2 / (n - 1)),   s.e. = s / sqrt(n).

One value (n = 1) has no measured spread: s and s.e. are None, never a zero; n = 0: the mean is
None too.

Paired difference A − B (``paired_difference``): d_s = A(s) − B(s) for every seed s present in
both (mappings seed -> value; a seed in only one of them is left out), or position by position
(two sequences of equal length); with n the number of pairs and confidence c
(default ``CONFIDENCE`` = 0.95):

    mean d ± s.e.(d),   half-width h = t_{1 - (1 - c) / 2, n - 1} · s.e.(d),
    interval [mean d − h, mean d + h],   positive = #{s : d_s > 0},
    verdict = "ahead" (interval above 0), "behind" (below 0), "within noise" (contains 0),
              "undefined" (a nan difference), ONE_SEED (n = 1: no interval),
              NO_COMMON_SEED (n = 0).

Independent difference A − B (``independent_difference``), for two sets of runs whose seeds
do not pair (e.g. two programs that draw their randomness differently): with n_A, n_B runs, their
means and their variances s_A², s_B² (ddof 1),

    D = mean A − mean B,   s.e.(D) = sqrt(s_A² / n_A + s_B² / n_B),
    nu = s.e.(D)⁴ / ((s_A² / n_A)² / (n_A − 1) + (s_B² / n_B)² / (n_B − 1))   (Welch–Satterthwaite),
    interval D ± t_{1 - (1 - c) / 2, nu} · s.e.(D),  verdict as for a paired difference;

below two runs on either side there is no interval (ONE_SEED). Where both spreads are zero the
interval is [D, D]. Prediction interval of one more run of B (``prediction_interval``, n_B >= 2):
mean B ± t_{1 - (1 - c) / 2, n_B − 1} · s_B · sqrt(1 + 1 / n_B): a single run of A outside it is
unlikely (1 − c) to be a run of B.

With a practical margin m > 0 (``margin``, absolute, in the metric's units; a scalar or an array
of the values' shape), an interval that contains 0 and lies inside (-m, +m) is EQUIVALENT
("equivalent"): the data exclude a difference as large as m either way. This is the
two-one-sided-tests equivalence check at level (1 - c) / 2 per side (with c = 0.95: 2.5 %), so
it is conservative; an interval that contains 0 but reaches past +-m stays "within noise" (the
experiment cannot tell), and "ahead" / "behind" do not depend on m. A margin relative to the
second arm (``relative_margin``): m = fraction · |mean of B's values| (e.g. 0.02: ± 2 % of B).
"""

import functools
import math
import numbers
from typing import Mapping

import numpy as np

__all__ = [
  "CONFIDENCE",
  "AHEAD",
  "BEHIND",
  "WITHIN_NOISE",
  "EQUIVALENT",
  "UNDEFINED",
  "ONE_SEED",
  "NO_COMMON_SEED",
  "t_cdf",
  "t_quantile",
  "t_critical",
  "mean_se",
  "paired_difference",
  "independent_difference",
  "prediction_interval",
  "relative_margin",
]

CONFIDENCE = 0.95
AHEAD = "ahead"
BEHIND = "behind"
WITHIN_NOISE = "within noise"
EQUIVALENT = "equivalent"
UNDEFINED = "undefined"
ONE_SEED = "one seed: no interval"
NO_COMMON_SEED = "no common seed"

_TINY = 1e-300  # Lentz's guard against a zero denominator
_CF_TOLERANCE = 1e-15
_CF_MAX_TERMS = 100_000
_BISECTION_TOLERANCE = 1e-13


# ------------------------------------------------------------------------------ Student's t


def _log(x: float, one_minus_x: float) -> float:
  """log x, from whichever of x and 1 - x is known to full relative precision near 1."""
  return math.log(x) if x < 0.5 else math.log1p(-one_minus_x)


def _stirling_tail(z: float) -> float:
  """log Γ(z) - ((z - 1/2) log z - z + log(2π) / 2) = 1/(12z) - 1/(360z³) + 1/(1260z⁵) + ...
  (the next term, 1/(1680z⁷), is below 1e-17 for z >= 100)."""
  return 1.0 / (12.0 * z) - 1.0 / (360.0 * z**3) + 1.0 / (1260.0 * z**5)


def _log_beta(a: float, b: float) -> float:
  """log B(a, b) = log Γ(a) + log Γ(b) - log Γ(a + b), without the cancellation of the two large
  lgamma values when one argument is large (Stirling's series for their difference)."""
  small, large = min(a, b), max(a, b)
  if large < 100.0:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
  # log Γ(L + S) - log Γ(L) = (L - 1/2) log(1 + S/L) + S log(L + S) - S + tail(L + S) - tail(L)
  ratio = (
    (large - 0.5) * math.log1p(small / large)
    + small * math.log(large + small)
    - small
    + _stirling_tail(large + small)
    - _stirling_tail(large)
  )
  return math.lgamma(small) - ratio


def _betainc(a: float, b: float, x: float, y: float) -> float:
  """I_x(a, b) = B(x; a, b) / B(a, b) for a, b > 0, 0 <= x <= 1, with y = 1 - x given too (each
  computed without cancellation by the caller).

  I_x(a, b) = x^a y^b / (a B(a, b)) · 1 / (1 + d_1 / (1 + d_2 / (1 + ...))) with
  d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)) and
  d_{2m} = m (b - m) x / ((a + 2m - 1)(a + 2m)), evaluated by the modified Lentz method. The
  fraction converges fast for x < (a + 1) / (a + b + 2); I_x(a, b) = 1 - I_y(b, a) covers the
  other side.
  """
  if x <= 0.0:
    return 0.0
  if y <= 0.0:
    return 1.0
  if x > (a + 1.0) / (a + b + 2.0):
    return 1.0 - _betainc(b, a, y, x)
  log_front = a * _log(x, y) + b * _log(y, x) - _log_beta(a, b)

  def guard(v):
    return v if abs(v) > _TINY else _TINY

  # Lentz: the fraction is the running product of C_j D_j, starting after d_1.
  c = 1.0
  d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0))
  fraction = d
  for m in range(1, _CF_MAX_TERMS):
    for coef in (
      m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
      -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
    ):
      d = 1.0 / guard(1.0 + coef * d)
      c = guard(1.0 + coef / c)
      fraction *= c * d
    if abs(c * d - 1.0) < _CF_TOLERANCE:
      break
  return math.exp(log_front) * fraction / a


def _check_df(df) -> float:
  if not isinstance(df, numbers.Real) or isinstance(df, bool):
    raise TypeError(f"df must be a real number, got {type(df).__name__}")
  if not (math.isfinite(df) and df > 0):
    raise ValueError(f"df must be a finite number > 0, got {df}")
  return float(df)


def _upper_tail(t: float, df: float) -> float:
  """P(T > |t|) = I_x(df / 2, 1 / 2) / 2, x = df / (df + t^2), 1 - x = t^2 / (df + t^2)."""
  t2 = t * t
  return 0.5 * _betainc(df / 2.0, 0.5, df / (df + t2), t2 / (df + t2))


def t_cdf(t: float, df: float) -> float:
  """P(T <= t) for Student's t with df > 0 degrees of freedom (module docstring)."""
  df = _check_df(df)
  if not isinstance(t, numbers.Real) or isinstance(t, bool) or math.isnan(t):
    raise ValueError(f"t must be a real number, got {t!r}")
  tail = _upper_tail(float(t), df)
  return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
  """t_{p, df}: the p-quantile of Student's t with df > 0 degrees of freedom, 0 < p < 1.

  Bisection on the upper tail P(T > t) = 1 - p (exact in floating point for p >= 1/2, so the
  far tail keeps its relative precision); p < 1/2 by symmetry.
  """
  df = _check_df(df)
  if not isinstance(p, numbers.Real) or isinstance(p, bool) or not 0.0 < p < 1.0:
    raise ValueError(f"p must be a number in (0, 1), got {p!r}")
  if p < 0.5:
    return -t_quantile(1.0 - p, df)
  tail = 1.0 - p
  lo, hi = 0.0, 1.0
  while _upper_tail(hi, df) > tail:
    lo, hi = hi, 2.0 * hi
  while hi - lo > _BISECTION_TOLERANCE * hi:
    mid = 0.5 * (lo + hi)
    if mid in (lo, hi):
      break
    if _upper_tail(mid, df) > tail:
      lo = mid
    else:
      hi = mid
  return 0.5 * (lo + hi)


@functools.lru_cache(maxsize=256)
def t_critical(confidence: float, df: float) -> float:
  """t_{1 - (1 - c) / 2, df}: the half-width of a two-sided c interval in standard errors."""
  _check_confidence(confidence)
  return t_quantile(0.5 + confidence / 2.0, df)


def _check_confidence(confidence) -> None:
  if (
    not isinstance(confidence, numbers.Real)
    or isinstance(confidence, bool)
    or not 0.0 < confidence < 1.0
  ):
    raise ValueError(f"confidence must be a number in (0, 1), got {confidence!r}")


# ------------------------------------------------------------------------------ over seeds


def _per_seed(values, name: str) -> np.ndarray:
  """float64 array, axis 0 = seeds."""
  if isinstance(values, (str, bytes, Mapping)):
    raise TypeError(f"{name} must be a sequence of per-seed values, got {type(values).__name__}")
  try:
    v = np.asarray(values, np.float64)
  except TypeError as e:
    raise TypeError(f"{name} must hold numbers or arrays of numbers: {e}") from e
  except ValueError as e:
    raise ValueError(f"{name} must hold per-seed values of one shape: {e}") from e
  if v.ndim == 0:
    raise ValueError(f"{name} must have a seed axis (axis 0), got the scalar {values!r}")
  return v


def _out(x, kind=float):
  """A Python number for a per-seed scalar statistic, the array for an element-wise one."""
  return kind(x) if np.ndim(x) == 0 else np.asarray(x)


def _mean_se(v: np.ndarray) -> dict:
  n = v.shape[0]
  if n == 0:
    return dict(n=0, mean=None, std=None, se=None)
  mean = _out(v.mean(axis=0))
  if n == 1:
    return dict(n=1, mean=mean, std=None, se=None)
  std = v.std(axis=0, ddof=1)
  return dict(n=n, mean=mean, std=_out(std), se=_out(std / math.sqrt(n)))


def mean_se(values) -> dict:
  """{n, mean, std, se} of per-seed values along axis 0 (module docstring).

  ``values``: a sequence of numbers, or of arrays of one shape (statistics element-wise). Scalars
  give Python floats, arrays numpy arrays; std and se are None for one value, and the mean too
  for none.
  """
  return _mean_se(_per_seed(values, "values"))


def _verdict(low, high, margin=None):
  low, high = np.asarray(low), np.asarray(high)
  contains_zero = (low <= 0) & (high >= 0)
  inside = (
    contains_zero & (low > -np.asarray(margin)) & (high < np.asarray(margin))
    if margin is not None
    else np.zeros_like(contains_zero)
  )
  verdict = np.where(
    low > 0,
    AHEAD,
    np.where(
      high < 0,
      BEHIND,
      np.where(inside, EQUIVALENT, np.where(contains_zero, WITHIN_NOISE, UNDEFINED)),
    ),
  )
  return str(verdict) if verdict.ndim == 0 else verdict


def _check_margin(margin, shape):
  """None, or a float array (broadcast to ``shape``) of finite margins >= 0."""
  if margin is None:
    return None
  m = np.asarray(margin, dtype=float)
  if not np.all(np.isfinite(m)) or np.any(m < 0):
    raise ValueError(f"margin must be finite and >= 0, got {margin!r}")
  try:
    return np.broadcast_to(m, shape)
  except ValueError:
    raise ValueError(f"margin of shape {m.shape} does not fit values of shape {shape}") from None


def paired_difference(first, second, confidence: float = CONFIDENCE, margin=None) -> dict:
  """Statistics of d_s = first(s) − second(s) over paired seeds (module docstring).

  ``first``, ``second``: both mappings seed -> value (paired on the seeds present in both), or
  both sequences of equal length (paired by position); values are numbers or arrays of one shape.
  Returns {n, seeds (the common seeds, sorted; positions for sequences), differences, mean, std,
  se, confidence, t, half_width, ci ([low, high]), positive, verdict}: t, half_width and ci are
  None below two pairs; for arrays, mean .. positive and verdict are element-wise arrays.
  ``margin``: the practical margin m (module docstring; None = no equivalence verdict), echoed
  in the result.
  """
  _check_confidence(confidence)
  if isinstance(first, Mapping) != isinstance(second, Mapping):
    raise TypeError(
      "first and second must both be mappings seed -> value or both sequences, got "
      f"{type(first).__name__} and {type(second).__name__}"
    )
  if isinstance(first, Mapping):
    seeds = sorted(set(first) & set(second))
    a = _per_seed([first[s] for s in seeds], "first")
    b = _per_seed([second[s] for s in seeds], "second")
  else:
    a, b = _per_seed(first, "first"), _per_seed(second, "second")
    if a.shape[0] != b.shape[0]:
      raise ValueError(
        "first and second must hold the same number of seeds (paired by "
        f"position), got {a.shape[0]} and {b.shape[0]}"
      )
    seeds = list(range(a.shape[0]))
  if a.shape[1:] != b.shape[1:]:
    raise ValueError(
      f"first and second must hold values of one shape, got {a.shape[1:]} and {b.shape[1:]}"
    )
  d = a - b
  margin = _check_margin(margin, d.shape[1:])
  stats = _mean_se(d)
  n = stats["n"]
  stats.update(
    seeds=seeds,
    differences=d.tolist() if d.ndim == 1 else d,
    confidence=confidence,
    margin=None if margin is None else _out(margin),
    t=None,
    half_width=None,
    ci=None,
    positive=_out((d > 0).sum(axis=0), int) if n else 0,
  )
  if n == 0:
    stats["verdict"] = NO_COMMON_SEED
  elif n == 1:
    stats["verdict"] = _out(np.full(d.shape[1:], ONE_SEED), str)
  else:
    t = t_critical(confidence, n - 1)
    half = _out(t * np.asarray(stats["se"]))
    low, high = _out(stats["mean"] - half), _out(stats["mean"] + half)
    stats.update(t=t, half_width=half, ci=[low, high], verdict=_verdict(low, high, margin))
  return stats


def _scalar_runs(values, name: str) -> np.ndarray:
  v = _per_seed(values, name)
  if v.ndim != 1:
    raise ValueError(f"{name} must hold one number per run, got values of shape {v.shape[1:]}")
  return v


def independent_difference(first, second, confidence: float = CONFIDENCE, margin=None) -> dict:
  """Welch's difference mean(first) − mean(second) of two independent sets of runs (module
  docstring): {n_first, n_second, mean, se, df, confidence, t, half_width, ci, verdict};
  se .. ci None below two runs on a side (verdict ONE_SEED; NO_COMMON_SEED when a side is
  empty). ``first``, ``second``: sequences of numbers (or mappings seed -> number: the seeds are
  not paired, only the values are used)."""
  _check_confidence(confidence)
  if isinstance(first, Mapping):
    first = [first[k] for k in sorted(first)]
  if isinstance(second, Mapping):
    second = [second[k] for k in sorted(second)]
  a, b = _scalar_runs(first, "first"), _scalar_runs(second, "second")
  m = _check_margin(margin, ())
  out = dict(
    n_first=int(a.size),
    n_second=int(b.size),
    mean=float(a.mean() - b.mean()) if a.size and b.size else None,
    se=None,
    df=None,
    confidence=confidence,
    t=None,
    half_width=None,
    ci=None,
    margin=None if m is None else float(m),
  )
  if not (a.size and b.size):
    out["verdict"] = NO_COMMON_SEED
    return out
  if a.size < 2 or b.size < 2:
    out["verdict"] = ONE_SEED
    return out
  va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
  se = math.sqrt(va + vb)
  if se == 0.0:
    half, df, t = 0.0, None, None
  else:
    df = se**4 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    t = t_critical(confidence, df)
    half = t * se
  low, high = out["mean"] - half, out["mean"] + half
  out.update(se=se, df=df, t=t, half_width=half, ci=[low, high])
  out["verdict"] = _verdict(low, high, m) if np.isfinite(low + high) else UNDEFINED
  return out


def prediction_interval(values, confidence: float = CONFIDENCE) -> dict:
  """{n, mean, std, confidence, ci}: where one more run of ``values``' kind falls with
  probability ``confidence`` (module docstring); ci None below two values."""
  _check_confidence(confidence)
  v = _scalar_runs(values, "values")
  out = _mean_se(v)
  out.pop("se")
  out["confidence"] = confidence
  out["ci"] = None
  if v.size >= 2:
    half = t_critical(confidence, v.size - 1) * out["std"] * math.sqrt(1 + 1 / v.size)
    out["ci"] = [out["mean"] - half, out["mean"] + half]
  return out


def relative_margin(fraction: float, reference):
  """The absolute margin ``fraction`` · |mean of ``reference``| (module docstring), for
  ``margin=``; None (no equivalence verdict) when ``fraction`` <= 0 or ``reference`` is empty."""
  values = _scalar_runs(reference, "reference")
  return fraction * abs(float(values.mean())) if fraction > 0 and values.size else None
