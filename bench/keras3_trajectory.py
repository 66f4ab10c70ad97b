"""Same-start training trajectories of the two binaries: is a gap between `python -m train` and
`python -m train.keras3` at a fixed step their implementations or their random starts?

    python -m bench.keras3_trajectory --steps=96 --out=bench/out/keras3_trajectory

Method, flags and measured results: bench/README.md, section `keras3_trajectory.py`.
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import sys
import tempfile

import numpy as np
from absl import app, flags

from bench.common import plot as plot_lib
from bench.common import report
from bench.common.workers import reply_line, run_worker, worker_command
from models import sasrec_weights
from train import config_flags
from train.config import RunConfig

FLAGS = flags.FLAGS
_FIXED = ("model", "model_dir", "export_dir", "metrics_json", "epochs", "early_stopping_patience")
# RunConfig's keras3 group: --backend is the Keras 3 runs' backend; the runs are single, in-process.
_FIXED += ("shuffle_rng", "compilation_cache", "seeds", "logqs")
config_flags.define_flags(
  RunConfig,
  exclude=_FIXED,
  defaults=dict(
    dataset="ml1m",
    split="leave_one_out",
    loss="full_softmax",
    dropout=0.0,
    steps_per_epoch=48,
    jit_compile=True,
    progress=False,
  ),
)
flags.DEFINE_integer("steps", 96, "Training steps of each run.")
flags.DEFINE_string("out", "bench/out/keras3_trajectory", "Output folder.")
flags.DEFINE_string("_worker", None, "Internal: a Keras 3 run, as JSON {init, weights}.")

RUNS = ("tf_keras", "keras3_copied", "keras3_own")
METRICS = ("recall@20", "ndcg@10")


def run_config(model_dir: str) -> RunConfig:
  """The run settings of every run (the flags; SASRec, enough epochs for --steps)."""
  if FLAGS.steps < 1:
    raise app.UsageError("--steps must be >= 1")
  return config_flags.from_flags(RunConfig).replace(
    model="sasrec",
    epochs=1 + (FLAGS.steps - 1) // max(FLAGS.steps_per_epoch, 1),
    model_dir=model_dir,
  )


def _metrics(m: dict) -> dict:
  return {k: float(m[k]) for k in METRICS}


def _train(trainer, steps_of_epoch, steps: int, per_epoch: int) -> dict:
  """Runs ``steps`` steps (``steps_of_epoch(e)`` yields each step's loss); validates at step 0
  and after every ``per_epoch`` steps (and at the last)."""
  losses, val = [], [dict(step=0, **_metrics(trainer.validate("val")))]
  for epoch in itertools.count():
    for loss in itertools.islice(steps_of_epoch(epoch), steps - len(losses)):
      losses.append(float(loss))
      if len(losses) % per_epoch == 0 or len(losses) == steps:
        val.append(dict(step=len(losses), **_metrics(trainer.validate("val"))))
    if len(losses) == steps:
      return dict(loss=losses, val=val)


def tf_keras_run(cfg: RunConfig, weights_path: str) -> dict:
  """The tf-keras trainer's run; saves its initial weights to ``weights_path``."""
  import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

  from train.trainer import Trainer

  trainer = Trainer(cfg, data=cfg.data.load())
  sasrec_weights.to_npz(weights_path, sasrec_weights.get_arrays(trainer.model))
  steps_of_epoch = lambda e: (loss for loss, _, _ in trainer.epoch_steps(e))
  return _train(trainer, steps_of_epoch, FLAGS.steps, cfg.steps_per_epoch)


def keras3_run(cfg: RunConfig, init: str, weights_path: str) -> dict:
  """A Keras 3 trainer's run (in a worker whose KERAS_BACKEND is set): from the tf-keras run's
  initial weights (``init="copied"``) or its own (``"own"``)."""
  from train.keras3.trainer import Trainer

  trainer = Trainer(cfg, data=cfg.data.load(), report=lambda line: None, shuffle_rng="tensorflow")
  if init == "copied":
    sasrec_weights.set_arrays(trainer.encoder, sasrec_weights.from_npz(weights_path))
  steps_of_epoch = lambda e: (trainer.train_step(b)[0] for b in trainer.epoch_batches(e))
  return _train(trainer, steps_of_epoch, FLAGS.steps, cfg.steps_per_epoch)


def _spawn_keras3(init: str, weights_path: str, log_path: pathlib.Path) -> dict:
  command = worker_command("bench.keras3_trajectory", dict(init=init, weights=weights_path))
  env = {**os.environ, "KERAS_BACKEND": FLAGS.backend}
  with open(log_path, "w") as log:
    status, reply = run_worker([*command, *sys.argv[1:]], stderr=log, env=env)
  if status or reply is None:
    raise RuntimeError(f"Keras 3 run {init} failed (status {status}); see {log_path}")
  return reply


def summary(runs: dict) -> dict:
  """|Δ loss| against tf_keras per step (max, mean, at the first and the last step) and the
  first and last validation differences, for each Keras 3 run."""
  base, ref = np.asarray(runs["tf_keras"]["loss"]), runs["tf_keras"]["val"]
  out = {}
  for name in RUNS[1:]:
    diff, val = np.abs(np.asarray(runs[name]["loss"]) - base), runs[name]["val"]
    out[name] = dict(
      max_abs_loss_diff=float(diff.max()),
      mean_abs_loss_diff=float(diff.mean()),
      last_abs_loss_diff=float(diff[-1]),
      first_step_abs_loss_diff=float(diff[0]),
      val_start_diff={m: val[0][m] - ref[0][m] for m in METRICS},
      val_last_diff={m: val[-1][m] - ref[-1][m] for m in METRICS},
    )
  return out


def markdown(result: dict) -> str:
  runs, s = result["runs"], result["summary"]
  lines = [
    f"# Same-start trajectories: tf-keras vs Keras 3 ({result['backend']})",
    "",
    f"`{result['command']}` (code {result['commit']}; settings: loss {result['loss']}, "
    f"dropout {result['dropout']}, seed {result['seed']}, {result['steps']} steps)",
    "",
    "| step | loss tf_keras | keras3_copied | keras3_own | val NDCG@10 tf_keras | "
    "keras3_copied | keras3_own | val R@20 tf_keras | keras3_copied | keras3_own |",
    "|---|---|---|---|---|---|---|---|---|---|",
  ]
  for i, v in enumerate(runs["tf_keras"]["val"]):
    step = v["step"]
    loss = ["—" if step == 0 else f"{runs[r]['loss'][step - 1]:.5f}" for r in RUNS]
    ndcg = [f"{runs[r]['val'][i]['ndcg@10']:.4f}" for r in RUNS]
    rec = [f"{runs[r]['val'][i]['recall@20']:.4f}" for r in RUNS]
    lines.append(f"| {step} | " + " | ".join(loss + ndcg + rec) + " |")
  lines += [
    "",
    "| Keras 3 run | first-step abs Δ loss | mean abs Δ loss | max abs Δ loss | "
    "last-step abs Δ loss | Δ val NDCG@10 at the end | Δ val R@20 at the end |",
    "|---|---|---|---|---|---|---|",
  ]
  for name in RUNS[1:]:
    t = s[name]
    lines.append(
      f"| {name} | {t['first_step_abs_loss_diff']:.2e} | {t['mean_abs_loss_diff']:.2e}"
      f" | {t['max_abs_loss_diff']:.2e} | {t['last_abs_loss_diff']:.2e} | "
      f"{t['val_last_diff']['ndcg@10']:+.4f} | {t['val_last_diff']['recall@20']:+.4f} |"
    )
  lines += ["", "Δ: the Keras 3 run minus tf_keras at the same step, on the same batches."]
  return "\n".join(lines) + "\n"


def plot(result: dict, path: pathlib.Path) -> None:
  runs = result["runs"]
  fig, (a, b) = plot_lib.pyplot().subplots(1, 2, figsize=(11, 4))
  steps = np.arange(1, len(runs["tf_keras"]["loss"]) + 1)
  for name in RUNS:
    a.plot(steps, runs[name]["loss"], label=name, lw=1)
  a.set(xlabel="step", ylabel="training loss", title="loss per step, same batches")
  a.legend()
  base = np.asarray(runs["tf_keras"]["loss"])
  for name in RUNS[1:]:
    b.semilogy(steps, np.abs(np.asarray(runs[name]["loss"]) - base) + 1e-12, label=name, lw=1)
  b.set(xlabel="step", ylabel="|loss − tf_keras loss|", title="distance from the tf-keras run")
  b.legend()
  plot_lib.save(fig, path, dpi=110)


def main(argv):
  del argv
  with tempfile.TemporaryDirectory(prefix="keras3_trajectory_") as model_dir:
    cfg = run_config(model_dir)  # the trainers' checkpoint / summary folder: discarded
    if FLAGS._worker:
      spec = json.loads(FLAGS._worker)
      print(reply_line(keras3_run(cfg, spec["init"], spec["weights"])), flush=True)
    else:
      compare(cfg)


def compare(cfg: RunConfig) -> None:
  """The three runs, their summary and the output files (bench/README.md)."""
  out = pathlib.Path(FLAGS.out)
  out.mkdir(parents=True, exist_ok=True)
  weights_path = str(out / "initial_weights.npz")
  runs = {"tf_keras": tf_keras_run(cfg, weights_path)}
  print(f"tf_keras: {FLAGS.steps} steps, val {runs['tf_keras']['val'][-1]}", flush=True)
  for init in ("copied", "own"):
    runs[f"keras3_{init}"] = _spawn_keras3(init, weights_path, out / f"keras3_{init}.log")
    print(f"keras3_{init}: val {runs[f'keras3_{init}']['val'][-1]}", flush=True)
  result = dict(
    command=report.command("bench.keras3_trajectory", sys.argv[1:]),
    commit=report.commit(),
    backend=FLAGS.backend,
    loss=cfg.loss,
    dropout=cfg.dropout,
    seed=cfg.seed,
    steps=FLAGS.steps,
    runs=runs,
  )
  result["summary"] = summary(runs)
  (out / "trajectory.json").write_text(json.dumps(result, indent=1))
  (out / "trajectory.md").write_text(markdown(result))
  plot(result, out / "trajectory.png")
  os.remove(weights_path)
  print(markdown(result))


if __name__ == "__main__":
  app.run(main)
