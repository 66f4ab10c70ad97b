"""TensorBoard event files read back by TensorFlow's own reader (``summary_iterator``), the
independent check of what `train.summaries` writes: used by every test that reads a run's
summaries."""

import pathlib
from typing import Dict, Set, Tuple

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import tensorflow as tf


def read_scalars(directory) -> Tuple[Dict[str, Dict[int, float]], Set[str]]:
  """({tag: {step: value}}, the plugin names) of every events.out.tfevents.* in ``directory``."""
  found: Dict[str, Dict[int, float]] = {}
  plugins: Set[str] = set()
  for path in sorted(pathlib.Path(directory).glob("events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(str(path)):
      for value in event.summary.value:
        found.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
        plugins.add(value.metadata.plugin_data.plugin_name)
  return found, plugins
