"""Test set-up shared by the whole suite.

* The application packages (models, train, eval, bench) are importable because the project is
  installed (`pip install -e ".[test]"`, what `make test` does); nothing touches sys.path.
* Splits the CPU into 2 logical devices before TensorFlow initialises, so
  MirroredStrategy tests have two replicas on a CPU-only machine.
* Locates ../shared/data (or $TFRS_LOGQ_DATA): tests that need it fail, never skip, when it
  is missing.
* Gives the session one JAX persistent compilation cache, inherited by its JAX subprocesses,
  and XLA's CPU back end set for compile speed (tiny programs: the compile is the cost).
* Orders the files: the longest first, the in-process parameter-server tests last.
* Ends the process right after pytest is done when an in-process parameter-server cluster ran
  (`train.distribute.local_cluster`): its servers cannot be stopped, and the interpreter's
  teardown would log dozens of gRPC errors after the summary line.
"""

import os
import pathlib
import shutil
import sys
import tempfile

import xla_flags  # tests/ (pytest.ini's pythonpath)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# One JAX persistent compilation cache for the whole session, made by the first process that loads
# this file (pytest, or pytest-xdist's controller, whose environment its workers inherit) and
# inherited by every JAX subprocess the tests start: most Keras 3 tests compile the same tiny
# SASRec step, and on this CPU a cached compile is the difference between ~100 s and ~30 s for
# a 2-epoch synthetic run of the binary. The cache starts empty in every session; a cached
# executable is the one the compiler produced, so results are unchanged.
_JAX_CACHE_MADE = []
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _JAX_CACHE_MADE.append(tempfile.mkdtemp(prefix="tfrs_logq_test_jax_cache_"))
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _JAX_CACHE_MADE[0]
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

# XLA's CPU back end set for compile speed in every process of the session (in-process TensorFlow
# reads XLA_FLAGS at its first XLA compile; the test subprocesses inherit it): why and what it
# costs in tests/xla_flags.py. A setting of one of these flags already in XLA_FLAGS is kept.
os.environ["XLA_FLAGS"] = xla_flags.with_session_flags(os.environ.get("XLA_FLAGS", ""))

import pytest  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
  """In every process that runs tests (not pytest-xdist's controller, which runs none, and whose
  TensorFlow start-up messages would be printed after the summary line): legacy Keras, then 2
  logical CPUs before TensorFlow initialises."""
  if config.pluginmanager.get_plugin("dsession") is not None:
    return
  import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

  import tensorflow as tf

  cpus = tf.config.list_physical_devices("CPU")
  tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)


_MIRRORED = []


@pytest.fixture(scope="session")
def mirrored_strategy():
  """The one MirroredStrategy over the 2 logical CPUs for the whole session.

  Separate MirroredStrategy instances in one process can reuse collective instance keys and
  abort each other's all_gather ("Shape mismatch in the collective instance"): every test that
  needs 2 replicas takes this fixture instead of building its own.
  """
  import tensorflow as tf

  if not _MIRRORED:
    _MIRRORED.append(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
  assert _MIRRORED[0].num_replicas_in_sync == 2
  return _MIRRORED[0]


def shared_data_dir() -> pathlib.Path:
  """The shared datasets folder: $TFRS_LOGQ_DATA or ../shared/data beside the repo."""
  return pathlib.Path(os.environ.get("TFRS_LOGQ_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
  path = shared_data_dir()
  if not path.is_dir():
    pytest.fail(
      f"shared datasets not found at {path}: set TFRS_LOGQ_DATA or place "
      "../shared/data beside the repository (tests never skip on missing data)"
    )
  return path


# Test files that connect their process to an in-process cluster for good
# (`tf.config.experimental_connect_to_cluster` cannot be undone): they run after every other file,
# in one process or in each pytest-xdist worker, so no other file sees the changed device context.
# (`make test` passes --no-loadscope-reorder, so pytest-xdist hands out the files in this order.)
_PROCESS_CHANGING_FILES = ("tests/train/test_parameter_server.py",)
# The longest files first, so that no worker starts a long file when the others are nearly done
# (a file's summed seconds in one whole 2-process run on a 2-core CPU, rounded: the profile at
# 2b82cf5, `pytest --durations=0`; a file not listed runs after these, in collection order; a
# stale entry costs wall-clock, never a result).
_LONGEST_FIRST = (
  "tests/tfrs_logq/keras3/test_backends.py",  # 85 s
  "tests/train/keras3/test_seeds.py",  # 85 s
  "tests/bench/step/test_keras3_sides.py",  # 70 s
  "tests/train/test_compiled_step.py",  # 70 s
  "tests/train/test_trainer.py",  # 65 s
  "tests/tfrs_logq/keras3/test_backends_samplers.py",  # 65 s
  "tests/train/keras3/test_binary.py",  # 55 s
  "tests/tfrs_logq/keras3/test_backends_features.py",  # 50 s
  "tests/train/test_cli.py",  # 50 s
  "tests/train/test_distributed.py",  # 45 s
  "tests/train/test_parameter_server_binary.py",  # 45 s
  "tests/train/test_resume.py",  # 40 s
  "tests/train/test_train_binary.py",  # 35 s
  "tests/bench/launch/test_launch.py",  # 35 s
  "tests/train/keras3/test_jax_step.py",  # 30 s
  "tests/bench/test_catalog_parameter_server.py",  # 30 s
  "tests/train/keras3/test_losses.py",  # 30 s
  "tests/train/keras3/test_data_parallel.py",  # 25 s
  "tests/models/test_sasrec.py",  # 25 s
  "tests/train/keras3/test_torch.py",  # 25 s
  "tests/models/keras3/test_sasrec.py",  # 25 s
  "tests/eval/test_evaluate.py",  # 20 s
  "tests/train/keras3/test_mixed_precision.py",  # 20 s
  "tests/tfrs_logq/test_fronts.py",  # 20 s
  "tests/eval/test_demo.py",  # 20 s
  "tests/train/keras3/test_negatives.py",  # 20 s
  "tests/bench/test_paper_loop.py",  # 20 s
  "tests/train/keras3/test_serving_export.py",  # 15 s
  "tests/tfrs_logq/keras3/test_data_parallel.py",  # 15 s
  "tests/bench/step/test_trees.py",  # 15 s
)


def pytest_collection_modifyitems(session, config, items):
  """Orders the files: `_LONGEST_FIRST`, then the others, then `_PROCESS_CHANGING_FILES`; the
  tests of a file keep their order."""
  del session, config

  def rank(item) -> int:
    path = item.nodeid.split("::", 1)[0]
    if path in _PROCESS_CHANGING_FILES:
      return len(_LONGEST_FIRST) + 1
    return _LONGEST_FIRST.index(path) if path in _LONGEST_FIRST else len(_LONGEST_FIRST)

  items.sort(key=rank)  # stable: collection order within a rank


_EXIT_STATUS = []


def pytest_sessionfinish(session, exitstatus):
  _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
  """After the summary: the session's JAX cache is removed; with an in-process cluster alive,
  exit with pytest's status now."""
  del config
  for path in _JAX_CACHE_MADE:
    shutil.rmtree(path, ignore_errors=True)
  distribute = sys.modules.get("train.distribute")
  if _EXIT_STATUS and distribute is not None and distribute.LOCAL_CLUSTERS:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_EXIT_STATUS[-1])
