"""bench.step.trace: the trace events are sorted into XLA dots, other XLA instructions,
TensorFlow kernels and pool workers; containers and the framework's own events are not counted."""

import pytest

from bench.step import trace


def _xspace(events):
  from tensorflow.tsl.profiler.protobuf import xplane_pb2

  xs = xplane_pb2.XSpace()
  plane = xs.planes.add(name="/host:CPU")
  lines = {}
  for i, (line_name, name, ms) in enumerate(events):
    plane.event_metadata[i + 1].name = name
    if line_name not in lines:
      lines[line_name] = plane.lines.add(name=line_name)
    lines[line_name].events.add(metadata_id=i + 1, duration_ps=int(ms * 1e9))
  return xs


def test_events_are_sorted_into_their_category_per_step():
  xs = _xspace(
    [
      ("tf_numa_-1_Eigen/1", "ThunkExecutor::Execute", 100.0),  # container: skipped
      ("tf_numa_-1_Eigen/1", "call.12", 50.0),  # container: skipped
      ("tf_numa_-1_Eigen/1", "dot.1522", 10.0),
      ("tf_numa_-1_Eigen/2", "dot.7.clone", 6.0),
      ("tf_numa_-1_Eigen/2", "add_gather_fusion.2.clone", 4.0),
      ("tf_numa_-1_Eigen/2", "reduce-window", 2.0),
      ("tf_numa_-1_Eigen/2", "ParallelFor", 8.0),  # a kernel's worker share
      ("tf_Compute/5", "MatMul_1:BatchMatMulV2", 12.0),
      ("tf_Compute/5", "Adam/UnsortedSegmentSum:UnsortedSegmentSum", 3.0),
      ("tf_Compute/5", "ExecutorState::Process", 200.0),  # framework: skipped
      ("tf_Compute/5", "ParallelFor", 5.0),  # on the caller: in the op
      ("python", "_train_step_fn", 400.0),
    ]
  )
  out = trace.summarize_xspace(xs, num_steps=2)
  assert out["xla_dot"] == pytest.approx(8e-3)
  assert out["xla_other"] == pytest.approx(3e-3)
  assert out["tf_ops"] == pytest.approx(7.5e-3)
  assert out["tf_matmul"] == pytest.approx(6e-3)
  assert out["workers"] == pytest.approx(4e-3)
  assert out["tf_top"][0] == ("MatMul_1:BatchMatMulV2", pytest.approx(6e-3))


def test_report_puts_the_rest_of_the_cpu_time_in_other():
  r = dict(
    config="c",
    wall=0.5,
    user=0.9,
    system=0.1,
    cores=2,
    xla_dot=0.2,
    xla_other=0.2,
    tf_ops=0.3,
    tf_matmul=0.1,
    workers=0.1,
    tf_top=[],
  )
  text = trace.report(r)
  assert "other CPU                 0.200 s (20.0 % of CPU)" in text
  assert "matmul floor 0.150 s/step = 30 % of the step" in text
  assert "busy cores 2.00 of 2" in text


def test_trace_of_one_tiny_step(tmp_path):
  """--trace in a real worker: the step's wall and CPU seconds, and a profiler trace with XLA
  dots in it (the tiny ML-1M batch, the XLA encoder)."""
  import json
  import pathlib
  import subprocess
  import sys

  root = pathlib.Path(__file__).resolve().parents[3]
  proc = subprocess.run(
    [
      sys.executable,
      "-m",
      "bench.step",
      "--trace",
      "--configs=sequence+reference+xla",
      "--warmup=1",
      "--steps=1",
      "--num_batches=1",
      "--batch_size=4",
      "--max_len=20",
      f"--out={tmp_path}",
    ],
    cwd=root,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  (result,) = json.loads((tmp_path / "step_trace.json").read_text())
  assert result["config"] == "sequence+reference+xla" and result["wall"] > 0
  assert result["user"] + result["system"] > 0 and result["xla_dot"] > 0
  assert "XLA matmuls (dot)" in proc.stdout
  assert proc.stdout.strip().splitlines()[-1].startswith("summary: sequence+reference+xla")
