"""The XLA flags of the test session (set by tests/conftest.py, inherited by every subprocess),
and the environment of a test whose claim needs XLA's own code generation.

The suite compiles hundreds of tiny programs and runs each a few times, so the compile is the
cost and optimising the generated code buys nothing:

* LLVM at optimisation level 0 (a tiny 2-epoch JAX run of the Keras 3 binary: 48.1 s of CPU at
  the default level, 32.0 s at level 0, the project's 2-core CPU);
* XLA's elemental emitters instead of its fusion emitters, and LLVM's expensive passes off: an
  eager JAX process compiles one program per op and shape (tests/tfrs_logq/keras3/
  features_worker.py on jax: 915 compiles); that worker took 0.68x the CPU of level 0 alone
  (median of 4 interleaved pairs, 2-core CPU, bit-identical results). A whole jitted train step
  compiles no faster this way (1.02x), nor does the tf-keras jit_compile file (0.96x, 2 pairs).
  The whole suite (fresh clones, run in turn B A B A): 0.84x and 0.97x of pytest time, within
  its run-to-run noise (the same commit's two runs differed by 15 %).

Programs compute the same functions; float results may differ from an optimised build's in the
last bits. Two *different* programs that XLA's fusion emitters compile to bit-identical results
(the Keras 3 jax trainer's own step against ``train_on_batch``, tests/train/keras3/
test_jax_step.py) differ by ~3e-8 under the elemental emitters: a test that claims bit-for-bit
equality between two programs runs with `fusion_emitters`: XLA's default emitters, the ones
users get (at the session's level 0).
"""

OPTIMISATION_LEVEL = "--xla_backend_optimization_level=0"
# The flags that change how XLA generates code (not only how hard LLVM optimises it).
EMITTER_FLAGS = (
  "--xla_cpu_use_fusion_emitters=false",
  "--xla_llvm_disable_expensive_passes=true",
)
SESSION_FLAGS = (OPTIMISATION_LEVEL, *EMITTER_FLAGS)


def _name(flag: str) -> str:
  return flag.split("=", 1)[0]


def with_session_flags(xla_flags: str) -> str:
  """``xla_flags`` with every session flag added whose setting it does not already hold."""
  flags = xla_flags.split()
  present = {_name(f) for f in flags}
  return " ".join(flags + [f for f in SESSION_FLAGS if _name(f) not in present])


def fusion_emitters(environment: dict) -> dict:
  """``environment`` (a new dict) with XLA_FLAGS' emitter flags removed: XLA's default code
  generation, at the session's optimisation level."""
  drop = {_name(f) for f in EMITTER_FLAGS}
  flags = [f for f in environment.get("XLA_FLAGS", "").split() if _name(f) not in drop]
  return dict(environment, XLA_FLAGS=" ".join(flags))
