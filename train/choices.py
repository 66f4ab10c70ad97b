"""Vocabularies of run settings whose implementations import TensorFlow.

`train.config` (the flags of `python -m train` and `python -m train.keras3`) reads them from
here, so that the Keras 3 binary starts where TensorFlow is not installed; the modules that
implement them (`train.distribute`, `train.objective`) import them from here too.
"""

__all__ = ["NEGATIVES", "PS_MIN_SHARD_BYTES", "STRATEGIES"]

STRATEGIES = ("default", "mirrored", "multi_worker", "tpu", "parameter_server")
"""--strategy: tf.distribute strategies of `python -m train` (`train.distribute`)."""

PS_MIN_SHARD_BYTES = 256 << 10
"""Default smallest shard of a partitioned variable (TensorFlow's own MinSizePartitioner
default)."""

NEGATIVES = ("uniform", "in_batch", "mixed", "midx")
"""--negatives: the samplers of the training step (`train.objective.build_sampler`)."""
