"""train.keras3.settings: what `python -m train.keras3` sets in the environment before keras and
jax are imported (the backend, the host devices, the JAX compilation cache), read from argv."""

import os

import pytest

from train.keras3 import settings


@pytest.fixture
def env(monkeypatch):
  """A clean slate for the variables select_backend writes (restored after the test)."""
  for name in ("KERAS_BACKEND", "XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR", "XDG_CACHE_HOME"):
    monkeypatch.delenv(name, raising=False)
  return monkeypatch


def test_the_cache_defaults_to_the_users_cache_folder(env, tmp_path):
  env.setenv("HOME", str(tmp_path))
  assert settings.default_compilation_cache() == str(tmp_path / ".cache" / "tfrs_logq" / "jax")
  env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
  assert settings.default_compilation_cache() == str(tmp_path / "xdg" / "tfrs_logq" / "jax")
  env.setenv("JAX_COMPILATION_CACHE_DIR", "")  # the caller's choice wins, "off" included
  assert settings.default_compilation_cache() == ""


def test_jax_gets_the_flags_cache_folder_and_an_empty_one_turns_it_off(env, tmp_path):
  env.setenv("XDG_CACHE_HOME", str(tmp_path))
  assert settings.select_backend(["prog", "--backend=jax"]) == "jax"
  assert os.environ["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "tfrs_logq" / "jax")
  settings.select_backend(["prog", "--compilation_cache", str(tmp_path / "mine")])
  assert os.environ["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "mine")
  settings.select_backend(["prog", "--compilation_cache="])
  assert "JAX_COMPILATION_CACHE_DIR" not in os.environ
  assert os.environ["KERAS_BACKEND"] == "jax"


def test_other_backends_leave_the_jax_cache_alone(env):
  env.setenv("JAX_COMPILATION_CACHE_DIR", "/somewhere")
  assert settings.select_backend(["prog", "--backend=torch", "--compilation_cache="]) == "torch"
  assert os.environ["JAX_COMPILATION_CACHE_DIR"] == "/somewhere"
  assert os.environ["KERAS_BACKEND"] == "torch"


def test_cpu_replicas_set_the_host_device_count_on_jax_only(env):
  env.setenv("XLA_FLAGS", "--xla_backend_optimization_level=0")
  settings.select_backend(["prog", "--backend=jax", "--cpu_replicas=3"])
  assert os.environ["XLA_FLAGS"].split() == [
    "--xla_backend_optimization_level=0",
    "--xla_force_host_platform_device_count=3",
  ]
  env.setenv("XLA_FLAGS", "")
  settings.select_backend(["prog", "--backend=tensorflow", "--cpu_replicas=3"])
  assert os.environ["XLA_FLAGS"] == ""
