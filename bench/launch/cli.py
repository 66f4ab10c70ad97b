r"""``python -m bench.launch EXPERIMENT``: the runs of an experiment file, planned from
`train.config.RunConfig` (rows x seeds x arms), run in a row, in parallel or as one program,
resumed, finished runs skipped, capped by a time budget.

    python -m bench.launch table1_cpu --seeds=0,1,2                  # bench/experiments/*.toml
    python -m bench.launch table1_cpu --dry_run                      # the commands, nothing run
    python -m bench.launch xbatch_ml1m_cpu --time_budget_minutes=150 # rerun: goes on
    python -m bench.analysis table1 --runs=bench/out/table1_cpu      # the report

Folders, arrangements, exit status: bench/README.md, section `launch/`; the file's keys:
`bench.launch.experiment`.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from bench.analysis.runs import read_json
from bench.common.flags import csv
from bench.common.report import markdown_header, markdown_row
from bench.common.timing import rotated
from bench.launch import execute as execute_lib
from bench.launch import experiment as experiment_lib
from bench.launch import plan as plan_lib

__all__ = ["EXPERIMENTS", "main", "parse_args", "resolve", "run"]

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "bench" / "experiments"
TEST = ("recall@20", "ndcg@10", "recall@100")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(
    prog="python -m bench.launch",
    description=__doc__.split("\n\n")[0],
    formatter_class=argparse.RawDescriptionHelpFormatter,
    epilog=__doc__.split("\n\n", 1)[1],
  )
  p.add_argument("experiment", help="a TOML file, or the name of one in bench/experiments/")
  p.add_argument("--out", default=None, help="default: bench/out/<experiment>")
  for key in ("settings", "rows", "seeds", "binaries"):
    p.add_argument(f"--{key}", type=csv, default=None, help="comma-separated; default: the file's")
  p.add_argument(
    "--set",
    action="append",
    default=[],
    metavar="NAME=VALUE",
    help="a RunConfig setting of every run (as its flag), over the file's [base]; repeatable",
  )
  p.add_argument("--arrange", choices=experiment_lib.ARRANGEMENTS, default=None, help="the file's")
  p.add_argument("--jobs", type=int, default=None, help="runs at once with --arrange=parallel")
  p.add_argument("--time_budget_minutes", type=float, default=0.0, help="0: none")
  p.add_argument("--data_root", default=None, help="default: $TFRS_LOGQ_DATA or ../shared/data")
  p.add_argument("--python", default=sys.executable, help="the interpreter of the runs")
  p.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
  p.add_argument("--overwrite", action="store_true", help="rerun finished runs from scratch")
  p.add_argument("--arrangements", type=csv, default=None, help="time the plan arranged so")
  p.add_argument("--rounds", type=int, default=1, help="rounds of --arrangements")
  args = p.parse_args(argv)
  if args.time_budget_minutes < 0 or args.rounds < 1 or (args.jobs is not None and args.jobs < 1):
    p.error("--time_budget_minutes must be >= 0, --rounds and --jobs >= 1")
  if args.arrangements and not set(args.arrangements) <= set(experiment_lib.ARRANGEMENTS):
    p.error(f"--arrangements: of {list(experiment_lib.ARRANGEMENTS)}, got {args.arrangements}")
  return args


def _value(text: str) -> object:
  for kind in (int, float):
    try:
      return kind(text)
    except ValueError:
      pass
  return {"true": True, "false": False}.get(text.lower(), text)


def resolve(args: argparse.Namespace) -> experiment_lib.Experiment:
  """The experiment of the file, with the command line's overrides."""
  path = pathlib.Path(args.experiment)
  if not path.is_file() and (EXPERIMENTS / f"{args.experiment}.toml").is_file():
    path = EXPERIMENTS / f"{args.experiment}.toml"
  if not path.is_file():
    names = sorted(p.stem for p in EXPERIMENTS.glob("*.toml"))
    raise ValueError(f"no experiment {args.experiment!r}: a TOML file or one of {names}")
  exp = experiment_lib.load(path)
  keys = ("settings", "rows", "seeds", "binaries", "arrange", "jobs")
  changes = {k: getattr(args, k) for k in keys if getattr(args, k) is not None}
  if args.set:
    base = dict(exp.base)
    for item in args.set:
      name, sep, value = item.partition("=")
      if not sep:
        raise ValueError(f"--set {item!r}: NAME=VALUE")
      base[name.lstrip("-")] = _value(value)
    changes["base"] = base
  return exp.replace(**changes)


def _write(out: pathlib.Path, stem: str, data: dict, title: str, command: str, table: list) -> None:
  """<out>/<stem>.json (``data``) and <stem>.md: the title, the command and ``table``."""
  (out / f"{stem}.json").write_text(json.dumps(data, indent=2))
  lines = [f"# {title}", "", f"Command: `{command}`", "", *table]
  (out / f"{stem}.md").write_text("\n".join(lines) + "\n")


def _fmt(x: Optional[float], spec: str = ".4f") -> str:
  return "" if x is None else format(x, spec)


def report(name: str, command: str, runs: Sequence[plan_lib.Run], out: pathlib.Path) -> List[dict]:
  """Writes <out>/launch.json and launch.md; the runs' summaries."""
  rows: List[Dict[str, Any]] = []
  for run in runs:
    record = read_json(run.folder / "run.json") or {}
    metrics = read_json(run.folder / "train_metrics.json") or {}
    rows.append(
      dict(
        key=run.key,
        setting=run.setting,
        arm=run.arm.name,
        seed=run.seed,
        repeat=run.repeat,
        folder=str(run.folder),
        status="finished" if run.finished else record.get("status", "not run"),
        train_seconds=record.get("train_seconds"),
        program_seconds=record.get("program_seconds"),
        epochs=metrics.get("epochs_done"),
        best_epoch=metrics.get("best_epoch"),
        test={k: metrics.get("test", {}).get(k) for k in TEST},
      )
    )
  table = markdown_header(
    ["run", "status", "train s", "epochs (best)", "test R@20", "NDCG@10", "R@100"]
  )
  for r in rows:
    secs = r["train_seconds"] if r["train_seconds"] is not None else r["program_seconds"]
    epochs = f"{'' if r['epochs'] is None else r['epochs']} ({_fmt(r['best_epoch'], 'd')})"
    cells = [r["key"], r["status"], _fmt(secs, ".0f"), epochs, *map(_fmt, r["test"].values())]
    table.append(markdown_row(cells))
  finished = sum(r["status"] == "finished" for r in rows)
  title = f"{name}: {finished} of {len(rows)} runs finished"
  _write(out, "launch", dict(experiment=name, command=command, runs=rows), title, command, table)
  return rows


def _arrangements(
  args: argparse.Namespace,
  exp: experiment_lib.Experiment,
  out: pathlib.Path,
  root: pathlib.Path,
  codes: Dict[str, pathlib.Path],
  command: str,
) -> int:
  """--arrangements: the whole plan from scratch in each arrangement per round, the order of the
  arrangements rotated per round (bench/README.md, `launch/`)."""
  exp = exp.replace(base=dict(exp.base, sasrec_pack_tokens=False, frequency_seed=exp.seeds[0]))
  names = list(args.arrangements)
  seconds: Dict[str, List[float]] = {n: [] for n in names}
  ndcg: Dict[str, List[float]] = {n: [] for n in names}
  for rnd in range(args.rounds):
    for name in rotated(names, rnd):
      folder = out / "arrangements" / f"{name}_r{rnd}"
      shutil.rmtree(folder, ignore_errors=True)
      runs = plan_lib.plan(exp, folder, root, codes, ROOT, args.python)
      programs = plan_lib.programs(runs, args.python) if name == "program" else []
      jobs = len(runs) if name == "parallel" else 1
      start = time.perf_counter()
      statuses = execute_lib.execute(runs, name, jobs, None, programs, log=lambda *_: None)
      seconds[name].append(time.perf_counter() - start)
      if any(s != "finished" for s in statuses.values()):
        print(f"error: {name} round {rnd}: {statuses}", file=sys.stderr)
        return 1
      tests = [(read_json(r.folder / "train_metrics.json") or {})["test"] for r in runs]
      ndcg[name].append(statistics.mean(t["ndcg@10"] for t in tests))
      print(f"round {rnd} {name}: {seconds[name][-1]:.1f} s", flush=True)
  first, med = names[0], {n: statistics.median(s) for n, s in seconds.items()}
  ratios = {
    n: dict(min=min(seconds[n]) / min(seconds[first]), median=med[n] / med[first])
    for n in names[1:]
  }
  table = markdown_header(["arrangement", "wall min s", "wall median s", "mean test NDCG@10"])
  for n in names:
    mean = statistics.mean(ndcg[n])
    table.append(markdown_row([n, f"{min(seconds[n]):.1f}", f"{med[n]:.1f}", f"{mean:.4f}"]))
  notes = [
    f"- {n} / {first}: {v['median']:.2f}x by median, {v['min']:.2f}x by min (> 1: {first} "
    "is faster)"
    for n, v in ratios.items()
  ]
  title = f"{len(exp.seeds)} seeds x {len(exp.arms)} arms, arranged {len(names)} ways"
  data = dict(seconds=seconds, ratios=ratios, test_ndcg10=ndcg)
  _write(out, "arrangements", data, title, command, [*table, "", *notes])
  print("\n".join(notes))
  parts = ", ".join(f"{n}/{first} {v['median']:.2f}x" for n, v in ratios.items())
  print(f"SUMMARY launch arrangements: {parts} by median")
  return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)
  name = pathlib.Path(args.experiment).stem
  out = pathlib.Path(args.out or f"bench/out/{name}").resolve()
  command = "python -m bench.launch " + " ".join(sys.argv[1:] if argv is None else argv)
  try:
    exp = resolve(args)
    if args.data_root:
      root = pathlib.Path(args.data_root)
    else:
      from train.data.datasets import default_data_root

      root = default_data_root()
    if args.dry_run:  # no worktree made: the commands name the folder or commit as given
      codes = {n: pathlib.Path(v) for n, v in exp.codes.items()}
    else:
      codes = execute_lib.checkouts(exp.codes, out, ROOT)
    if args.arrangements:
      return _arrangements(args, exp, out, root, codes, command)
    runs = plan_lib.plan(exp, out, root, codes, ROOT, args.python)
    programs = plan_lib.programs(runs, args.python) if exp.arrange == "program" else []
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if args.dry_run:
    commands = [p.command for p in programs] or [c for r in runs for c in r.commands]
    print("\n".join(" ".join(c) for c in commands))
    print(
      f"SUMMARY launch {name} dry run: {len(exp.settings)} settings x {len(exp.arms)} arms x "
      f"{len(exp.seeds)} seeds x {exp.repeats} repeats = {len(runs)} runs"
      + (f" in {len(programs)} programs" if programs else "")
      + f" ({exp.arrange})"
    )
    return 0
  if args.overwrite:
    for run in runs:
      shutil.rmtree(run.folder, ignore_errors=True)
  out.mkdir(parents=True, exist_ok=True)
  deadline = time.time() + 60.0 * args.time_budget_minutes if args.time_budget_minutes else None
  start = time.perf_counter()
  statuses = list(execute_lib.execute(runs, exp.arrange, exp.jobs, deadline, programs).values())
  rows = report(name, command, runs, out)
  finished = sum(r["status"] == "finished" for r in rows)
  failed = statuses.count("failed")
  unfinished = len(rows) - finished - failed
  ran = sum(s in ("finished", "paused", "failed") for s in statuses)
  print(
    f"SUMMARY launch {name}: {finished} of {len(rows)} runs finished ({ran} run now, "
    f"{failed} failed, {unfinished} to go) in {time.perf_counter() - start:.0f} s; "
    f"runs in {out / 'launch.md'}"
    + ("; rerun the same command to continue" if unfinished and not failed else "")
  )
  return 1 if failed else (execute_lib.EXIT_PAUSED if unfinished else 0)


def run() -> None:
  """Console-script entry point (tfrs-logq-launch)."""
  sys.exit(main())
