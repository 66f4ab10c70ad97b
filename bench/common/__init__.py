"""Helpers the benchmark scripts share: `timing` (min / median of repeats, interleaved rounds),
`memory` (resident set size and its peak, from /proc/self/status), `report` (the one-line
summary, markdown tables, GiB, the JSON file of a run) and `workers` (the reply protocol of a
script's worker subprocesses)."""
