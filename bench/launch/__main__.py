"""``python -m bench.launch``: the launcher (`bench.launch.cli`)."""

from bench.launch.cli import run

run()
