"""``python -m bench.step``: the step benchmark (`bench.step.cli`)."""

from bench.step.cli import main

main()
