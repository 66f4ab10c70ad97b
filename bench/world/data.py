r"""The world of bench/world_scale.py at 10^5-10^6 items: `eval.synthetic_world`, chunked: the
held-out users, the training streams, the initial weights and the oracle's cache (their seeds
and files: bench/README.md, section `world_scale.py`). Chunks are sized from a memory budget: a
chunk of c users holds about ``arrays`` [c, |D|] float64 arrays at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import time
from typing import Callable, NamedTuple

import numpy as np

from eval import synthetic_world as world_lib
from eval.demo import training as demo_training
from eval.demo.metrics import top_k


class WorldData(NamedTuple):
  world: world_lib.World
  eval_x: np.ndarray  # [U, f] held-out users
  popularity: np.ndarray  # [D] Q(d) = E_u P(d|u) over them
  bins: np.ndarray  # [D] popularity bin (0 = most popular tenth)
  oracle_top: np.ndarray  # int32 [U, k_max] the true top-k_max of every held-out user


class Stream(NamedTuple):
  user_features: np.ndarray  # [U_train, f]
  users: np.ndarray  # uint16 [steps, B]
  items: np.ndarray  # int32 [steps, B]
  counts: np.ndarray  # int64 [D] the stream's item counts (ExactCounts of the demo)


def chunk_users(num_items: int, arrays: int, memory_bytes: int) -> int:
  """Users per chunk: ``arrays`` [c, num_items] float64 arrays within ``memory_bytes``."""
  return max(1, int(memory_bytes // (arrays * 8 * num_items)))


def _cached(cache_dir, kind: str, fields: dict, compute: Callable[[], dict], log, what) -> dict:
  """The arrays of CACHE_DIR/KIND-KEY.npz (KEY: a short hash of ``fields``), else compute()'s,
  saved there (to a temporary name, then renamed: a killed run leaves no half file)."""
  key = hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()
  path = pathlib.Path(cache_dir) / f"{kind}-{key[:12]}.npz"
  if path.exists():
    with np.load(path) as f:
      return dict(f)
  start = time.time()
  arrays = compute()
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(path.name + ".tmp.npz")
  np.savez(tmp, **arrays)
  os.replace(tmp, path)
  log(f"  {what} ({time.time() - start:.0f} s)")
  return arrays


def prepare_world(settings, cache_dir, memory_bytes: int, log) -> WorldData:
  """The world, its held-out users, Q(d), the bins and the oracle's top-k_max (cached)."""
  s = settings
  world = world_lib.make_world(s.num_items, s.feature_dim, s.zipf, s.tau, s.world_seed)
  x = world_lib.held_out_users(world, s.eval_users, s.world_seed)
  k_max = max(s.ks)

  def compute():
    chunk = chunk_users(s.num_items, 3, memory_bytes)
    popularity = np.zeros(s.num_items)
    oracle_top = np.empty((s.eval_users, k_max), np.int32)
    for a in range(0, s.eval_users, chunk):
      p = world_lib.true_probabilities(world, x[a : a + chunk])
      popularity += p.sum(axis=0)
      oracle_top[a : a + chunk] = top_k(p, k_max)
    popularity /= s.eval_users
    bins = world_lib.popularity_bins(popularity, s.num_bins)
    return dict(popularity=popularity, bins=bins, oracle_top=oracle_top)

  what = f"world: oracle top-{k_max} of {s.eval_users} held-out users"
  return WorldData(world, x, **_cached(cache_dir, "world", s.world_fields(), compute, log, what))


def training_stream(world, num_users, steps, batch_size, seed, memory_bytes=1_500_000_000):
  """`eval.synthetic_world.training_stream` of ``seed``, drawn chunk by chunk of training users
  (bench/README.md), with uint16 users and the stream's item counts."""
  chunk = chunk_users(world.num_items, 4, memory_bytes)
  s = world_lib.training_stream(world, num_users, steps, batch_size, seed, chunk)
  counts = np.bincount(s.items.ravel(), minlength=world.num_items)
  return Stream(s.user_features, s.users.astype(np.uint16), s.items, counts)


def load_stream(world, settings, seed: int, cache_dir, memory_bytes: int, log) -> Stream:
  """`training_stream` of ``seed``, from the cache when it is there."""
  s = settings
  names = ("num_items", "feature_dim", "zipf", "tau", "world_seed", "train_users", "steps")
  fields = {n: getattr(s, n) for n in names} | dict(batch_size=s.batch_size, seed=seed)
  args = (world, s.train_users, s.steps, s.batch_size, seed, memory_bytes)
  compute = lambda: training_stream(*args)._asdict()
  what = f"stream of seed {seed}: {s.steps} x {s.batch_size} draws"
  return Stream(**_cached(cache_dir, "stream", fields, compute, log, what))


def initial_weights(settings, seed: int):
  """(W float32 [f, d], item table float32 [|D|, d + 1]): the demo's draws (bench/README.md)."""
  s = settings
  return demo_training.initial_weights(s.feature_dim, s.num_items, s.embedding_dim, seed)
