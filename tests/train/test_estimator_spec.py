"""train/estimator_spec.py: one mapping from --frequency to the estimator, for both fronts."""

import dataclasses

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import frequency

import numpy as np
import pytest

from train import estimator_spec
from train.config import RunConfig


@dataclasses.dataclass
class _Data:
  num_items: int = 9
  item_counts: np.ndarray = dataclasses.field(default_factory=lambda: np.arange(10.0))


@pytest.mark.parametrize(
  "name,cls",
  [
    ("exact", frequency.ExactCounts),
    ("hash_array", frequency.HashArrayEstimator),
    ("count_min", frequency.CountMinSketch),
  ],
)
def test_each_setting_builds_its_estimator_with_the_run_settings(name, cls):
  cfg = dataclasses.replace(RunConfig(), frequency=name, frequency_buckets=0, seed=3)
  est = estimator_spec.build(frequency, cfg, _Data())
  assert type(est) is cls and est.name == "frequency"
  kind, kwargs = estimator_spec.estimator_spec(cfg, 10, np.arange(10.0))
  assert kind == cls.__name__
  if name != "exact":
    assert kwargs["seed"] == 3 and kwargs["num_items"] == 10
    assert kwargs.get("num_buckets", kwargs.get("width")) == 1024  # max(1024, 4 * 10)


def test_unknown_setting_is_refused():
  with pytest.raises(ValueError, match="frequency"):  # RunConfig refuses it first
    dataclasses.replace(RunConfig(), frequency="nope")
  with pytest.raises(ValueError, match="unknown --frequency"):  # a config built otherwise
    estimator_spec.estimator_spec(
      type("Cfg", (), {"frequency": "nope", "frequency_buckets": 0})(), 10, None
    )
