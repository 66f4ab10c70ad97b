"""Running the planned runs: in a row, in parallel, or as `--seeds` programs; resumed, skipped
when finished, capped by a time budget.

    row        one run after another (`plan.plan`'s order); the first run the budget pauses
               ends the invocation
    parallel   up to ``jobs`` runs at once, each started as a slot frees (JAX runs may each
               take 0.9 / jobs of an accelerator's memory, XLA_PYTHON_CLIENT_MEM_FRACTION)
    program    one process per `plan.programs` group (python -m train.keras3 --seeds ...)

A run's commands run in its checkout (``Run.code``, on PYTHONPATH), their output appended to
<run>/<command>.log. Budget: with ``deadline`` (time.time() seconds) each training command gets
what is left (--time_budget_minutes; the paper's script --max_seconds): it pauses between epochs,
writes its checkpoint and exits with status 3 (`train.epochs.EXIT_PAUSED`); no run starts with
less than MIN_CHUNK_SECONDS left, and the same command later resumes it from its checkpoint (its
training seconds summed over the chunks). A program cannot pause itself (`train.keras3.seeds`):
at the deadline it is stopped, and resumes from its runs' last epoch checkpoints.
Each run's record is <run>/run.json: status (finished, paused, failed), training and evaluation
seconds, the commands and the checkout.
"""

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
_NAMES = ("train", "results")
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
    if path.is_dir():
      found[name] = path.resolve()
      continue
    tree = (out / f"src_{value}").resolve()
    if not tree.is_dir():
      out.mkdir(parents=True, exist_ok=True)
      proc = subprocess.run(
        ["git", "-C", str(here), "worktree", "add", "-q", "--detach", str(tree), value],
        capture_output=True,
        text=True,
      )
      if proc.returncode != 0:
        raise ValueError(f"[codes] {name} = {value!r}: not a folder or a commit ({proc.stderr})")
    found[name] = tree
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


def _record(folder: pathlib.Path, **values: Any) -> dict:
  path = folder / "run.json"
  record = read_json(path) or {}
  record.update(values)
  folder.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(record, indent=2))
  return record


def _budgeted(run: Run, command: List[str], left: Optional[float]) -> List[str]:
  """The training command with the time left (seconds) as its budget."""
  if left is None:
    return command
  if run.config is None:  # the paper's script
    return [c for c in command if not c.startswith("--max_seconds=")] + [
      f"--max_seconds={left:.0f}"
    ]
  return train_command(run, command[0], run.config.replace(time_budget_minutes=left / 60.0))


def run_one(run: Run, deadline: Optional[float], jobs: int = 1, log: Log = print) -> str:
  """Runs one run's commands unless it is finished; its status (finished, paused, failed,
  skipped: finished before, waiting: not started for lack of time)."""
  if run.finished:
    return "skipped"
  left = None if deadline is None else deadline - time.time()
  if left is not None and left < MIN_CHUNK_SECONDS:
    return "waiting"
  run.folder.mkdir(parents=True, exist_ok=True)
  before = read_json(run.folder / "run.json") or {}
  seconds = {
    "train": float(before.get("train_seconds", 0.0)) if before.get("status") == "paused" else 0.0
  }
  env = run_env(run, jobs)
  commands = [_budgeted(run, run.commands[0], left), *run.commands[1:]]
  status = "finished"
  start = time.perf_counter()
  for name, command in zip(_NAMES, commands):
    if name == "results" and "eval.evaluate" in command:
      name = "eval"
    t0 = time.perf_counter()
    with open(run.folder / f"{name}.log", "a") as out:
      proc = subprocess.run(command, cwd=run.code, env=env, stdout=out, stderr=subprocess.STDOUT)
    seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - t0
    if name == "train" and proc.returncode == EXIT_PAUSED:
      status = "paused"
      break
    if proc.returncode != 0:
      status = f"failed ({name}: exit {proc.returncode}, see {run.folder / (name + '.log')})"
      break
  _record(
    run.folder,
    key=run.key,
    status=status.split(" ", 1)[0],
    detail=status,
    train_seconds=seconds.get("train", 0.0),
    eval_seconds=seconds.get("eval", seconds.get("results", 0.0)),
    commands=[" ".join(c) for c in commands],
    code=str(run.code),
  )
  log(f"{run.key}: {status} after {time.perf_counter() - start:.0f} s")
  return status.split(" ", 1)[0]


def run_program(program: Program, deadline: Optional[float], log: Log = print) -> Dict[str, str]:
  """Runs one `--seeds` program unless all its runs are finished; each run's status."""
  if all(r.finished for r in program.runs):
    return {r.key: "skipped" for r in program.runs}
  left = None if deadline is None else deadline - time.time()
  if left is not None and left < MIN_CHUNK_SECONDS:
    return {r.key: "waiting" for r in program.runs}
  program.folder.mkdir(parents=True, exist_ok=True)
  for link, target in program.links.items():
    if not link.is_symlink():
      link.parent.mkdir(parents=True, exist_ok=True)
      link.symlink_to(os.path.relpath(target, link.parent), target_is_directory=True)
  env = run_env(program.runs[0])
  start = time.perf_counter()
  with open(program.folder / "program.log", "a") as out:
    proc = subprocess.Popen(
      program.command, cwd=program.code, env=env, stdout=out, stderr=subprocess.STDOUT
    )
    try:
      code = proc.wait(timeout=left)
    except subprocess.TimeoutExpired:
      proc.terminate()
      try:
        proc.wait(timeout=30)
      except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
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
    _record(
      run.folder,
      key=run.key,
      status=status.split(" ", 1)[0],
      detail=status,
      program_seconds=seconds,
      program=" ".join(program.command),
      code=str(run.code),
    )
    statuses[run.key] = status.split(" ", 1)[0]
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
    return statuses
  if arrange == "row":
    for i, run in enumerate(runs):
      statuses[run.key] = run_one(run, deadline, log=log)
      if statuses[run.key] in ("paused", "waiting"):
        statuses.update({r.key: "waiting" for r in runs[i + 1 :] if not r.finished})
        break
    return statuses
  with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
    futures = {pool.submit(run_one, run, deadline, jobs, log): run for run in runs}
    for future in concurrent.futures.as_completed(futures):
      statuses[futures[future].key] = future.result()
  return statuses
