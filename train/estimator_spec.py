"""The frequency estimator a run asks for: --frequency and its settings → (class name, arguments).

One mapping for both binaries: `python -m train` builds it from `tfrs_logq.tf_keras.frequency`,
`python -m train.keras3` from `tfrs_logq.keras3.frequency` (same class names and arguments).
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import numpy as np


def estimator_spec(cfg, num_items: int, item_counts) -> Tuple[str, Dict[str, Any]]:
  """(class name, constructor arguments) of the Q(d) estimator of ``cfg`` for ``num_items`` ids
  (padding id 0 included): exact training-set counts, or a streaming hash array / count-min
  sketch (its parameters are the --frequency_* / --hash_array_* / --count_min_* settings)."""
  n = int(num_items)
  if cfg.frequency == "exact":
    return "ExactCounts", dict(
      num_items=n,
      counts=np.asarray(item_counts),
      min_count=cfg.frequency_min_count,
      name="frequency",
    )
  buckets = cfg.frequency_buckets or max(1024, 4 * n)
  if cfg.frequency == "hash_array":
    return "HashArrayEstimator", dict(
      num_buckets=buckets,
      num_hashes=cfg.hash_array_hashes,
      alpha=cfg.hash_array_alpha,
      warmup=cfg.hash_array_warmup,
      pending_gap=cfg.hash_array_pending_gap,
      seed=_hash_seed(cfg),
      num_items=n,
      name="frequency",
    )
  if cfg.frequency == "count_min":
    return "CountMinSketch", dict(
      width=buckets,
      depth=cfg.count_min_depth,
      conservative=cfg.count_min_conservative,
      half_life=cfg.count_min_half_life,
      min_count=cfg.frequency_min_count,
      seed=_hash_seed(cfg),
      num_items=n,
      name="frequency",
    )
  raise ValueError(f"unknown --frequency {cfg.frequency!r}")


def build(frequency_module, cfg, data):
  """The estimator of ``cfg`` from ``frequency_module`` (tf-keras or Keras 3 front)."""
  name, kwargs = estimator_spec(cfg, data.num_items + 1, data.item_counts)
  return getattr(frequency_module, name)(**kwargs)


def _hash_seed(cfg) -> int:
  """The streaming estimators' hash seed: --frequency_seed, default --seed."""
  return cfg.seed if cfg.frequency_seed is None else cfg.frequency_seed
