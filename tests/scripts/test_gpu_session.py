"""scripts/gpu_session.sh: with no time left nothing starts and every part says so in order (after
the machine's description); a part whose result is in OUT is skipped as done; OUT is packed into
session.tar.gz; without its arguments it prints its usage."""

import pathlib
import subprocess
import tarfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
PARTS = [
  "env",
  "step",
  "ttc_ml1m",
  "ttc_ml1m_warm",
  "concurrent",
  "paper_ml1m",
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
  (tmp_path / "step").mkdir()
  (tmp_path / "step" / "train_speed.json").write_text("{}")
  proc = _run(str(tmp_path), "0")
  assert proc.returncode == 0, proc.stderr
  lines = (tmp_path / "session.log").read_text().splitlines()
  assert [line.split()[1].rstrip(":") for line in lines[:-2]] == PARTS
  assert "done before, skipped" in lines[1]
  assert all("not started" in line for i, line in enumerate(lines[:-2]) if i > 1)
  assert "session over" in lines[-2] and "packed" in lines[-1]
  assert not any(p.suffix == ".log" and p.name != "session.log" for p in tmp_path.iterdir())
  with tarfile.open(tmp_path / "session.tar.gz") as tar:
    names = set(tar.getnames())
  assert {"./session.log", "./env.txt", "./step/train_speed.json"} <= names


def test_usage():
  proc = _run()
  assert proc.returncode != 0 and "usage: scripts/gpu_session.sh OUT MINUTES" in proc.stderr
