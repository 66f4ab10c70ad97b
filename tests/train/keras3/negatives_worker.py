"""The Keras 3 objective's negatives for fixed batches, in a fresh Keras 3 process.

    KERAS_BACKEND=jax python negatives_worker.py CASES.json BATCHES.npz OUT.npz

Spawned by test_negatives.py (no TF_USE_LEGACY_KERAS). For each case (RunConfig settings, a
batch name, the catalog's item counts) it builds `train.keras3.objective.RetrievalModel` as the
binary does and writes ``RetrievalModel.candidates`` of the batch's B L positions (ids, log Q,
valid (empty when None), positive log Q, the blocks' layouts), the block-by-block scores of
``RetrievalModel.score`` beside ``score_negatives`` on the negatives' embeddings formed in full,
and the queries' positives / rows / valid.
"""

import json
import sys
import types

import numpy as np


def main(cases_path, batches_path, out_path):
  # The application's config (tf-keras stack) first, then keras (test_binary's export_worker).
  from train.config import RunConfig

  # isort: split
  import keras
  from keras import ops

  from tfrs_logq.keras3 import negatives as neg_lib
  from train.keras3 import objective

  with open(cases_path) as f:
    cases = json.load(f)
  batches = np.load(batches_path)
  out = {"backend": np.array(keras.backend.backend())}
  for name, case in cases.items():
    cfg = RunConfig.create(**case["settings"])
    counts = np.asarray(case["counts"], np.float64)
    data = types.SimpleNamespace(num_items=len(counts) - 1, item_counts=counts)
    encoder = objective.build_encoder(cfg, data.num_items)
    estimator = objective.build_estimator(cfg, data)
    model = objective.RetrievalModel(cfg, encoder, estimator, name="retrieval")
    batch = {k: batches[f"{case['batch']}_{k}"].astype(np.int32) for k in ("inputs", "targets")}
    tq = encoder.training_queries(batch, training=False)
    pos_emb = encoder.item_embeddings(tq.positive_ids)
    candidates = model.candidates(tq, pos_emb, batch_size=batch["targets"].shape[0])
    negatives = candidates.negatives
    scored = model.score(tq.queries, tq.positive_ids, pos_emb, candidates)
    # the reference: score_negatives on the negatives' embeddings, formed in full
    full = neg_lib.score_negatives(
      tq.queries,
      tq.positive_ids,
      pos_emb,
      negatives._replace(embeddings=encoder.item_embeddings(negatives.ids)),
      temperature=cfg.temperature,
    )
    numpy = lambda x: np.asarray(ops.convert_to_numpy(x))
    out.update(
      {
        f"{name}/ids": numpy(negatives.ids),
        f"{name}/log_q": numpy(negatives.log_q),
        f"{name}/valid": (
          np.zeros((0,), bool) if negatives.valid is None else numpy(negatives.valid)
        ),
        f"{name}/positive_log_q": numpy(negatives.positive_log_q),
        f"{name}/scores": numpy(scored.negative_scores),
        f"{name}/full_scores": numpy(full.negative_scores),
        f"{name}/valid_mask": numpy(scored.valid_mask),
        f"{name}/full_valid_mask": numpy(full.valid_mask),
        f"{name}/positive_scores_diff": np.array(
          float(np.max(np.abs(numpy(scored.positive_scores) - numpy(full.positive_scores))))
        ),
        f"{name}/blocks": np.array([layout for layout, _ in candidates.blocks]),
        f"{name}/positive_ids": numpy(tq.positive_ids),
        f"{name}/rows": numpy(tq.sequence_ids),
        f"{name}/query_valid": numpy(tq.valid),
        f"{name}/split": np.array(objective.negatives_split(cfg)),
      }
    )
  np.savez(out_path, **out)


if __name__ == "__main__":
  main(*sys.argv[1:])
