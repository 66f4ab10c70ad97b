"""Loaded at start-up by every Python process with this folder on PYTHONPATH
(tests/without_tensorflow.py): TensorFlow and what needs it are not found, as on a machine
without them (a GPU machine with JAX or PyTorch only). The path finder skips them, so an import
raises ModuleNotFoundError and ``importlib.util.find_spec`` answers None (libraries that look
before they import, such as torch, see them absent). $HIDDEN_ALSO (comma-separated) names more
top-level modules to hide the same way (e.g. jax,keras: a process that must not import them)."""

import importlib.machinery
import os

_BLOCKED = ("tensorflow", "tf_keras", "tensorflow_recommenders", "scann", "tensorflow_datasets")
_BLOCKED += tuple(m for m in os.environ.get("HIDDEN_ALSO", "").split(",") if m)
_find_spec = importlib.machinery.PathFinder.find_spec


def _hiding_find_spec(name, path=None, target=None):
  if name.split(".")[0] in _BLOCKED:
    return None
  return _find_spec(name, path, target)


importlib.machinery.PathFinder.find_spec = staticmethod(_hiding_find_spec)
