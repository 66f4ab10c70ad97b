"""tfrs_logq: corrected logQ sampled softmax for TensorFlow Recommenders."""

import pathlib

import setuptools

HERE = pathlib.Path(__file__).parent

setuptools.setup(
    name="tfrs-logq",
    version="0.1.0",
    description=("Corrected logQ sampled softmax, frequency estimation and negative sampling "
                 "for TensorFlow Recommenders"),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.9,<3.13",
    packages=setuptools.find_packages(include=["tfrs_logq", "tfrs_logq.*"]),
    install_requires=[
        # scann 1.4.2's TF ops are built against TF 2.20 exactly: keep TF on 2.20.x.
        "tensorflow>=2.20,<2.21",
        "tf-keras>=2.20,<2.21",
        "tensorflow-recommenders==0.7.7",
        "scann[tf]==1.4.2",
        "tensorflow-datasets>=4.9",
        "absl-py>=1.0",
        "numpy>=1.23",
    ],
    extras_require={
        # The binaries (train/, eval/), benchmarks and tests run from the repository root.
        "tools": ["tqdm>=4.60", "matplotlib>=3.5"],
        "test": ["pytest>=7", "tqdm>=4.60", "matplotlib>=3.5"],
    },
    license="Apache-2.0",
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
