"""The parts of bench/world_scale.py (the synthetic world at 10^5-10^6 items, Keras 3 on JAX):
`rows` (the arms and the settings), `data` (the world, the chunked training streams, the oracle's
cache, the initial weights), `metrics` (KL, recall@k against the oracle, HR@k, calibration by
popularity decile, chunked over users in numpy float64), `training` (one arm's jitted step on
the library's samplers and losses, with sparse row updates; the interleaved step timing) and
`report` (tables, paired differences over seeds, the recall@k plot; corrected − standard
across the settings folders of a sweep).

Named `bench/world/`, not `bench/world_scale/`: a package of the script's own name would shadow
the script's module (`import bench.world_scale` would find the package).
"""
