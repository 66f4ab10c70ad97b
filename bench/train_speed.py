r"""Seconds per SASRec training step, ours against the paper's PyTorch code in the same run.

    python bench/train_speed.py                 # paper-code config + fastest default vs paper code
    python bench/train_speed.py --quick         # 1 warm-up step, 2 rounds of 2 steps
    python bench/train_speed.py --configs=paper,batch+xla,sequence+xla,query+xla
    python bench/train_speed.py --no_yardstick  # ours only (no PyTorch needed)
    python bench/train_speed.py --profile       # where the time of our step goes (no PyTorch)
    python bench/train_speed.py --configs=paper,paper+jax,paper+keras3_tf   # + Keras 3 steps

Workload (the paper's ML-1M setup): batch B = 128 windows of length L = 200 from the training
pipeline (`train.data.sasrec_train_dataset`, the same batches for every side), d = 128, 2 blocks,
1 head, dropout 0.5, 256 negatives = 128 in-batch (deduplicated, shared) + 128 uniform, corrected
logQ, Adam. A step is forward, loss, backward and the optimizer update (and, for the streaming
estimators, the estimator update); not the data pipeline.

Sides. Each runs in its own subprocess, all set up (and warmed up: tracing, XLA) before timing:
* ``paper code``: `bench/paper_code_torch.py`, a PyTorch re-implementation of the paper code's
  step (eager, float64 scores, [A, 256, d] gathered negatives; see that module). It needs the
  optional extra ``pip install ".[bench]"`` (PyTorch; tested with torch 2.13.0 CPU).
* ours, one per ``--configs`` entry: `train.trainer.Trainer.train_step` with the configuration
  named by ``+``-joined tokens: ``batch`` | ``sequence`` | ``query`` (who shares the 128 uniform
  negatives: the batch, each sequence, or nobody = the paper code's per-position draws; aliases
  ``shared``, ``per_position``), ``xla`` (jit_compile: encoder and scoring), ``step``
  (jit_compile_step: the whole step as one static-shape XLA program), ``reference`` (the paper
  code's block, else the default pre-LN block), ``hash_array`` | ``count_min`` (streaming Q(d)
  estimator updated every step, else exact counts), ``nopack`` (the encoder's per-token layers on
  the padded grid: `models.sasrec.SASRec` ``pack_tokens=False``), ``blocks<k>`` (causal attention
  in k query blocks, e.g. ``blocks1`` = the full L x L grid; else the model's default),
  ``malloc_default`` (glibc's own malloc settings; else ``--host_allocator=retain``, the
  binary's default: `train/host_memory.py`), ``malloc_arenas`` (retain, but glibc's per-thread
  heaps instead of one), ``noloss`` (a bound, not a trainable configuration: the step with the
  negatives' sampling and scoring and the sampled loss replaced by -<q, c_p>, i.e. what the step
  would cost if they were free), ``xla_loss`` / ``xla_objective`` (experiments, measured not to
  pay on CPU: the sampled loss alone, or the negatives' sampling, scoring and the loss together,
  compiled as one XLA program on rows zero-padded to a multiple of 3,200, i.e. <= 8 shapes).
  ``paper`` = ``query+reference+xla`` (the paper-code configuration), ``fastest`` =
  ``batch+xla``, ``defaults`` = ``sequence+reference`` (the binaries' default run settings). The
  paper-code side runs with glibc's defaults, as it does when run
  (``--yardstick_allocator=retain`` gives it ours).
* Keras 3, a configuration with the token ``jax`` or ``keras3_tf`` (e.g. ``paper+jax``,
  ``defaults+keras3_tf``): `python -m train.keras3`'s step (the Keras 3 SASRec, the binary's
  mixed negatives: 128 in-batch (k_b subsample) + 128 uniform laid out per the uniform token,
  the same log Q and loss, Adam; `bench/sasrec_step/keras3_side.py`) in a worker whose
  KERAS_BACKEND is set before keras is imported. ``jax``: one ``jax.jit`` train step with the
  state's buffers donated (``stateless_call`` + ``value_and_grad`` + the optimizer's
  ``stateless_apply``: Keras's own JAX train step without ``train_on_batch`` around it); the
  ``xla`` token changes nothing (always compiled). ``keras3_tf``: ``Trainer.train_step``
  (``train_on_batch``) on the TensorFlow backend, ``xla`` = ``jit_compile`` (the whole step as
  one XLA program, as the binary's --jit_compile), else a tf.function graph. Keras 3 takes the
  uniform, ``reference``, ``xla``, ``blocks<k>`` and ``malloc_*`` tokens (exact Q(d) counts; the
  step always runs on the padded B x L grid with static shapes). The summary adds, for each
  Keras 3 configuration whose tf-keras twin ran too, tf-keras's time over Keras 3's.

Timing: ``--rounds`` rounds; in each, every side runs ``--steps`` steps in a rotated order while
the others wait, so drift from other jobs on a shared machine hits every side alike. Reported: min
and median seconds per step over all timed steps, and the ratios paper code / ours of the mins
and of the medians. Only these same-run ratios mean anything: absolute times move 2-3x between
machines and with the load of a shared one.

Arithmetic: model FLOPs per step, counted analytically and the same for every implementation of
a configuration (multiply-add = 2 FLOPs; forward + backward = 3 x the forward matmul FLOPs, the
backward pass computing two matmuls per forward one):

    encoder  = 2 B L n_blocks (P d^2 + 2 d f + 2 L d)   P = 3 (reference: W_q, W_k, W_v) or
                                                        4 (pre-LN: W_qkv, W_out); f = FFN width = d;
                                                        2 L d: Q K^T and attn V on the full L x L
                                                        grid, as both sides compute it (a causal
                                                        kernel would need half)
    scoring  = 2 A (1 + N) d                            A = non-padding positions, N = 256
    step     = 3 (encoder + scoring)                    (ML-1M batch: ~44 GFLOP)

Element-wise work (LayerNorm, softmax, dropout, the loss, Adam) is not counted, nor extra work an
implementation chooses (e.g. per-query negatives scored as an [A, |I|] matmul plus a gather).
"GFLOP/s" is that count over the median step time, "% peak" against the fp32 matmul peak
measured in the same run, in the side's own framework (a 2048 x 2048 matmul, best of 5, at the
start and end of the run; the higher is kept): TensorFlow for tf-keras and Keras 3 on TF, a
jitted JAX matmul for Keras 3 on JAX, PyTorch for the paper code.

Memory: peak resident set size (VmHWM) of each side's process during the timed steps (the peak
is reset after the warm-up), the same above the process's footprint right after importing its
framework ("step" = what the model, optimizer and step need), and above the process after the
warm-up ("work" = the step's working set: activations, gradients, temporaries). Every side
returns its free heap to the kernel after the warm-up (`train.host_memory.release_free_memory`,
glibc's malloc_trim), so the warm-up's garbage is not counted as the step's.

``--profile`` times the pieces of our step for each config (encoder forward, encoder forward +
backward, scores + loss + backward from fixed queries, the estimator update, the optimizer
update, the whole step), interleaved, and prints their medians as fractions of the step; on a
``jax`` config the pieces are jitted programs of the Keras 3 step (`keras3_side.JaxProfiler`).

The last line is a one-line summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from bench.common.timing import rotated  # noqa: E402
from bench.sasrec_step import report  # noqa: E402
from bench.sasrec_step.configs import (  # noqa: E402
  ESTIMATORS,
  NAMED,
  PER_TOKENS,
  YARDSTICK,
  SideConfig,
  parse_config,
  step_flops,
)
from bench.sasrec_step.ours import load_batches  # noqa: E402
from bench.sasrec_step.worker import Side  # noqa: E402

# The parts (bench/sasrec_step/): configs (the names above, FLOPs), ours (our side's trainer),
# worker (a side's subprocess), profiler (--profile), report (the table, JSON, summary line);
# the paper code's side is bench/paper_code_torch.py.
__all__ = [
  "main",
  "PER_TOKENS",
  "ESTIMATORS",
  "NAMED",
  "YARDSTICK",
  "SideConfig",
  "parse_config",
  "step_flops",
]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true", help="1 warm-up step, 2 rounds of 2 steps")
  parser.add_argument(
    "--configs",
    default="paper,fastest",
    help="comma-separated configurations of ours (module docstring)",
  )
  parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
  parser.add_argument("--steps", type=int, default=2, help="timed steps per side and round")
  parser.add_argument(
    "--warmup",
    type=int,
    default=None,
    help="untimed steps (tracing, XLA; default --num_batches: every batch once, "
    "so each token-capacity shape of the packed XLA encoder is compiled)",
  )
  parser.add_argument(
    "--no_yardstick", action="store_true", help="do not run the paper code (PyTorch) side"
  )
  parser.add_argument(
    "--profile",
    action="store_true",
    help="time the pieces of our step instead (implies --no_yardstick)",
  )
  parser.add_argument("--data_path", default=None, help="ml1m folder (default: the data root)")
  parser.add_argument("--batch_size", type=int, default=128)
  parser.add_argument("--max_len", type=int, default=200)
  parser.add_argument("--num_batches", type=int, default=4, help="distinct batches, cycled")
  parser.add_argument("--dropout", type=float, default=0.5, help="dropout (paper: 0.5)")
  parser.add_argument(
    "--logq",
    default="corrected",
    help="our logQ correction (tfrs_logq.tf_keras.losses.CORRECTIONS); the paper "
    "code side is always corrected",
  )
  parser.add_argument(
    "--buckets",
    type=int,
    default=2**22,
    help="hash-array size / count-min width for +hash_array / +count_min",
  )
  parser.add_argument(
    "--threads", type=int, default=os.cpu_count(), help="intra-op threads of every side"
  )
  parser.add_argument("--matmul_n", type=int, default=2048, help="size of the peak matmul")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument(
    "--yardstick_allocator",
    default="default",
    choices=("default", "retain"),
    help="the paper code's malloc: default (as it runs) or retain (ours; train/host_memory.py)",
  )
  parser.add_argument(
    "--check_keras3_step",
    action="store_true",
    help="jax sides: also run Keras's train_on_batch once from the same state "
    "and print both losses (the jitted stateless step must give the same)",
  )
  parser.add_argument(
    "--out",
    default="bench/out",
    help="folder for train_speed.json (every side's times, ratios, GFLOP/s, RSS)",
  )
  args = parser.parse_args(argv)
  if args.warmup is None:
    args.warmup = args.num_batches
  if args.quick:
    args.rounds, args.steps, args.warmup, args.matmul_n = 2, 2, 1, 1024
  if args.profile:
    args.no_yardstick = True
  configs = [parse_config(c) for c in args.configs.split(",") if c]
  if not configs:
    raise ValueError("--configs is empty")
  if args.profile and any(c.framework == "keras3_tensorflow" for c in configs):
    raise ValueError(
      "--profile times the pieces of the tf-keras and Keras 3 JAX steps: drop "
      "the keras3_tf configurations"
    )
  inputs, targets, windows, data = load_batches(args)
  num_queries = float(np.mean([(t != 0).sum() for t in targets]))
  tmp = tempfile.mkdtemp(prefix="train_speed_")
  batches_path = os.path.join(tmp, "batches.npz")
  np.savez(
    batches_path,
    inputs=inputs,
    targets=targets,
    windows=windows,
    item_counts=np.asarray(data.item_counts, np.float32),
    num_items=data.num_items,
  )
  base = dict(
    batches=batches_path,
    data_path=args.data_path,
    batch_size=args.batch_size,
    max_len=args.max_len,
    dropout=args.dropout,
    logq=args.logq,
    buckets=args.buckets,
    threads=args.threads,
    warmup=args.warmup,
    seed=args.seed,
    check_step=args.check_keras3_step,
  )
  yardstick = not args.no_yardstick
  if yardstick:
    try:
      import importlib.util

      yardstick = importlib.util.find_spec("torch") is not None
    except ImportError:
      yardstick = False
    if not yardstick:
      print(
        "PyTorch is not installed: no paper-code side (pip install torch, e.g. "
        "`.venv/bin/pip install torch==2.13.0`)"
      )
  flops = {
    c.name: step_flops(
      num_queries,
      batch=args.batch_size,
      length=args.max_len,
      dim=128,
      num_blocks=2,
      block=c.block,
      num_negatives=0 if c.no_loss else 256,
    )
    for c in configs
  }
  flops[YARDSTICK] = step_flops(
    num_queries,
    batch=args.batch_size,
    length=args.max_len,
    dim=128,
    num_blocks=2,
    block="reference",
    num_negatives=256,
  )
  print(
    f"SASRec ML-1M: batch {args.batch_size} x {args.max_len}, A = {num_queries:.0f} queries "
    f"per batch (mean of {args.num_batches} batches), d 128, 2 blocks, 1 head, dropout "
    f"{args.dropout}, 128 in-batch + 128 uniform negatives, {args.logq} logQ (ours); "
    f"{args.threads} threads per side, {os.cpu_count()} CPUs; {args.warmup} warm-up steps, "
    f"{args.rounds} interleaved rounds x {args.steps} steps. Shared machine: only same-run "
    "ratios count.",
    flush=True,
  )
  sides = {}
  try:
    if yardstick:
      sides[YARDSTICK] = Side(
        YARDSTICK, dict(base, side="torch", allocator=args.yardstick_allocator), tmp
      )
    for c in configs:
      sides[c.name] = Side(c.name, dict(base, side="ours", config=dataclasses.asdict(c)), tmp)
    for side in sides.values():
      side.info = side.receive()
      if side.info.get("check"):
        print(f"{side.name}: one step from the same state: {side.info['check']}", flush=True)
    if args.profile:
      _profile(sides, configs, args)
      return
    # the matmul peak of each framework, measured in one side that runs it
    peak_sides = {"torch": YARDSTICK} if yardstick else {}
    for c in configs:
      peak_sides.setdefault(c.peak_framework, c.name)
    peaks = {"tensorflow": [], "jax": [], "torch": []}

    def measure_peaks():
      for framework, name in peak_sides.items():
        peaks[framework].append(sides[name].ask(cmd="peak", n=args.matmul_n)["gflops"])

    measure_peaks()
    names = list(sides)
    for r in range(args.rounds):
      for name in rotated(names, r):
        out = sides[name].ask(cmd="steps", n=args.steps)
        sides[name].times += out["times"]
        sides[name].loss, sides[name].w = out["loss"], out["w"]
      print(
        f"round {r + 1}/{args.rounds}: "
        + ", ".join(f"{n} {statistics.median(s.times):.2f} s" for n, s in sides.items()),
        flush=True,
      )
    measure_peaks()
  finally:
    for side in sides.values():
      if side.proc.poll() is None:
        side.close()
  peak = {k: max(v) if v else None for k, v in peaks.items()}
  report.print_report(sides, configs, flops, peak, num_queries, args)


def _profile(sides, configs, args):
  """Interleaved timing of the pieces of each config's step (module docstring)."""
  times = {c.name: {} for c in configs}
  for r in range(args.rounds):
    for c in configs:
      out = sides[c.name].ask(cmd="profile", n=args.steps)
      check = out.pop("check", None)
      if check and r == 0:
        print(f"{c.name}: the loss piece's fixed queries, one loss two ways: {check}", flush=True)
      for piece, t in out.items():
        times[c.name].setdefault(piece, []).extend(t)
    print(f"profile round {r + 1}/{args.rounds}", flush=True)
  for side in sides.values():
    side.close()
  report.print_profile(times, configs)


if __name__ == "__main__":
  main()
