"""Every benchmark script answers --help and takes --out, and bench/README.md documents it.

The absl scripts run as bench/README.md documents them (`python bench/<script>.py` from the
repository root, nothing added to sys.path: a script named like an installed package, e.g. the
old bench/scann.py, would shadow it); the argparse ones are called in-process with --help."""

import importlib
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
  p.stem for p in (ROOT / "bench").glob("*.py") if p.stem != "__init__" and "torch" not in p.stem
)
# Tools that are packages (``python -m bench.<name>``; their parser and main in <name>/cli.py).
PACKAGES = sorted(p.parent.name for p in (ROOT / "bench").glob("*/__main__.py"))
ABSL = ("keras3_trajectory", "paper_loop")


def test_every_script_is_documented():
  assert {
    "frequency",
    "gradient_bias",
    "loss_overhead",
    "negatives",
    "serving_scale",
  } <= set(SCRIPTS)
  assert "step" in PACKAGES
  readme = (ROOT / "bench" / "README.md").read_text()
  undocumented = [name for name in SCRIPTS if f"## {name}.py" not in readme]
  undocumented += [name for name in PACKAGES if f"## {name}/" not in readme]
  assert not undocumented, f"bench/README.md has no section for {undocumented}"


def test_absl_scripts_answer_help_as_scripts():
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  procs = {
    name: subprocess.Popen(
      [sys.executable, f"bench/{name}.py", "--help"],
      cwd=ROOT,
      env=env,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for name in ABSL
  }
  for name, proc in procs.items():
    out, err = proc.communicate(timeout=300)
    assert proc.returncode in (0, 1) and "Traceback" not in err, (name, err[-2000:])
    assert "--out:" in out, (name, out[-1000:])


@pytest.mark.parametrize(
  "name", [s for s in SCRIPTS if s not in ABSL] + [f"{p}.cli" for p in PACKAGES]
)
def test_argparse_scripts_answer_help(name, monkeypatch, capsys):
  module = importlib.import_module(f"bench.{name}")
  monkeypatch.setattr(sys, "argv", [f"bench/{name}.py"])  # argparse's program name
  try:
    code = module.main(["--help"])  # a dispatcher returns, argparse exits
  except SystemExit as done:
    code = done.code
  assert code in (0, None)
  assert "--out" in capsys.readouterr().out, f"bench/{name}.py has no --out"
