"""train/keras3/config.py: the settings only the Keras 3 binary reads are the ``keras3`` group of
`train.config.RunConfig`, flags of `train.config_flags` like the others (help, choices, list
parsing and validation), left out of the recorded settings, refused by ``python -m train``."""

import dataclasses
import subprocess
import sys

import pytest
from absl import flags

from train import config_flags
from train.config import RunConfig
from train.keras3.config import Keras3Config
from train.keras3.settings import BACKENDS

KERAS3_FLAGS = {"backend", "shuffle_rng", "compilation_cache", "seeds", "logqs"}


def _parse(argv):
  values = flags.FlagValues()
  names = config_flags.define_flags(RunConfig, values)
  values(["prog", *argv])
  return names, config_flags.from_flags(RunConfig, values)


def test_the_keras3_flags_are_runconfigs_and_parse_into_its_group():
  names, config = _parse(["--backend=torch", "--seeds=0,2", "--logqs=none,corrected"])
  assert KERAS3_FLAGS <= set(names)
  assert {leaf.flag for leaf in config_flags.leaves(RunConfig) if leaf.path[0] == "keras3"} == (
    KERAS3_FLAGS
  )
  assert config.keras3 == Keras3Config(backend="torch", seeds=(0, 2), logqs=("none", "corrected"))
  assert config.keras3.changed() == ["--backend", "--seeds", "--logqs"]
  default = _parse([])[1]
  assert default.keras3.backend == BACKENDS[0] and default.keras3.seeds == ()
  assert default.keras3.changed() == []
  with pytest.raises(flags.IllegalFlagValueError):
    _parse(["--backend=mxnet"])
  with pytest.raises(ValueError, match="--logqs trains its rows as one program with --seeds"):
    _parse(["--logqs=none"])
  with pytest.raises(ValueError):
    _parse(["--seeds=a"])
  with pytest.raises(ValueError, match="numpy"):
    Keras3Config(shuffle_rng="python")


def test_the_group_is_not_recorded_and_create_replace_and_to_flags_reach_it():
  cfg = RunConfig.create(backend="tensorflow", seeds=(1, 2), shuffle_rng="numpy")
  assert cfg.keras3 == Keras3Config(backend="tensorflow", seeds=(1, 2), shuffle_rng="numpy")
  record = cfg.to_dict()
  assert "keras3" not in record and not KERAS3_FLAGS & set(record)
  back = RunConfig.from_dict(record)
  assert back.keras3 == Keras3Config() and back == dataclasses.replace(cfg, keras3=Keras3Config())
  assert RunConfig.from_dict({**record, "keras3": {"seeds": [3]}}).keras3.seeds == (3,)
  assert cfg.replace(seeds=()).keras3.seeds == ()
  flags_out = cfg.to_flags(only_changed=True)
  assert {"--backend=tensorflow", "--seeds=1,2", "--shuffle_rng=numpy"} <= set(flags_out)
  assert _parse(cfg.to_flags())[1] == cfg


@pytest.mark.parametrize("argv", [["--seeds=0,1"], ["--backend=torch", "--shuffle_rng=numpy"]])
def test_python_m_train_refuses_them_in_one_line(argv, tmp_path):
  proc = subprocess.run(
    [sys.executable, "-m", "train", "--dataset=synthetic", f"--model_dir={tmp_path}", *argv],
    capture_output=True,
    text=True,
    timeout=120,
  )
  lines = [line for line in proc.stderr.splitlines() if line.strip()]
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
  assert "settings of python -m train.keras3" in lines[0]
  for arg in argv:
    assert arg.split("=")[0] in lines[0]
