"""`python -m train.keras3`: SASRec trained on Keras 3 (JAX, TensorFlow or PyTorch) with the
Keras 3 front of the library (`tfrs_logq.keras3`), the same run settings as `python -m train`
(`train.config.RunConfig`) plus ``--backend``, the same data (`train.data`) and metrics
(`train.validation`).

Modules: `train.keras3.objective` (the loss: Keras 3 SASRec + negatives + sampled softmax),
`train.keras3.trainer` (epochs, validation, early stopping, checkpoints, export),
`train.keras3.checkpoints` (every variable in one npz), `train.keras3.finite` (the optimizer that
counts non-finite gradients), `train.summaries` (TensorBoard scalars, shared with python -m train),
`train.keras3.settings` (--backend, and the settings this path does not support),
`train.keras3.__main__` (the binary).
"""
