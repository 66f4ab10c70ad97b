"""Query models of tfrs_logq: SASRec (sequential; its blocks in `models.sasrec_blocks`, its
dropout and execution paths in `models.sasrec_ops`) and a TFRS two-tower model.

Both implement the interface of `models.queries` (``training_queries`` -> `TrainingQueries`,
``query_embeddings``, ``serving_queries``, ``item_embeddings``, ``all_item_embeddings``,
``build_all``); the losses live in `tfrs_logq.losses`.
"""

from models.queries import TrainingQueries
from models.sasrec import BLOCK_STYLES, SASRec
from models.two_tower import TwoTower

__all__ = ["TrainingQueries", "SASRec", "TwoTower", "BLOCK_STYLES"]
