"""tfrs_logq: corrected logQ sampled softmax for TensorFlow Recommenders.

    pip install .            # the library (tfrs_logq): only what it imports
    pip install ".[app]"     # + the application: models, train (+ train.data), eval, bench, with
                             #   the console scripts tfrs-logq-train, tfrs-logq-evaluate,
                             #   tfrs-logq-launch (Python >= 3.11) and their dependencies
    pip install -e ".[test]" # the application + pytest (what `make test` installs)
    pip install ".[bench]"   # + PyTorch (the paper-code yardstick of bench/step) and
                             #   faiss-cpu (bench/serving_scale.py)

setuptools cannot install packages per extra: the application packages are always copied, but
they run only with the [app] dependencies (absl, ScaNN, TFDS, matplotlib); the library never
imports them. tests/test_setup.py checks that the library's requirements are exactly what
tfrs_logq imports.
"""

import pathlib

import setuptools

HERE = pathlib.Path(__file__).parent

# What tfrs_logq imports (tf-keras is Keras 2 behind tf.keras with TF_USE_LEGACY_KERAS=1).
LIBRARY_REQUIRES = [
  # scann 1.4.2's TF ops are built against TF 2.20 exactly: keep TF on 2.20.x.
  "tensorflow>=2.20,<2.21",
  "tf-keras>=2.20,<2.21",
  "tensorflow-recommenders==0.7.7",
  "numpy>=1.23",
]
# What the application packages (models, train, eval, bench) import beyond the library.
APP_REQUIRES = [
  "absl-py>=1.0",
  "scann[tf]==1.4.2",
  "tensorflow-datasets>=4.9",
  "matplotlib>=3.5",
  # train.summaries (both binaries' TensorBoard scalars) falls back on the tensorboard
  # package's event writer where TensorFlow is absent; TensorFlow itself requires it too.
  "tensorboard>=2.20",
]
# The Keras 3 path (tfrs_logq.keras3, keras.ops only): Keras 3 with keras-rs and the JAX backend;
# tensorboard: train.keras3 writes its summaries with the tensorboard package's event writer
# where TensorFlow is not installed (`python -m train.keras3` runs without it).
# Python >= 3.10 (tested on 3.11 with keras 3.15, keras-rs 0.4, jax 0.10). PyTorch is optional
# for users (a CPU wheel: `pip install torch`); the test extra installs it so that the parity
# tests run on all three backends.
KERAS3_REQUIRES = [
  "keras>=3.12",
  "keras-rs>=0.2.1",
  "jax[cpu]>=0.6.2",
  "tensorboard>=2.20",
]
# FAISS, the other index of bench/serving_scale.py (ScaNN vs FAISS at 1e5..1e7 items); its test
# runs the bench end to end, so the test extra installs it too. The library and the application
# never import it.
FAISS_REQUIRES = ["faiss-cpu==1.15.1"]
# bench/step's yardstick: a PyTorch re-implementation of the paper code's training step
# (bench/paper_code_torch.py), timed beside ours in the same run (never run by the suite), and
# FAISS for bench/serving_scale.py; Keras 3 and JAX for the Keras 3 sides of bench/step.
BENCH_REQUIRES = APP_REQUIRES + KERAS3_REQUIRES + ["torch>=2.4"] + FAISS_REQUIRES
# The suite runs the Keras 3 parity tests on the TensorFlow, JAX and PyTorch backends (torch
# pinned to the CPU build 2.13.0, the one tested; `make test` installs it).
# pytest-xdist: `make test` runs the suite in $(PYTEST_WORKERS) processes, one test file per process
# at a time (--dist loadfile keeps each file's module fixtures in one process).
# scipy: the oracle of eval/paired_stats.py's Student t (tests only; the application never
# imports it).
# The style gate of `make lint` / .ci/run (pyproject.toml: ruff's rules, mypy on the
# core and the public API of both fronts).
LINT_REQUIRES = ["ruff==0.16.9", "mypy==2.4.0"]
TEST_REQUIRES = (
  APP_REQUIRES
  + KERAS3_REQUIRES
  + ["pytest>=7", "pytest-xdist==3.8.0", "scipy>=1.10", "torch==2.13.0"]
  + FAISS_REQUIRES
  + LINT_REQUIRES
)

setuptools.setup(
  name="tfrs-logq",
  version="0.2.0",
  description=(
    "Corrected logQ sampled softmax, frequency estimation and negative sampling "
    "for TensorFlow Recommenders"
  ),
  long_description=(HERE / "README.md").read_text(encoding="utf-8"),
  long_description_content_type="text/markdown",
  python_requires=">=3.10,<3.13",
  packages=setuptools.find_packages(
    include=[
      "tfrs_logq",
      "tfrs_logq.*",
      "models",
      "models.*",
      "train",
      "train.*",
      "eval",
      "bench",
      "bench.*",
    ]
  ),
  install_requires=LIBRARY_REQUIRES,
  extras_require={
    "app": APP_REQUIRES,
    "test": TEST_REQUIRES,
    "keras3": KERAS3_REQUIRES,
    "bench": BENCH_REQUIRES,
    "lint": LINT_REQUIRES,
  },
  entry_points={
    "console_scripts": [
      "tfrs-logq-train = train.__main__:run",
      "tfrs-logq-evaluate = eval.evaluate:run",
      "tfrs-logq-launch = bench.launch.cli:run",
    ],
  },
  license="Apache-2.0",
  classifiers=[
    "Programming Language :: Python :: 3",
    "Topic :: Scientific/Engineering :: Artificial Intelligence",
  ],
)
