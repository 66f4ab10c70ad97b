"""Benchmarks: one script per claim, each printing a one-line summary last (bench/README.md).

Run as ``python -m bench.<script>`` or ``python bench/<script>.py`` from the repository root;
``bench.launch`` is also the console script ``tfrs-logq-launch``.
"""
