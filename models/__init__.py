"""Models of tfrs_logq: SASRec (sequential) and a TFRS two-tower model, plus their training losses.

Both models share the interface the training binary and the export use:
``query_embeddings(features, training, seed) -> [B, d]``, ``item_embeddings(ids) -> [..., d]``,
``all_item_embeddings() -> [num_items + 1, d]`` (row 0 = padding) and ``build_all()``.
"""

from models.sasrec import SASRec
from models.training_losses import (LOSSES, bce_loss, full_softmax_loss, gbce_beta, gbce_loss,
                                    sampled_softmax)
from models.two_tower import TwoTower

__all__ = ["SASRec", "TwoTower", "LOSSES", "bce_loss", "full_softmax_loss", "gbce_beta",
           "gbce_loss", "sampled_softmax"]
