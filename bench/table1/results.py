"""`python -m bench.table1.results RUN_DIR`: `bench.analysis.runs.write_binary_test_results`, the
launcher's last command of a run that evaluates test itself, under the name that pinned checkouts
and the commands recorded in run.json use."""

import argparse
import pathlib

from bench.analysis.runs import write_binary_test_results

if __name__ == "__main__":
  parser = argparse.ArgumentParser(
    description="RUN_DIR/eval/eval_results.json from the run's test metrics."
  )
  parser.add_argument("run_dir", type=pathlib.Path)
  write_binary_test_results(parser.parse_args().run_dir)
