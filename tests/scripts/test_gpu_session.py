"""scripts/gpu_session.sh: with no time left nothing starts and every part says so in order; a
part whose result is in OUT is skipped as done; without its arguments it prints its usage."""

import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
PARTS = [
  "ttc_ml1m",
  "bf16_step",
  "seeds_program",
  "table1_mixed_corrected",
  "table1_mixed_standard",
  "table1_mixed_none",
  "table1_full_softmax",
]


def _run(*args):
  return subprocess.run(
    ["bash", "scripts/gpu_session.sh", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
  )


def test_no_time_left_starts_nothing(tmp_path):
  (tmp_path / "bf16_step").mkdir()
  (tmp_path / "bf16_step" / "step_ab.md").write_text("done")
  proc = _run(str(tmp_path), "0")
  assert proc.returncode == 0, proc.stderr
  lines = (tmp_path / "session.log").read_text().splitlines()
  assert [line.split()[1].rstrip(":") for line in lines[:-1]] == PARTS
  assert "done before, skipped" in lines[1]
  assert all("not started" in line for i, line in enumerate(lines[:-1]) if i != 1)
  assert "session over" in lines[-1]
  assert not any(p.suffix == ".log" and p.name != "session.log" for p in tmp_path.iterdir())


def test_usage():
  proc = _run()
  assert proc.returncode != 0 and "usage: scripts/gpu_session.sh OUT MINUTES" in proc.stderr
