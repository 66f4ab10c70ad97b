"""scripts/gpu_session.sh: with no time left nothing starts and every part says so in order (after
the machine's description); a part whose result is in OUT is skipped as done; OUT is packed into
session.tar.gz; PARTS and TABLE1_* choose the parts; a cut Table 1 run's last checkpoint state is
written beside it; without its arguments it prints its usage."""

import os
import pathlib
import subprocess
import sys
import tarfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
PARTS = [
  "env",
  "step",
  "ttc_ml1m",
  "ttc_ml1m_warm",
  "concurrent",
  "paper_ml1m",
  "table1_mixed_query",
  "table1_full_softmax",
] + [f"paper_runs_{logq}_s{seed}" for logq in ("corrected", "standard") for seed in (0, 1, 2)]


def _run(*args, env=None, timeout=60):
  return subprocess.run(
    ["bash", "scripts/gpu_session.sh", *args],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=timeout,
    env=None if env is None else {**os.environ, **env},
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


def test_parts_and_table1_arms_choose_what_runs(tmp_path):
  env = dict(PARTS="ttc_ml1m table1", TABLE1_ROWS="mixed_none", TABLE1_ARMS="query sequence")
  proc = _run(str(tmp_path), "0", env=env)
  assert proc.returncode == 0, proc.stderr
  lines = (tmp_path / "session.log").read_text().splitlines()
  said = {line.split()[1].rstrip(":"): line for line in lines[:-2]}
  assert list(said) == [
    "env", "step", "ttc_ml1m", "ttc_ml1m_warm", "concurrent", "paper_ml1m",
    "table1_mixed_query", "table1_mixed_sequence", *PARTS[8:],
  ]  # fmt: skip
  for name in ("step", "ttc_ml1m_warm", "concurrent", "paper_ml1m"):
    assert "not in PARTS, skipped" in said[name]
  for name in ("ttc_ml1m", "table1_mixed_query", "table1_mixed_sequence"):
    assert "not started" in said[name]


def test_table1_mixed_rows_are_one_program_with_the_papers_standard(tmp_path):
  """The mixed rows of TABLE1_ROWS go into one --seeds --logqs program per arm, the paper's
  standard row as standard_no_positive (bench/table1/rows.py), in TABLE1_ROWS's order; a program
  whose last run finished is skipped as done; full softmax runs once whatever the arms; an
  unknown row is refused."""
  from bench.table1.rows import ROWS

  marker = tmp_path / "table1" / "mixed_query" / "corrected" / "seed4" / "metrics.json"
  marker.parent.mkdir(parents=True)
  marker.write_text("{}")
  env = dict(PARTS="table1", TABLE1_ROWS="mixed_none mixed_standard mixed_corrected")
  proc = _run(str(tmp_path), "0", env=env)
  assert proc.returncode == 0, proc.stderr
  said = (tmp_path / "session.log").read_text()
  assert "table1_mixed_query: done before, skipped" in said
  script = (ROOT / "scripts" / "gpu_session.sh").read_text()
  for kind, logq in (("none", "none"), ("standard", "standard_no_positive"),
                     ("corrected", "corrected")):  # fmt: skip
    assert ROWS[f"mixed_{kind}"][1]["logq"] == ROWS[f"inbatch_{kind}"][1]["logq"] == logq
    assert f"mixed_{kind} | inbatch_{kind}) logq={logq} ;;" in script
  both = dict(PARTS="table1", TABLE1_ROWS="mixed_none full_softmax", TABLE1_ARMS="query sequence")
  proc = _run(str(tmp_path / "arms"), "0", env=both)
  assert proc.returncode == 0, proc.stderr
  parts = [
    line.split()[1].rstrip(":")
    for line in (tmp_path / "arms" / "session.log").read_text().splitlines()
  ]
  table1 = [p for p in parts if p.startswith("table1")]
  assert table1 == ["table1_mixed_query", "table1_mixed_sequence", "table1_full_softmax"]
  bad = _run(str(tmp_path / "bad"), "0", env=dict(PARTS="table1", TABLE1_ROWS="mixed_sideways"))
  assert bad.returncode == 2 and "unknown row mixed_sideways" in bad.stderr


def test_all_ten_rows_are_parts_with_the_settings_of_bench_table1_rows(tmp_path):
  """Every ML-1M row of bench/table1/rows.py that Table 1 has is a TABLE1_ROWS name: the mixed
  rows one program per arm, the uniform-only rows (sampled softmax, BCE, gBCE) one program each
  per arm, the in-batch rows one program and full softmax one, in that order; the uniform-only
  rows' flags are the rows' settings."""
  from bench.table1.rows import PAPER_CONVENTION, ROWS
  from train.config import RunConfig

  rows = (
    "mixed_none mixed_standard mixed_corrected inbatch_none inbatch_standard inbatch_corrected "
    "ss_uniform bce gbce full_softmax"
  )
  env = dict(PARTS="table1", TABLE1_ROWS=rows, TABLE1_ARMS="query sequence")
  proc = _run(str(tmp_path), "0", env=env)
  assert proc.returncode == 0, proc.stderr
  parts = [
    line.split()[1].rstrip(":") for line in (tmp_path / "session.log").read_text().splitlines()
  ]
  assert [p for p in parts if p.startswith("table1")] == [
    "table1_mixed_query", "table1_ss_uniform_query", "table1_bce_query", "table1_gbce_query",
    "table1_mixed_sequence", "table1_ss_uniform_sequence", "table1_bce_sequence",
    "table1_gbce_sequence", "table1_inbatch", "table1_full_softmax",
  ]  # fmt: skip
  assert set(rows.split()) <= set(ROWS)
  # the script leaves log Q's convention to the binary: its default is the rows' (the paper's)
  assert RunConfig().log_q_convention == PAPER_CONVENTION
  script = (ROOT / "scripts" / "gpu_session.sh").read_text()
  for row in ("ss_uniform", "bce", "gbce"):
    settings = ROWS[row][1]
    assert settings["negatives"] == "uniform" and settings["logq"] == "none"
    flags = f"--loss={settings['loss']}"
    if "num_negatives" in settings:
      flags += f" --num_negatives={settings['num_negatives']}"
    assert f"{row}) flags=({flags}) ;;" in script


def test_a_cut_table1_run_keeps_its_last_checkpoint_state(tmp_path):
  import json

  import numpy as np

  ckpt = tmp_path / "table1" / "mixed_query" / "none" / "seed3" / "ckpt"
  ckpt.mkdir(parents=True)
  for step, epoch in ((48, 1), (96, 2)):
    state = dict(epoch=epoch, best_epoch=1, history=[dict(epoch=e + 1) for e in range(epoch)])
    np.savez(ckpt / f"ckpt-{step}.npz", v0=np.zeros(2), state=np.array(json.dumps(state)))
  (ckpt / "ckpt-144.npz.tmp.npz").write_bytes(b"partial write")  # never read
  proc = _run(str(tmp_path), "0", env=dict(PARTS="none", PYTHON=sys.executable))
  assert proc.returncode == 0, proc.stderr
  state = json.loads((ckpt.parent / "last_state.json").read_text())
  assert state["epoch"] == 2 and len(state["history"]) == 2
  with tarfile.open(tmp_path / "session.tar.gz") as tar:
    assert "./table1/mixed_query/none/seed3/last_state.json" in tar.getnames()


def test_paper_runs_train_the_papers_script_to_its_stop(tmp_path):
  """Part 7 on the CPU with a small gSASRec folder as the data's ml1m: the paper's script
  (bench/paper_loop.py) runs to its early stop, resumable from its checkpoint, which stays out
  of the packed results; a rerun finds it done."""
  sys.path.insert(0, str(ROOT / "tests" / "bench"))
  try:
    from test_paper_loop import write_gsasrec_folder
  finally:
    sys.path.pop(0)
  data = tmp_path / "data"
  write_gsasrec_folder(data / "ml1m")
  env = dict(
    PARTS="paper_runs_none_s1",
    PAPER_LOGQS="none",
    PAPER_SEEDS="1",
    PAPER_PATIENCE="2",
    PYTHON=sys.executable,
    OMP_NUM_THREADS="1",
  )
  out = tmp_path / "out"
  proc = _run(str(out), "3", str(data), env=env, timeout=170)
  assert proc.returncode == 0, proc.stderr
  run = out / "paper" / "none" / "seed1"
  assert (run / "done").exists(), (out / "paper_runs_none_s1.log").read_text()[-2000:]
  import json

  m = json.loads((run / "metrics.json").read_text())
  assert m["stopped_early"] and m["paper_loop"]["logq"] == "none" and m["paper_loop"]["seed"] == 1
  assert (run / "paper_loop.pt").exists()
  with tarfile.open(out / "session.tar.gz") as tar:
    names = tar.getnames()
  assert "./paper/none/seed1/metrics.json" in names and not any(n.endswith(".pt") for n in names)
  again = _run(str(out), "3", str(data), env=env)
  assert (
    again.returncode == 0
    and "paper_runs_none_s1: done before, skipped" in (out / "session.log").read_text()
  )
