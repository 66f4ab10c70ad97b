"""``--before`` / ``--after`` of the step benchmark: the training step of two source trees (or
one tree with two settings), timed interleaved in one run (bench/README.md, section `step/`).
`TREE_WORKER` runs with the tree's own code and is self-contained (it speaks
`bench.common.workers`' reply lines itself): a tree needs only its binary's trainer interface."""

from __future__ import annotations

import json
import os
import pathlib
import statistics
import sys
from typing import Dict, List

from bench.common.report import summary_line

__all__ = ["TREE_WORKER", "BINARIES", "tree_spec", "tree_env", "ab_lines"]

BINARIES = ("tf_keras", "keras3_jax")

TREE_WORKER = r"""
import json, os, sys, time
spec = json.loads(sys.argv[1])
settings = dict(dataset=spec["dataset"], data_path=spec["data_path"] or None, progress=False,
                model_dir=f"/tmp/step_ab_{os.getpid()}", **spec["settings"])
if spec["binary"] == "tf_keras":
  import tfrs_logq.tf_keras  # legacy Keras before TensorFlow loads
  import tensorflow as tf
  from train.config import RunConfig
  from train.trainer import Trainer
  trainer = Trainer(RunConfig.create(jit_compile=spec["jit_compile"], **settings),
                    strategy=tf.distribute.get_strategy())
  batches = list(trainer.distributed_epoch(0))[:8]
else:
  from train.keras3 import settings as backend
  backend.select_backend()
  from train.config import RunConfig
  from train.keras3.trainer import Trainer
  cfg = RunConfig.create(**settings)
  trainer = Trainer(cfg, data=cfg.data.load(), report=lambda line: None, shuffle_rng="numpy")
  batches = list(trainer.epoch_batches(0))[:8]
reply = lambda obj: print("@@ " + json.dumps(obj), flush=True)
for b in batches[:3]:
  float(trainer.train_step(b)[0])
reply(dict(ready=True))
k = 0
for line in sys.stdin:
  cmd = json.loads(line)
  if cmd["cmd"] == "quit":
    reply(dict())
    break
  times = []
  for _ in range(cmd["n"]):
    t = time.perf_counter()
    loss = float(trainer.train_step(batches[k % len(batches)])[0])
    times.append(time.perf_counter() - t)
    k += 1
  reply(dict(times=times, loss=loss, w=None))
"""


def tree_spec(args, side: str) -> dict:
  """The worker's spec of side ``before`` or ``after``; exits on a malformed settings object
  (before any worker starts)."""
  text = getattr(args, f"settings_{side}")
  try:
    settings = json.loads(text)
    if not isinstance(settings, dict):
      raise ValueError("not an object")
  except ValueError as e:
    sys.exit(f"error: --settings_{side} must be a JSON object of settings: {e}")
  binary = (args.binary_after if side == "after" else None) or args.binary
  return dict(
    dataset=args.dataset,
    data_path=args.data_path or "",
    jit_compile=not args.no_jit_compile,
    binary=binary,
    settings=settings,
  )


def tree_env(tree: pathlib.Path, binary: str, root: pathlib.Path) -> Dict[str, str]:
  """The worker's environment: the tree's code, this repository's data root (a worktree
  elsewhere would look for ../shared/data beside itself), the binary's backend."""
  data_root = os.environ.get("TFRS_LOGQ_DATA", str(root.parent / "shared" / "data"))
  env = dict(os.environ, TFRS_LOGQ_DATA=data_root, PYTHONPATH=str(tree), TF_CPP_MIN_LOG_LEVEL="3")
  if binary == "keras3_jax":
    env.pop("TF_USE_LEGACY_KERAS", None)
    env["KERAS_BACKEND"] = "jax"
  return env


def ab_lines(args, specs: dict, rounds: Dict[str, List[List[float]]]) -> List[str]:
  """The result line and the summary line, from each side's per-round step times."""
  b, a = ([min(r) for r in rounds[side]] for side in ("before", "after"))
  ratios = dict(
    min=min(b) / min(a),
    median=statistics.median(b) / statistics.median(a),
    paired_median=statistics.median([x / y for x, y in zip(b, a)]),
  )
  binaries = {specs[s]["binary"] for s in specs}
  binary = binaries.pop() if len(binaries) == 1 else " vs ".join(specs[s]["binary"] for s in specs)
  line = (
    f"{args.dataset} {binary} training step (before {args.settings_before}, after "
    f"{args.settings_after}), {args.rounds} rounds x {args.steps} steps: before "
    f"min {min(b):.3f} s median {statistics.median(b):.3f} s; after min {min(a):.3f} s "
    f"median {statistics.median(a):.3f} s; speed before/after: min {ratios['min']:.3f}, "
    f"median {ratios['median']:.3f}, paired median {ratios['paired_median']:.3f}"
  )
  summary = summary_line(
    [f"speed before/after {ratios['median']:.3f} by median", f"{ratios['min']:.3f} by min"],
    head="step_ab",
  )
  return [line, summary]
