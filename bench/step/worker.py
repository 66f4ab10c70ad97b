"""A side of the step benchmark in its own subprocess (``python -m bench.step.worker SPEC``):
it sets up our step or the paper code's, warms up, then answers the parent's commands (one JSON
a line on stdin: steps, peak, profile, trace, quit; replies by `bench.common.workers`); `Side`
is the parent's handle on it or on a tree's worker (`bench.step.trees`)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import resource
import subprocess
import sys
import time
from typing import List

import numpy as np

from bench.common import memory, workers
from bench.step.configs import SideConfig
from bench.step.peaks import matmul_peak_torch
from bench.step.trace import trace_steps

__all__ = ["serve", "Side"]

ROOT = pathlib.Path(__file__).resolve().parents[2]


def paper_code_setup(spec: dict, cfg, arrays):
  """`bench.step.keras3_side.setup`'s (run, peak, info, profiler) of the paper code's side."""
  import torch

  from bench import paper_code_torch

  step_fn = paper_code_torch.PaperCodeStep(
    spec["num_items"],
    arrays["item_counts"],
    max_len=spec["max_len"],
    dropout=spec["dropout"],
    threads=spec["threads"],
    seed=spec["seed"],
  )
  windows = arrays["windows"]
  run = lambda i: step_fn(windows[i])  # its loss.item() waits for the step, as in the script
  peak = lambda n: matmul_peak_torch(n, device=step_fn.device)
  framework, device = f"torch {torch.__version__}", str(step_fn.device)
  return run, peak, dict(threads=torch.get_num_threads(), framework=framework, device=device), None


def serve(spec: dict) -> None:
  """Subprocess: sets up one side, then answers commands read from stdin (one JSON a line)."""
  proto = os.fdopen(os.dup(1), "w", buffering=1)
  os.dup2(2, 1)  # anything a library prints goes to stderr, not the protocol
  reply = lambda obj: proto.write(workers.reply_line(obj) + "\n")
  arrays = np.load(spec["batches"])
  threads = spec["threads"]
  from train import host_memory

  cfg = None if spec["side"] == "torch" else SideConfig(**spec["config"])
  if cfg is None:
    host_memory.configure(spec["yardstick_allocator"])
    import torch

    torch.set_num_threads(threads)
    setup = paper_code_setup
  else:
    host_memory.configure(cfg.allocator, one_heap=cfg.one_heap)
    if cfg.keras3:  # before keras is imported; a JAX side imports no TensorFlow (a GPU machine)
      from bench.step import keras3_side as side_lib

      backend = side_lib.select_backend(cfg, threads)
    else:
      from bench.step import ours as side_lib

      backend = "tensorflow"
    if backend == "tensorflow":
      import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

      import tensorflow as tf

      tf.config.threading.set_intra_op_parallelism_threads(threads)
      tf.get_logger().setLevel("ERROR")
    if cfg.keras3:
      import keras  # noqa: F401

      if backend == "jax":
        import jax  # noqa: F401
    setup = side_lib.setup
  rss_import = memory.status_kib("VmRSS")
  run, peak, info, make_profiler = setup(spec, cfg, arrays)
  num_batches = len(arrays["windows"])
  cursor = [0]

  def steps(n):
    times, out = [], None
    for _ in range(n):
      start = time.perf_counter()
      out = run(cursor[0] % num_batches)
      times.append(time.perf_counter() - start)
      cursor[0] += 1
    return times, out

  for _ in range(spec["warmup"]):
    steps(1)
  cursor[0] = 0
  host_memory.release_free_memory()  # the warm-up's garbage (tracing, XLA) is not the step's
  rss_ready = memory.status_kib("VmRSS")
  reset = memory.reset_peak_rss()
  reply(dict(dict(threads=threads), ready=True, **info))
  profiler = None
  for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["cmd"] == "steps":
      times, (loss, w) = steps(cmd["n"])
      reply(dict(times=times, loss=loss, w=w))
    elif cmd["cmd"] == "peak":
      reply(dict(gflops=peak(cmd["n"])))
    elif cmd["cmd"] == "profile":
      if make_profiler is None:
        raise ValueError("--profile times the pieces of the tf-keras and Keras 3 JAX steps only")
      profiler = profiler or make_profiler()
      out = profiler.round(cmd["n"])
      reply(dict(out, check=profiler.check) if getattr(profiler, "check", None) else out)
    elif cmd["cmd"] == "trace":
      if cfg is None or cfg.keras3:
        raise ValueError("--trace breaks down the tf-keras step only")
      reply(trace_steps(steps, cmd["n"]))
    elif cmd["cmd"] == "quit":
      rss = dict(peak_rss_kib=memory.peak_rss_kib(reset))
      rss["lifetime_peak_rss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
      reply(dict(rss, rss_import_kib=rss_import, rss_ready_kib=rss_ready))
      return


class Side:
  """A worker subprocess (`serve`) and its results."""

  def __init__(self, name: str, spec: dict, log_dir: str, command=None, cwd=None, env=None):
    """``command`` (a list; default: `serve` of this tree) gets JSON(spec) appended."""
    self.name = name
    self.log_path = os.path.join(log_dir, re.sub(r"[^a-z0-9]+", "_", name.lower()) + ".log")
    self.log = open(self.log_path, "w")
    self.proc = subprocess.Popen(
      (command or [sys.executable, "-m", "bench.step.worker"]) + [json.dumps(spec)],
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      stderr=self.log,
      text=True,
      bufsize=1,
      cwd=cwd or str(ROOT),
      env=env,
    )
    self.times: List[float] = []
    self.rounds: List[List[float]] = []  # the times of each ``steps`` request
    self.loss, self.w, self.memory = None, None, {}

  def steps(self, n: int) -> None:
    """Times ``n`` steps: one more round."""
    out = self.ask(cmd="steps", n=n)
    self.rounds.append(out["times"])
    self.times += out["times"]
    self.loss, self.w = out["loss"], out["w"]

  def receive(self) -> dict:
    for line in self.proc.stdout:
      out = workers.parse_reply(line)
      if out is not None:
        return out
    self.log.flush()
    tail = pathlib.Path(self.log_path).read_text()[-3000:]
    raise RuntimeError(f"side {self.name!r} died (exit {self.proc.wait()}); log tail:\n{tail}")

  def ask(self, **cmd) -> dict:
    self.proc.stdin.write(json.dumps(cmd) + "\n")
    self.proc.stdin.flush()
    return self.receive()

  def close(self):
    try:
      self.memory = self.ask(cmd="quit")
    finally:
      self.proc.wait(timeout=120)
      self.log.close()


if __name__ == "__main__":
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  serve(json.loads(sys.argv[1]))
