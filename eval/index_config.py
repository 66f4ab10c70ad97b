"""The ScaNN index's settings (``IndexConfig``, flags of `python -m eval.evaluate`), apart from
`eval.index` so that reading them (`eval.config`, the bench's command builders) imports no
TensorFlow. What each setting does: `eval.index`."""

import dataclasses
from typing import Optional

import numpy as np

from train.config_flags import setting

__all__ = ["MODES", "IndexConfig"]

MODES = ("auto", "brute_force", "tree_ah")


@dataclasses.dataclass
class IndexConfig:
  """ScaNN parameters (None: chosen from the catalog size by ``resolve``); flags of
  `python -m eval.evaluate` (`train.config_flags`)."""

  mode: str = setting(
    "auto",
    "ScaNN mode: auto (brute force up to --brute_force_max_items "
    "items, tree + AH + reordering above), brute_force, tree_ah.",
    choices=MODES,
    flag="index_mode",
  )
  brute_force_max_items: int = setting(20_000, "auto mode: brute force up to this many items.")
  num_leaves: Optional[int] = setting(None, "ScaNN tree leaves (unset: about 2 sqrt(N)).")
  num_leaves_to_search: Optional[int] = setting(
    None, "Leaves probed per query (unset: leaves / 10)."
  )
  training_sample_size: Optional[int] = setting(
    None, "Tree / AH training sample (unset: min(N, 250k))."
  )
  dimensions_per_block: int = setting(2, "AH dimensions per 4-bit code.")
  anisotropic_quantization_threshold: float = setting(0.2, "AH anisotropic threshold eta.")
  reorder_k: Optional[int] = setting(None, "Candidates re-scored exactly (unset: max(10 k, 1000)).")
  training_threads: int = setting(0, "ScaNN training threads (0 = ScaNN's default).")

  def resolve(self, num_items: int, k: int) -> "IndexConfig":
    """Fills the defaults for a catalog of ``num_items`` and k neighbours.

    Defaults: num_leaves ≈ 2·sqrt(N); num_leaves_to_search = num_leaves / 10 (>= 1);
    training_sample_size = min(N, 250,000); reorder_k = max(10·k, 1,000), capped at N.
    """
    if self.mode not in MODES:
      raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
    if num_items < 1:
      raise ValueError("the catalog is empty")
    mode = self.mode
    if mode == "auto":
      mode = "brute_force" if num_items <= self.brute_force_max_items else "tree_ah"
    leaves = self.num_leaves or max(2, int(round(2 * np.sqrt(num_items))))
    leaves = min(leaves, num_items)
    search = self.num_leaves_to_search or max(1, leaves // 10)
    if search > leaves:
      raise ValueError(f"num_leaves_to_search={search} > num_leaves={leaves}")
    sample = min(num_items, self.training_sample_size or 250_000)
    reorder = min(num_items, self.reorder_k or max(10 * k, 1000))
    if self.dimensions_per_block < 1:
      raise ValueError("dimensions_per_block must be >= 1")
    if mode == "brute_force":  # tree / AH / reordering parameters do not apply
      return dataclasses.replace(
        self,
        mode=mode,
        num_leaves=None,
        num_leaves_to_search=None,
        training_sample_size=None,
        reorder_k=None,
      )
    return dataclasses.replace(
      self,
      mode=mode,
      num_leaves=leaves,
      num_leaves_to_search=search,
      training_sample_size=sample,
      reorder_k=reorder,
    )
