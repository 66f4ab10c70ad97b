"""Exact filtered top-k over the whole catalog on the device, Keras 3 front.

`tfrs_logq.core.top_k`'s search (the formula, the chunking over items, the ties) compiled on the
backend (`tfrs_logq.keras3.compiled`) and called per query chunk; the same arguments, checks and
results as ``tfrs_logq.core.ranking.exact_top_k_np`` (the numpy search, the tests' oracle) and
the tf-keras ``tfrs_logq.tf_keras.top_k.exact_top_k``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence, Tuple

import keras
import numpy as np
import numpy.typing as npt
from keras import ops

from tfrs_logq.core import ranking
from tfrs_logq.core import top_k as top_k_lib
from tfrs_logq.keras3 import compiled
from tfrs_logq.keras3._tensors import Tensor

__all__ = ["exact_top_k"]


def exact_top_k(
  queries: npt.ArrayLike,
  item_embeddings: npt.ArrayLike,
  k: int,
  rated: Optional[ranking.History] = None,
  targets: Optional[npt.ArrayLike] = None,
  chunk_size: Optional[int] = None,
  max_chunk_scores: int = 1 << 25,
  item_chunk: Optional[int] = None,
) -> Tuple[np.ndarray, np.ndarray]:
  """(ids int64 [Q, k], scores float32 [Q, k]): the k best items 1..N by <q_u, c_d>, rated
  items (all but t_u with ``targets``) and padding removed, ties lower id first, -1 for empty
  slots. Arguments as ``tfrs_logq.tf_keras.top_k.exact_top_k`` (``item_chunk``: items per chunk)."""
  lay = top_k_lib.layout(
    queries, item_embeddings, k, rated, targets, chunk_size, item_chunk, max_chunk_scores
  )
  table = ops.convert_to_tensor(lay.table)
  fn = _compiled(keras.backend.backend(), k, lay.num_items, lay.item_chunk)
  return top_k_lib.run_layout(
    lay,
    lambda q, r: fn(ops.convert_to_tensor(q), table, ops.convert_to_tensor(r)),
    ops.convert_to_numpy,
  )


class _TorchOps:
  """``keras.ops`` for the torch backend (eager) with two replacements: a stable ``top_k``
  (``torch.topk`` orders ties arbitrarily) and ``scatter`` by ``index_put_`` (keras's torch
  scatter is ~100x slower here). Ties: the top k's value multiset is unique; when the k-th value
  is also tied outside the top k, the lowest ids among those ties are chosen (a running count
  of the ties along the row); the k are then ordered by (-value, id)."""

  def __getattr__(self, name: str) -> Any:
    return getattr(ops, name)

  @staticmethod
  def top_k(x: Tensor, k: int, sorted: bool = True) -> Tuple[Tensor, Tensor]:
    import torch

    del sorted
    x = ops.convert_to_tensor(x)
    values, idx = torch.topk(x, k, dim=-1)
    kth = values[:, -1:]
    ties = x == kth
    if bool(((values == kth).sum(-1) == ties.sum(-1)).all()):  # no tie across the cut
      idx, _ = torch.sort(idx, dim=-1)
    else:
      greater = x > kth
      need = k - greater.sum(-1, keepdim=True)
      chosen = greater | (ties & (torch.cumsum(ties.to(torch.int32), -1) <= need))
      idx = torch.nonzero(chosen)[:, 1].reshape(x.shape[0], k)
    values, order = torch.sort(torch.gather(x, 1, idx), dim=-1, descending=True, stable=True)
    return values, torch.gather(idx, 1, order)

  @staticmethod
  def scatter(indices: Tensor, values: Tensor, shape: Sequence[int]) -> Tensor:
    import torch

    indices = ops.convert_to_tensor(indices).long()
    values = ops.convert_to_tensor(values)
    out = torch.zeros(tuple(shape), dtype=values.dtype, device=values.device)
    return out.index_put_(tuple(indices.T), values, accumulate=True)


@functools.lru_cache(maxsize=None)
def _compiled(
  backend: str, k: int, num_items: int, item_chunk: int
) -> Callable[[Tensor, Tensor, Tensor], Tuple[Tensor, Tensor]]:
  namespace = _TorchOps() if backend == "torch" else ops
  return compiled.compile_function(
    functools.partial(
      top_k_lib.filtered_top_k, namespace, k=k, num_items=num_items, item_chunk=item_chunk
    )
  )
