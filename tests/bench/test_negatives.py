"""bench/negatives.py end to end at a tiny size: every sampler side is timed (MIDX at each K and
both quantizers, the exact softmax sampling side that replaced bench/midx.py's), the step table
has in-batch, mixed and the two memory sides (bench.catalog.points' steps), the summary names the
MIDX K, catalog and step ratios, and the plot is written."""

import re

import pytest

from bench import negatives


@pytest.mark.parametrize("quantizer", ["pq", "rq"])
def test_negatives_runs_every_side(quantizer, tmp_path, capsys):
  negatives.main(
    [
      "--catalogs=500,2000",
      "--codewords=4,8",
      f"--quantizer={quantizer}",
      "--batch=16",
      "--k-u=8",
      "--dim=8",
      "--num-users=50",
      "--warmup=1",
      "--repeats=1",
      "--calls=1",
      f"--memory-slots={32 if quantizer == 'pq' else 0}",
      f"--out={tmp_path}",
    ]
  )
  out = capsys.readouterr().out
  header = next(line for line in out.splitlines() if line.lstrip().startswith("|D|"))
  assert header.split()[1:] == ["uniform", "in_batch", "mixed", "midx_K4", "midx_K8", "softmax"]
  summary = out.strip().splitlines()[-1]
  assert summary.startswith("SUMMARY") and f"quantizer={quantizer}" in out
  assert re.search(
    r"MIDX K=8 time x[\d.]+ from \|D\|=500 to 2000 vs x[\d.]+ from K=4 to 8", summary
  )
  assert re.search(r"exact softmax [\d.]+ -> [\d.]+ ms from \|D\|=500 to 2000", summary)
  for mode in ("ids", "embeddings") if quantizer == "pq" else ():
    assert re.search(rf"mixed\+memory\(32, {mode}\)/mixed step x[\d.]+", summary)
  for size in (500, 2000):
    assert re.search(rf"^ +{size} in_batch .* mixed .* ratio min x[\d.]+ median x", out, re.M)
  assert (tmp_path / "negatives_sampling.png").stat().st_size > 0


def test_softmax_side_is_one_call_per_round():
  calls = {"a": 0, "softmax": 0}
  fns = {side: (lambda side=side: calls.__setitem__(side, calls[side] + 1)) for side in calls}
  args = negatives.parse_args(["--warmup=2", "--repeats=3", "--calls=4"])
  times = negatives.time_sides(fns, args, calls={"softmax": 1})
  assert calls == {"a": 2 + 3 * 4, "softmax": 1 + 3 * 1}
  assert {side: len(t) for side, t in times.items()} == {"a": 3, "softmax": 3}
