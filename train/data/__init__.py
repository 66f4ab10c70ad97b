"""Datasets and tf.data pipelines shared by the training and evaluation binaries.

    data = DataConfig(dataset="synthetic").load()              # what the binaries do
    data = load("synthetic")                                   # embedded default, no download
    data = load("gsasrec", "/data/steam")                      # any gSASRec-layout folder
    data = load("ml1m")                                        # gsasrec at <data root>/ml1m
    data = load("movielens_raw", "/path/ratings.dat", split="temporal")
    data = load("tfds", tfds_name="movielens/1m-ratings", data_dir="~/tensorflow_datasets")
    ds = sasrec_train_dataset(data, batch_size=128, max_len=200, seed=0)
    q = eval_arrays(data.test, max_len=200)

Conventions: item ids 1..num_items, 0 = padding; sequences oldest first; a query model sees the
last max_len items of a history, left-padded (`left_pad`, `fit_length`); rated-item filtering
uses each query's input (`EvalSplit.inputs`, alias `EvalSplit.rated`). Malformed files raise
`DataFormatError` (a ValueError) naming the file and line; missing ones `FileNotFoundError`.

Modules: records (containers, fingerprint), readers (parsers), splits (k-core, leave-one-out,
temporal), gsasrec, movielens, tfds, synthetic (readers), datasets (`load`), config
(`DataConfig`), padding, pipelines, seeds (`epoch_seed`: the seed of an epoch's stream).
Everything but `pipelines` is numpy; `pipelines` (tf.data) loads on first use of one of its
names, so that `python -m train.keras3` reads data where TensorFlow is not installed.
"""

from __future__ import annotations

from train.data.config import DataConfig
from train.data.datasets import DATASETS, SPLITS, default_data_root, load
from train.data.gsasrec import load_gsasrec
from train.data.movielens import load_movielens_raw
from train.data.padding import fit_length, left_pad
from train.data.records import (
  DataFormatError,
  EvalSplit,
  SequenceData,
  count_items,
  fingerprint,
  summary,
)
from train.data.seeds import epoch_seed
from train.data.splits import build_sequence_data, k_core_mask
from train.data.synthetic import SyntheticCatalog, SyntheticConfig, load_synthetic

__all__ = [
  "DATASETS",
  "DataConfig",
  "DataFormatError",
  "EvalSplit",
  "SPLITS",
  "SequenceData",
  "SyntheticCatalog",
  "SyntheticConfig",
  "build_sequence_data",
  "count_items",
  "default_data_root",
  "epoch_seed",
  "eval_arrays",
  "eval_dataset",
  "fingerprint",
  "fit_length",
  "k_core_mask",
  "left_pad",
  "load",
  "load_gsasrec",
  "load_movielens_raw",
  "load_synthetic",
  "rated_mask",
  "sasrec_train_dataset",
  "summary",
  "synthetic_catalog",
  "two_tower_train_dataset",
]


def synthetic_catalog(data: SequenceData) -> SyntheticCatalog:
  """The generator behind a synthetic dataset (true popularity and next-item softmax)."""
  catalog = data.metadata.get("catalog")
  if not isinstance(catalog, SyntheticCatalog):
    raise ValueError(f"dataset {data.name!r} was not generated synthetically")
  return catalog


_PIPELINES = (
  "eval_arrays",
  "eval_dataset",
  "rated_mask",
  "sasrec_train_dataset",
  "two_tower_train_dataset",
)


def __getattr__(name):
  """Loads `train.data.pipelines` (TensorFlow) on first use of one of its names."""
  if name in _PIPELINES:
    import importlib

    return getattr(importlib.import_module("train.data.pipelines"), name)
  raise AttributeError(f"module 'train.data' has no attribute {name!r}")
