"""The training application: `python -m train` (console script tfrs-logq-train).

Modules: ``config`` (`RunConfig`, every setting of a run) and ``config_flags`` (absl flags generated
from configuration dataclasses), ``data`` (datasets, splits, pipelines, padding, `DataConfig`),
``trainer`` (strategy, model, estimator, checkpoints, the loop), ``objective`` (the loss of a step,
composed of `tfrs_logq` objects), ``validation`` (exact Recall/NDCG each epoch), ``export``
(serving SavedModels + metadata), ``distribute`` (tf.distribute strategies).
"""
