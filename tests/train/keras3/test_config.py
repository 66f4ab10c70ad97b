"""train/keras3/config.py: the Keras 3 binary's own settings are flags of `train.config_flags`
(help, choices, list parsing and validation as RunConfig's)."""

import pytest
from absl import flags

from train import config_flags
from train.keras3.config import Keras3Config
from train.keras3.settings import BACKENDS


def _parse(argv):
  values = flags.FlagValues()
  names = config_flags.define_flags(Keras3Config, values)
  values(["prog", *argv])
  return names, config_flags.from_flags(Keras3Config, values)


def test_flags_parse_into_the_config_and_are_checked():
  names, config = _parse(["--backend=torch", "--seeds=0,2", "--logqs=none,corrected"])
  assert set(names) == {"backend", "shuffle_rng", "compilation_cache", "seeds", "logqs"}
  assert config == Keras3Config(backend="torch", seeds=(0, 2), logqs=("none", "corrected"))
  assert _parse([])[1].backend == BACKENDS[0] and _parse([])[1].seeds == ()
  with pytest.raises(flags.IllegalFlagValueError):
    _parse(["--backend=mxnet"])
  with pytest.raises(ValueError, match="--logqs trains its rows as one program with --seeds"):
    _parse(["--logqs=none"])
  with pytest.raises(ValueError):
    _parse(["--seeds=a"])
  with pytest.raises(ValueError, match="numpy"):
    Keras3Config(shuffle_rng="python")
