"""bench.step's Keras 3 sides (``jax``, ``keras3_tf``): the configuration tokens, the
tf-keras / Keras 3 ratio of the same configuration, and a real run of both sides for one step on
a tiny ML-1M batch (B = 4, L = 20): each worker sets KERAS_BACKEND before keras is imported
(the keras3_tf side is the TensorFlow backend, the jax side JAX), the jitted stateless JAX step
gives Keras's own ``train_on_batch`` loss from the same state, and the report has every side's
time, GFLOP/s against its own framework's matmul peak, and the summary line."""

import dataclasses
import json
import math
import os
import pathlib
import re
import subprocess
import sys

import pytest

from bench.step import report
from bench.step.configs import parse_config

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_framework_tokens():
  jax = parse_config("paper+jax")
  assert (jax.framework, jax.uniform, jax.block, jax.xla) == (
    "keras3_jax",
    "query",
    "reference",
    True,
  )
  assert jax.keras3 and jax.peak_framework == "jax" and "Keras 3 JAX" in jax.label
  tf = parse_config("defaults+keras3_tf")
  assert (tf.framework, tf.uniform, tf.block, tf.xla) == (
    "keras3_tensorflow",
    "sequence",
    "reference",
    False,
  )
  assert tf.peak_framework == "tensorflow" and "Keras 3 TF" in tf.label
  ours = parse_config("defaults")
  assert not ours.keras3 and ours.framework == "tf_keras"
  assert parse_config("keras3_jax").framework == "keras3_jax"
  # token packing, the binary's default, on Keras 3 sides too; nopack = the padded encoder
  assert jax.pack and "no pack" not in jax.label
  padded = parse_config("defaults+jax+nopack")
  assert not padded.pack and "no pack" in padded.label and padded.framework == "keras3_jax"


@pytest.mark.parametrize(
  "name",
  [
    "paper+jax+step",
    "sequence+keras3_tf+hash_array",
    "batch+jax+noloss",
    "jax+keras3_tf",
    "jax+xla_loss",
  ],
)
def test_tf_keras_only_tokens_are_rejected_on_keras3_sides(name):
  with pytest.raises(ValueError, match="--configs"):
    parse_config(name)


def test_keras3_ratio_pairs_the_same_configuration():
  configs = [parse_config(n) for n in ("paper", "paper+jax", "defaults+keras3_tf", "fastest")]
  results = {
    "paper": (2.0, 3.0),
    "paper+jax": (1.0, 1.5),
    "defaults+keras3_tf": (4.0, 4.0),
    "fastest": (1.0, 1.0),
  }
  got = report.keras3_ratios(configs, results)
  assert got == {"paper+jax": dict(tf_keras="paper", x_min=2.0, x_median=2.0)}
  assert dataclasses.replace(configs[1], name="paper", framework="tf_keras") == configs[0]


def test_keras3_sides_run_one_step_on_a_tiny_batch(tmp_path):
  env = {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS", "KERAS_BACKEND")}
  env.update(PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
  cmd = [
    sys.executable,
    "-m",
    "bench.step",
    "--configs=defaults+jax,query+reference+keras3_tf",
    "--no_yardstick",
    "--rounds=1",
    "--steps=1",
    "--warmup=1",
    "--num_batches=1",
    "--batch_size=4",
    "--max_len=20",
    "--matmul_n=128",
    "--check_keras3_step",
    f"--out={tmp_path}",
  ]
  proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  out = proc.stdout
  check = re.search(r"defaults\+jax: one step from the same state: (\{.*\})", out)
  assert check, out
  losses = json.loads(check.group(1).replace("'", '"'))
  assert math.isfinite(losses["stateless_jit"])
  assert losses["stateless_jit"] == pytest.approx(losses["keras_train_on_batch"], rel=1e-5)
  result = json.loads((tmp_path / "train_speed.json").read_text())
  assert set(result["sides"]) == {"defaults+jax", "query+reference+keras3_tf"}
  for side in result["sides"].values():
    assert len(side["times"]) == 1 and side["times"][0] > 0
  assert result["peak_gflops"]["jax"] > 0 and result["peak_gflops"]["tensorflow"] > 0
  assert "Keras 3 JAX: sequence uniform, reference, jit" in out
  assert "Keras 3 TF: query uniform, reference" in out
  assert "JAX" in out.splitlines()[-1] or "best" in out.splitlines()[-1]


def test_profile_times_the_pieces_of_the_jax_step(tmp_path):
  """--profile on a jax config: every piece of the Keras 3 step (no estimator: exact counts)
  beside the tf-keras step's, and the loss piece's query substitution is exact (the objective
  on the model's own queries, held fixed, = its loss)."""
  env = {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS", "KERAS_BACKEND")}
  env.update(PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", CUDA_VISIBLE_DEVICES="")
  cmd = [
    sys.executable,
    "-m",
    "bench.step",
    "--profile",
    "--configs=defaults,defaults+jax",
    "--rounds=1",
    "--steps=1",
    "--warmup=1",
    "--num_batches=1",
    "--batch_size=4",
    "--max_len=20",
    f"--out={tmp_path}",
  ]
  proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  check = re.search(
    r"defaults\+jax: the loss piece's fixed queries, one loss two ways: (\{.*\})", proc.stdout
  )
  assert check, proc.stdout[-3000:]
  losses = json.loads(check.group(1).replace("'", '"'))
  assert math.isfinite(losses["objective"])
  assert losses["fixed_queries"] == pytest.approx(losses["objective"], rel=1e-5)
  rows = {
    line.split("  ")[0]: line
    for line in proc.stdout.splitlines()
    if line.startswith(("ours:", "Keras 3 JAX:"))
  }
  jax_row = rows["Keras 3 JAX: sequence uniform, reference, jit"]
  assert len(re.findall(r"\d+\.\d+ \(", jax_row)) == 5 and jax_row.rstrip().count(" - ") <= 1
  assert "defaults+jax: encoder" in proc.stdout.splitlines()[-1]
  from bench.step import cli

  with pytest.raises(ValueError, match="keras3_tf"):  # before any data is read
    cli.main(["--profile", "--configs=defaults,defaults+keras3_tf"])
  with pytest.raises(ValueError, match="Keras 3"):
    cli.main(["--trace", "--configs=defaults+jax"])
  with pytest.raises(ValueError, match="one mode"):
    cli.main(["--trace", "--profile"])
