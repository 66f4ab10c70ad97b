"""`EvalConfig`: the settings of `python -m eval.evaluate` (its flags are generated from them).

The data settings are not here: evaluation takes the export's own `train.data.DataConfig`
(recorded in export_meta.json) and lets the data flags of `train.data.DataConfig` override it,
refusing data that differs from what the model was trained on (see eval/evaluate.py).

    EvalConfig(export_dir="runs/x/export", output_dir="runs/x/eval").to_flags()
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Tuple

from eval.index_config import IndexConfig
from train import config_flags
from train.config_flags import setting
from train.validation import FILTER_RATED

__all__ = ["EvalConfig"]


@dataclasses.dataclass
class EvalConfig:
  """What to evaluate and how (see module docstring); validated on construction."""

  export_dir: Optional[str] = setting(
    None,
    "Training export folder (query_encoder/, item_embeddings.npy, export_meta.json). Required.",
  )
  output_dir: Optional[str] = setting(None, "Where the JSON, markdown and PNG go. Required.")
  eval_split: str = setting("test", "Which held-out split to score.", choices=("test", "val"))
  eval_npz: Optional[str] = setting(
    None,
    "Evaluate on a custom file instead of the export's dataset: inputs int [Q, L] "
    "(left-padded full histories), targets int [Q], optional item_counts [num_items + 1].",
  )
  filter_rated: str = setting(
    "all",
    "Rated-item filtering: all (every input item is removed, the target too when it "
    "occurs in the input: the paper's protocol) or except_target (the target never is).",
    choices=FILTER_RATED,
  )
  ks: Tuple[int, ...] = setting((10, 20, 100), "Cut-offs k.")
  batch_size: int = setting(512, "Queries per encoder call.")
  max_queries: int = setting(0, "Evaluate only the first N queries (0 = all).")
  num_bins: int = setting(10, "Popularity bins (10 = deciles).")
  timing_repeats: int = setting(3, "Repeats of each timed search.")
  plot: bool = setting(True, "Write recall_by_popularity.png.")
  serving_dir: Optional[str] = setting(
    None,
    "Also export the ScaNN serving SavedModel (history -> top-k ids and scores, "
    "eval/serving.py) here, reload it and check it serves the same ids as the in-process "
    "index.",
  )
  serving_k: int = setting(10, "k of the serving SavedModel.")
  index: IndexConfig = dataclasses.field(default_factory=IndexConfig)

  def __post_init__(self):
    if isinstance(self.index, dict):
      self.index = IndexConfig(**self.index)
    config_flags.coerce(self)
    self.ks = tuple(sorted(set(self.ks)))
    if not self.ks or self.ks[0] < 1:
      raise ValueError(f"ks must be positive integers, got {self.ks}")
    for name in ("batch_size", "num_bins", "timing_repeats", "serving_k"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
    if self.max_queries < 0:
      raise ValueError(f"max_queries must be >= 0, got {self.max_queries}")

  def to_flags(self, *, exclude: Sequence[str] = (), only_changed: bool = False) -> list:
    """["--name=value", ...] that make `python -m eval.evaluate` build this configuration."""
    return config_flags.to_flags(self, exclude=exclude, only_changed=only_changed)
