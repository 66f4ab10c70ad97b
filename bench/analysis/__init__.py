"""The analysis of finished runs (``python -m bench.analysis COMMAND``, `cli`): `compare` (two
arms on paired seeds, row by row), `band` (one run's learning curve against a band of runs),
`patience` (what a shorter early-stopping patience would have selected)."""
