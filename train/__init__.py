"""The training application: `python -m train` (console script tfrs-logq-train).

Modules: ``config`` (`RunConfig`, every setting of a run) and ``config_flags`` (absl flags generated
from configuration dataclasses), ``data`` (datasets, splits, pipelines, padding, `DataConfig`),
``trainer`` (strategy, model, estimator, checkpoints, the loop), ``objective`` (the loss of a step,
composed of `tfrs_logq` objects), ``validation`` (exact Recall/NDCG each epoch), ``export``
(serving SavedModels + metadata), ``distribute`` (tf.distribute strategies).
"""

# The application's tf-keras modules need TF_USE_LEGACY_KERAS=1 before TensorFlow loads; set it
# here without importing TensorFlow (`train.config` and the Keras 3 binary import only the
# framework-free `tfrs_logq.core`, so they run where TensorFlow is not installed).
import tfrs_logq._keras_env

tfrs_logq._keras_env.prefer_legacy_keras()
