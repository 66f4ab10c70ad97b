"""The gradients of the LazyAdam tests (numpy only; shared by the test and its worker)."""

import numpy as np

LR, B1, B2, EPS = 0.01, 0.9, 0.999, 1e-7
ROWS, DIM, STEPS = 9, 3, 7


def case():
  """(table [9, 3], dense weight [3, 2], table gradients [7, 9, 3], dense gradients [7, 3, 2]):
  each step's table gradient is nonzero in a few rows (rows 7, 8 never; row 0 only at step 0;
  every row absent from some step), zero elsewhere."""
  rng = np.random.default_rng(0)
  table = rng.normal(size=(ROWS, DIM)).astype(np.float32)
  dense = rng.normal(size=(3, 2)).astype(np.float32)
  grads = np.zeros((STEPS, ROWS, DIM), np.float32)
  for t in range(STEPS):
    rows = rng.choice(np.arange(1, ROWS - 2), size=3, replace=False)
    grads[t, rows] = rng.normal(size=(3, DIM))
  grads[0, 0] = rng.normal(size=DIM)
  return table, dense, grads, rng.normal(size=(STEPS, 3, 2)).astype(np.float32)
