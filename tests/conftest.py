"""Test set-up shared by the whole suite.

* The application packages (models, train, eval, bench) are importable because the project is
  installed (`pip install -e ".[test]"`, what `make test` does); nothing touches sys.path.
* Splits the CPU into 2 logical devices before TensorFlow initialises, so
  MirroredStrategy tests have two replicas on a CPU-only machine.
* Locates ../shared/data (or $TFRS_LOGQ_DATA): tests that need it fail, never skip, when it
  is missing.
* Gives the session one JAX persistent compilation cache, inherited by its JAX subprocesses.
* Runs the in-process parameter-server tests last (`_PROCESS_CHANGING_FILES`).
* Ends the process right after pytest is done when an in-process parameter-server cluster ran
  (`train.distribute.local_cluster`): its servers cannot be stopped, and the interpreter's
  teardown would log dozens of gRPC errors after the summary line.
"""

import os
import pathlib
import shutil
import sys
import tempfile

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

import tfrs_logq.tf_keras  # noqa: E402,F401  (legacy Keras before TensorFlow loads)
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]

_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(_cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)


_MIRRORED = []


@pytest.fixture(scope="session")
def mirrored_strategy() -> tf.distribute.MirroredStrategy:
  """The one MirroredStrategy over the 2 logical CPUs for the whole session.

  Separate MirroredStrategy instances in one process can reuse collective instance keys and
  abort each other's all_gather ("Shape mismatch in the collective instance"): every test that
  needs 2 replicas takes this fixture instead of building its own.
  """
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
_PROCESS_CHANGING_FILES = ("tests/train/test_parameter_server.py",)


def pytest_collection_modifyitems(session, config, items):
  """Moves the tests of `_PROCESS_CHANGING_FILES` to the end, keeping every other order."""
  del session, config

  def changes_process(item) -> bool:
    return item.nodeid.split("::", 1)[0] in _PROCESS_CHANGING_FILES

  items[:] = [i for i in items if not changes_process(i)] + [i for i in items if changes_process(i)]


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
