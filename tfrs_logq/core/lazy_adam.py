r"""LazyAdam's per-row update, written once for both fronts.

For row r of a table, g_r its gradient in the step, k_r the number of steps that have updated
it (this one included), η the learning rate, β1, β2, ε as in Adam:

    k_r ← k_r + 1
    m_r ← β1 m_r + (1 − β1) g_r
    v_r ← β2 v_r + (1 − β2) g_r²
    θ_r ← θ_r − δ_r,    δ_r = η · sqrt(1 − β2^{k_r}) / (1 − β1^{k_r}) · m_r / (sqrt(v_r) + ε̂)

with ε̂ = ε, or ε · sqrt(1 − β2^{k_r}) when ``adaptive_epsilon`` (tf-keras's Adam form with the
row's own count). Rows not in the step keep θ_r, m_r, v_r and k_r.

`update_rows` evaluates this on the rows given (m, v [n, ...], k [n], g [n, ...]): the tf-keras
front passes the gathered rows of a sparse gradient. With ``rows`` (bool [n]) it evaluates it
on every row and keeps the old m, v, k (and δ = 0) where ``rows`` is False, with static shapes
(``ops.where``, no gather): the Keras 3 front passes a whole table and the mask of its rows
whose gradient is not all zero, so the update compiles under ``jax.jit``.
"""

from typing import Optional, Tuple

from tfrs_logq.core.ops import Ops, Tensor

__all__ = ["update_rows", "nonzero_rows"]


def _expand_to(ops: Ops, x: Tensor, rank: int) -> Tensor:
  """x [n] -> [n, 1, ..., 1] of the given rank (broadcasts against a row-major table)."""
  for _ in range(rank - 1):
    x = ops.expand_dims(x, -1)
  return x


def nonzero_rows(ops: Ops, g: Tensor) -> Tensor:
  """bool [n]: the rows of g [n, ...] with at least one nonzero entry."""
  nonzero = ops.not_equal(g, ops.zeros_like(g))
  if len(g.shape) == 1:
    return nonzero
  flat = ops.reshape(ops.cast(nonzero, "int32"), (g.shape[0], -1))
  return ops.not_equal(ops.max(flat, axis=1), 0)


def update_rows(
  ops: Ops,
  m: Tensor,
  v: Tensor,
  k: Tensor,
  g: Tensor,
  learning_rate: Tensor,
  beta_1: Tensor,
  beta_2: Tensor,
  epsilon: Tensor,
  adaptive_epsilon: bool = False,
  rows: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
  """(m', v', k', δ) of the module docstring (θ' = θ − δ); ``rows`` (bool [n] or None = all):
  the rows updated, the others keep m, v, k and get δ = 0. learning_rate, beta_1, beta_2 and
  epsilon: scalars of the table's dtype (or Python floats)."""
  rank = len(g.shape)
  k_new = k + 1
  m_new = beta_1 * m + (1 - beta_1) * g
  v_new = beta_2 * v + (1 - beta_2) * ops.square(g)
  k_b = _expand_to(ops, k_new, rank)
  correction_2 = ops.sqrt(1 - ops.power(beta_2, k_b))
  alpha = learning_rate * correction_2 / (1 - ops.power(beta_1, k_b))
  eps = epsilon * correction_2 if adaptive_epsilon else epsilon
  delta = alpha * m_new / (ops.sqrt(v_new) + eps)
  if rows is None:
    return m_new, v_new, k_new, delta
  rows_b = _expand_to(ops, rows, rank)
  return (
    ops.where(rows_b, m_new, m),
    ops.where(rows_b, v_new, v),
    ops.where(rows, k_new, k),
    ops.where(rows_b, delta, ops.zeros_like(delta)),
  )
