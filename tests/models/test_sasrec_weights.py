"""models.sasrec_weights on the tf-keras SASRec: the listed sublayers hold every weight once,
an npz round trip into a model of another seed gives the first model's outputs, and weights of
other settings are refused with the sublayer named. (Into the Keras 3 twin:
tests/models/keras3/test_sasrec.py, whose worker sets the weights through `sublayers`.)"""

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import pytest

from models import sasrec_weights
from models.sasrec import SASRec

SETTINGS = dict(
  num_items=30,
  max_len=8,
  embedding_dim=8,
  num_blocks=2,
  num_heads=2,
  dropout=0.0,
  pack_tokens=False,
)


def _model(seed, **extra):
  return SASRec(**{**SETTINGS, **extra}, seed=seed).build_all()


@pytest.mark.parametrize(
  "extra", [dict(block_style="reference"), dict(block_style="pre_ln", tie_embeddings=True)]
)
def test_sublayers_hold_every_weight_once(extra):
  model = _model(0, **extra)
  listed = [id(w) for _, layer in sasrec_weights.sublayers(model) for w in layer.weights]
  assert len(listed) == len(set(listed))
  assert sorted(listed) == sorted(id(w) for w in model.weights)


@pytest.mark.parametrize(
  "extra", [dict(block_style="reference"), dict(block_style="pre_ln", tie_embeddings=True)]
)
def test_npz_round_trip_gives_the_same_outputs(extra, tmp_path):
  source, target = _model(1, **extra), _model(2, **extra)
  x = np.array([[0, 0, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 29]], np.int64)
  assert not np.allclose(source.query_embeddings(x).numpy(), target.query_embeddings(x).numpy())
  sasrec_weights.to_npz(str(tmp_path / "w.npz"), sasrec_weights.get_arrays(source))
  sasrec_weights.set_arrays(target, sasrec_weights.from_npz(str(tmp_path / "w.npz")))
  np.testing.assert_array_equal(
    source.query_embeddings(x).numpy(), target.query_embeddings(x).numpy()
  )
  np.testing.assert_array_equal(
    source.all_item_embeddings().numpy(), target.all_item_embeddings().numpy()
  )


def test_weights_of_other_settings_are_refused_with_the_sublayer_named():
  arrays = sasrec_weights.get_arrays(_model(0))
  with pytest.raises(ValueError, match="missing.*output_embedding"):
    sasrec_weights.set_arrays(
      _model(0), {k: v for k, v in arrays.items() if k != "output_embedding"}
    )
  with pytest.raises(ValueError, match="unexpected.*output_embedding"):
    sasrec_weights.set_arrays(_model(0, tie_embeddings=True), arrays)
  wider = sasrec_weights.get_arrays(SASRec(**{**SETTINGS, "embedding_dim": 16}, seed=0).build_all())
  with pytest.raises(ValueError, match="sublayer input_embedding"):
    sasrec_weights.set_arrays(_model(0), wider)
