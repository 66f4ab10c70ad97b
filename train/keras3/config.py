"""`Keras3Config`: the settings only `python -m train.keras3` reads, the `keras3` group of
`train.config.RunConfig` (its flags are RunConfig's, as the data group's are).

    backend            jax | tensorflow | torch (KERAS_BACKEND, set before keras is imported)
    shuffle_rng        tensorflow | numpy: the generator of each epoch's batch order
    compilation_cache  jax: the folder of JAX's persistent compilation cache ('' = off)
    seeds              train these seeds as one program (`train.keras3.seeds`)
    logqs              with seeds: also these --logq rows, in the same program

Their flags are defined by `train.config_flags` with RunConfig's (help, choices and validation in
one place); `python -m train` refuses a value other than the default (`changed`). They are not
part of the recorded run settings (`RunConfig.to_dict` leaves the group out): the backend and
batch order are named in each run's metadata by the trainer, and a run of a ``seeds`` program
records the settings of the separate run it equals (``--seed=s``, ``--logq=v``).
Imports neither keras nor TensorFlow (`train.keras3.settings` reads --backend and
--compilation_cache from the command line before keras is imported).
"""

from __future__ import annotations

import dataclasses
from typing import List, Tuple

from train.config_flags import coerce, setting
from train.data.batches import SHUFFLE_RNGS
from train.keras3.settings import BACKENDS, DEFAULT_BACKEND, default_compilation_cache

__all__ = ["Keras3Config"]


@dataclasses.dataclass
class Keras3Config:
  """The Keras 3 binary's own settings (module docstring); validated on construction."""

  backend: str = setting(
    DEFAULT_BACKEND,
    "python -m train.keras3: Keras 3 backend (sets KERAS_BACKEND before keras is imported).",
    choices=BACKENDS,
  )
  shuffle_rng: str = setting(
    SHUFFLE_RNGS[0],
    "python -m train.keras3: Generator of each epoch's permutation of the training sequences: "
    "tensorflow = tf.data's stateless shuffle, python -m train's batches for the same --seed "
    "(needs TensorFlow installed); numpy = numpy's generator keyed by the seed (another order; "
    "no TensorFlow needed).",
    choices=SHUFFLE_RNGS,
  )
  compilation_cache: str = setting(
    default_compilation_cache(),
    "python -m train.keras3: --backend=jax: a folder where compiled programs are kept between "
    "runs (JAX's persistent compilation cache): a later run of the same shapes loads them "
    "instead of compiling. Empty: off. Default: JAX_COMPILATION_CACHE_DIR if set, else "
    "~/.cache/tfrs_logq/jax.",
  )
  seeds: Tuple[int, ...] = setting(
    (),
    "python -m train.keras3: Train these seeds as one compiled jax program "
    "(train.keras3.seeds): one run per seed in <model_dir>/seed<s>, as separate runs with "
    "--seed=s and --nosasrec_pack_tokens write; --seed is ignored.",
  )
  logqs: Tuple[str, ...] = setting(
    (),
    "python -m train.keras3: With --seeds: also train these --logq values (rows that differ "
    "only in the correction) in the same program: one run per (logq, seed) in "
    "<model_dir>/<logq>/seed<s>, as separate runs with --logq=v --seed=s --nosasrec_pack_tokens "
    "write; --logq is ignored.",
  )

  def __post_init__(self) -> None:
    coerce(self)
    self.validate()

  def validate(self) -> "Keras3Config":
    """Raises ValueError naming the setting (the choices are checked on construction; the
    --logqs values with the loss, by `train.keras3.seeds.check_seeds`)."""
    if self.logqs and not self.seeds:
      raise ValueError("--logqs trains its rows as one program with --seeds: give --seeds")
    return self

  def changed(self) -> List[str]:
    """The settings that differ from their defaults, as flags ("--seeds", ...)."""
    default = Keras3Config()
    return [
      f"--{f.name}"
      for f in dataclasses.fields(self)
      if getattr(self, f.name) != getattr(default, f.name)
    ]
