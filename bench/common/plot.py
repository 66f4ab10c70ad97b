"""Figures of the benchmark scripts: pyplot on the file-only Agg backend, and a figure saved
(laid out, written, closed)."""

from __future__ import annotations

import pathlib
from typing import Any

__all__ = ["pyplot", "save"]


def pyplot() -> Any:
  """matplotlib.pyplot on the Agg backend (no display needed)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  return plt


def save(fig: Any, path: Any, dpi: int = 120, rect: Any = None) -> None:
  """Lays ``fig`` out (``tight_layout``, within ``rect`` if given), writes it to ``path`` (its
  folder created) and closes it."""
  fig.tight_layout(**({} if rect is None else {"rect": rect}))
  pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(path, dpi=dpi)
  pyplot().close(fig)
