"""Query models in Keras 3 (``keras`` / ``keras.ops`` only; JAX, TensorFlow, PyTorch): the twins
of the tf-keras `models` (so far SASRec: `models.keras3.sasrec`, its blocks in
`models.keras3.sasrec_blocks`, its attention in `models.keras3.sasrec_ops`).

``import models.keras3`` loads neither TensorFlow nor tf-keras (`models/__init__.py` loads the
tf-keras models lazily)."""

from models.keras3.sasrec import BLOCK_STYLES, SASRec, TrainingQueries

__all__ = ["BLOCK_STYLES", "SASRec", "TrainingQueries"]
