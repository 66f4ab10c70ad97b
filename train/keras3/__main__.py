r"""Trains SASRec on Keras 3 (JAX, TensorFlow or PyTorch) with the corrected / standard / no logQ.

    python -m train.keras3 --backend=jax --dataset=ml100k --logq=corrected \
        --model_dir=/tmp/k3run --export_dir=/tmp/k3run/export

The run settings are `python -m train`'s (`train.config.RunConfig`: the same flags, help texts and
defaults; see --help), including the group only this binary reads (`train.keras3.config`: --backend,
--shuffle_rng, --compilation_cache, --seeds, --logqs): --backend (jax | tensorflow | torch; sets
KERAS_BACKEND before keras is imported). The model is the Keras 3 SASRec (`models.keras3`), the
loss, negatives and frequency estimators are the library's Keras 3 front (`tfrs_logq.keras3`); the
data and the validation metrics are the tf-keras binary's (`train.data`, `train.validation`), with
the batches built in numpy (`train.data.batches`) and a numpy exact search, so the binary needs no
TensorFlow: --shuffle_rng=tensorflow (default) draws each epoch's permutation as python -m train
does (the same batches for the same --seed; needs TensorFlow), --shuffle_rng=numpy with numpy
(another order; for machines without TensorFlow). Not available here (one `error:` line):
--model=two_tower, tf.distribute strategies (--loss sampled_softmax / full_softmax / bce / gbce,
--negatives in_batch / uniform / mixed / midx (--midx_codewords, the index refreshed at every
epoch's start, as python -m train) and --table_optimizer adam / lazy_adam are). --sasrec_pack_tokens
applies (the token index is computed on the host per batch; not under --strategy=mirrored);
--jit_compile_step and --host_allocator do not (the step is always one static-shape program on JAX;
--jit_compile asks for XLA on the tensorflow backend).

--model_dir holds a checkpoint per epoch (model, optimizer, frequency estimator, the samplers' and
dropouts' seed states, epoch, step, best NDCG@10, patience counter: `train.keras3.checkpoints`),
the best model (best/weights.npz), TensorBoard summaries (tensorboard/: train/loss,
train/mean_weight, val/recall@k, val/ndcg@k, as python -m train) and metrics.json; rerunning the
same command resumes exactly from the last finished epoch. --export_dir writes the query encoder
as query_encoder.keras (load it with `keras.saving.load_model` after `import models.keras3`) and
metadata.json; with --backend=tensorflow also `python -m train`'s serving SavedModels
(train/export.py: query_encoder/, item_embeddings/, item_embeddings.npy, export_meta.json), read
by `python -m eval.evaluate`.

Output (train/cli.py): a progress bar and one line per epoch on stdout, a `done:` line on stderr;
exit status 0 done, 1 a non-finite loss or gradient (training stops at that step; the last
finished epoch's checkpoint is kept and named), 2 bad input (one `error: ...` line), 3 paused by
--time_budget_minutes, 130 Ctrl-C (rerun the same command to resume from the last epoch).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Sequence

from train import cli
from train.keras3 import settings

cli.quiet_tensorflow()  # before TensorFlow is imported (it logs while it loads)
settings.select_backend()  # before keras is imported (it reads KERAS_BACKEND once)

from train import config_flags  # noqa: E402
from train.config import RunConfig  # noqa: E402
from train.data import batches  # noqa: E402
from train.data.records import SequenceData  # noqa: E402

config_flags.define_flags(RunConfig)
cli.declare_verbosity_flag()


def _say(line: str) -> None:
  print(line, flush=True)


def main(argv: Sequence[str]) -> None:
  del argv  # checked by cli.run
  with cli.bad_input():
    cfg = config_flags.from_flags(RunConfig)
    k3 = cfg.keras3
    settings.check_supported(cfg, k3.backend)
    if k3.shuffle_rng == "tensorflow" and not batches.tensorflow_installed():
      raise ValueError(
        "--shuffle_rng=tensorflow (python -m train's batch order) needs "
        "TensorFlow, which is not installed here; use --shuffle_rng=numpy"
      )
  # before Keras (and its backend) is imported: a missing or malformed data file, data that
  # contradicts the flags, is reported at once
  with cli.bad_input():
    data = cfg.data.load()
  import keras

  if keras.backend.backend() != k3.backend:
    cli.fail(
      f"keras was imported with backend {keras.backend.backend()} before --backend="
      f"{k3.backend} could be set",
      cli.EXIT_BAD_INPUT,
    )
  from train.keras3 import trainer as trainer_lib

  os.makedirs(cfg.model_dir, exist_ok=True)
  if k3.seeds:
    _run_seeds(cfg, data, trainer_lib)
    return
  with cli.bad_input():  # e.g. a checkpoint of another configuration in --model_dir
    trainer = trainer_lib.Trainer(cfg, data=data, report=_say, shuffle_rng=k3.shuffle_rng)
    trainer.restore()
  try:
    result = trainer.run(restore=False)
  except trainer_lib.NonFiniteError as e:
    cli.fail(
      f"{e} Rerunning the same command repeats these steps: change the settings (e.g. a "
      "lower --learning_rate) and train in a new --model_dir.",
      cli.EXIT_ERROR,
      e,
    )
  except KeyboardInterrupt:
    sys.stdout.flush()
    print(
      f"\ninterrupted at step {trainer.step}: the checkpoint of the last finished epoch "
      f"({trainer.epoch}) is kept; to resume, rerun the same command:\n  "
      f"{cli.command_line()}",
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
    f"done: {k3.backend}, step {result['global_step']}, best epoch "
    f"{result['best_epoch']}, val ndcg@10 {result['val']['ndcg@10']:.4f}, test ndcg@10 "
    f"{result['test']['ndcg@10']:.4f}",
    file=sys.stderr,
  )


def _run_seeds(cfg: RunConfig, data: SequenceData, trainer_lib: Any) -> None:
  """--seeds: the runs as one program (`train.keras3.seeds`); a line per finished run."""
  from train.keras3 import seeds as seeds_lib

  k3 = cfg.keras3
  with cli.bad_input():
    logqs = list(k3.logqs) or None
    seeds = seeds_lib.check_seeds(cfg, list(k3.seeds), k3.backend, logqs)
    runs = seeds_lib.SeedRuns(
      cfg,
      data,
      seeds,
      report=_say,
      make_trainer=lambda c, d, r, v: trainer_lib.Trainer(
        c, data=d, report=r, shuffle_rng=k3.shuffle_rng, logq_variants=v
      ),
      logqs=logqs,
    )
  try:
    results = runs.run()
  except trainer_lib.NonFiniteError as e:
    cli.fail(
      f"{e} (in the stack of seeds {','.join(map(str, seeds))}; every run keeps its "
      "last checkpoint)",
      cli.EXIT_ERROR,
      e,
    )
  for (logq, seed), result in zip(runs.runs, results):
    name = f"seed {seed}" if logq is None else f"{logq} seed {seed}"
    print(
      f"done: {name}, step {result['global_step']}, best epoch {result['best_epoch']}, "
      f"val ndcg@10 {result['val']['ndcg@10']:.4f}, test ndcg@10 "
      f"{result['test']['ndcg@10']:.4f}",
      file=sys.stderr,
    )


def run() -> None:
  """Console-script entry point."""
  config_flags.expose_in_help(__name__)
  cli.run(main)


if __name__ == "__main__":
  run()
