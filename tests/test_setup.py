"""setup.py: what `pip install .` / `.[app]` promise, checked on the installed metadata.

* the library's requirements are exactly what tfrs_logq imports (tf-keras: through tf.keras);
  the application's extra adds what models / train / eval / bench import;
* the console scripts exist, point at the binaries and print their flags from any directory;
* Python >= the advertised floor (3.10): no syntax newer than it in any installed module.
"""

import ast
import importlib.metadata as metadata
import os
import pathlib
import re
import subprocess
import sys
import sysconfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
DIST = "tfrs-logq"
APPLICATION = ("models", "train", "eval", "bench")
# Optional yardstick of bench/step (`pip install torch`) and the other index of
# bench/serving_scale.py (faiss-cpu, the bench extra), not requirements of the application.
OPTIONAL_IMPORTS = {"torch", "paper_code_torch", "faiss"}


def _canon(name: str) -> str:
  return re.sub(r"[-_.]+", "-", name).lower()


def _installed():
  """The project's metadata as pip installed it (site-packages; never a stray *.egg-info in the
  working directory)."""
  paths = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
  found = [d for d in metadata.distributions(path=paths) if _canon(d.metadata["Name"]) == DIST]
  assert len(found) == 1, f"{DIST} is not installed: run pip install -e '.[test]'"
  return found[0]


def _requirements():
  """{extra or "": {distribution names}} from the installed metadata."""
  out = {}
  for req in _installed().requires or []:
    name = _canon(re.match(r"[A-Za-z0-9_.\-]+", req).group(0))
    extra = re.search(r'extra\s*==\s*"([^"]+)"', req)
    out.setdefault(extra.group(1) if extra else "", set()).add(name)
  return out


def _third_party_imports(package: str, skip=()):
  names = set()
  for path in (ROOT / package).rglob("*.py"):
    parts = path.relative_to(ROOT).parts
    if any(part in skip for part in parts) or parts[:2] == ("bench", "out"):
      continue  # bench/out: ignored outputs (a launcher's pinned checkout holds a whole tree)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(node, ast.Import):
        names |= {a.name.split(".")[0] for a in node.names}
      elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        names.add(node.module.split(".")[0])
  own = {"tfrs_logq", *APPLICATION}
  return {n for n in names if n not in sys.stdlib_module_names and n not in own}


def _distributions(modules):
  mapping = metadata.packages_distributions()
  missing = sorted(m for m in modules if m not in mapping)
  assert not missing, f"imported but not installed: {missing}"
  return {_canon(mapping[m][0]) for m in modules}


def test_library_requires_exactly_what_it_imports():
  reqs = _requirements()
  # tfrs_logq.keras3 is the optional Keras 3 path (its own extra).
  imported = _distributions(_third_party_imports("tfrs_logq", skip=("keras3",)))
  assert imported <= reqs[""], f"tfrs_logq imports {imported - reqs['']} it does not require"
  assert reqs[""] - imported == {"tf-keras"}, reqs[""]
  for app_only in ("absl-py", "scann", "tensorflow-datasets", "matplotlib"):
    assert app_only not in reqs[""] and app_only in reqs["app"]


def test_app_extra_provides_what_the_application_imports():
  reqs = _requirements()
  for package in APPLICATION:
    modules = _third_party_imports(package, skip=("keras3",)) - OPTIONAL_IMPORTS
    extra = "bench" if package == "bench" else "app"  # bench's yardsticks: the bench extra
    missing = _distributions(modules) - reqs[""] - reqs[extra]
    assert not missing, f"{package} imports {missing}, in no requirement of .[{extra}]"
    # The Keras 3 application (models/keras3, train/keras3): .[app,keras3].
    keras3 = {*_third_party_imports(package)} - modules - OPTIONAL_IMPORTS
    missing = _distributions(keras3) - reqs[""] - reqs["app"] - reqs["keras3"]
    assert not missing, f"{package}/keras3 imports {missing}, in no requirement of .[app,keras3]"
  # The suite = the application + the Keras 3 path's parity tests (JAX and PyTorch backends) +
  # pytest + pytest-xdist (`make test`'s worker processes) + scipy (an oracle only) + faiss-cpu
  # (tests/bench/test_serving_scale.py runs the ScaNN-vs-FAISS bench end to end) + the style
  # gate's tools (`make lint`, the lint extra).
  assert reqs["keras3"] == {"keras", "keras-rs", "jax", "tensorboard"}
  assert reqs["lint"] == {"ruff", "mypy"}
  assert (
    reqs["app"]
    | reqs["keras3"]
    | reqs["lint"]
    | {"pytest", "pytest-xdist", "scipy", "torch", "faiss-cpu"}
    == reqs["test"]
  )
  # The speed bench's PyTorch yardstick and serving_scale's FAISS are the bench extra (the suite
  # installs torch for the Keras 3 backend, and never runs the yardstick).
  assert reqs["bench"] == reqs["app"] | reqs["keras3"] | {"torch", "faiss-cpu"}


def test_console_scripts_point_at_the_binaries():
  scripts = {ep.name: ep.value for ep in _installed().entry_points if ep.group == "console_scripts"}
  assert scripts == {
    "tfrs-logq-train": "train.__main__:run",
    "tfrs-logq-evaluate": "eval.evaluate:run",
    "tfrs-logq-launch": "bench.launch.cli:run",
  }


def test_console_script_help_lists_the_flags_from_any_directory(tmp_path):
  """tfrs-logq-train --help outside the repository (python -m eval.evaluate / bench.launch
  --help are tested beside those binaries)."""
  bin_dir = pathlib.Path(sys.executable).parent
  for script in ("tfrs-logq-train", "tfrs-logq-evaluate", "tfrs-logq-launch"):
    assert (bin_dir / script).exists(), f"{bin_dir / script}: run pip install -e '.[test]'"
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  proc = subprocess.run(
    [str(bin_dir / "tfrs-logq-train"), "--help"],
    cwd=tmp_path,
    capture_output=True,
    text=True,
    env=env,
    timeout=240,
  )
  assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
  for flag in ("--logq", "--dataset", "--synthetic_users", "--hash_array_alpha"):
    assert re.search(rf"^  {flag}:", proc.stdout, re.M), proc.stdout[-2000:]


def test_no_syntax_newer_than_the_python_floor():
  """Every module parses with the grammar of the advertised floor (3.10: tensorflow-recommenders
  0.7.7 itself evaluates `X | Y` at import, so 3.9 cannot be claimed)."""
  floor = re.search(r">=\s*3\.(\d+)", _installed().metadata["Requires-Python"])
  minor = int(floor.group(1))
  assert minor == 10
  for package in ("tfrs_logq", *APPLICATION):
    for path in (ROOT / package).rglob("*.py"):
      ast.parse(path.read_text(), str(path), feature_version=(3, minor))
