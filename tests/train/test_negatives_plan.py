"""The one configuration -> negatives mapping (`train.negatives_plan`): the plan of every
--negatives / --loss, the memory of --cross_batch, and the tf-keras binary's samplers built from
it (the Keras 3 binary's: tests/train/keras3/test_negatives.py compares its shapes and log Q with
the tf-keras ones)."""

import pytest

from train.config import RunConfig
from train.negatives_plan import MemoryPlan, negatives_plan, push_rows


@pytest.mark.parametrize(
  "settings, source, split, midx",
  [
    (dict(negatives="mixed", num_negatives=9), "mixed", (4, 5), 0),
    (dict(negatives="in_batch", num_negatives=9), "in_batch", (9, 0), 0),
    (dict(negatives="uniform", num_negatives=9), "uniform", (0, 9), 0),
    (dict(negatives="midx", num_negatives=9), "midx", (0, 0), 9),
    (dict(loss="bce", negatives="uniform", num_negatives=1), "uniform", (0, 1), 0),
    (dict(loss="full_softmax"), "full", (0, 0), 0),
  ],
)
def test_each_negatives_setting_has_one_plan(settings, source, split, midx):
  plan = negatives_plan(RunConfig.create(**settings))
  assert (plan.source, plan.split, plan.num_midx, plan.memory) == (source, split, midx, None)


def test_cross_batch_plans_pushes_of_the_global_batch_with_capped_slots():
  sasrec = RunConfig.create(cross_batch=4, batch_size=8, max_len=5, num_negatives=16)
  assert push_rows(sasrec) == 40  # the B L positions
  assert negatives_plan(sasrec).memory == MemoryPlan(4, 40, 16, "ids")
  tower = sasrec.replace(model="two_tower", cross_batch_slots=100, cross_batch_mode="embeddings")
  assert negatives_plan(tower).memory == MemoryPlan(4, 8, 8, "embeddings")  # at most the rows
  with pytest.raises(ValueError, match="sampled softmax"):
    RunConfig.create(cross_batch=2, loss="full_softmax")
  with pytest.raises(ValueError, match="cross_batch must be >= 0"):
    RunConfig.create(cross_batch=-1)


def test_the_tf_keras_objective_builds_the_plan():
  import tfrs_logq.tf_keras  # noqa: F401
  from tfrs_logq.tf_keras import frequency, negatives

  from train import objective

  class Model:
    def item_embeddings(self, ids):
      raise AssertionError("not called to build")

  cfg = RunConfig.create(cross_batch=3, batch_size=4, max_len=5, num_negatives=6)
  estimator = frequency.ExactCounts(11)
  sampler = objective.build_sampler(cfg, Model(), 10, estimator)
  assert isinstance(sampler, negatives.MixedNegatives)
  assert (sampler.in_batch.num_negatives, sampler.uniform.num_negatives) == (3, 3)
  memory = objective.build_memory(cfg, Model(), estimator)
  assert (memory.num_batches, memory.batch_size, memory.slots_per_batch) == (3, 20, 6)
  assert memory.convention == cfg.log_q_convention and memory.mode == "ids"
  assert objective.build_memory(cfg.replace(cross_batch=0), Model(), estimator) is None
