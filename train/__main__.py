r"""Trains SASRec or a two-tower model with full / sampled softmax (logQ variants), BCE or gBCE.

    python -m train --dataset=ml1m --model=sasrec --loss=sampled_softmax \
        --negatives=mixed --num_negatives=256 --logq=corrected --model_dir=/tmp/run \
        --export_dir=/tmp/run/export
    tfrs-logq-train ...            # the same, as the console script of `pip install ".[app]"`

One binary for the paper's grid. Every flag is a field of `train.config.RunConfig` (help text and
choices there; see --help); the configuration is validated once, recorded in metrics.json and
in the export's metadata. The batch size is GLOBAL (split over the replicas of --strategy).
--model_dir holds the checkpoints (every epoch: model, optimizer, frequency estimator, step,
epoch, best NDCG@10, patience counter), TensorBoard summaries (train/loss, train/mean_weight,
val/recall@k, val/ndcg@k) and metrics.json; rerunning the same command resumes exactly where the
last finished epoch left off; with --time_budget_minutes=T it pauses (checkpoint kept, exit
status 3 = `train.epochs.EXIT_PAUSED`) before an epoch that would end past T minutes, so a long
run can be done in chunks by rerunning the command. --export_dir writes the serving SavedModels
(train/export.py). The paper's reference code calls an "epoch" min(100, batches per pass) = 48
steps on ML-1M (--steps_per_epoch=48, or 0 = one pass).

Multi-worker: set TF_CONFIG in every worker's environment and pass --strategy=multi_worker;
worker 0 (the chief) writes summaries, metrics and exports.

Parameter servers (--strategy=parameter_server): start the same command in every process of the
TF_CONFIG cluster; a "worker" or "ps" task only serves (`train.distribute.run_server`, never
returns), the "chief" trains, checkpoints, evaluates and exports (docs/distributed.md).

Output (train/cli.py): by default a progress bar and one line per epoch on stdout, and a `done:`
line on stderr; --verbosity=info adds the INFO logs (absl, TensorFlow, checkpoint saver),
--verbosity=debug the DEBUG logs and tracebacks. How it ends (exit status):
* 0 done; 3 paused by --time_budget_minutes (rerun the same command to continue).
* 2 bad input (a flag, a flag combination, a missing or malformed data file): one line
  `error: ...` naming the problem (e.g. the file and line).
* 1 a non-finite loss or gradient: training stops at that step, nothing newer than the last
  finished epoch's checkpoint is written, and one line names the step and that checkpoint.
* 4 (--strategy=parameter_server, the chief) a parameter server was lost, and its variables with
  it: one line names it, the checkpoint kept and the command to rerun once it is restarted
  (`train.trainer.EXIT_PS_LOST`; docs/distributed.md).
* 130 Ctrl-C: the checkpoint of the last finished epoch is on disk (written first if the
  interrupt came between an epoch's end and its save; a mid-epoch state is never saved, so
  resuming stays exact); the message gives the command that resumes.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from train import cli

cli.quiet_tensorflow()  # before TensorFlow is imported (it logs while it loads)

from absl import flags  # noqa: E402

from train import config_flags, host_memory  # noqa: E402
from train.config import RunConfig  # noqa: E402

FLAGS = flags.FLAGS
config_flags.define_flags(RunConfig)
cli.declare_verbosity_flag()


def _say(line: str) -> None:
  print(line, flush=True)


def main(argv: Sequence[str]) -> None:
  del argv  # checked by cli.run
  with cli.bad_input():
    cfg = config_flags.from_flags(RunConfig)
    keras3_only = cfg.keras3.changed()
    if keras3_only:
      raise ValueError(
        f"{', '.join(keras3_only)}: settings of python -m train.keras3 (the Keras 3 binary); "
        "python -m train does not read them"
      )
  host_memory.configure(cfg.host_allocator)
  if cfg.strategy == "parameter_server":
    from train import distribute

    with cli.bad_input():  # a malformed TF_CONFIG
      task = distribute.server_task()
    if task is not None:  # a worker or ps of the cluster: serve until killed
      _say(
        f"{task[0]} {task[1]} of the parameter-server cluster: serving (stop it with a "
        "signal once the chief is done)"
      )
      distribute.run_server()
      return
  data = None
  if not cfg.data.reads_with_tensorflow:  # a missing or malformed data file is reported at once
    with cli.bad_input():
      data = cfg.data.load()
  import tensorflow as tf

  if cfg.cpu_replicas > 1:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * cfg.cpu_replicas
    )
  from train import trainer as trainer_lib

  if data is None:
    with cli.bad_input():  # a missing or malformed data file, data that contradicts the flags
      data = cfg.data.load()
  os.makedirs(cfg.model_dir, exist_ok=True)
  try:
    result = trainer_lib.Trainer(cfg, data=data, report=_say).run()
  except trainer_lib.NonFiniteError as e:
    cli.fail(
      f"{e} Rerunning the same command repeats these steps: change the settings (e.g. a "
      "lower --learning_rate) and train in a new --model_dir.",
      cli.EXIT_ERROR,
      e,
    )
  except trainer_lib.ParameterServerLost as e:
    tasks = " and ".join(f"ps {i}" for i, _ in e.tasks) or "the lost ps"
    cli.fail(
      f"{e} Restart {tasks} (the workers and other ps can stay up), then rerun this "
      f"chief's command to resume: {cli.command_line()}",
      trainer_lib.EXIT_PS_LOST,
      e,
      hard=True,
    )
  except trainer_lib.TrainingInterrupted as e:
    if cli.verbosity() == "debug":
      import traceback

      traceback.print_exception(e)
    sys.stdout.flush()
    print(
      f"\n{e}; to resume, rerun the same command:\n  {cli.command_line()}",
      file=sys.stderr,
      flush=True,
    )
    sys.exit(cli.EXIT_INTERRUPTED)
  if result.get("paused"):
    print(
      f"paused: step {result['global_step']}, epoch {result['epochs_done']} (time budget "
      f"{cfg.time_budget_minutes:g} min); rerun the same command to continue",
      file=sys.stderr,
    )
    sys.exit(trainer_lib.EXIT_PAUSED)
  print(
    f"done: step {result['global_step']}, best epoch {result['best_epoch']}, "
    f"val ndcg@10 {result['val']['ndcg@10']:.4f}, test ndcg@10 {result['test']['ndcg@10']:.4f}",
    file=sys.stderr,
  )


def run() -> None:
  """Console-script entry point (tfrs-logq-train)."""
  config_flags.expose_in_help(__name__)
  cli.run(main)


if __name__ == "__main__":
  run()
