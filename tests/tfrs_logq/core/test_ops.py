"""`tfrs_logq.core.ops`: the typed ``Ops`` protocol has exactly the names of OPS_NAMES; the
tf-keras namespace `tf_ops()` provides each of them; and keras.ops (a Keras-3-only subprocess,
numpy backend) provides each with the protocol's parameter names, in order."""

import inspect
import json
import os
import subprocess
import sys

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

from tfrs_logq.core import ops as core_ops


def _protocol_parameters():
  return {
    name: [p for p in inspect.signature(getattr(core_ops.Ops, name)).parameters if p != "self"]
    for name in core_ops.OPS_NAMES
  }


def test_protocol_names_are_the_op_names():
  methods = {n for n, v in vars(core_ops.Ops).items() if callable(v) and not n.startswith("_")}
  assert methods == set(core_ops.OPS_NAMES)
  assert len(core_ops.OPS_NAMES) == len(set(core_ops.OPS_NAMES))


def test_tf_ops_provides_every_name():
  ops = core_ops.tf_ops()
  missing = [n for n in core_ops.OPS_NAMES if not callable(getattr(ops, n, None))]
  assert not missing


_SCRIPT = """
import inspect, json, sys
import keras
from keras import ops
names = json.loads(sys.argv[1])
print(json.dumps({n: list(inspect.signature(getattr(ops, n)).parameters) if hasattr(ops, n)
                  else None for n in names}))
"""


def test_keras_ops_has_the_protocol_signatures():
  env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
  env["KERAS_BACKEND"] = "numpy"
  proc = subprocess.run(
    [sys.executable, "-c", _SCRIPT, json.dumps(list(core_ops.OPS_NAMES))],
    capture_output=True,
    text=True,
    timeout=300,
    check=False,
    env=env,
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  keras_params = json.loads(proc.stdout.strip().splitlines()[-1])
  assert keras_params == _protocol_parameters()


def test_tf_ops_take_keras_arguments_in_keras_order():
  """The tf-keras namespace's own helpers read positional and keyword arguments as keras.ops
  does (arange's third argument is the step, not the dtype), checked against numpy."""
  import numpy as np

  ops = core_ops.tf_ops()
  np.testing.assert_array_equal(ops.arange(1, 8, 3).numpy(), np.arange(1, 8, 3))
  np.testing.assert_array_equal(ops.arange(4).numpy(), np.arange(4))
  x = np.array([[3.0, 1.0, 2.0], [0.5, 4.0, -1.0]], np.float32)
  np.testing.assert_array_equal(ops.argmin(x, axis=1).numpy(), np.argmin(x, axis=1))
  np.testing.assert_array_equal(
    ops.argmin(x, axis=1, keepdims=True).numpy(), np.argmin(x, axis=1, keepdims=True)
  )
  assert int(ops.argmin(x).numpy()) == int(np.argmin(x))  # flattened, as keras.ops
  assert ops.argmin(x, keepdims=True).numpy().shape == (1, 1)
  full = ops.full_like(x, 7, dtype="int32").numpy()
  assert full.dtype == np.int32 and (full == 7).all()
  ids = np.array([0, 2, 0, 1], np.int32)
  np.testing.assert_array_equal(
    ops.segment_sum(np.ones(4, np.float32), ids, num_segments=3, sorted=False).numpy(),
    np.bincount(ids, minlength=3),
  )
