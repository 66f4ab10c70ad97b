"""tfrs_logq/core/checks.py: the argument checks shared by the tf-keras and Keras 3 layers:
errors (types and messages) for bad inputs, values for good ones; and the core package imports
no framework."""

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from tfrs_logq.core import checks as core_checks


def _raises(error, message):
  return pytest.raises(error, match="^" + re.escape(message) + "$")


# ---- check_num_items_given, check_counts_table (ExactCounts) -------------------------------------


def test_check_num_items_given():
  core_checks.check_num_items_given(3)
  with _raises(ValueError, "ExactCounts needs num_items (the size of the counts table)"):
    core_checks.check_num_items_given(None)


def test_check_counts_table_accepts_whole_counts_and_defaults_to_zeros():
  min_count, initial = core_checks.check_counts_table(3, 2, None)
  assert type(min_count) is float and min_count == 2.0
  assert initial.dtype == np.int64 and initial.tolist() == [0, 0, 0]
  for counts in ([1, 0, 5], np.array([1.0, 0.0, 5.0]), np.array([1, 0, 5], np.int32)):
    min_count, initial = core_checks.check_counts_table(3, 0.5, counts)
    assert min_count == 0.5 and initial.dtype == np.int64 and initial.tolist() == [1, 0, 5]


@pytest.mark.parametrize(
  "min_count, counts, message",
  [
    (0, None, "min_count must be > 0, got 0"),
    (-1.5, [1, 2, 3], "min_count must be > 0, got -1.5"),
    (1.0, [1, 2], "counts must have shape [3], got (2,)"),
    (1.0, [[1, 2, 3]], "counts must have shape [3], got (1, 3)"),
    (1.0, [1.0, 2.5, 3.0], "counts must be whole numbers"),
    (1.0, [1, -2, 3], "counts must be >= 0"),
  ],
)
def test_check_counts_table_rejects(min_count, counts, message):
  with _raises(ValueError, message):
    core_checks.check_counts_table(3, min_count, counts)


# ---- check_hash_array (HashArrayEstimator) -------------------------------------------------------


def test_check_hash_array_returns_warmup_hits():
  assert core_checks.check_hash_array(2**22, 2, 0.001, 31) == 1000
  assert core_checks.check_hash_array(8, 1, 1.0, 24) == 1
  assert core_checks.check_hash_array(8, 1, 0.3, 24) == 3
  # J from float(alpha), as the layers compute it (a float32 alpha is widened first).
  alpha = np.float32(0.001)
  assert core_checks.check_hash_array(8, 1, alpha, 31) == int(np.floor(1.0 / float(alpha)))


@pytest.mark.parametrize(
  "num_buckets, num_hashes, alpha, bits, message",
  [
    (2**30, 2, 0.1, 31, "num_buckets * num_hashes must be < 2**31"),
    (8, 2, 0.0, 31, "alpha must be in (0, 1], got 0.0"),
    (8, 2, 1.5, 24, "alpha must be in (0, 1], got 1.5"),
    (8, 2, 2.0**-31, 31, f"alpha={2.0**-31} is too small (1/alpha must be < 2**31)"),
    (8, 2, 2.0**-24, 24, f"alpha={2.0**-24} is too small (1/alpha must be < 2**24)"),
  ],
)
def test_check_hash_array_rejects(num_buckets, num_hashes, alpha, bits, message):
  with _raises(ValueError, message):
    core_checks.check_hash_array(num_buckets, num_hashes, alpha, bits)


# ---- check_catalog (UniformNegatives) ------------------------------------------------------------


def test_check_catalog_accepts_ranges_and_tables():
  id_range, table = core_checks.check_catalog((np.int32(2), np.int64(9)), None)
  assert id_range == (2, 9) and all(type(v) is int for v in id_range) and table is None
  id_range, table = core_checks.check_catalog(None, [7, 3, 11])
  assert id_range is None and table.tolist() == [7, 3, 11]


@pytest.mark.parametrize(
  "id_range, candidate_ids, error, message",
  [
    ((1, 2, 3), None, ValueError, "id_range must be (lo, hi) ints, got (1, 2, 3)"),
    ((0, 5.0), None, ValueError, "id_range must be (lo, hi) ints, got (0, 5.0)"),
    ((False, 5), None, ValueError, "id_range must be (lo, hi) ints, got (False, 5)"),
    (
      (np.bool_(False), 5),
      None,
      ValueError,
      f"id_range must be (lo, hi) ints, got {(np.bool_(False), 5)!r}",
    ),
    ((5, 5), None, ValueError, "id_range must satisfy hi > lo, got (5, 5)"),
    (None, [], ValueError, "candidate_ids must be a non-empty 1-D table, got shape (0,)"),
    (None, [[1, 2]], ValueError, "candidate_ids must be a non-empty 1-D table, got shape (1, 2)"),
    (None, [1.0, 2.0], TypeError, "candidate_ids must be integer ids, got dtype float64"),
    (
      None,
      [1, 2, 1],
      ValueError,
      "candidate_ids has duplicate ids: uniform over rows would not be uniform over items",
    ),
  ],
)
def test_check_catalog_rejects(id_range, candidate_ids, error, message):
  with _raises(error, message):
    core_checks.check_catalog(id_range, candidate_ids)


# ---- check_retrieval_inputs (Retrieval.call) -----------------------------------------------------


def test_check_retrieval_inputs_returns_whether_hits_are_masked():
  assert core_checks.check_retrieval_inputs("none", False, False, False) is False
  assert core_checks.check_retrieval_inputs("none", False, True, True) is True
  assert core_checks.check_retrieval_inputs("standard", True, False, False) is False
  assert core_checks.check_retrieval_inputs("corrected", True, False, True) is True


def test_check_retrieval_inputs_rejects():
  with _raises(
    ValueError,
    "correction='standard' needs candidate_sampling_probability (or "
    "candidate_log_sampling_probability); use correction='none' for no correction",
  ):
    core_checks.check_retrieval_inputs("standard", False, False, True)
  with _raises(
    ValueError,
    "correction='corrected' needs candidate_sampling_probability (or "
    "candidate_log_sampling_probability, or a frequency_estimator); use "
    "correction='none' for no correction",
  ):
    core_checks.check_retrieval_inputs(
      "corrected",
      False,
      False,
      True,
      log_q_sources="candidate_log_sampling_probability, or a frequency_estimator",
    )
  with _raises(ValueError, "candidate_ids are needed: accidental-hit removal is enabled"):
    core_checks.check_retrieval_inputs("none", False, True, False)
  with _raises(
    ValueError,
    "candidate_ids are needed: correction='corrected' masks negatives equal to the positive",
  ):
    core_checks.check_retrieval_inputs("corrected", True, False, False)


def test_check_estimator_inputs():
  core_checks.check_estimator_inputs(False, True)
  with _raises(
    ValueError,
    "pass either a frequency_estimator (to the constructor) or "
    "candidate_(log_)sampling_probability, not both",
  ):
    core_checks.check_estimator_inputs(True, True)
  with _raises(
    ValueError,
    "candidate_ids are needed with a frequency_estimator (it is updated "
    "with and read for the candidates' ids)",
  ):
    core_checks.check_estimator_inputs(False, False)


# ---- resolve_log_q -------------------------------------------------------------------------------


def test_resolve_log_q_dispatches_to_the_path_converters():
  def from_p(p, name):
    return ("p", p, name)

  def from_log_p(log_p, name):
    return ("log p", log_p, name)

  assert core_checks.resolve_log_q(None, None, "q", from_p, from_log_p) is None
  assert core_checks.resolve_log_q(0.5, None, "q", from_p, from_log_p) == ("p", 0.5, "q")
  assert core_checks.resolve_log_q(None, -1.0, "q", from_p, from_log_p) == ("log p", -1.0, "log q")
  with _raises(ValueError, "Pass either q or its log, not both."):
    core_checks.resolve_log_q(0.5, -1.0, "q", from_p, from_log_p)


# ---- framework-free ------------------------------------------------------------------------------


def test_core_package_imports_neither_tensorflow_nor_keras():
  """In a fresh process, every module of ``tfrs_logq.core`` (and its argument checks) loads and
  runs without pulling in an array framework (no module of the core imports one)."""
  core_dir = pathlib.Path(core_checks.__file__).resolve().parent
  modules = sorted(p.stem for p in core_dir.glob("*.py") if p.stem != "__init__")
  assert {"checks", "ops", "sampled_softmax", "log_q", "frequency"} <= set(modules), modules
  code = (
    "import sys\n"
    "import importlib\n"
    f"for name in {modules!r}:\n"
    "  importlib.import_module('tfrs_logq.core.' + name)\n"
    "from tfrs_logq.core import checks as m\n"
    "m.check_counts_table(2, 1.0, [1, 2]); m.check_hash_array(4, 2, 0.5, 24)\n"
    "m.check_catalog((0, 3)); m.check_catalog(None, [4, 2])\n"
    "m.check_num_items_given(2); m.check_estimator_inputs(False, True)\n"
    "m.check_retrieval_inputs('corrected', True, False, True)\n"
    "frameworks = ('tensorflow', 'keras', 'tf_keras', 'jax', 'torch')\n"
    "print(sorted(k for k in sys.modules if k.split('.')[0] in frameworks))"
  )
  env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
  out = subprocess.run(
    [sys.executable, "-c", code],
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
    env=env,
    cwd=str(core_dir.parents[1]),
  )
  assert out.returncode == 0, out.stderr[-3000:]
  assert out.stdout.strip() == "[]", out.stdout
