"""train.validation: Recall@k / NDCG@k of the training binary against a plain-Python oracle, under
both rated-item filters, on data with repeat consumption (targets that occur in the history)."""

import math

import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

from models.sasrec import SASRec
from models.two_tower import TwoTower
from train import data as data_lib
from train.validation import evaluate


def _oracle(scores, histories, targets, k, keep_target):
  """Plain Python from the protocol: drop padding and every history item (the target too unless
  keep_target); rank = number of remaining items scored higher (ties: lower id first)."""
  recall, ndcg = [], []
  for s, history, t in zip(scores, histories, targets):
    removed = set(int(i) for i in history)
    if keep_target:
      removed.discard(int(t))
    if int(t) in removed:
      recall.append(0.0)
      ndcg.append(0.0)
      continue
    rank = sum(
      1
      for d in range(1, len(s))
      if d not in removed and d != t and (s[d] > s[t] or (s[d] == s[t] and d < t))
    )
    recall.append(1.0 if rank < k else 0.0)
    ndcg.append(1.0 / math.log2(rank + 2) if rank < k else 0.0)
  return float(np.mean(recall)), float(np.mean(ndcg))


def _last_items(history, length):
  items = list(history)[-length:]
  return [0] * (length - len(items)) + items


@pytest.fixture(scope="module")
def repeat_data():
  data = data_lib.load(
    "synthetic", num_users=60, num_items=30, min_len=6, max_len=14, allow_repeats=True, seed=1
  )
  repeats = sum(int(t) in set(h.tolist()) for h, t in zip(data.test.inputs, data.test.targets))
  assert repeats >= 10, "the fixture needs targets that also occur in their history"
  return data


@pytest.mark.parametrize("filter_rated", ["all", "except_target"])
def test_sasrec_metrics_match_the_oracle_with_repeat_consumption(repeat_data, filter_rated):
  max_len = 8
  model = SASRec(30, max_len=max_len, embedding_dim=8, dropout=0.0, seed=2).build_all()
  split = repeat_data.test
  got = evaluate(
    model, split, max_len=max_len, ks=(5, 10), batch_size=17, filter_rated=filter_rated
  )
  inputs = np.array([_last_items(h.tolist(), max_len) for h in split.inputs], np.int64)
  q = model.query_embeddings(tf.constant(inputs)).numpy().astype(np.float64)
  scores = q @ np.asarray(model.all_item_embeddings(), np.float64).T
  assert got["num_queries"] == split.num_queries
  for k in (5, 10):
    r, n = _oracle(scores, split.inputs, split.targets, k, filter_rated == "except_target")
    assert got[f"recall@{k}"] == pytest.approx(r, abs=1e-6)
    assert got[f"ndcg@{k}"] == pytest.approx(n, abs=1e-5)


def test_the_paper_protocol_scores_repeated_targets_as_misses(repeat_data):
  model = SASRec(30, max_len=8, embedding_dim=8, dropout=0.0, seed=3).build_all()
  paper = evaluate(model, repeat_data.test, max_len=8, ks=(29,))
  kept = evaluate(model, repeat_data.test, max_len=8, ks=(29,), filter_rated="except_target")
  repeated = np.mean(
    [int(t) in set(h.tolist()) for h, t in zip(repeat_data.test.inputs, repeat_data.test.targets)]
  )
  # k = 29 of 30 items and every history rates at least one item, so an unfiltered target is
  # always in the top 29: the protocols differ exactly by the share of repeated targets.
  assert kept["recall@29"] == pytest.approx(1.0)
  assert paper["recall@29"] == pytest.approx(1.0 - repeated, abs=1e-6)
  with pytest.raises(ValueError, match="filter_rated"):
    evaluate(model, repeat_data.test, max_len=8, filter_rated="none")


def test_two_tower_validation_uses_the_query_user_ids(repeat_data):
  model = TwoTower(
    30, num_users=repeat_data.num_users, embedding_dim=8, use_user_id=True, max_len=8, seed=4
  ).build_all()
  split = repeat_data.val
  got = evaluate(model, split, max_len=8, ks=(5,))
  inputs = np.array([_last_items(h.tolist(), 8) for h in split.inputs], np.int64)
  q = model.query_embeddings(
    {"history": tf.constant(inputs), "user_id": tf.constant(split.user_ids)}
  ).numpy()
  scores = q.astype(np.float64) @ np.asarray(model.all_item_embeddings(), np.float64).T
  r, n = _oracle(scores, split.inputs, split.targets, 5, keep_target=False)
  assert got["recall@5"] == pytest.approx(r, abs=1e-6)
  assert got["ndcg@5"] == pytest.approx(n, abs=1e-5)
