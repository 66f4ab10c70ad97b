"""Worker of test_mixed_precision.py (a fresh Keras 3 process): the same trainer with
--mixed_precision=float32 and =bfloat16 for 3 steps; prints JSON with the dtypes of a block's
compute and weights, of the training queries and item embeddings, each step's loss, and the
global policy after each build."""

import json
import sys

from train.keras3 import settings

settings.select_backend()

import keras  # noqa: E402
import numpy as np  # noqa: E402

from train import config_flags  # noqa: E402
from train.config import RunConfig  # noqa: E402
from train.keras3 import trainer as trainer_lib  # noqa: E402


def main():
  out = {}
  for precision in ("float32", "bfloat16"):
    cfg = config_flags.parse(RunConfig, [*sys.argv[1:], f"--mixed_precision={precision}"])
    data = cfg.data.load()
    t = trainer_lib.Trainer(cfg, data=data, report=lambda line: None, shuffle_rng="numpy")
    policy_after = keras.config.dtype_policy().name
    dense = t.encoder.blocks[0].ffn1
    batch = next(iter(t.epoch_batches(0)))
    tq = t.encoder.training_queries(batch, training=False)
    items = t.encoder.item_embeddings(batch["targets"])
    t.begin_epoch(0)
    losses = [float(loss) for loss, _, _ in t.epoch_steps(0)]
    out[precision] = dict(
      compute=dense.compute_dtype,
      weights=str(dense.kernel.dtype),
      queries=keras.backend.standardize_dtype(tq.queries.dtype),
      items=keras.backend.standardize_dtype(items.dtype),
      query_values=np.asarray(keras.ops.convert_to_numpy(tq.queries), np.float64)[
        np.asarray(keras.ops.convert_to_numpy(tq.valid))
      ][:8].tolist(),
      losses=losses,
      policy_after=policy_after,
    )
  print("RESULT " + json.dumps(out))


if __name__ == "__main__":
  main()
