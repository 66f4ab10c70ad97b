r"""Trains SASRec or a two-tower model with full / sampled softmax (logQ variants), BCE or gBCE.

    python -m train --dataset=ml1m --model=sasrec --loss=sampled_softmax \
        --negatives=mixed --num_negatives=256 --logq=corrected --model_dir=/tmp/run \
        --export_dir=/tmp/run/export

One binary for the paper's grid (see --help for every flag). The batch size is GLOBAL (split
over the replicas of --strategy). --model_dir holds the checkpoints (every epoch: model,
optimizer, frequency estimator, step, epoch, best NDCG@10, patience counter), TensorBoard
summaries (train/loss, train/mean_weight, val/recall@k, val/ndcg@k) and metrics.json; rerunning
the same command resumes exactly where the last finished epoch left off. --export_dir writes the
serving SavedModels (see train/export.py). The paper's reference code calls an "epoch"
min(100, batches per pass) = 48 steps on ML-1M (--steps_per_epoch=48, or 0 = one pass).

Multi-worker: set TF_CONFIG in every worker's environment and pass --strategy=multi_worker;
worker 0 (the chief) writes summaries, metrics and exports.
"""

from __future__ import annotations

import logging
import os
import sys

from absl import app
from absl import flags

import tfrs_logq  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

from train import data as data_lib
from train.distribute import STRATEGIES
from tfrs_logq.losses import Q_PRIME_MODES
from train.objective import CORRECTIONS, NEGATIVES
from train.trainer import FREQUENCIES, MODELS, TrainConfig, Trainer
from models.sasrec import BLOCK_STYLES
from models.training_losses import LOSSES

FLAGS = flags.FLAGS

flags.DEFINE_enum("dataset", "synthetic", list(data_lib.DATASETS),
                  "synthetic (embedded generator), ml1m (gSASRec leave-one-out files), "
                  "movielens_raw (ratings.dat / u.data via --data_path), tfds (movielens/*).")
flags.DEFINE_string("data_path", None, "File or folder of the dataset (default: the shared data "
                    "folder for ml1m / movielens_raw; TFDS data_dir for tfds).")
flags.DEFINE_enum("split", "leave_one_out", ["leave_one_out", "temporal"],
                  "Evaluation split: leave-one-out or the global temporal split.")
flags.DEFINE_string("tfds_name", "movielens/100k-ratings", "TFDS dataset name (--dataset=tfds).")
flags.DEFINE_integer("synthetic_users", 2000, "Synthetic dataset: number of users.")
flags.DEFINE_integer("synthetic_items", 1000, "Synthetic dataset: number of items.")
flags.DEFINE_integer("synthetic_min_len", 30, "Synthetic dataset: shortest sequence.")
flags.DEFINE_integer("synthetic_max_len", 70, "Synthetic dataset: longest sequence.")
flags.DEFINE_enum("model", "sasrec", list(MODELS), "sasrec or two_tower.")
flags.DEFINE_enum("loss", "sampled_softmax", list(LOSSES),
                  "full_softmax (all items), sampled_softmax (--negatives, --logq), bce (SASRec: "
                  "uniform negatives, use --num_negatives=1 for the original), gbce (gSASRec).")
flags.DEFINE_enum("negatives", "mixed", list(NEGATIVES),
                  "Negatives of sampled softmax: uniform, in_batch (global batch, deduplicated), "
                  "mixed (half in-batch, half uniform), midx (adaptive MIDX proposal).")
flags.DEFINE_integer("num_negatives", 256, "Negatives per query (mixed: split evenly).")
flags.DEFINE_bool("uniform_negatives_per_position", False,
                  "Draw the uniform negatives per query/position (the reference code) instead of "
                  "sharing them across the batch (one matmul, much faster).")
flags.DEFINE_enum("logq", "corrected", list(CORRECTIONS), "logQ correction of sampled softmax.")
flags.DEFINE_enum("q_prime", "exact", list(Q_PRIME_MODES),
                  "corrected: log Q' = log Q - log(1 - Q(p)) (exact) or log Q (proxy).")
flags.DEFINE_integer("frequency_buckets", 0, "Hash-array size H / count-min width for "
                     "--frequency=hash_array|count_min (0 = 4 x number of items).")
flags.DEFINE_enum("frequency", "exact", list(FREQUENCIES),
                  "Q(d) estimator: exact training counts, or streaming hash_array / count_min "
                  "(updated every step with the global batch's positives).")
flags.DEFINE_float("temperature", 1.0, "Scores are <q, c> / temperature.")
flags.DEFINE_float("gbce_t", 0.75, "gBCE calibration parameter t in [0, 1].")
flags.DEFINE_integer("batch_size", 128, "GLOBAL batch size (sequences or pairs).")
flags.DEFINE_float("learning_rate", 1e-3, "Adam learning rate.")
flags.DEFINE_integer("epochs", 200, "Maximum number of epochs.")
flags.DEFINE_integer("steps_per_epoch", 100, "Steps per epoch (0 = one pass over the data).")
flags.DEFINE_integer("early_stopping_patience", 200,
                     "Stop after this many epochs without a better validation NDCG@10.")
flags.DEFINE_integer("seed", 0, "Seed of data order, negatives, dropout and initialisation.")
flags.DEFINE_integer("max_len", 200, "Sequence / history length.")
flags.DEFINE_integer("embedding_dim", 128, "Embedding size d.")
flags.DEFINE_integer("num_blocks", 2, "SASRec transformer blocks.")
flags.DEFINE_integer("num_heads", 1, "SASRec attention heads.")
flags.DEFINE_float("dropout", 0.5, "SASRec dropout rate.")
flags.DEFINE_bool("tie_embeddings", False,
                  "SASRec: score with the input item-embedding table (gSASRec's "
                  "reuse_item_embeddings) instead of a separate output table.")
flags.DEFINE_enum("sasrec_block", "pre_ln", list(BLOCK_STYLES),
                  "SASRec block: pre_ln (pre-LayerNorm transformer, inputs scaled by sqrt(d)) or "
                  "reference (the original SASRec block of the paper's gSASRec-pytorch code).")
flags.DEFINE_bool("jit_compile", False, "Compile the SASRec encoder with XLA.")
flags.DEFINE_integer("midx_codewords", 32, "MIDX codewords per codebook.")
flags.DEFINE_enum("strategy", "default", list(STRATEGIES),
                  "tf.distribute strategy: default, mirrored (local devices), multi_worker "
                  "(TF_CONFIG), tpu (--tpu).")
flags.DEFINE_string("tpu", None, "TPU name or address for --strategy=tpu ('local' on a TPU VM).")
flags.DEFINE_integer("cpu_replicas", 0, "Split the CPU into this many logical devices (for "
                     "--strategy=mirrored on a CPU-only machine); 0 = leave as is.")
flags.DEFINE_string("model_dir", "/tmp/tfrs_logq_run", "Checkpoints, TensorBoard, metrics.json.")
flags.DEFINE_string("export_dir", None, "Write serving SavedModels here (train/export.py).")
flags.DEFINE_string("metrics_json", None, "Final metrics JSON (default: model_dir/metrics.json).")
flags.DEFINE_integer("eval_batch_size", 512, "Queries per validation batch.")
flags.DEFINE_bool("progress", True, "Show a progress bar.")


def config_from_flags() -> TrainConfig:
  kwargs = {}
  if FLAGS.dataset == "synthetic":
    kwargs = dict(num_users=FLAGS.synthetic_users, num_items=FLAGS.synthetic_items,
                  min_len=FLAGS.synthetic_min_len, max_len=FLAGS.synthetic_max_len)
  elif FLAGS.dataset == "tfds":
    kwargs = dict(tfds_name=FLAGS.tfds_name)
  return TrainConfig(
      dataset=FLAGS.dataset, data_path=FLAGS.data_path, split=FLAGS.split,
      dataset_kwargs=kwargs, model=FLAGS.model, loss=FLAGS.loss, negatives=FLAGS.negatives,
      num_negatives=FLAGS.num_negatives,
      uniform_negatives_per_position=FLAGS.uniform_negatives_per_position, logq=FLAGS.logq,
      q_prime=FLAGS.q_prime, frequency=FLAGS.frequency,
      frequency_buckets=FLAGS.frequency_buckets, temperature=FLAGS.temperature,
      gbce_t=FLAGS.gbce_t, batch_size=FLAGS.batch_size, learning_rate=FLAGS.learning_rate,
      epochs=FLAGS.epochs, steps_per_epoch=FLAGS.steps_per_epoch,
      early_stopping_patience=FLAGS.early_stopping_patience, seed=FLAGS.seed,
      max_len=FLAGS.max_len, embedding_dim=FLAGS.embedding_dim, num_blocks=FLAGS.num_blocks,
      num_heads=FLAGS.num_heads, dropout=FLAGS.dropout, sasrec_block=FLAGS.sasrec_block,
      tie_embeddings=FLAGS.tie_embeddings, jit_compile=FLAGS.jit_compile,
      midx_codewords=FLAGS.midx_codewords, strategy=FLAGS.strategy, tpu=FLAGS.tpu,
      model_dir=FLAGS.model_dir, export_dir=FLAGS.export_dir, metrics_json=FLAGS.metrics_json,
      eval_batch_size=FLAGS.eval_batch_size, progress=FLAGS.progress)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.getLogger().setLevel(logging.INFO)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if FLAGS.cpu_replicas > 1:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * FLAGS.cpu_replicas)
  cfg = config_from_flags()
  os.makedirs(cfg.model_dir, exist_ok=True)
  result = Trainer(cfg).run()
  print(f"done: step {result['global_step']}, best epoch {result['best_epoch']}, "
        f"val ndcg@10 {result['val']['ndcg@10']:.4f}, test ndcg@10 {result['test']['ndcg@10']:.4f}",
        file=sys.stderr)


if __name__ == "__main__":
  app.run(main)
