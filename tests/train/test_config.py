"""train.config / train.config_flags: one declaration per setting -> flags, validation, records.

Pins down: every RunConfig setting is a flag with help text; parsing RunConfig.to_flags() gives
back the same configuration; choices come from the library's constants and the estimator defaults
from the library's constructors; bad values are refused once, naming the setting."""

import dataclasses
import inspect
import json
import os

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import frequency, losses
from tfrs_logq.tf_keras.negatives.in_batch import CONVENTIONS
from tfrs_logq.tf_keras.negatives.uniform import UNIFORM_PER

import numpy as np
import pytest
from absl import flags

from models.sasrec import BLOCK_STYLES
from train import config_flags, objective
from train import data as data_lib
from train.config import RunConfig
from train.config_flags import setting


def _fresh_flags(cls, argv=(), **kwargs):
  values = flags.FlagValues()
  config_flags.define_flags(cls, values, **kwargs)
  values(["prog", *argv])
  return values


def test_every_leaf_setting_is_a_flag_with_help_and_the_data_settings_are_nested():
  names = [leaf.flag for leaf in config_flags.leaves(RunConfig)]
  assert len(names) == len(set(names))
  values = _fresh_flags(RunConfig)
  for leaf in config_flags.leaves(RunConfig):
    assert leaf.flag in values and values[leaf.flag].help.endswith(leaf.help) and leaf.help
  data_fields = {f.name for f in dataclasses.fields(data_lib.DataConfig)}
  assert data_fields <= set(names)
  assert not data_fields & {f.name for f in dataclasses.fields(RunConfig)}


def test_to_flags_parses_back_to_the_same_config():
  cfg = RunConfig.create(
    dataset="movielens_raw",
    data_path="/x/u.data",
    split="temporal",
    model="two_tower",
    hidden_dims=[64, 32],
    use_user_id=True,
    negatives="uniform",
    loss="gbce",
    gbce_t=0.5,
    ratio_floor=1e-10,
    count_min_half_life=1000.0,
    progress=False,
    tpu=None,
  )
  assert config_flags.parse(RunConfig, cfg.to_flags()) == cfg
  changed = cfg.to_flags(only_changed=True)
  assert "--hidden_dims=64,32" in changed and "--noprogress" not in changed
  assert "--progress=false" in changed and "--ratio_floor=1e-10" in changed
  assert not any(f.startswith("--batch_size=") for f in changed)  # default left out
  assert config_flags.parse(RunConfig, changed) == cfg
  assert RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def test_choices_and_estimator_defaults_come_from_the_library():
  leaves = {leaf.flag: leaf for leaf in config_flags.leaves(RunConfig)}
  assert leaves["logq"].choices == tuple(losses.CORRECTIONS)
  assert leaves["q_prime"].choices == tuple(losses.Q_PRIME_MODES)
  assert leaves["sasrec_block"].choices == tuple(BLOCK_STYLES)
  assert leaves["loss"].choices == tuple(losses.LOSSES)
  assert leaves["negatives"].choices == tuple(objective.NEGATIVES)
  assert leaves["uniform_negatives"].choices == tuple(UNIFORM_PER)
  assert leaves["log_q_convention"].choices == tuple(CONVENTIONS)
  assert leaves["dataset"].choices == tuple(data_lib.DATASETS) and "gsasrec" in data_lib.DATASETS
  hash_array = inspect.signature(frequency.HashArrayEstimator.__init__).parameters
  count_min = inspect.signature(frequency.CountMinSketch.__init__).parameters
  cfg = RunConfig()
  assert cfg.hash_array_alpha == hash_array["alpha"].default
  assert cfg.hash_array_hashes == hash_array["num_hashes"].default
  assert cfg.hash_array_warmup == hash_array["warmup"].default
  assert cfg.count_min_conservative == count_min["conservative"].default
  assert cfg.count_min_half_life == count_min["half_life"].default


def test_flag_kinds_bool_enum_list_optional():
  values = _fresh_flags(
    RunConfig, ["--noprogress", "--hidden_dims=8,4", "--logq=standard", "--count_min_half_life=50"]
  )
  cfg = config_flags.from_flags(RunConfig, values)
  assert cfg.progress is False and cfg.hidden_dims == (8, 4) and cfg.logq == "standard"
  assert cfg.count_min_half_life == 50.0 and cfg.export_dir is None
  with pytest.raises(flags.IllegalFlagValueError):
    _fresh_flags(RunConfig, ["--logq=bogus"])
  assert config_flags.present_settings(RunConfig, values) == {
    "progress": False,
    "hidden_dims": (8, 4),
    "logq": "standard",
    "count_min_half_life": 50.0,
  }


def test_numpy_sizes_accepted_wrong_types_and_bad_values_refused_naming_the_setting():
  cfg = RunConfig.create(
    batch_size=np.int64(64), learning_rate=np.float32(0.5), synthetic_users=np.int32(50)
  )
  assert type(cfg.batch_size) is int and cfg.batch_size == 64 and cfg.data.synthetic_users == 50
  assert type(cfg.learning_rate) is float
  with pytest.raises(TypeError, match="batch_size"):
    RunConfig.create(batch_size=64.0)
  with pytest.raises(TypeError, match="progress"):
    RunConfig.create(progress=1)
  with pytest.raises(TypeError, match="no settings named.*batch_sz"):
    RunConfig.create(batch_sz=3)
  with pytest.raises(ValueError, match="logq must be one of"):
    RunConfig.create(logq="bogus")
  for bad, match in [
    (dict(loss="bce", negatives="mixed"), "uniform"),
    (dict(num_negatives=1), "mixed negatives need"),
    (dict(temperature=0.0), "temperature"),
    (dict(embedding_dim=10, num_heads=4), "num_heads"),
    (dict(model="two_tower", use_history=False), "use_history"),
    (dict(hash_array_alpha=1.5), "hash_array_alpha"),
    (dict(dataset="gsasrec"), "data_path"),
    (dict(dataset="ml1m", split="temporal"), "leave_one_out"),
    (dict(data_path="/x"), "synthetic dataset takes no data_path"),
    (dict(synthetic_min_len=9, synthetic_max_len=5), "synthetic_min_len"),
  ]:
    with pytest.raises(ValueError, match=match):
      RunConfig.create(**bad)


def test_ratio_floor_needs_the_corrected_loss():
  """The floor clamps the ratio inside the log of the corrected loss only."""
  assert RunConfig.create(logq="corrected", ratio_floor=1e-10).ratio_floor == 1e-10
  for logq in ("none", "standard", "standard_no_positive"):
    assert RunConfig.create(logq=logq).ratio_floor == 0.0  # the default (off) is fine
    with pytest.raises(ValueError, match=f"ratio_floor.*logq=corrected.*logq={logq}"):
      RunConfig.create(logq=logq, ratio_floor=1e-10)
  cfg = RunConfig.create(ratio_floor=1e-10)
  with pytest.raises(ValueError, match="ratio_floor.*logq"):
    cfg.replace(logq="standard")
  assert cfg.replace(logq="standard", ratio_floor=0.0).logq == "standard"


def test_choice_tuples_are_the_library_definitions():
  """Each set of choices is declared once: train.config re-exports the library's tuples (and the
  objective's NEGATIVES), so the flags cannot drift from what the library accepts."""
  from train import config as config_lib

  assert config_lib.LOSSES is losses.LOSSES
  assert config_lib.UNIFORM_NEGATIVES is UNIFORM_PER
  assert config_lib.LOG_Q_CONVENTIONS is CONVENTIONS
  assert config_lib.NEGATIVES is objective.NEGATIVES


def test_replace_keeps_the_rest_and_revalidates():
  cfg = RunConfig.create(dataset="synthetic", synthetic_users=300, seed=4)
  other = cfg.replace(seed=5, logq="none")
  assert (other.seed, other.logq, other.data.synthetic_users) == (5, "none", 300)
  assert cfg.seed == 4  # a copy
  with pytest.raises(ValueError, match="uniform"):
    cfg.replace(loss="gbce")


def test_define_flags_exclude_defaults_and_help_note():
  values = _fresh_flags(
    data_lib.DataConfig,
    defaults={"dataset": None},
    exclude=["tfds_name"],
    help_note="(default: the export's)",
  )
  assert "tfds_name" not in values and values["dataset"].value is None
  assert values["dataset"].help.endswith("(default: the export's)")
  with pytest.raises(ValueError, match="no settings named"):
    _fresh_flags(data_lib.DataConfig, exclude=["nope"])


def test_a_setting_without_help_is_an_error():
  @dataclasses.dataclass
  class Bad:
    a: int = 1

  @dataclasses.dataclass
  class Good:
    a: int = setting(1, "an integer")

  with pytest.raises(TypeError, match="setting"):
    list(config_flags.leaves(Bad))
  assert config_flags.parse(Good, ["--a=3"]) == Good(a=3)
  with pytest.raises(ValueError, match="help"):
    setting(1, "")


_ESTIMATOR_ARGS = {
  "ExactCounts": ("min_count",),
  "HashArrayEstimator": ("num_buckets", "num_hashes", "alpha", "warmup", "pending_gap"),
  "CountMinSketch": ("conservative", "half_life", "min_count"),
}


def test_both_fronts_estimators_and_the_flags_default_to_the_core_defaults():
  """tfrs_logq.core.frequency.DEFAULTS is the one definition: the tf-keras and Keras 3
  estimators' constructor defaults and RunConfig's flag defaults are its values."""
  import subprocess
  import sys

  from tfrs_logq.core.frequency import DEFAULTS

  fronts = {
    "tf-keras": {
      c: {a: inspect.signature(getattr(frequency, c).__init__).parameters[a].default for a in args}
      for c, args in _ESTIMATOR_ARGS.items()
    }
  }
  code = (
    "import inspect, json; from tfrs_logq.keras3 import frequency as f; "
    f"print(json.dumps({{c: {{a: inspect.signature(getattr(f, c).__init__).parameters[a]"
    f".default for a in args}} for c, args in {_ESTIMATOR_ARGS!r}.items()}}))"
  )
  proc = subprocess.run(
    [sys.executable, "-c", code],
    capture_output=True,
    text=True,
    timeout=300,
    env=dict(os.environ, KERAS_BACKEND="jax"),
  )
  assert proc.returncode == 0, proc.stderr[-2000:]
  fronts["keras3"] = json.loads(proc.stdout.strip().splitlines()[-1])
  for front, classes in fronts.items():
    for cls, values in classes.items():
      assert values == {a: DEFAULTS[a] for a in values}, (front, cls)
  cfg = RunConfig()
  assert (
    cfg.frequency_min_count,
    cfg.hash_array_hashes,
    cfg.hash_array_alpha,
    cfg.hash_array_warmup,
    cfg.hash_array_pending_gap,
    cfg.count_min_conservative,
    cfg.count_min_half_life,
  ) == tuple(
    DEFAULTS[k]
    for k in (
      "min_count",
      "num_hashes",
      "alpha",
      "warmup",
      "pending_gap",
      "conservative",
      "half_life",
    )
  )
