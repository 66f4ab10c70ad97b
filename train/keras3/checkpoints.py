"""Checkpoints of the Keras 3 binary: every variable's value in one ``.npz``, any backend.

A checkpoint holds, in one file written atomically (temporary file + rename), the values of a
list of ``keras.Variable``s (the model's: weights, the samplers' and dropouts' seed states, the
frequency estimator's state; the optimizer's: iteration count, moments) under their index, their
paths (for reading; restore checks the count and shapes), and a JSON ``state`` (epoch, step,
best NDCG@10, ...). Restoring
assigns every value back, so a run resumed from the checkpoint of an epoch's end continues with
exactly the state it had.

    save(directory, step, variables, state, keep=3)   -> path of ckpt-<step>.npz
    latest(directory)                                  -> that path or None
    restore(path, variables)                           -> state (ValueError if they differ)
"""

from __future__ import annotations

import glob
import json
import os
import re
from typing import Optional, Sequence

import numpy as np
from keras import ops

__all__ = ["latest", "restore", "save", "save_values", "restore_values"]

_NAME = re.compile(r"ckpt-(\d+)\.npz$")


def save_values(path: str, variables: Sequence, state: Optional[dict] = None) -> str:
  """Writes the values of ``variables`` (and ``state``) to ``path`` atomically."""
  arrays = {f"v{i}": np.asarray(ops.convert_to_numpy(v.value)) for i, v in enumerate(variables)}
  arrays["paths"] = np.array(json.dumps([v.path for v in variables]))
  arrays["state"] = np.array(json.dumps(state or {}))
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = path + ".tmp.npz"
  np.savez(tmp, **arrays)
  os.replace(tmp, path)
  return path


def restore_values(path: str, variables: Sequence) -> dict:
  """Assigns the values saved in ``path`` to ``variables``; returns the saved state.

  Raises:
    ValueError: the checkpoint holds other variables (another configuration).
  """
  with np.load(path, allow_pickle=False) as f:
    paths = json.loads(str(f["paths"]))
    if len(paths) != len(variables):  # (paths may differ by Keras's auto-numbered names)
      raise ValueError(
        f"{path} was written by another model or configuration ({len(paths)} "
        f"variables, this one has {len(variables)}); use a new --model_dir"
      )
    values = [f[f"v{i}"] for i in range(len(variables))]
    state = json.loads(str(f["state"]))
  for v, value in zip(variables, values):
    if tuple(v.shape) != value.shape:
      raise ValueError(
        f"{path}: {v.path} has shape {value.shape}, the model {tuple(v.shape)}; "
        "use a new --model_dir"
      )
  for v, value in zip(variables, values):
    v.assign(value)
  return state


def _numbered(directory: str):
  found = []
  for path in glob.glob(os.path.join(directory, "ckpt-*.npz")):
    m = _NAME.search(path)
    if m:
      found.append((int(m.group(1)), path))
  return sorted(found)


def save(directory: str, step: int, variables: Sequence, state: dict, keep: int = 3) -> str:
  """Writes ``directory/ckpt-<step>.npz`` and keeps the ``keep`` newest checkpoints."""
  path = save_values(os.path.join(directory, f"ckpt-{step}.npz"), variables, state)
  for _, old in _numbered(directory)[:-keep]:
    os.remove(old)
  return path


def latest(directory: str) -> Optional[str]:
  """The newest checkpoint in ``directory`` (highest step), or None."""
  found = _numbered(directory)
  return found[-1][1] if found else None


def restore(path: str, variables: Sequence) -> dict:
  """`restore_values` (the state saved with the checkpoint)."""
  return restore_values(path, variables)
