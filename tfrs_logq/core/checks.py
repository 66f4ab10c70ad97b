r"""Argument vocabularies and checks shared by the tf-keras layers and their Keras 3 twins.

Plain Python and numpy (no ``ops``, no tensors): the same error types and messages on both
fronts. ``check_*`` raise ValueError / TypeError naming the argument and return the normalised
values; ``needs_log_q`` says which log Q a correction reads; ``resolve_log_q`` picks log Q from
exactly one of a probability and a log-probability, converted by the front's own functions.
"""

import math
import numbers
from typing import Callable, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt

from tfrs_logq.core.ops import Tensor

__all__ = [
  "LOSSES",
  "CORRECTIONS",
  "Q_PRIME_MODES",
  "MIXED_CONVENTIONS",
  "LOG_Q_CONVENTIONS",
  "UNIFORM_PER",
  "LOG_Q_SLACK",
  "check_correction",
  "check_num_items_given",
  "check_counts_table",
  "check_hash_array",
  "check_catalog",
  "check_retrieval_inputs",
  "check_estimator_inputs",
  "check_full_softmax",
  "check_clip_epsilon",
  "resolve_log_q",
  "needs_log_q",
]

LOSSES = ("sampled_softmax", "full_softmax", "bce", "gbce")
"""Training losses of the binaries (sampled softmax with a correction, or the references)."""
CORRECTIONS = ("none", "standard", "standard_no_positive", "corrected")
Q_PRIME_MODES = ("exact", "proxy")
MIXED_CONVENTIONS = ("unigram", "mixture")
LOG_Q_CONVENTIONS = MIXED_CONVENTIONS + ("expected_count",)
"""log Q conventions of in-batch and mixed negatives (``tfrs_logq.core.negatives``)."""
UNIFORM_PER = ("batch", "sequence", "query")
"""Layouts of uniform negatives: shared by the batch, one set per sequence, one per query."""
LOG_Q_SLACK = 1e-5
"""log Q may exceed 0 by this much (float rounding, e.g. log(count / total) with count ==
total); anything above is a caller error (Q > 1)."""


def check_correction(correction: str, q_prime: str, ratio_floor: float = 0.0) -> float:
  """Raises ValueError naming the argument for an unknown correction / q_prime / ratio_floor;
  returns ratio_floor as a float."""
  if correction not in CORRECTIONS:
    raise ValueError(f"correction must be one of {CORRECTIONS}, got {correction!r}")
  if q_prime not in Q_PRIME_MODES:
    raise ValueError(f"q_prime must be one of {Q_PRIME_MODES}, got {q_prime!r}")
  if (
    isinstance(ratio_floor, bool)
    or not isinstance(ratio_floor, numbers.Real)
    or not 0.0 <= float(ratio_floor) < 1.0
  ):
    raise ValueError(f"ratio_floor must be a float in [0, 1) (0 = off), got {ratio_floor!r}")
  if ratio_floor > 0 and correction != "corrected":
    raise ValueError(
      "ratio_floor applies to correction='corrected' only (the clamp of the "
      f"paper's corrected script), got correction={correction!r}"
    )
  return float(ratio_floor)


def check_num_items_given(num_items: Optional[int]) -> None:
  """ExactCounts' first check (before the layer is set up): num_items is not None."""
  if num_items is None:
    raise ValueError("ExactCounts needs num_items (the size of the counts table)")


def check_counts_table(
  num_items: int, min_count: float, counts: Optional[npt.ArrayLike] = None
) -> Tuple[float, np.ndarray]:
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


def check_hash_array(
  num_buckets: int, num_hashes: int, alpha: float, max_log2_warmup_hits: int
) -> int:
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
    raise ValueError(f"alpha={alpha} is too small (1/alpha must be < 2**{max_log2_warmup_hits})")
  return int(math.floor(1.0 / float(alpha)))


def check_catalog(
  id_range: Optional[Sequence[int]] = None, candidate_ids: Optional[npt.ArrayLike] = None
) -> Tuple[Optional[Tuple[int, int]], Optional[np.ndarray]]:
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
      isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in id_range
    ):
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
    raise ValueError(
      "candidate_ids has duplicate ids: uniform over rows would not be uniform over items"
    )
  return None, table


def check_retrieval_inputs(
  correction: str,
  has_log_q: bool,
  remove_accidental_hits: bool,
  has_candidate_ids: bool,
  log_q_sources: str = "candidate_log_sampling_probability",
) -> bool:
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
      "use correction='none' for no correction"
    )
  mask_hits = remove_accidental_hits or correction == "corrected"
  if mask_hits and not has_candidate_ids:
    raise ValueError(
      "candidate_ids are needed: "
      + (
        "accidental-hit removal is enabled"
        if remove_accidental_hits
        else "correction='corrected' masks negatives equal to the positive"
      )
    )
  return mask_hits


def check_estimator_inputs(has_log_q: bool, has_candidate_ids: bool) -> None:
  """A Retrieval call with a frequency_estimator: no candidate sampling probabilities (log Q
  comes from the estimator) and candidate ids (it is updated with and read for them)."""
  if has_log_q:
    raise ValueError(
      "pass either a frequency_estimator (to the constructor) or "
      "candidate_(log_)sampling_probability, not both"
    )
  if not has_candidate_ids:
    raise ValueError(
      "candidate_ids are needed with a frequency_estimator (it is updated "
      "with and read for the candidates' ids)"
    )


def check_full_softmax(temperature: float, id_offset: int) -> Tuple[float, int]:
  """Full softmax's checks: temperature > 0 and id_offset an int >= 0 (Python or numpy, not
  bool); ValueError otherwise.

  Returns:
    (temperature as a float, id_offset as an int).
  """
  if not temperature > 0:
    raise ValueError(f"temperature must be > 0, got {temperature!r}")
  if (
    isinstance(id_offset, (bool, np.bool_))
    or not isinstance(id_offset, (numbers.Integral, np.integer))
    or id_offset < 0
  ):
    raise ValueError(f"id_offset must be an int >= 0, got {id_offset!r}")
  return float(temperature), int(id_offset)


def check_clip_epsilon(epsilon: Optional[float], from_log: bool) -> Optional[float]:
  """The sampling-probability correction's clip: None (no clipping) or a float in (0, 1), and
  never with ``from_log`` (it clips probabilities); ValueError otherwise. Returns it as a float."""
  if epsilon is not None and not 0.0 < float(epsilon) < 1.0:
    raise ValueError(f"epsilon must be None (no clipping) or in (0, 1), got {epsilon!r}")
  if epsilon is not None and from_log:
    raise ValueError("epsilon clips probabilities; it cannot be combined with from_log=True")
  return None if epsilon is None else float(epsilon)


def resolve_log_q(
  probability: Optional[Tensor],
  log_probability: Optional[Tensor],
  name: str,
  from_probability: Callable[[Tensor, str], Tensor],
  from_log_probability: Callable[[Tensor, str], Tensor],
) -> Optional[Tensor]:
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


def needs_log_q(correction: str, q_prime: str) -> Tuple[bool, bool]:
  """(needs negative log Q, needs positive log Q) of a correction."""
  return (
    correction != "none",
    correction == "standard" or (correction == "corrected" and q_prime == "exact"),
  )
