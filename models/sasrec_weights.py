"""SASRec's weights as named numpy arrays, one layout for both twins: move a model between the
tf-keras SASRec (`models.sasrec`) and the Keras 3 SASRec (`models.keras3.sasrec`).

The twins hold their weights in sublayers of the same names, each with the same weights in the
same order (what `get_weights` returns). `sublayers` lists them, in one order:

    input_embedding, position_embedding, [output_embedding: absent when tied],
    block{i}.{ln1, ln2, ffn1, ffn2, query, kv}              (block_style="reference")
    block{i}.{ln1, ln2, ffn1, ffn2, attention.qkv, attention.out}   (block_style="pre_ln")
    final_norm

`get_arrays` reads a built model into ``{name: [arrays]}``; `set_arrays` writes them into a built
model of the same settings (every name present, every shape equal, or a ValueError naming the
sublayer). Plain Python: the model's own ``get_weights`` / ``set_weights`` do the framework work.

Use: start a Keras 3 run from the tf-keras model's initial weights (bench/keras3_trajectory.py),
or carry a trained tf-keras encoder to Keras 3 (``np.savez`` the arrays, load them there).
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

__all__ = ["get_arrays", "set_arrays", "sublayers", "to_npz", "from_npz"]

_BLOCK_LAYERS = {
  "reference": ("ln1", "ln2", "ffn1", "ffn2", "query", "kv"),
  "pre_ln": ("ln1", "ln2", "ffn1", "ffn2", "attention.qkv", "attention.out"),
}


def sublayers(model) -> List[Tuple[str, object]]:
  """(name, layer) of every weight-holding sublayer of either SASRec twin, in the order above."""
  if model.block_style not in _BLOCK_LAYERS:
    raise ValueError(f"unknown block_style {model.block_style!r}; known: {sorted(_BLOCK_LAYERS)}")
  out = [
    ("input_embedding", model.input_embedding),
    ("position_embedding", model.position_embedding),
  ]
  if not model.tie_embeddings:
    out.append(("output_embedding", model.output_embedding))
  for i, block in enumerate(model.blocks):
    for name in _BLOCK_LAYERS[model.block_style]:
      layer = block
      for part in name.split("."):
        layer = getattr(layer, part)
      out.append((f"block{i}.{name}", layer))
  out.append(("final_norm", model.final_norm))
  return out


def get_arrays(model) -> Dict[str, List[np.ndarray]]:
  """``{sublayer name: its weights as numpy arrays}`` of a built SASRec (either twin)."""
  return {name: [np.asarray(w) for w in layer.get_weights()] for name, layer in sublayers(model)}


def set_arrays(model, arrays: Dict[str, Sequence[np.ndarray]]) -> None:
  """Writes ``arrays`` (`get_arrays`' layout, from either twin) into a built SASRec."""
  layers = sublayers(model)
  missing = sorted({name for name, _ in layers} - set(arrays))
  extra = sorted(set(arrays) - {name for name, _ in layers})
  if missing or extra:
    raise ValueError(
      f"SASRec weights do not match this model's sublayers: missing {missing}, "
      f"unexpected {extra} (block_style={model.block_style!r}, "
      f"tie_embeddings={model.tie_embeddings})"
    )
  for name, layer in layers:
    current, given = layer.get_weights(), [np.asarray(w) for w in arrays[name]]
    shapes = [tuple(w.shape) for w in current], [tuple(w.shape) for w in given]
    if shapes[0] != shapes[1]:
      raise ValueError(
        f"SASRec sublayer {name}: this model's weights have shapes {shapes[0]}, "
        f"the given ones {shapes[1]}"
      )
    layer.set_weights([w.astype(c.dtype) for c, w in zip(current, given)])


def to_npz(path: str, arrays: Dict[str, Sequence[np.ndarray]]) -> None:
  """Saves `get_arrays`' output as one npz (``NAME/K``: the K-th weight of sublayer NAME)."""
  np.savez(path, **{f"{name}/{k}": w for name, ws in arrays.items() for k, w in enumerate(ws)})


def from_npz(path: str) -> Dict[str, List[np.ndarray]]:
  """The arrays `to_npz` saved."""
  with np.load(path) as f:
    keys = sorted(f.files, key=lambda key: (key.rsplit("/", 1)[0], int(key.rsplit("/", 1)[1])))
    out: Dict[str, List[np.ndarray]] = {}
    for key in keys:
      out.setdefault(key.rsplit("/", 1)[0], []).append(f[key])
  return out
