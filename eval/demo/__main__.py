"""``python -m eval.demo`` (`make demo`): the demo's command line. The flags are declared here,
in the main module, so that absl's --help lists them (`eval.demo.define_flags`)."""

from train import cli as cli_lib

cli_lib.quiet_tensorflow()  # before TensorFlow is imported (it logs while it loads)

from absl import flags  # noqa: E402

from eval import demo  # noqa: E402

demo.define_flags()
flags.adopt_module_key_flags(demo)
cli_lib.declare_verbosity_flag()
cli_lib.run(demo.main)
