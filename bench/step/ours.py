"""Our side of the SASRec step benchmark: the ML-1M batches of the training pipeline, a
`train.trainer.Trainer` per configuration (`setup`), and the ``noloss`` / ``xla_loss`` /
``xla_objective`` variants of its objective (bench/README.md, section `step/`)."""

from __future__ import annotations

import tempfile

import numpy as np

from bench.step.configs import SideConfig

__all__ = ["load_batches", "run_config", "setup", "remove_scoring_and_loss", "compile_separately"]


def load_batches(args) -> tuple:
  """(inputs, targets, windows, data): the first --num_batches ML-1M batches of the training
  pipeline as numpy; without TensorFlow (a GPU machine with JAX and PyTorch only), the same from
  the Keras 3 binary's numpy stream (`train.data.batches`, --shuffle_rng=numpy's order)."""
  from train import data as data_lib
  from train.data import batches as batches_lib

  data = data_lib.load("ml1m", args.data_path)
  shape = dict(batch_size=args.batch_size, max_len=args.max_len, seed=args.seed)
  if batches_lib.tensorflow_installed():
    ds = data_lib.sasrec_train_dataset(data, **shape)
    batches = [{k: v.numpy() for k, v in b.items()} for b in ds.take(args.num_batches)]
  else:
    batches = batches_lib.sasrec_batches(data, **shape, num_batches=args.num_batches, rng="numpy")
    batches = list(batches)
  inputs = np.stack([b["inputs"] for b in batches])
  targets = np.stack([b["targets"] for b in batches])
  # windows [B, L + 1] of the paper code: inputs followed by the last target.
  windows = np.concatenate([inputs, targets[:, :, -1:]], axis=2)
  if not np.array_equal(np.where(inputs != 0, windows[:, :, 1:], 0), targets):
    raise AssertionError("the pipeline's targets are not the next items of its inputs")
  return inputs, targets, windows, data


def run_config(spec: dict, cfg: SideConfig, **settings):
  """The `train.config.RunConfig` of one configuration on the ML-1M workload (both binaries'
  sides), plus ``settings``."""
  from train.config import RunConfig

  return RunConfig.create(
    dataset="ml1m",
    data_path=spec["data_path"],
    model="sasrec",
    loss="sampled_softmax",
    negatives="mixed",
    num_negatives=256,
    uniform_negatives=cfg.uniform,
    logq=spec["logq"],
    sasrec_block=cfg.block,
    frequency=cfg.estimator,
    batch_size=spec["batch_size"],
    max_len=spec["max_len"],
    jit_compile=cfg.xla,
    **({"sasrec_attention_blocks": cfg.attention_blocks} if cfg.attention_blocks else {}),
    dropout=spec["dropout"],
    seed=spec["seed"],
    steps_per_epoch=1,
    model_dir=tempfile.mkdtemp(prefix="bench_step_"),
    progress=False,
    **settings,
  )


def setup(spec: dict, cfg: SideConfig, arrays):
  """`bench.step.keras3_side.setup`'s (run, peak, info, profiler) of one of our (tf-keras)
  configurations: a `train.trainer.Trainer`; TensorFlow is imported and set up."""
  import tensorflow as tf

  from bench.step.peaks import matmul_peak_tf
  from bench.step.profiler import Profiler
  from train import data as data_lib
  from train.trainer import Trainer

  data = data_lib.load("ml1m", spec["data_path"])
  settings = dict(frequency_buckets=spec["buckets"], jit_compile_step=cfg.step_xla)
  trainer = Trainer(run_config(spec, cfg, sasrec_pack_tokens=cfg.pack, **settings), data=data)
  if cfg.no_loss:
    remove_scoring_and_loss(trainer)
  if cfg.xla_part:
    compile_separately(trainer, cfg.xla_part)
  pairs = zip(arrays["inputs"], arrays["targets"])
  batches = [dict(inputs=tf.constant(x), targets=tf.constant(y)) for x, y in pairs]

  run = lambda i: tuple(float(t) for t in trainer.train_step(batches[i]))
  info = dict(framework=f"tensorflow {tf.__version__}")
  return run, matmul_peak_tf, info, lambda: Profiler(trainer, batches)


def remove_scoring_and_loss(trainer) -> None:
  """The ``noloss`` bound: the objective's per-query loss becomes -<q_a, c_{p_a}> (no negatives
  are drawn or scored, no log Q is read); the encoder, its gradient, the embedding lookups, the
  padding mask and Adam are the real step's."""
  from tfrs_logq.tf_keras import losses

  import tensorflow as tf

  objective = trainer.objective

  def per_query_loss(q, pos_ids, seq_ids, seed, valid=None):
    score = tf.reduce_sum(q * objective.model.item_embeddings(pos_ids), axis=-1)
    return losses.LossOutput(-score, tf.ones_like(score), tf.zeros_like(score, tf.int32))

  objective.per_query_loss = per_query_loss


_PAD_ROWS = 3200  # ceil(B L / 8) for the ML-1M batch: the encoder's capacity step


def compile_separately(trainer, part: str) -> None:
  """The ``xla_loss`` / ``xla_objective`` experiments: the sampled loss (``loss``), or the
  negatives' sampling and scoring and the loss (``objective``), as one XLA program on the A rows
  zero-padded to a multiple of `_PAD_ROWS` (padding rows have positive id 0: masked by the
  objective's static-shape path, and sliced off)."""
  from tfrs_logq.tf_keras import losses

  import tensorflow as tf

  objective = trainer.objective

  def pad(x, rows):
    return tf.pad(x, [[0, rows - tf.shape(x)[0]]] + [[0, 0]] * (x.shape.rank - 1))

  def rows_of(x):
    a = tf.shape(x)[0]
    return a, (a + _PAD_ROWS - 1) // _PAD_ROWS * _PAD_ROWS

  if part == "objective":
    per_query_loss = objective.per_query_loss
    compiled = tf.function(
      lambda q, p, s, seed: tuple(per_query_loss(q, p, s, seed, valid=tf.not_equal(p, 0))),
      jit_compile=True,
    )

    def padded_objective(q, pos_ids, seq_ids, seed, valid=None):
      if valid is not None:
        raise ValueError("xla_objective runs on the dynamic-shape step only")
      a, c = rows_of(q)
      out = compiled(pad(q, c), pad(pos_ids, c), pad(seq_ids, c), seed)
      return losses.LossOutput(*(t[:a] for t in out))

    objective.per_query_loss = padded_objective
  elif part == "loss":
    loss_layer = objective.loss
    compiled = tf.function(lambda *args: tuple(loss_layer(*args)), jit_compile=True)

    def padded_loss(s_p, s_n, log_q, pos_log_q, valid_mask):
      a, c = rows_of(s_p)
      log_q = pad(log_q, c) if log_q.shape.rank == 2 else log_q
      out = compiled(pad(s_p, c), pad(s_n, c), log_q, pad(pos_log_q, c), pad(valid_mask, c))
      return losses.LossOutput(*(t[:a] for t in out))

    objective.loss = padded_loss
  else:
    raise ValueError(f"unknown part {part!r}")
