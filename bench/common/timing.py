"""Timing on a shared machine (bench/README.md): repeat, interleave the compared sides so that
drift from other jobs hits every side alike, report min and median."""

from __future__ import annotations

import statistics
import time
from typing import Callable, Dict, Hashable, List, Sequence, Tuple

__all__ = ["min_median", "rotated", "time_interleaved", "time_calls"]


def min_median(times: Sequence[float]) -> Tuple[float, float]:
  """(min, median) of repeated timings."""
  return min(times), statistics.median(times)


def rotated(sides: Sequence, round_index: int) -> list:
  """The order of the sides in round ``round_index``: rotated by one per round, so every side
  takes every position in turn."""
  sides = list(sides)
  k = round_index % len(sides)
  return sides[k:] + sides[:k]


def time_interleaved(
  run: Callable[[Hashable, int], object], sides: Sequence[Hashable], rounds: int, calls: int = 1
) -> Dict[Hashable, List[float]]:
  """{side: [seconds per call in each round]}: in round r every side, in `rotated` order, runs
  ``run(side, r)`` (which makes ``calls`` calls and waits for their results) once."""
  times: Dict[Hashable, List[float]] = {side: [] for side in sides}
  for r in range(rounds):
    for side in rotated(sides, r):
      start = time.perf_counter()
      run(side, r)
      times[side].append((time.perf_counter() - start) / calls)
  return times


def time_calls(fn: Callable[[], object], repeats: int) -> Tuple[float, float]:
  """(min, median) wall seconds of fn() over ``repeats`` calls, after one warm-up call."""
  fn()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return min_median(times)
