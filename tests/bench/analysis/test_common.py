"""bench.analysis.common: the pieces the analysis commands share."""

import pytest

from bench.analysis import common
from eval import paired_stats


def test_paired_takes_its_margin_of_the_second_mean_on_the_common_seeds():
  first = {0: 0.30, 1: 0.32, 2: 0.31, 3: 0.50}
  second = {0: 0.29, 1: 0.30, 2: 0.30, 5: 0.90}  # seeds 3 and 5 pair with nothing
  d = common.paired(first, second, 0.02)
  assert d["seeds"] == [0, 1, 2]
  assert d["margin"] == pytest.approx(0.02 * (0.29 + 0.30 + 0.30) / 3)
  assert d == paired_stats.paired_difference(first, second, margin=d["margin"])
  assert common.paired(first, second, 0.0)["margin"] is None  # no margin: no equivalence


def test_values_keeps_the_runs_that_hold_the_metric():
  runs = {0: {"metrics": {"recall@20": 0.3}}, 1: {"metrics": {"ndcg@20": 0.1}}}
  assert common.values(runs, "recall@20") == {0: 0.3}


def test_number_formats():
  assert common.signed(0.01234) == "+0.0123" and common.signed(None) == "—"
  assert common.plain(0.01234) == "0.0123" and common.plain(None) == "—"
  assert common.interval([-0.01, 0.02]) == "[-0.0100, +0.0200]"
  assert common.mean_se(dict(mean=None, se=None)) == "—"
  assert common.mean_se(dict(mean=0.25, se=None)) == "0.2500"
  assert common.mean_se(dict(mean=0.25, se=0.01)) == "0.2500 ± 0.0100"
  assert common.mean_se(dict(mean=120.4, se=3.6), digits=0) == "120 ± 4"


def test_command_line_quotes_the_arguments():
  assert (
    common.command_line("band", ["--names=a,b", "--title=two words"])
    == "python -m bench.analysis band --names=a,b '--title=two words'"
  )


def test_write_makes_the_folder(tmp_path):
  out = common.write(tmp_path / "a" / "b", {"x.md": "x\n", "y.json": "{}"})
  assert (out / "x.md").read_text() == "x\n" and (out / "y.json").read_text() == "{}"
