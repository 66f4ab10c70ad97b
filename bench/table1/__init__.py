"""`python -m bench.table1.results RUN_DIR` (the launcher's command, in run.json records)."""
