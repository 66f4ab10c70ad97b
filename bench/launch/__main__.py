"""``python -m bench.launch``: the launcher (`bench.launch.cli`)."""

import sys

from bench.launch.cli import main

sys.exit(main())
