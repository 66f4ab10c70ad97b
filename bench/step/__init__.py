"""The SASRec training step under benchmark (``python -m bench.step``, bench/README.md):
`configs` (our configurations by name, the step's model FLOPs), `ours` (our side: the ML-1M
batches and a `train.trainer.Trainer` per configuration), `keras3_side` (the Keras 3 sides),
`peaks` (each framework's matmul peak), `profiler` (the pieces of our step), `trace` (where its
CPU time goes), `trees` (two source trees' steps), `worker` (a side's subprocess and the
parent's handle on it) and `report` (the tables)."""
