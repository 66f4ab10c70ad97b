"""Running the planned runs in a row, in parallel or as `--seeds` programs (``arrange``);
resumed, skipped when finished, capped by a ``deadline`` (time.time() seconds): bench/README.md,
section `launch/` (the budget, the records)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import subprocess
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from bench.analysis.runs import read_json, write_binary_test_results
from bench.launch.plan import Program, Run, train_command

__all__ = ["MIN_CHUNK_SECONDS", "EXIT_PAUSED", "checkouts", "run_env", "execute"]

MIN_CHUNK_SECONDS = 60.0
EXIT_PAUSED = 3  # train.epochs.EXIT_PAUSED (not imported: that module loads TensorFlow's helpers)
Log = Callable[[str], Any]


def checkouts(
  codes: Dict[str, str], out: pathlib.Path, here: pathlib.Path
) -> Dict[str, pathlib.Path]:
  """[codes] as folders: an existing folder as it is, anything else a commit of this repository,
  checked out once as a detached worktree at <out>/src_<commit> (never mix code versions in one
  comparison: a pinned arm runs at its commit whatever the tree's state)."""
  found: Dict[str, pathlib.Path] = {}
  for name, value in codes.items():
    path = pathlib.Path(value).expanduser()
    found[name] = path.resolve() if path.is_dir() else (out / f"src_{value}").resolve()
    if not found[name].is_dir():
      out.mkdir(parents=True, exist_ok=True)
      proc = subprocess.run(
        ["git", "-C", str(here), "worktree", "add", "-q", "--detach", str(found[name]), value],
        capture_output=True,
        text=True,
      )
      if proc.returncode != 0:
        raise ValueError(f"[codes] {name} = {value!r}: not a folder or a commit ({proc.stderr})")
  return found


def run_env(run: Run, jobs: int = 1) -> Dict[str, str]:
  """The environment of a run's commands: its checkout on PYTHONPATH, TensorFlow's start-up
  messages off; a Keras 3 run without the tf-keras switch, a JAX one with its share of the
  device with several at once."""
  env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
  env.update(PYTHONPATH=str(run.code), TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
  backend = run.arm.keras3_backend
  if backend:
    env["KERAS_BACKEND"] = backend
    if backend == "jax" and jobs > 1:
      env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", f"{0.9 / jobs:.3f}")
  return env


def _record(run: Run, status: str, **values: Any) -> str:
  """Updates <run>/run.json with the run's status (its first word) and ``values``; the status."""
  path = run.folder / "run.json"
  record = read_json(path) or {}
  record.update(key=run.key, status=status.split(" ", 1)[0], detail=status, **values)
  run.folder.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(dict(record, code=str(run.code)), indent=2))
  return record["status"]


def _call(
  command: List[str], run: Run, log: pathlib.Path, jobs: int = 1, timeout: Optional[float] = None
) -> int:
  """Runs ``command`` in the run's checkout and environment, its output appended to ``log``."""
  env = run_env(run, jobs)
  with open(log, "a") as out:
    return subprocess.run(
      command, cwd=run.code, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
    ).returncode


def _left(deadline: Optional[float]) -> Optional[float]:
  return None if deadline is None else deadline - time.time()


def _budgeted(run: Run, command: List[str], left: Optional[float]) -> List[str]:
  """The training command with the time left (seconds) as its budget."""
  if left is None:
    return command
  if run.config is None:  # the paper's script
    kept = [c for c in command if not c.startswith("--max_seconds=")]
    return [*kept, f"--max_seconds={left:.0f}"]
  return train_command(run, command[0], run.config.replace(time_budget_minutes=left / 60.0))


def run_one(run: Run, deadline: Optional[float], jobs: int = 1, log: Log = print) -> str:
  """Runs one run's commands unless it is finished; its status (finished, paused, failed,
  skipped: finished before, waiting: not started for lack of time)."""
  left = _left(deadline)
  if run.finished or (left is not None and left < MIN_CHUNK_SECONDS):
    return "skipped" if run.finished else "waiting"
  run.folder.mkdir(parents=True, exist_ok=True)
  before = read_json(run.folder / "run.json") or {}
  paused = before.get("status") == "paused"
  seconds = {"train": float(before.get("train_seconds", 0.0)) if paused else 0.0}
  commands = [_budgeted(run, run.commands[0], left), *run.commands[1:]]
  status = "finished"
  start = time.perf_counter()
  for name, command in zip(("train", "results"), commands):
    name = "eval" if "eval.evaluate" in command else name
    t0 = time.perf_counter()
    code = _call(command, run, run.folder / f"{name}.log", jobs)
    seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t0
    if name == "train" and code == EXIT_PAUSED:
      status = "paused"
      break
    if code != 0:
      status = f"failed ({name}: exit {code}, see {run.folder / (name + '.log')})"
      break
  log(f"{run.key}: {status} after {time.perf_counter() - start:.0f} s")
  return _record(
    run,
    status,
    train_seconds=seconds["train"],
    eval_seconds=seconds.get("eval", seconds.get("results", 0.0)),
    commands=[" ".join(c) for c in commands],
  )


def run_program(program: Program, deadline: Optional[float], log: Log = print) -> Dict[str, str]:
  """Runs one `--seeds` program unless all its runs are finished; each run's status."""
  left = _left(deadline)
  if all(r.finished for r in program.runs) or (left is not None and left < MIN_CHUNK_SECONDS):
    skip = "skipped" if all(r.finished for r in program.runs) else "waiting"
    return {r.key: skip for r in program.runs}
  program.folder.mkdir(parents=True, exist_ok=True)
  for link, target in program.links.items():
    if not link.is_symlink():
      link.parent.mkdir(parents=True, exist_ok=True)
      link.symlink_to(os.path.relpath(target, link.parent), target_is_directory=True)
  start = time.perf_counter()
  try:
    code = _call(program.command, program.runs[0], program.folder / "program.log", timeout=left)
  except subprocess.TimeoutExpired:  # stopped at the deadline: resumes from its checkpoints
    code = EXIT_PAUSED
  seconds = time.perf_counter() - start
  statuses = {}
  for run in program.runs:
    status = "paused" if code == EXIT_PAUSED else "finished" if code == 0 else "failed"
    if status == "finished":
      try:
        write_binary_test_results(run.folder)
      except ValueError as e:
        status = f"failed ({e})"
    command = " ".join(program.command)
    statuses[run.key] = _record(run, status, program_seconds=seconds, program=command)
  log(
    f"program {program.folder.name} ({len(program.runs)} runs): exit {code} after {seconds:.0f} s"
  )
  return statuses


def execute(
  runs: Sequence[Run],
  arrange: str,
  jobs: int = 1,
  deadline: Optional[float] = None,
  programs: Sequence[Program] = (),
  log: Log = print,
) -> Dict[str, str]:
  """Runs ``runs`` as ``arrange`` says (module docstring); {run key: status}."""
  statuses: Dict[str, str] = {}
  if arrange == "program":
    for program in programs:
      statuses.update(run_program(program, deadline, log))
  elif arrange == "row":
    for i, run in enumerate(runs):
      statuses[run.key] = run_one(run, deadline, log=log)
      if statuses[run.key] in ("paused", "waiting"):
        statuses.update({r.key: "waiting" for r in runs[i + 1 :] if not r.finished})
        break
  else:
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
      futures = {pool.submit(run_one, run, deadline, jobs, log): run for run in runs}
      for future in concurrent.futures.as_completed(futures):
        statuses[futures[future].key] = future.result()
  return statuses
