"""Query models of tfrs_logq: SASRec (sequential; its blocks in `models.sasrec_blocks`, its
dropout and execution paths in `models.sasrec_ops`) and a TFRS two-tower model.

Both implement the interface of `models.queries` (``training_queries`` -> `TrainingQueries`,
``query_embeddings``, ``serving_queries``, ``item_embeddings``, ``all_item_embeddings``,
``build_all``); the losses live in `tfrs_logq.tf_keras.losses`. The Keras 3 twins are in
`models.keras3`.

The tf-keras models load on first use (``from models import SASRec`` works as before), so that
``import models.keras3`` does not load TensorFlow or tf-keras.
"""

_EXPORTS = {
  "TrainingQueries": "models.queries",
  "SASRec": "models.sasrec",
  "BLOCK_STYLES": "models.sasrec",
  "TwoTower": "models.two_tower",
}

__all__ = ["TrainingQueries", "SASRec", "TwoTower", "BLOCK_STYLES"]


def __getattr__(name):
  if name in _EXPORTS:
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)
  raise AttributeError(f"module 'models' has no attribute {name!r}")
