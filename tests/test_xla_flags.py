"""tests/xla_flags.py: the session's XLA flags are set (and a setting already given is kept), and
a bit-for-bit test's environment gets XLA's default emitters back at the session's level."""

import os

import xla_flags


def test_the_session_runs_with_every_flag():
  names = os.environ["XLA_FLAGS"].split()
  for flag in xla_flags.SESSION_FLAGS:
    assert any(n.split("=")[0] == flag.split("=")[0] for n in names), flag


def test_a_setting_already_given_is_kept_and_the_others_added():
  got = xla_flags.with_session_flags("--xla_foo=1 --xla_cpu_use_fusion_emitters=true").split()
  assert got == [
    "--xla_foo=1",
    "--xla_cpu_use_fusion_emitters=true",
    "--xla_backend_optimization_level=0",
    "--xla_llvm_disable_expensive_passes=true",
  ]
  assert xla_flags.with_session_flags("").split() == list(xla_flags.SESSION_FLAGS)


def test_fusion_emitters_drops_only_the_emitter_flags():
  env = dict(
    A="1", XLA_FLAGS=xla_flags.with_session_flags("--xla_force_host_platform_device_count=2")
  )
  got = xla_flags.fusion_emitters(env)
  assert got["A"] == "1" and env["XLA_FLAGS"] != got["XLA_FLAGS"]  # a new dict
  assert got["XLA_FLAGS"].split() == [
    "--xla_force_host_platform_device_count=2",
    "--xla_backend_optimization_level=0",
  ]
  assert xla_flags.fusion_emitters({})["XLA_FLAGS"] == ""
