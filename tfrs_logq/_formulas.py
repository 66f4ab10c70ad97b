r"""The formulas of the library written once, for any array backend (tf-keras and Keras 3 paths).

Every function takes an ``ops`` namespace first: ``keras.ops`` on the Keras 3 path (JAX,
TensorFlow, PyTorch), or ``tf_ops()`` (the same names bound to TensorFlow functions) on the
tf-keras path. This module imports neither TensorFlow nor Keras. The names used are

    where max sum exp log log1p expm1 sigmoid softplus stop_gradient minimum maximum
    logical_and not_equal squeeze expand_dims cast zeros_like ones_like logaddexp isfinite
    power full_like

with the keras.ops signatures (``max(x, axis, keepdims)``, ``cast(x, dtype_name)``).

Formulas (notation of ``tfrs_logq.losses``; A rows, N negatives, valid [A, N]):

    log1mexp(x)   = log(1 - e^x)                         (x <= 0, stable, 1 - e^x floored)
    LSE_valid(x)  = max-shifted log-sum-exp over valid entries (invalid and -inf -> -1e30)
    none / standard / standard_no_positive:
                    L = softplus(LSE_valid(l_i) - l_p)  = log(e^{l_p} + sum_i e^{l_i}) - l_p
                    (l_p = s_p or s_p - log Q(p); l_i = s_i or s_i - log Q(d_i); 0 when n = 0)
    corrected:      Z = LSE_valid(s_i - log Q(d_i)) + log(1 - Q(p))      (q_prime="exact")
                    w = sg(sigmoid(Z - log n - s_p)),   L = -w (s_p - Z)  (0 when n = 0)
                    ratio_floor r > 0: L = -w max(s_p - max(Z, log r), log r)

Infinite scores give the limit of the formula where it exists (s_p = +inf: 0; s_p = -inf or a
valid negative at +inf: +inf; negatives at -inf drop out), and finite losses have finite
gradients (the edge cases of ``tfrs_logq.losses``).
    mixture log Q:  log((n_b q_uni(d) + k_u / |D|) / (n_b + k_u))
    gap weight:     w = prod_{j=k+1}^{k+c} (1 - max(alpha, 1/j))  (hash-array estimator)

The ``check_*`` functions and ``resolve_log_q`` (no ``ops`` argument) are the argument checks
that the tf-keras layers and their Keras 3 twins share: plain Python and numpy, the same error
types and messages on both paths.
"""

import math
import numbers
import types

import numpy as np

CORRECTIONS = ("none", "standard", "standard_no_positive", "corrected")
Q_PRIME_MODES = ("exact", "proxy")
MIXED_CONVENTIONS = ("unigram", "mixture")
MASKED_LOGIT = -1e30          # fill value of invalid entries inside the log-sum-exp
MIN_ONE_MINUS_Q = 1e-6        # 1 - Q(p) floor of log(1 - Q(p)) (tfrs_logq.log_q.MIN_ONE_MINUS_Q)
LOG_Q_SLACK = 1e-5            # log Q may exceed 0 by this much (float rounding)


def check_correction(correction: str, q_prime: str,
                     ratio_floor: float = 0.0) -> float:
  """Raises ValueError naming the argument for an unknown correction / q_prime / ratio_floor;
  returns ratio_floor as a float."""
  if correction not in CORRECTIONS:
    raise ValueError(f"correction must be one of {CORRECTIONS}, got {correction!r}")
  if q_prime not in Q_PRIME_MODES:
    raise ValueError(f"q_prime must be one of {Q_PRIME_MODES}, got {q_prime!r}")
  if (isinstance(ratio_floor, bool) or not isinstance(ratio_floor, numbers.Real)
      or not 0.0 <= float(ratio_floor) < 1.0):
    raise ValueError(f"ratio_floor must be a float in [0, 1) (0 = off), got {ratio_floor!r}")
  if ratio_floor > 0 and correction != "corrected":
    raise ValueError("ratio_floor applies to correction='corrected' only (the clamp of the "
                     f"paper's corrected script), got correction={correction!r}")
  return float(ratio_floor)


def check_num_items_given(num_items) -> None:
  """ExactCounts' first check (before the layer is set up): num_items is not None."""
  if num_items is None:
    raise ValueError("ExactCounts needs num_items (the size of the counts table)")


def check_counts_table(num_items: int, min_count: float, counts=None):
  """ExactCounts' checks: ``min_count`` > 0 and an optional ``counts`` table [num_items] of
  whole numbers >= 0 (ValueError otherwise).

  Returns:
    (min_count as a float, the initial table as int64 numpy [num_items]: ``counts``, or zeros
    without it).
  """
  if not min_count > 0:
    raise ValueError(f"min_count must be > 0, got {min_count}")
  initial = np.zeros([num_items], np.int64)
  if counts is not None:
    table = np.asarray(counts)
    if table.shape != (num_items,):
      raise ValueError(f"counts must have shape [{num_items}], got {table.shape}")
    if not (np.issubdtype(table.dtype, np.integer) or np.all(np.equal(np.mod(table, 1), 0))):
      raise ValueError("counts must be whole numbers")
    if np.any(table < 0):
      raise ValueError("counts must be >= 0")
    initial = table.astype(np.int64)
  return float(min_count), initial


def check_hash_array(num_buckets: int, num_hashes: int, alpha: float,
                     max_log2_warmup_hits: int) -> int:
  """HashArrayEstimator's checks: num_buckets * num_hashes < 2**31 (the sizes are positive ints,
  checked by the caller), 0 < alpha <= 1 and floor(1 / alpha) < 2**max_log2_warmup_hits (31 on
  the tf-keras path, 24 on the Keras 3 path); ValueError otherwise.

  Returns:
    J = floor(1 / alpha) as a Python int, the number of warm-up hits.
  """
  if num_buckets * num_hashes >= 2**31:
    raise ValueError("num_buckets * num_hashes must be < 2**31")
  if not 0.0 < alpha <= 1.0:
    raise ValueError(f"alpha must be in (0, 1], got {alpha}")
  if math.floor(1.0 / alpha) >= 2**max_log2_warmup_hits:
    raise ValueError(
        f"alpha={alpha} is too small (1/alpha must be < 2**{max_log2_warmup_hits})")
  return int(math.floor(1.0 / float(alpha)))


def check_catalog(id_range=None, candidate_ids=None):
  """The catalog of a uniform sampler: ``id_range`` (lo, hi), Python or numpy ints (not bool)
  with hi > lo, or else ``candidate_ids``, a non-empty 1-D table of distinct integer ids (the
  caller checks that exactly one is given).

  Returns:
    ((lo, hi) as Python ints, None) or (None, the table as a numpy array).

  Raises:
    ValueError: a malformed id_range, an empty or not 1-D table, or duplicate ids.
    TypeError: a table of non-integer dtype.
  """
  if id_range is not None:
    if len(id_range) != 2 or not all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in id_range):
      raise ValueError(f"id_range must be (lo, hi) ints, got {id_range!r}")
    lo, hi = int(id_range[0]), int(id_range[1])
    if hi <= lo:
      raise ValueError(f"id_range must satisfy hi > lo, got ({lo}, {hi})")
    return (lo, hi), None
  table = np.asarray(candidate_ids)
  if table.ndim != 1 or table.size == 0:
    raise ValueError(f"candidate_ids must be a non-empty 1-D table, got shape {table.shape}")
  if not np.issubdtype(table.dtype, np.integer):
    raise TypeError(f"candidate_ids must be integer ids, got dtype {table.dtype}")
  if np.unique(table).size != table.size:
    raise ValueError("candidate_ids has duplicate ids: uniform over rows would not be "
                     "uniform over items")
  return None, table


def check_retrieval_inputs(correction: str, has_log_q: bool, remove_accidental_hits: bool,
                           has_candidate_ids: bool,
                           log_q_sources: str = "candidate_log_sampling_probability") -> bool:
  """A Retrieval call's checks: a correction other than ``none`` needs log Q, and masking
  accidental hits (``remove_accidental_hits``, or ``corrected``, which masks negatives equal to
  the positive) needs candidate ids; ValueError otherwise. ``log_q_sources``: the other ways to
  give log Q, named in the message.

  Returns:
    whether accidental hits are masked.
  """
  if correction != "none" and not has_log_q:
    raise ValueError(
        f"correction={correction!r} needs candidate_sampling_probability (or {log_q_sources}); "
        "use correction='none' for no correction")
  mask_hits = remove_accidental_hits or correction == "corrected"
  if mask_hits and not has_candidate_ids:
    raise ValueError(
        "candidate_ids are needed: " +
        ("accidental-hit removal is enabled" if remove_accidental_hits else
         "correction='corrected' masks negatives equal to the positive"))
  return mask_hits


def check_estimator_inputs(has_log_q: bool, has_candidate_ids: bool) -> None:
  """A Retrieval call with a frequency_estimator: no candidate sampling probabilities (log Q
  comes from the estimator) and candidate ids (it is updated with and read for them)."""
  if has_log_q:
    raise ValueError("pass either a frequency_estimator (to the constructor) or "
                     "candidate_(log_)sampling_probability, not both")
  if not has_candidate_ids:
    raise ValueError("candidate_ids are needed with a frequency_estimator (it is updated "
                     "with and read for the candidates' ids)")


def resolve_log_q(probability, log_probability, name: str, from_probability,
                  from_log_probability):
  """log Q from exactly one of probability / log_probability (None if neither; ValueError for
  both), converted by the path's ``from_probability(probability, name)`` or
  ``from_log_probability(log_probability, "log " + name)``."""
  if probability is not None and log_probability is not None:
    raise ValueError(f"Pass either {name} or its log, not both.")
  if probability is not None:
    return from_probability(probability, name)
  if log_probability is not None:
    return from_log_probability(log_probability, "log " + name)
  return None


def needs_log_q(correction: str, q_prime: str):
  """(needs negative log Q, needs positive log Q) of a correction."""
  return (correction != "none",
          correction == "standard" or (correction == "corrected" and q_prime == "exact"))


def lowest_logit(dtype_name: str) -> float:
  """dtype.min / 100 (float16: -6e4): finite with room to spare, and exp of it is 0."""
  return {"float16": -6.0e4, "bfloat16": -3.3895313892515355e36,
          "float32": -3.4028234663852886e36, "float64": -1.7976931348623157e306}[dtype_name]


def log1mexp(ops, x, min_one_minus_p: float = MIN_ONE_MINUS_Q):
  """log(1 - exp(x)) for x <= 0 (Maechler 2012), 1 - exp(x) floored at min_one_minus_p.

  log(-expm1(x)) above -ln 2, log1p(-exp(x)) below; each branch sees only its own range, so
  neither the value nor the gradient of the unused branch is NaN.
  """
  x = ops.minimum(x, math.log1p(-min_one_minus_p))
  log_half = -math.log(2.0)
  near_one = x > log_half
  hi = ops.where(near_one, x, log_half)
  lo = ops.where(near_one, log_half, x)
  return ops.where(near_one, ops.log(-ops.expm1(hi)), ops.log1p(-ops.exp(lo)))


def masked_logsumexp(ops, x, valid):
  """LSE over the valid entries of each row of x [A, N]; a row without one gives ~ -1e30.

  Invalid entries and entries at -inf (which add e^-inf = 0) become -1e30 before a
  stop-gradient row-max shift, so they get exactly zero gradient and huge values stay finite; a
  row whose maximum is +inf gives +inf (shift 0); NaN propagates.
  """
  keep = ops.logical_and(valid, ops.not_equal(x, -math.inf))
  masked = ops.where(keep, x, MASKED_LOGIT)
  row_max = ops.max(masked, axis=1, keepdims=True)
  shift = ops.stop_gradient(ops.where(ops.isfinite(row_max), row_max, 0.0))
  sum_exp = ops.sum(ops.exp(masked - shift), axis=1)
  return ops.squeeze(shift, 1) + ops.log(sum_exp)


def sampled_softmax(ops, s_p, s_n, negative_log_q, positive_log_q, valid, correction: str,
                    q_prime: str = "exact", ratio_floor: float = 0.0):
  """Per-row loss, weight and n of the four corrections (module docstring).

  Args:
    ops: the array namespace.
    s_p: float32 [A] positive scores.
    s_n: float32 [A, N] negative scores.
    negative_log_q: float32 [N] or [A, N] (None for ``none``).
    positive_log_q: float32 [A] (None unless ``standard`` or ``corrected`` + ``exact``).
    valid: bool [A, N].
    correction, q_prime, ratio_floor: as in ``tfrs_logq.losses`` (checked by the caller).

  Returns:
    (loss [A], weight [A], num_valid [A] int32), all computed in the inputs' float dtype.
  """
  num_valid = ops.sum(ops.cast(valid, "int32"), axis=1)
  has_negatives = num_valid > 0
  if correction == "corrected":
    lse = masked_logsumexp(ops, s_n - negative_log_q, valid)
    if q_prime == "exact":
      lse = lse + log1mexp(ops, positive_log_q)
    log_n = ops.log(ops.cast(ops.maximum(num_valid, 1), "float32"))
    # 1 - P̂ = 1 - sigmoid(s_p - (Z - log n)) = sigmoid((Z - log n) - s_p)
    weight = ops.stop_gradient(ops.sigmoid((lse - log_n) - s_p))
    weight = ops.where(has_negatives, weight, ops.zeros_like(weight))
    if ratio_floor > 0:
      log_floor = math.log(ratio_floor)
      term = ops.maximum(s_p - ops.maximum(lse, log_floor), log_floor)
    else:
      term = s_p - lse
    # w = 0 (n = 0, or s_p = +inf where term = +inf) contributes exactly 0, never 0 * inf; a NaN
    # weight (s_p and a negative both +inf: no limit) propagates.
    active = ops.logical_and(has_negatives, ops.not_equal(weight, 0.0))
    loss = ops.where(active, -weight * ops.where(active, term, ops.zeros_like(term)),
                     ops.zeros_like(term))
    return loss, weight, num_valid
  if correction == "none":
    logits, pos_logit = s_n, s_p
  elif correction == "standard":
    logits, pos_logit = s_n - negative_log_q, s_p - positive_log_q
  elif correction == "standard_no_positive":
    logits, pos_logit = s_n - negative_log_q, s_p
  else:
    raise ValueError(f"correction must be one of {CORRECTIONS}, got {correction!r}")
  # log(e^{pos} + e^{LSE(valid negatives)}) - pos = softplus(LSE - pos), without an [A, N + 1]
  # copy; finite limits for pos = +inf and LSE = -inf; a row without negatives gives 0.
  loss = ops.softplus(masked_logsumexp(ops, logits, valid) - pos_logit)
  loss = ops.where(has_negatives, loss, ops.zeros_like(loss))
  return loss, ops.ones_like(loss), num_valid


def log_q_prime(ops, negative_log_q, positive_log_q,
                min_one_minus_p: float = MIN_ONE_MINUS_Q):
  """log Q'(d) = log Q(d) - log(1 - Q(p)): [N] or [A, N] against [A] -> [A, N]."""
  return negative_log_q - ops.expand_dims(log1mexp(ops, positive_log_q, min_one_minus_p), -1)


def mixture_log_q(ops, log_q_unigram, num_in_batch, num_uniform: int, catalog_size: int):
  """log q(d) = log((n_b q_uni(d) + k_u / |D|) / (n_b + k_u)) in log space (n_b float32)."""
  in_batch = ops.log(num_in_batch) + log_q_unigram          # -inf when n_b = 0 or q_uni = 0
  uniform = ops.full_like(log_q_unigram, math.log(num_uniform) - math.log(catalog_size))
  return ops.logaddexp(in_batch, uniform) - ops.log(num_in_batch + float(num_uniform))


def unigram_log_q(ops, log_q_unigram, num_in_batch, num_uniform: int, catalog_size: int):
  """The paper's convention: log q_uni(d), or log(k_u / ((n_b + k_u) |D|)) where q_uni = 0."""
  unseen = (math.log(num_uniform) - math.log(catalog_size)
            - ops.log(num_in_batch + float(num_uniform)))
  return ops.where(ops.isfinite(log_q_unigram), log_q_unigram, unseen)


def gap_weight(ops, k, c, alpha: float, warmup_hits: int):
  """w = prod_{j=k+1}^{k+c} (1 - max(alpha, 1/j)) in closed form (k, c float32 >= 0)."""
  j_cap = float(warmup_hits)
  running = k / ops.maximum(ops.maximum(k, ops.minimum(k + c, j_cap)), 1.0)
  ema_hits = ops.maximum(k + c - ops.maximum(k, j_cap), 0.0)
  return running * ops.power(1.0 - alpha, ema_hits)


def tf_ops():
  """The namespace above bound to TensorFlow (for the tf-keras path and its tests)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def _cast(x, dtype):
    return tf.cast(x, dtype)

  def _logaddexp(a, b):
    m = tf.maximum(a, b)
    safe = tf.where(tf.math.is_finite(m), m, tf.zeros_like(m))
    return tf.where(tf.math.is_finite(m),
                    safe + tf.math.log(tf.exp(a - safe) + tf.exp(b - safe)), m)

  def _full_like(x, value):
    return tf.fill(tf.shape(x), tf.cast(value, x.dtype))

  return types.SimpleNamespace(
      where=tf.where, max=tf.reduce_max, sum=tf.reduce_sum, exp=tf.exp, log=tf.math.log,
      log1p=tf.math.log1p, expm1=tf.math.expm1, sigmoid=tf.sigmoid,
      softplus=tf.math.softplus, stop_gradient=tf.stop_gradient, minimum=tf.minimum,
      maximum=tf.maximum, logical_and=tf.logical_and, not_equal=tf.not_equal,
      squeeze=tf.squeeze, expand_dims=tf.expand_dims, cast=_cast, zeros_like=tf.zeros_like,
      ones_like=tf.ones_like, logaddexp=_logaddexp, isfinite=tf.math.is_finite, power=tf.pow,
      full_like=_full_like)
