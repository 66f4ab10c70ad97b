"""Test set-up shared by the whole suite.

* The application packages (models, train, eval, bench) are importable because the project is
  installed (`pip install -e ".[test]"`, what `make test` does); nothing touches sys.path.
* Splits the CPU into 2 logical devices before TensorFlow initialises, so
  MirroredStrategy tests have two replicas on a CPU-only machine.
* Locates ../shared/data (or $TFRS_LOGQ_DATA): tests that need it fail, never skip, when it
  is missing.
* Ends the process right after pytest is done when an in-process parameter-server cluster ran
  (`train.distribute.local_cluster`): its servers cannot be stopped, and the interpreter's
  teardown would log dozens of gRPC errors after the summary line.
"""

import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

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


_EXIT_STATUS = []


def pytest_sessionfinish(session, exitstatus):
  _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
  """After the summary: with an in-process cluster alive, exit with pytest's status now."""
  del config
  distribute = sys.modules.get("train.distribute")
  if _EXIT_STATUS and distribute is not None and distribute.LOCAL_CLUSTERS:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_EXIT_STATUS[-1])
