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
status 3 = `train.trainer.EXIT_PAUSED`) before an epoch that would end past T minutes, so a long
run can be done in chunks by rerunning the command. --export_dir writes the serving SavedModels
(train/export.py). The paper's reference code calls an "epoch" min(100, batches per pass) = 48
steps on ML-1M (--steps_per_epoch=48, or 0 = one pass).

Multi-worker: set TF_CONFIG in every worker's environment and pass --strategy=multi_worker;
worker 0 (the chief) writes summaries, metrics and exports.
"""

from __future__ import annotations

import logging
import os
import sys

from absl import app
from absl import flags

from train import config_flags
from train import host_memory
from train.config import RunConfig

FLAGS = flags.FLAGS
config_flags.define_flags(RunConfig)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.getLogger().setLevel(logging.INFO)
  try:
    cfg = config_flags.from_flags(RunConfig)
  except (TypeError, ValueError) as e:
    raise app.UsageError(str(e)) from e
  host_memory.configure(cfg.host_allocator)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if cfg.cpu_replicas > 1:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * cfg.cpu_replicas)
  from train.trainer import EXIT_PAUSED, Trainer  # pylint: disable=g-import-not-at-top
  os.makedirs(cfg.model_dir, exist_ok=True)
  result = Trainer(cfg).run()
  if result.get("paused"):
    print(f"paused: step {result['global_step']}, epoch {result['epochs_done']} (time budget "
          f"{cfg.time_budget_minutes:g} min); rerun the same command to continue",
          file=sys.stderr)
    sys.exit(EXIT_PAUSED)
  print(f"done: step {result['global_step']}, best epoch {result['best_epoch']}, "
        f"val ndcg@10 {result['val']['ndcg@10']:.4f}, test ndcg@10 {result['test']['ndcg@10']:.4f}",
        file=sys.stderr)


def run():
  """Console-script entry point (tfrs-logq-train)."""
  config_flags.expose_in_help(__name__)
  app.run(main)


if __name__ == "__main__":
  run()
