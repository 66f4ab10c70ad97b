"""Helpers the benchmark scripts share: `timing` (min / median of repeats, interleaved rounds),
`memory` (resident set size and its peak, from /proc/self/status; the bytes of a layer's
variables), `report` (the one-line summary, markdown tables, GiB, the JSON file of a run, its
command and commit), `workers` (the reply protocol of a script's worker subprocesses, a worker
run to its end), `plot` (pyplot on Agg, a figure saved) and `zipf` (the Zipf popularity law)."""
