"""Benchmarks: one script per claim, each printing a one-line summary last (bench/README.md).

Run as ``python -m bench.<script>`` or ``python bench/<script>.py`` from the repository root;
``bench.reproduce`` is also the console script ``tfrs-logq-reproduce``.
"""
