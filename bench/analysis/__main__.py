"""``python -m bench.analysis``: the analysis commands (`bench.analysis.cli`)."""

import sys

from bench.analysis.cli import main

sys.exit(main())
