"""Negatives sources x logQ corrections at 10^5-10^6 items, against a synthetic world's truth.

Commands, method, flags and measured results: bench/README.md, section `world_scale.py`.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import itertools
import json
import os
import pathlib
import sys
import time
from typing import Dict, List, Optional, Sequence

from bench.common.report import commit as git_commit
from bench.common.report import summary_line, write_json
from bench.world import report as report_lib
from bench.world import rows as rows_lib
from eval.demo.config import CONVENTIONS

ROOT = pathlib.Path(__file__).resolve().parents[1]
SWEPT = ("num_items", "batch_size", "steps", "zipf", "tau")  # the list-valued settings flags


class _Parser(argparse.ArgumentParser):
  """argparse with a one-line error (no usage block)."""

  def error(self, message):
    self.exit(2, f"{self.prog}: error: {message}\n")


def _numbers(text: str, name: str, kind=int) -> List:
  """The comma-separated values of --NAME as ``kind`` (int: '1e5' is 100000)."""
  out = []
  for part in filter(None, (p.strip() for p in text.split(","))):
    try:
      value = float(part)
    except ValueError:
      raise ValueError(f"--{name}: {part!r} is not a number") from None
    if kind is int and value != int(value):
      raise ValueError(f"--{name}: {part!r} is not an integer")
    out.append(kind(value))
  if not out:
    raise ValueError(f"--{name}: no values given")
  return out


def build_parser() -> argparse.ArgumentParser:
  d = rows_lib.Settings()
  p = _Parser(
    prog="world_scale.py",
    description=__doc__.splitlines()[0],
    formatter_class=argparse.ArgumentDefaultsHelpFormatter,
  )
  add = p.add_argument
  add("--num_items", default="1e5", help="catalog sizes |D|, comma-separated (1e5,1e6)")
  add("--batch_size", default="512", help="batch sizes B, comma-separated (512,4096)")
  add("--steps", default=str(d.steps), help="training steps, comma-separated (500,2000)")
  add("--seeds", default="0,1,2", help="paired seeds (same stream and initial weights per seed)")
  add("--rows", default="", help="comma-separated rows (bench/README.md); default: the grid")
  add("--convention", default="unigram", help="log Q convention of rows that name none")
  add("--num_negatives", type=int, default=0, help="k (0: the batch size)")
  add("--midx_negatives", type=int, default=d.midx_negatives, help="MIDX draws per query (0: k)")
  add("--midx_codewords", type=int, default=d.midx_codewords, help="MIDX codewords K")
  add("--midx_refresh", type=int, default=d.midx_refresh, help="MIDX index refresh period")
  add("--learning_rate", type=float, default=d.learning_rate, help="Adam's rate (cosine to 1%%)")
  add("--embedding_dim", type=int, default=d.embedding_dim, help="model dimension (+1 bias)")
  add("--feature_dim", type=int, default=d.feature_dim, help="user feature dimension f")
  add("--zipf", default=str(d.zipf), help="Zipf exponents of the popularity, comma-separated")
  add("--tau", default=str(d.tau), help="peakedness of the preferences, comma-separated")
  add(
    "--one_at_a_time",
    action="store_true",
    help=f"settings: the first value of each of {list(SWEPT)} and each other value of one of "
    "them around it (default: their product)",
  )
  add("--world_seed", type=int, default=d.world_seed, help="seed of the world and held-out users")
  add("--train_users", type=int, default=d.train_users, help="training user pool")
  add("--eval_users", type=int, default=d.eval_users, help="held-out users of the metrics")
  add("--ks", default="10,100,1000", help="cut-offs k of recall@k and HR@k")
  add("--full_max_logits", type=float, default=d.full_max_logits, help="full softmax: max B |D|")
  add("--eval_memory_gb", type=float, default=1.5, help="memory of one chunk of the metrics")
  add("--timing_rounds", type=int, default=4, help="interleaved timing rounds (0: no timing)")
  add("--timing_steps", type=int, default=5, help="timed steps per row and round")
  add("--time_budget_minutes", type=float, default=0.0, help="stop before exceeding (0: none)")
  add("--out", default="bench/out/world_scale", help="output folder")
  add("--report_only", action="store_true", help="only rewrite the reports from OUT")
  add(
    "--compare",
    action="append",
    default=[],
    help="A,B: paired A − B of every metric (repeatable; added to the report)",
  )
  add("--quick", action="store_true", help="a small world and budget: a smoke, not evidence")
  return p


QUICK = (  # --quick: the flags left at their defaults take these values
  "--num_items=2000 --batch_size=128 --steps=200 --seeds=0,1 --train_users=1024 --eval_users=300"
  " --ks=10,100 --midx_codewords=16 --midx_negatives=32 --midx_refresh=50 --timing_rounds=2"
  " --rows=in_batch:corrected,mixed:corrected,midx:corrected,full"
).split()


def settings_from(args) -> List[rows_lib.Settings]:
  """A Settings per point of the list-valued flags (SWEPT): their product, or with
  --one_at_a_time their first values and each other value of one flag around them; the other
  fields are the flags of their names."""
  ks = tuple(_numbers(args.ks, "ks"))
  lists = {f: _numbers(getattr(args, f), f, float if f in ("zipf", "tau") else int) for f in SWEPT}
  named = set(rows_lib.Settings._fields) - set(SWEPT) - {"ks", "num_bins"}
  same = {f: getattr(args, f) for f in named} | {"full_max_logits": int(args.full_max_logits)}
  if args.one_at_a_time:
    centre = {f: v[0] for f, v in lists.items()}
    points = [centre] + [centre | {f: x} for f, v in lists.items() for x in v[1:]]
  else:
    points = [dict(zip(lists, p)) for p in itertools.product(*lists.values())]
  return list(dict.fromkeys(rows_lib.Settings(ks=ks, **same, **p) for p in points))


def _run_path(folder: pathlib.Path, row, seed: int) -> pathlib.Path:
  return folder / "runs" / f"{row.file_name}__seed{seed}.json"


def _check_folder(folder: pathlib.Path, settings: rows_lib.Settings) -> None:
  """ValueError when FOLDER/runs holds a run of other settings."""
  mine = json.loads(json.dumps(settings.as_dict()))
  for path in sorted((folder / "runs").glob("*.json")):
    theirs = json.loads(path.read_text()).get("settings", {})
    k = next((k for k in mine if theirs.get(k) != mine[k]), None)
    if k is not None:
      raise ValueError(
        f"{path} was run with {k}={theirs.get(k)!r}, this invocation has {mine[k]!r}: "
        "use another --out"
      )


def _setup_backend() -> None:
  """KERAS_BACKEND=jax before Keras loads (ValueError if another backend is in use)."""
  backend = os.environ.setdefault("KERAS_BACKEND", "jax")
  if backend != "jax":
    raise ValueError(f"world_scale runs on the JAX backend (KERAS_BACKEND=jax), got {backend!r}")
  if "keras" in sys.modules:
    import keras

    if keras.backend.backend() != "jax":
      raise ValueError(f"Keras is already loaded with the {keras.backend.backend()} backend")


def run_setting(settings, rows, seeds, folder: pathlib.Path, args, deadline, log) -> Dict:
  """Trains and evaluates the pending (row, seed) runs of one setting; returns counts."""
  from bench.world import data, metrics, training

  cache, memory = folder.parent / "cache", int(args.eval_memory_gb * 1e9)
  pending = [(r, s) for s in seeds for r in rows if not _run_path(folder, r, s).exists()]
  done = {"new": 0, "skipped": len(rows) * len(seeds) - len(pending), "left": 0}
  if not pending:
    return done
  machine, commit = training.machine_label(), git_commit(full=True)
  tag = rows_lib.settings_tag(settings)
  log(f"{tag}: {len(pending)} runs to go ({done['skipped']} done) on {machine}")
  wd = data.prepare_world(settings, cache, memory, log)
  chunk = data.chunk_users(settings.num_items, 8, memory)
  evaluate = lambda models: metrics.evaluate(
    wd.world, wd.eval_x, models, wd.bins, settings.ks, settings.num_bins, chunk, wd.oracle_top
  )
  if not (folder / "references.json").exists():
    write_json(str(folder), "references.json", evaluate(metrics.reference_models(wd.popularity)))
  # the seeds' streams in turn (pending is ordered by seed): the last one kept
  stream = functools.lru_cache(1)(
    lambda seed: data.load_stream(wd.world, settings, seed, cache, memory, log)
  )
  # ---- the step cost of this invocation's rows beside mixed, interleaved
  seed0, arms, timing = pending[0][1], {}, {}
  if args.timing_rounds > 0:
    reference = rows_lib.REFERENCE_ROW
    timed = {r.name: r for r in [rows_lib.parse_row(reference)] + [r for r, _ in pending]}
    arms = {n: training.Arm(r, settings, seed0, stream(seed0).counts) for n, r in timed.items()}
    init, start = data.initial_weights(settings, seed0), time.time()
    timing = training.time_rows(arms, init, stream(seed0), args.timing_rounds, args.timing_steps)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    record = dict(when=stamp, machine=machine, commit=commit, reference=reference, rows=timing)
    write_json(str(folder / "timing"), f"{stamp}.json", record)
    ref_ms = timing[reference]["median_ms"]
    log(
      f"  step ms on {machine} (median / min, × {reference}; {time.time() - start:.0f} s): "
      + ", ".join(
        f"{n} {t['median_ms']:.1f} / {t['min_ms']:.1f} (× {t['median_ms'] / ref_ms:.2f})"
        for n, t in timing.items()
      )
    )
  eval_seconds = None
  for i, (row, seed) in enumerate(pending):
    step_ms = timing.get(row.name, {}).get("median_ms")
    estimate = (step_ms or 0.0) * settings.steps / 1e3 + (eval_seconds or 0.0)
    if deadline is not None and time.time() + estimate > deadline:
      done["left"] = len(pending) - i
      log(f"  --time_budget_minutes: {done['left']} runs left (run again to resume)")
      break
    start, st = time.time(), stream(seed)
    arm = arms.pop(row.name) if seed == seed0 and row.name in arms else None
    arm = arm or training.Arm(row, settings, seed, st.counts)
    state = arm.initial_state(*data.initial_weights(settings, seed))
    info = training.train(arm, state, st, settings.steps)
    w, table = arm.weights(state)
    del state
    eval_start = time.time()
    result = evaluate({"model": metrics.model_log_probs(w, table)})["model"]
    eval_seconds = time.time() - eval_start
    t, ref = timing.get(row.name), timing.get(rows_lib.REFERENCE_ROW)
    run = dict(
      row=row.name,
      seed=seed,
      settings=settings.as_dict(),
      machine=machine,
      commit=commit,
      when=datetime.datetime.now().isoformat(timespec="seconds"),
      metrics=result,
      train=info,
      eval_seconds=eval_seconds,
      wall_seconds=time.time() - start,
      step_vs_mixed=(t["median_ms"] / ref["median_ms"]) if t and ref else None,
    )
    path = _run_path(folder, row, seed)
    write_json(str(path.parent), path.name, run)
    done["new"] += 1
    r, h, ks = result["recall"], result["hit_rate"], settings.ks
    scores = [f"R@{k} {r[str(k)]:.4f}" for k in ks] + [f"HR@{k} {h[str(k)]:.4f}" for k in ks]
    ratio = f" (× mixed {run['step_vs_mixed']:.2f})" if run["step_vs_mixed"] else ""
    log(
      f"  [{i + 1}/{len(pending)}] {row.name} seed {seed}: KL {result['kl']:.3f}, "
      f"{', '.join(scores)}; step {info['step_ms_median']:.1f} ms{ratio}; "
      f"train {info['seconds']:.0f} s, eval {eval_seconds:.0f} s"
    )
  return done


def write_reports(folder: pathlib.Path, compares, log) -> Optional[Dict]:
  if not any((folder / "runs").glob("*.json")):
    return None
  summary = report_lib.summarise(folder, compares)
  text = report_lib.format_markdown(summary)
  (folder / "report.md").write_text(text)
  write_json(str(folder), "summary.json", summary)
  report_lib.plot_recall(summary, folder / "recall_at_k.png")
  log(text)
  return summary


def write_sweep(out: pathlib.Path, log) -> None:
  """OUT/sweep.md, .json, .png: corrected − standard across OUT's settings folders."""
  result = report_lib.sweep([json.loads(p.read_text()) for p in out.glob("*/summary.json")])
  if result["varying"] and result["points"]:
    text = report_lib.format_sweep(result)
    (out / "sweep.md").write_text(text)
    write_json(str(out), "sweep.json", result)
    report_lib.plot_sweep(result, out / "sweep.png")
    log(text)


def _headline(tag: str, summary: Optional[Dict], done: Dict) -> str:
  part = f"{tag} {done['new']} new / {done['skipped']} done / {done['left']} left"
  if not summary:
    return part
  k, rows = summary["ks"][-1], summary["rows"]
  best = max(summary["order"], key=lambda n: rows[n][f"recall@{k}"]["mean"])
  part += f", best R@{k} {best} {rows[best][f'recall@{k}']['mean']:.4f}"
  for p in summary["pairs"]:
    if p["kind"] == "correction" and p["a"].endswith("corrected") and ":standard" in p["b"]:
      d = p["metrics"][f"recall@{k}"]
      half = "" if d["half_width"] is None else f" ± {d['half_width']:.4f}"
      return part + f", {p['a']} − standard ΔR@{k} {d['mean']:+.4f}{half}"
  return part


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = build_parser()
  args = parser.parse_args(argv)
  if args.quick:
    default, quick = vars(parser.parse_args([])), vars(parser.parse_args(QUICK))
    vars(args).update({k: quick[k] for k, v in vars(args).items() if v == default[k]})
  start, out = time.time(), pathlib.Path(args.out)
  try:
    seeds = _numbers(args.seeds, "seeds")
    rows_lib.check(
      (len(set(seeds)) == len(seeds), f"--seeds must be distinct, got {seeds}"),
      (args.convention in CONVENTIONS, f"--convention must be one of {list(CONVENTIONS)}"),
      (args.timing_rounds >= 0, "--timing_rounds must be >= 0"),
      (args.timing_steps > 0, "--timing_steps must be > 0"),
      (
        args.eval_memory_gb > 0 and not args.time_budget_minutes < 0,
        "--eval_memory_gb must be > 0 and --time_budget_minutes >= 0",
      ),
    )
    compares = []
    for text in args.compare:
      pair = [t.strip() for t in text.split(",")]
      if len(pair) != 2 or not all(pair):
        raise ValueError(f"--compare needs A,B, got {text!r}")
      compares.append(tuple(rows_lib.parse_row(t, args.convention).name for t in pair))
    plan = []
    for settings in [] if args.report_only else settings_from(args):
      if args.rows:
        rows = rows_lib.parse_rows(args.rows.split(","), args.convention)
      else:
        rows = rows_lib.default_rows(settings, args.convention)
      rows_lib.check_settings(settings, rows)
      folder = out / rows_lib.settings_tag(settings)
      _check_folder(folder, settings)
      plan.append((settings, rows, folder))
    if not args.report_only:
      _setup_backend()
  except ValueError as e:
    parser.error(str(e))
  if args.report_only:  # every settings folder under OUT, whatever the settings flags say
    plan = [(None, None, f.parent) for f in sorted(out.glob("*/runs")) if f.is_dir()]
  deadline = start + args.time_budget_minutes * 60 if args.time_budget_minutes else None
  parts = []
  for settings, rows, folder in plan:
    if args.report_only:
      done = {"new": 0, "skipped": len(list((folder / "runs").glob("*.json"))), "left": 0}
    else:
      done = run_setting(settings, rows, seeds, folder, args, deadline, print)
    try:
      summary = write_reports(folder, compares, print)
    except ValueError as e:
      parser.error(str(e))
    parts.append(_headline(folder.name, summary, done))
  write_sweep(out, print)
  note = f"{time.time() - start:.0f} s; outputs in {args.out}"
  print(summary_line(parts or [f"no runs under {args.out}"], head="world_scale", note=note))
  return 0


if __name__ == "__main__":
  sys.exit(main())
