"""bench.step's report: the table of the sides, train_speed.json and the summary line;
the ``--profile`` table."""

from __future__ import annotations

import dataclasses
import statistics
import sys

from bench.common import report
from bench.common.timing import min_median
from bench.step.configs import YARDSTICK, parse_config
from bench.step.profiler import Profiler

__all__ = ["keras3_ratios", "print_report", "print_profile"]


def print_report(sides: dict, configs: list, flops: dict, peak: dict, pre_ln: float, args) -> None:
  """The table of the timed ``sides`` (name -> `bench.step.worker.Side`, closed), OUT/
  train_speed.json and the summary line; ``peak``: the matmul peak per framework, ``pre_ln``:
  the model FLOPs of a pre-LN step."""
  names = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}
  print(
    f"fp32 matmul peak ({args.matmul_n}^2, {args.threads} threads): "
    + ", ".join(f"{names[k]} {v:.1f} GFLOP/s" for k, v in peak.items() if v)
  )
  print(
    f"model FLOPs per step: {flops[YARDSTICK] / 1e9:.1f} G (reference block), "
    f"{pre_ln / 1e9:.1f} G (pre-LN block)"
  )
  ref = sides.get(YARDSTICK)
  labels = {name: YARDSTICK if name == YARDSTICK else parse_config(name).label for name in sides}
  width = max([44] + [len(label) + 1 for label in labels.values()])
  print(
    "\n".join(
      report.ruled(
        f"{'side':<{width}}{'min s':>7}{'med s':>7}{'x min':>7}{'x med':>7}{'GFLOP/s':>9}"
        f"{'%peak':>7}{'RSS GiB':>9}{'step GiB':>9}{'work GiB':>9}{'loss':>8}{'w':>7}"
      )
    )
  )
  results = {name: min_median(side.times) for name, side in sides.items()}
  ref_min, ref_med = results[YARDSTICK] if ref else (None, None)
  # the paper code's min / median over the side's
  x = {
    n: (ref_min / mn, ref_med / med) if ref else (None, None) for n, (mn, med) in results.items()
  }
  for name, side in sides.items():
    mn, med = results[name]
    framework = "torch" if name == YARDSTICK else parse_config(name).peak_framework
    gflops = flops[name] / med / 1e9
    rss = side.memory.get("peak_rss_kib")
    step_mem, work_mem = [
      None if rss is None else rss - side.memory[k] for k in ("rss_import_kib", "rss_ready_kib")
    ]
    ratios = "".join(f"{r:>7.2f}" if ref else f"{'-':>7}" for r in x[name])
    print(
      f"{labels[name]:<{width}}{mn:>7.2f}{med:>7.2f}{ratios}{gflops:>9.1f}"
      f"{100 * gflops / peak[framework]:>7.0f}{report.gib(rss):>9}"
      f"{report.gib(step_mem):>9}{report.gib(work_mem):>9}{side.loss:>8.3f}{side.w:>7.3f}"
    )
  keras3 = keras3_ratios(configs, results)
  report.write_json(
    args.out,
    "train_speed.json",
    dict(
      argv=sys.argv[1:],
      peak_gflops=peak,
      keras3_over_tf_keras=keras3,
      model_gflop_per_step={n: f / 1e9 for n, f in flops.items()},
      sides={
        name: dict(
          times=side.times,
          min_s=results[name][0],
          median_s=results[name][1],
          memory=side.memory,
          x_min=x[name][0],
          x_median=x[name][1],
        )
        for name, side in sides.items()
      },
    ),
  )
  print(
    "x min / x med: the paper code's min / median over ours (same run); RSS: peak resident "
    "set during the timed steps; step: the same above the framework's import footprint; work: "
    "above the process after the warm-up (model, optimizer, compiled programs; free heap "
    "returned to the kernel first): the step's working set. "
    "Losses differ by definition (the paper code's loss has no log-sum-exp shift)."
  )
  if keras3:
    print(
      "Keras 3 / tf-keras, the same configuration (seconds per step, tf-keras over Keras 3: "
      "> 1 = Keras 3 faster; min / median): "
      + ", ".join(f"{k} {v['x_min']:.2f}x / {v['x_median']:.2f}x" for k, v in keras3.items())
    )
  ours = [c.name for c in configs]
  trainable = [c.name for c in configs if not c.no_loss] or ours  # a bound is not a contender
  best = min(trainable, key=lambda n: results[n][1])
  best_gflops = flops[best] / results[best][1] / 1e9
  best_peak = peak[parse_config(best).peak_framework]
  keras3_parts = [f"{k} {v['x_median']:.2f}x tf-keras's" for k, v in keras3.items()]
  rate = f"{best_gflops:.1f} GFLOP/s = {100 * best_gflops / best_peak:.0f}% of"
  if ref:
    rss = [side.memory.get("peak_rss_kib") for side in (ref, sides[best])]
    mem_ratio = rss[0] / rss[1] if rss[0] and rss[1] else float("nan")
    parts = [f"{n} {x[n][0]:.2f}x / {x[n][1]:.2f}x" for n in ours]
    parts.append(f"best {best} at {rate} peak, peak RSS {mem_ratio:.1f}x smaller")
    head = "faster than the paper's PyTorch code (min / median, same run)"
    note = "shared machine: ratios only"
  else:
    mn, med = results[best]
    parts = [
      f"best {best} {mn:.2f} s min / {med:.2f} s median per step, {rate} its framework's "
      "matmul peak"
    ]
    head, note = "", "no paper-code side; shared machine: absolute times noisy"
  print(report.summary_line(parts + keras3_parts, head=head, note=note))


def keras3_ratios(configs: list, results: dict) -> dict:
  """{Keras 3 config name: dict(tf_keras=name, x_min, x_median)}: the tf-keras side of the same
  configuration (every setting but the framework) over the Keras 3 side, when both ran."""
  key = lambda c: dataclasses.replace(c, name="", framework="tf_keras")
  tf_keras = {key(c): c.name for c in configs if not c.keras3}
  out = {}
  for c in configs:
    other = tf_keras.get(key(c)) if c.keras3 else None
    if other is not None:
      (tf_min, tf_med), (k3_min, k3_med) = results[other], results[c.name]
      out[c.name] = dict(tf_keras=other, x_min=tf_min / k3_min, x_median=tf_med / k3_med)
  return out


def print_profile(times: dict, configs: list) -> None:
  """The ``--profile`` table: ``times`` = {config name: {piece: [seconds]}}."""
  print("median seconds (fraction of the step) per piece:")
  print("\n".join(report.ruled(f"{'config':<44}" + "".join(f"{p:>17}" for p in Profiler.PIECES))))
  summary = []
  for c in configs:
    med = {p: statistics.median(t) for p, t in times[c.name].items() if t}
    step = med["step"]
    cells = "".join(
      f"{med[p]:>9.3f} ({med[p] / step:>4.0%})" if p in med else f"{'-':>17}"
      for p in Profiler.PIECES
    )
    print(f"{parse_config(c.name).label:<44}{cells}")
    rest = step - med["encoder_fwd_bwd"] - med["loss_fwd_bwd"] - med["optimizer"]
    summary.append(
      f"{c.name}: encoder {med['encoder_fwd_bwd'] / step:.0%}, scores+loss "
      f"{med['loss_fwd_bwd'] / step:.0%}, Adam {med['optimizer'] / step:.0%}, rest "
      f"{rest / step:.0%}"
    )
  print(
    "encoder_fwd_bwd + loss_fwd_bwd + optimizer ~ step (the rest: glue, the real gradients "
    "w.r.t. the item table meeting, tf.function overhead); estimator is inside loss_fwd_bwd."
  )
  print(report.summary_line(summary, head="share of the step (median, shared machine)"))
