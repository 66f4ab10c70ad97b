"""Serving SavedModel: fresh-process round trip through the ScaNN TF ops; missing-ops message."""

import json
import os
import subprocess
import sys

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from tfrs_logq.tf_keras import top_k as top_k_lib

import numpy as np
import pytest
import tensorflow as tf

from eval import index as index_lib
from eval import serving

_LOAD_AND_SERVE = r"""
import json
import numpy as np
import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)
from eval import serving
model = serving.load_serving_model({path!r}, import_scann={import_scann})
out = model.signatures["serving_default"](history=__import__("tensorflow").constant(
    np.load({hist!r}), dtype="int64"))
print("RESULT " + json.dumps({{k: v.numpy().tolist() for k, v in out.items()}}))
"""


def _run(code):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.run(
    [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=240
  )


def _histories(num_q, width, num_items, seed):
  rng = np.random.default_rng(seed)
  h = np.zeros((num_q, width), np.int64)
  for q in range(num_q):
    n = rng.integers(1, width + 1)
    h[q, width - n :] = rng.integers(1, num_items + 1, size=n)
  return h


@pytest.fixture(scope="module")
def served(tiny_export, tmp_path_factory):
  export_dir, qe, items = tiny_export
  out = tmp_path_factory.mktemp("serving") / "model"
  cfg = index_lib.IndexConfig(mode="tree_ah", num_leaves=12, num_leaves_to_search=6, reorder_k=100)
  module = serving.ServingModule(
    tf.saved_model.load(str(export_dir / "query_encoder")), items, k=10, index_config=cfg
  )
  hist = _histories(16, 9, items.shape[0] - 1, 0)  # width 9 > encoder max_len 6
  in_process = {k: v.numpy() for k, v in module.recommend(tf.constant(hist)).items()}
  serving.save_serving_module(module, out)
  hist_path = out.parent / "hist.npy"
  np.save(hist_path, hist)
  return out, hist, hist_path, qe, items, in_process


def test_fresh_process_serves_same_ids_as_in_process_index(served):
  out, hist, hist_path, qe, items, in_process = served
  proc = _run(_LOAD_AND_SERVE.format(path=str(out), hist=str(hist_path), import_scann=True))
  assert proc.returncode == 0, proc.stderr[-3000:]
  got = json.loads(proc.stdout.split("RESULT ", 1)[1])
  ids, scores = np.array(got["item_ids"]), np.array(got["scores"], np.float32)
  assert ids.shape == (16, 10) and scores.shape == (16, 10)
  np.testing.assert_array_equal(ids, in_process["item_ids"])
  np.testing.assert_allclose(scores, in_process["scores"], rtol=1e-6)
  meta = json.loads((out / "serving_meta.json").read_text())
  assert meta["k"] == 10 and meta["index"]["mode"] == "tree_ah" and meta["max_len"] == 6
  # Never a history item (all 9 columns, though the encoder sees the last 6), never padding,
  # and the scores are the dot products <q_u, c_d> of the served ids.
  assert np.all(ids >= 1)
  for row, h in zip(ids, hist):
    assert not np.isin(row, h[h > 0]).any()
  q = qe.serve(tf.constant(hist[:, -6:]))["embedding"].numpy()  # the encoder's last 6 columns
  np.testing.assert_allclose(scores, np.take_along_axis(q @ items.T, ids, 1), rtol=1e-4, atol=1e-4)
  # Tree search over 6 of 12 leaves with reordering: most of the exact filtered top-10.
  ex, _ = top_k_lib.exact_top_k(q, items, 10, rated=list(hist))
  assert index_lib.agreement_at_k(ids, ex, 10) >= 0.5


def test_in_process_load_matches_and_validates(served):
  out, hist, _, _, _, in_process = served
  model = serving.load_serving_model(out)
  res = model.recommend(tf.constant(hist))
  res2 = model.signatures["serving_default"](history=tf.constant(hist))
  np.testing.assert_array_equal(res["item_ids"].numpy(), res2["item_ids"].numpy())
  np.testing.assert_array_equal(res["item_ids"].numpy(), in_process["item_ids"])
  with pytest.raises(tf.errors.InvalidArgumentError, match="num_items"):
    model.recommend(tf.constant([[1, 100000]], tf.int64))


def test_missing_scann_ops_gives_clear_message(served):
  out, _, hist_path, _, _, _ = served
  proc = _run(_LOAD_AND_SERVE.format(path=str(out), hist=str(hist_path), import_scann=False))
  assert proc.returncode != 0
  assert "ScannOpsMissingError" in proc.stderr
  assert "import scann" in proc.stderr


@pytest.mark.parametrize("filter_history", [True, False])
def test_brute_force_serving_is_exact(tiny_export, tmp_path, filter_history):
  export_dir, qe, items = tiny_export
  out = serving.export_from_training_export(
    export_dir, tmp_path / "m", k=5, filter_history=filter_history
  )
  model = serving.load_serving_model(out)
  hist = np.array([[0, 0, 3, 4, 5, 6], [9, 8, 7, 6, 5, 4]], np.int64)
  ids = model.recommend(tf.constant(hist))["item_ids"].numpy()
  q = qe.serve(tf.constant(hist))["embedding"].numpy()
  history = list(hist) if filter_history else None
  ex, _ = top_k_lib.exact_top_k(q, items, 5, rated=history)  # brute-force mode: exact
  np.testing.assert_array_equal(ids, ex)


def test_bad_k():
  items = np.ones((5, 2), np.float32)
  with pytest.raises(ValueError, match="k must be"):
    serving.ServingModule(lambda h: h, items, k=0)
