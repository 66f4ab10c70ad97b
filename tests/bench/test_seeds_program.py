"""bench/seeds_program.py on a tiny synthetic run, 1 round, rows x seeds (--logqs): the
arrangements run, train the same models (equal test NDCG@10 up to float rounding) and the report
is written with the ratios; --arrangements picks a subset (program among them)."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

FLAGS = (
  "--dataset=synthetic --synthetic_users=40 --synthetic_items=30 --synthetic_min_len=4 "
  "--synthetic_max_len=10 --max_len=10 --embedding_dim=8 --num_blocks=1 "
  "--num_negatives=4 --batch_size=8 --eval_batch_size=40 --steps_per_epoch=2 --epochs=2 "
  "--shuffle_rng=numpy --frequency=hash_array --logq=corrected"
)


def _bench(out, *args):
  """`python -m bench.seeds_program ARGS` on the tiny run, 1 round, into ``out``: its stdout and
  seeds_program.json."""
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "bench.seeds_program",
      *args,
      "--repeats=1",
      f"--flags={FLAGS}",
      f"--out={out}",
    ],  # fmt: skip
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=900,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stdout, json.loads((out / "seeds_program.json").read_text())


def test_arrangements_train_the_same_models(tmp_path):
  """--logqs=none,corrected with 1 seed: the rows' program, one process per run at once
  (parallel) and one --seeds program per row (row_programs) train the same two models (one per
  row; each run's equality to its separate run is tests/train/keras3/test_seeds.py's), and the
  report has both ratios. (serial launches the runs of parallel one after the other.)"""
  stdout, result = _bench(
    tmp_path, "--seeds=0", "--logqs=none,corrected", "--arrangements=program,parallel,row_programs"
  )
  assert stdout.strip().splitlines()[-1].startswith("summary: seeds_program: parallel/")
  assert result["logqs"] == ["none", "corrected"]
  assert set(result["ratios"]) == {"parallel/program", "row_programs/program"}
  ndcg = result["test_ndcg10"]
  np.testing.assert_allclose(ndcg["program"], ndcg["parallel"], atol=1e-4)
  np.testing.assert_allclose(ndcg["program"], ndcg["row_programs"], atol=1e-4)
  assert len(ndcg["program"][0]) == 2
  assert (tmp_path / "runs" / "program_r0" / "corrected" / "seed0" / "metrics.json").is_file()
  assert (tmp_path / "seeds_program.md").read_text().startswith("# N seeds")


def test_arrangements_without_program_are_refused(tmp_path, capsys):
  from bench import seeds_program

  with pytest.raises(SystemExit):
    seeds_program.main(["--arrangements=serial,parallel", f"--out={tmp_path}"])
  assert "--arrangements: program and any of" in capsys.readouterr().err
