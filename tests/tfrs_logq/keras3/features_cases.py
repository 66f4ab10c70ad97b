"""Deterministic numpy cases shared by features_worker.py (Keras 3, one process per backend) and
test_backends_features.py (tf-keras path and numpy oracles)."""

import numpy as np

VOCAB = 60
COUNT_MIN_CONFIGS = {  # width 13: collisions (numpy reference); 2**20: none (equals tf-keras)
  "standard": dict(width=13, depth=3, seed=5),
  "conservative": dict(width=13, depth=3, conservative=True, seed=5),
  "decay": dict(width=13, depth=3, half_life=3.0, seed=5),
  "conservative_decay": dict(width=13, depth=3, conservative=True, half_life=2.5, seed=5),
  "wide": dict(width=2**20, depth=2, conservative=True, half_life=4.0, seed=1),
}
GBCE_BETAS = (1.0, 0.4)


def full_softmax_case():
  rng = np.random.default_rng(11)
  return dict(
    query=rng.normal(size=(6, 4)).astype(np.float32),
    table=rng.normal(size=(9, 4)).astype(np.float32),  # ids 1..9 (id_offset 1)
    ids=np.array([1, 4, 9, 2, 2, 7], np.int32),
  )


def gbce_case():
  rng = np.random.default_rng(12)
  s_p = rng.normal(0, 2, 6).astype(np.float32)
  s_n = rng.normal(0, 2, (6, 5)).astype(np.float32)
  valid = rng.uniform(size=(6, 5)) > 0.3
  valid[-1] = False  # a row without negatives
  return dict(s_p=s_p, s_n=s_n, valid=valid)


def gbce_extreme_case():
  """Huge finite scores and -inf / +inf entries that are masked: the loss stays finite."""
  s_p = np.array([3e30, -3e30, 0.5, 1.0], np.float32)
  s_n = np.array(
    [[1e30, -1e30, 0.0], [0.0, 2.0, 1e30], [np.inf, 1.0, -np.inf], [np.nan, np.inf, 2.0]],
    np.float32,
  )
  valid = np.array([[1, 1, 1], [1, 1, 1], [0, 1, 1], [0, 0, 1]], bool)
  return dict(s_p=s_p, s_n=s_n, valid=valid)


def stream():
  rng = np.random.default_rng(2)
  p = np.arange(1, VOCAB + 1) ** -1.1
  sizes = [40, 40, 7, 40, 40, 40, 7, 40]
  return [rng.choice(VOCAB, size=n, p=p / p.sum()).astype(np.int32) for n in sizes]


PROBE = np.arange(VOCAB, dtype=np.int32).reshape(6, 10)

# update(ids, valid): every estimator, built twice; one counts the stream, the other the stream
# padded to a static [6, 8] (padding at random places with random ids, valid False there).
MASKED_ESTIMATORS = {
  "hash_array": ("HashArrayEstimator", dict(num_buckets=13, num_hashes=2, alpha=0.2, seed=3)),
  **{f"count_min_{k}": ("CountMinSketch", v) for k, v in COUNT_MIN_CONFIGS.items()},
  "exact": ("ExactCounts", dict(num_items=VOCAB)),
}
PADDED_SHAPE = (6, 8)


def padded_stream():
  """[(ids [6, 8], valid [6, 8])] holding stream()'s batches, then one batch with nothing valid."""
  rng = np.random.default_rng(3)
  size = PADDED_SHAPE[0] * PADDED_SHAPE[1]
  out = []
  for ids in stream() + [np.zeros((0,), np.int32)]:
    padded = rng.integers(0, VOCAB, size).astype(np.int32)
    valid = np.zeros(size, bool)
    where = rng.choice(size, ids.size, replace=False)
    padded[where], valid[where] = ids, True
    out.append((padded.reshape(PADDED_SHAPE), valid.reshape(PADDED_SHAPE)))
  return out


def negatives_case():
  rng = np.random.default_rng(13)
  return dict(
    pos_ids=np.array([3, 5, 3, 7, 1, 5, 9, 2], np.int32),
    pos_valid=np.array([1, 1, 1, 1, 0, 1, 1, 1], bool),
    sequence_ids=np.array([4, 4, 4, 8, 8, 2, 2, 4], np.int32),
    emb_table=rng.normal(size=(12, 4)).astype(np.float32),
    query=rng.normal(size=(8, 4)).astype(np.float32),
    counts=np.array([0, 5, 3, 9, 1, 4, 0, 2, 0, 6, 1, 1]),
    k_u=5,
  )


# (name, constructor or function, kwargs): built on both fronts, the errors compared.
BAD_ARGUMENTS = [
  ("FullSoftmaxLoss", dict(temperature=0.0)),
  ("FullSoftmaxLoss", dict(id_offset=-1)),
  ("FullSoftmaxLoss", dict(id_offset=True)),
  ("FullSoftmaxLoss", dict(id_offset=1.0)),
  ("GBCELoss", dict(beta=0.0)),
  ("GBCELoss", dict(beta=1.5)),
  ("gbce_beta", dict(num_negatives=0, num_items=10, t=0.5)),
  ("gbce_beta", dict(num_negatives=5, num_items=1, t=0.5)),
  ("gbce_beta", dict(num_negatives=5, num_items=10, t=2.0)),
  ("gbce_beta", dict(num_negatives=5.0, num_items=10, t=0.5)),
  ("CountMinSketch", dict(epsilon=0.0)),
  ("CountMinSketch", dict(epsilon=0.1, width=10)),
  ("CountMinSketch", dict(delta=0.1, depth=2)),
  ("CountMinSketch", dict(delta=1.0)),
  ("CountMinSketch", dict(width=64.5, depth=2)),
  ("CountMinSketch", dict(width="64", depth=2)),
  ("CountMinSketch", dict(width=0, depth=2)),
  ("CountMinSketch", dict(width=8, depth=True)),
  ("CountMinSketch", dict(width=2**16, depth=2**15)),
  ("CountMinSketch", dict(width=8, half_life=0.0)),
  ("CountMinSketch", dict(width=8, min_count=0.0)),
  ("CountMinSketch", dict(width=8, seed=1.5)),
  ("UniformNegatives", dict(num_negatives=3, id_range=(0, 9), per="sample")),
  ("UniformNegatives", dict(num_negatives=0, id_range=(0, 9), per="sequence")),
  ("InBatchConvention", dict(convention="expected")),
]
