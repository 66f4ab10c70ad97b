"""The SASRec training step under benchmark, shared by bench/train_speed.py and bench/step_trace.py:
`configs` (our configurations by name, the step's model FLOPs), `ours` (our side: the ML-1M batches
and a `train.trainer.Trainer` per configuration), `profiler` (the pieces of our step), `worker`
(a side's subprocess and the parent's handle on it) and `report` (train_speed's tables)."""
