r"""N seeds of one run: as one compiled program, as N processes at once, as N runs in a row.

    python -m bench.seeds_program --seeds=0,1,2 --repeats=2 \
        --flags="--dataset=movielens_raw --epochs=3 --steps_per_epoch=20 \
                 --early_stopping_patience=100"

Each arrangement runs `python -m train.keras3 --backend=jax` with the same flags (plus
--nosasrec_pack_tokens and --frequency_seed=<first seed> for the separate runs, so that all
three train the same models, `train.keras3.seeds`), from a fresh model folder, timed from the
command's start to its end (start-up, compilation, steps, validation, test): "program"
(--seeds=...), "parallel" (one process per seed, started together, sharing the machine),
"serial" (one process per seed, one after the other). With --logqs=v1,v2,.. the runs are the
rows x seeds (rows that differ only in --logq): "program" is one --seeds --logqs program, the
separate runs take --logq=v, and a fourth arrangement, "row_programs", runs one --seeds program
per row, one after the other (what --seeds alone gives). Rounds rotate the order of the
arrangements; reported: min and median wall-clock of each and the ratio of each to the program
(> 1: the program is faster), and each arrangement's mean test NDCG@10 (the same models: equal
up to float rounding). Writes seeds_program.json and .md in --out.
Absolute seconds are this machine's, under its load; the ratios are the result.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from typing import Dict, List

ROOT = pathlib.Path(__file__).resolve().parents[1]
ARRANGEMENTS = ("program", "parallel", "serial")


def _env() -> Dict[str, str]:
  env = {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS", "KERAS_BACKEND")}
  env.update(PYTHONPATH=str(ROOT), KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3")
  return env


def _command(flags: List[str], model_dir: pathlib.Path, extra: List[str]) -> List[str]:
  return [
    sys.executable,
    "-m",
    "train.keras3",
    "--backend=jax",
    "--noprogress",
    *flags,
    f"--model_dir={model_dir}",
    *extra,
  ]


def _run_dir(folder: pathlib.Path, logq, seed: int) -> pathlib.Path:
  return folder / f"seed{seed}" if logq is None else folder / logq / f"seed{seed}"


def _popen(command: List[str]) -> subprocess.Popen:
  return subprocess.Popen(
    command, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
  )


def _wait(name: str, procs: List[subprocess.Popen]) -> None:
  for proc in procs:
    _, err = proc.communicate()
    if proc.returncode != 0:
      raise SystemExit(f"error: {name} failed:\n{err[-2000:]}")


def run_arrangement(
  name: str, seeds: List[int], flags: List[str], folder: pathlib.Path, logqs=None
) -> dict:
  """Runs one arrangement from scratch in ``folder``; its wall-clock and test NDCG@10s (one
  per run: per seed, or per (logq, seed) with ``logqs``, logq-major)."""
  shutil.rmtree(folder, ignore_errors=True)
  folder.mkdir(parents=True)
  separate = ["--nosasrec_pack_tokens", f"--frequency_seed={seeds[0]}"]
  runs = [(v, s) for v in (logqs or [None]) for s in seeds]
  seed_list = f"--seeds={','.join(map(str, seeds))}"

  def alone(logq, seed) -> List[str]:
    row = [] if logq is None else [f"--logq={logq}"]
    return _command(flags, _run_dir(folder, logq, seed), [f"--seed={seed}", *row, *separate])

  start = time.perf_counter()
  if name == "program":
    row = [] if logqs is None else [f"--logqs={','.join(logqs)}"]
    _wait(name, [_popen(_command(flags, folder, [seed_list, *row]))])
  elif name == "row_programs":  # one --seeds program per row, one after the other
    for v in logqs:
      _wait(name, [_popen(_command(flags, folder / v, [seed_list, f"--logq={v}"]))])
  elif name == "parallel":
    _wait(name, [_popen(alone(v, s)) for v, s in runs])
  else:
    for v, s in runs:
      _wait(f"{name} {v or ''} seed {s}", [_popen(alone(v, s))])
  seconds = time.perf_counter() - start
  ndcg = [
    json.loads((_run_dir(folder, v, s) / "metrics.json").read_text())["test"]["ndcg@10"]
    for v, s in runs
  ]
  return dict(seconds=seconds, test_ndcg10=ndcg)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--seeds", default="0,1,2")
  parser.add_argument("--repeats", type=int, default=2, help="rounds (order rotated)")
  parser.add_argument(
    "--flags",
    default="--dataset=movielens_raw --epochs=3 --steps_per_epoch=20 --early_stopping_patience=100",
    help="the binary's flags (one string)",
  )
  parser.add_argument(
    "--logqs",
    default="",
    help="rows that differ only in --logq, e.g. none,corrected: runs are (logq, seed) pairs, "
    "and a fourth arrangement, one --seeds program per row in a row, is timed",
  )
  parser.add_argument(
    "--arrangements",
    default="",
    help="the arrangements timed, comma-separated, program among them (default: all: program, "
    "parallel, serial, and row_programs with --logqs)",
  )
  parser.add_argument("--out", default="bench/out/seeds_program")
  args = parser.parse_args(argv)
  seeds = [int(s) for s in args.seeds.split(",")]
  logqs = [v for v in args.logqs.split(",") if v] or None
  arrangements = ARRANGEMENTS + (("row_programs",) if logqs else ())
  if args.arrangements:
    chosen = tuple(a for a in args.arrangements.split(",") if a)
    if "program" not in chosen or not set(chosen) <= set(arrangements):
      parser.error(
        f"--arrangements: program and any of {list(arrangements[1:])}, got {args.arrangements!r}"
      )
    arrangements = tuple(a for a in arrangements if a in chosen)
  flags = shlex.split(args.flags)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  results: Dict[str, List[dict]] = {name: [] for name in arrangements}
  for r in range(args.repeats):
    k = r % len(arrangements)
    order = arrangements[k:] + arrangements[:k]
    for name in order:
      res = run_arrangement(name, seeds, flags, out / "runs" / f"{name}_r{r}", logqs)
      results[name].append(res)
      print(
        f"round {r} {name}: {res['seconds']:.1f} s, test NDCG@10 "
        f"{statistics.mean(res['test_ndcg10']):.4f}",
        flush=True,
      )
  secs = {name: [x["seconds"] for x in results[name]] for name in arrangements}
  ratios = {
    f"{name}/program": dict(
      min=min(secs[name]) / min(secs["program"]),
      median=statistics.median(secs[name]) / statistics.median(secs["program"]),
    )
    for name in arrangements
    if name != "program"
  }
  summary = dict(
    seeds=seeds,
    logqs=logqs,
    flags=flags,
    repeats=args.repeats,
    seconds=secs,
    ratios=ratios,
    test_ndcg10={name: [x["test_ndcg10"] for x in results[name]] for name in arrangements},
  )
  (out / "seeds_program.json").write_text(json.dumps(summary, indent=2))
  lines = [
    "# N seeds: one program, N processes at once, N in a row",
    "",
    f"`python -m bench.seeds_program {' '.join(shlex.quote(a) for a in (argv or sys.argv[1:]))}`",
    "",
    f"seeds {seeds}{f', rows (--logq) {logqs}' if logqs else ''}, flags `{' '.join(flags)}`, "
    f"{args.repeats} rounds",
    "",
    "| arrangement | wall min | wall median | mean test NDCG@10 |",
    "|---|---|---|---|",
  ]
  for name in arrangements:
    lines.append(
      f"| {name} | {min(secs[name]):.1f} s | {statistics.median(secs[name]):.1f} s | "
      f"{statistics.mean(statistics.mean(x['test_ndcg10']) for x in results[name]):.4f}"
      " |"
    )
  lines += [
    "",
    *(
      f"- {k}: {v['median']:.2f}x by median, {v['min']:.2f}x by min (> 1: the program is faster)"
      for k, v in ratios.items()
    ),
  ]
  (out / "seeds_program.md").write_text("\n".join(lines) + "\n")
  print("\n".join(lines[-len(ratios) :]))
  print(
    "summary: seeds_program: "
    + ", ".join(f"{k} {v['median']:.2f}x" for k, v in ratios.items())
    + " by median"
  )


if __name__ == "__main__":
  main()
