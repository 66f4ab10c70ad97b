"""bench.step: the model-FLOP count and the configuration names (no timing); the
``noloss`` / ``xla_*`` variants of our side (bench/step/ours.py)."""

import pytest

from bench.step import configs, ours


def _matmul_flops(block, b, l, d, f, blocks, a, n):
  """2 m k n summed over every matmul of the forward pass, listed layer by layer, times 3."""
  tokens = b * l
  per_block = []
  if block == "reference":
    per_block += [(tokens, d, d)] * 3  # W_q on LN(x); W_k, W_v on x
  else:
    per_block += [(tokens, d, 3 * d), (tokens, d, d)]  # fused W_qkv, output map
  per_block += [(l, d, l)] * b  # Q K^T per sequence
  per_block += [(l, l, d)] * b  # attn V per sequence
  per_block += [(tokens, d, f), (tokens, f, d)]  # FFN
  scores = [(1, d, 1 + n)] * a  # each query against its 1 + N candidates
  forward = sum(2 * m * k * p for m, k, p in per_block * blocks + scores)
  return 3 * forward


@pytest.mark.parametrize("block", ["reference", "pre_ln"])
def test_step_flops_counts_every_matmul_forward_and_backward(block):
  got = configs.step_flops(
    7, batch=3, length=5, dim=4, num_blocks=2, block=block, num_negatives=9, ffn_dim=6
  )
  assert got == _matmul_flops(block, b=3, l=5, d=4, f=6, blocks=2, a=7, n=9)


def test_step_flops_of_the_ml1m_batch_is_about_44_gflop():
  # The rough count: ~40 GFLOP for the transformer, forward + backward.
  got = configs.step_flops(
    14_000, batch=128, length=200, dim=128, num_blocks=2, block="reference", num_negatives=256
  )
  assert 40e9 < got < 48e9


def test_named_configs_and_aliases():
  paper = configs.parse_config("paper")
  assert (paper.uniform, paper.xla, paper.block, paper.estimator) == (
    "query",
    True,
    "reference",
    "exact",
  )
  fast = configs.parse_config("fastest")
  assert (fast.uniform, fast.xla, fast.block) == ("batch", True, "pre_ln")
  alias = configs.parse_config("per_position+count_min")
  assert (alias.uniform, alias.xla, alias.estimator) == ("query", False, "count_min")
  assert configs.parse_config("shared+xla").uniform == "batch"
  assert configs.parse_config("sequence").uniform == "sequence"


@pytest.mark.parametrize("name", ["batch+query", "xla+bogus", "hash_array+count_min"])
def test_bad_config_names_are_rejected(name):
  with pytest.raises(ValueError, match="--configs"):
    configs.parse_config(name)


def test_step_token_compiles_the_whole_step():
  cfg = configs.parse_config("sequence+xla+step")
  assert (cfg.uniform, cfg.xla, cfg.step_xla) == ("sequence", True, True)
  assert not configs.parse_config("paper").step_xla
  paper_step = configs.parse_config("paper+step")
  assert (paper_step.uniform, paper_step.block, paper_step.step_xla) == ("query", "reference", True)


def test_allocator_token_defaults_to_the_binary_setting():
  from train.config import RunConfig

  assert configs.parse_config("paper").allocator == RunConfig().host_allocator == "retain"
  cfg = configs.parse_config("sequence+reference+xla+malloc_default")
  assert (cfg.uniform, cfg.block, cfg.allocator) == ("sequence", "reference", "default")
  assert "glibc malloc" in cfg.label


def test_heap_and_bound_tokens():
  cfg = configs.parse_config("sequence+reference+xla")
  assert cfg.one_heap and not cfg.no_loss
  cfg = configs.parse_config("sequence+reference+xla+malloc_arenas+noloss")
  assert (cfg.allocator, cfg.one_heap, cfg.no_loss) == ("retain", False, True)
  assert "heap per thread" in cfg.label and "bound" in cfg.label


def test_noloss_bound_scores_only_the_positive():
  import types

  import numpy as np
  import tensorflow as tf

  rng = np.random.default_rng(0)
  table = rng.normal(size=(10, 4)).astype(np.float32)
  q = rng.normal(size=(6, 4)).astype(np.float32)
  ids = np.array([1, 3, 3, 9, 2, 5])

  def never(*args, **kwargs):
    raise AssertionError("the bound must not sample or score negatives")

  objective = types.SimpleNamespace(
    model=types.SimpleNamespace(item_embeddings=lambda i: tf.gather(table, i)), per_query_loss=never
  )
  ours.remove_scoring_and_loss(types.SimpleNamespace(objective=objective))
  out = objective.per_query_loss(tf.constant(q), tf.constant(ids), None, None)
  np.testing.assert_allclose(out.loss.numpy(), -(q * table[ids]).sum(-1), rtol=1e-6)
  np.testing.assert_array_equal(out.weight.numpy(), np.ones(6))


@pytest.mark.parametrize("part", ["loss", "objective"])
def test_separately_compiled_experiments_train_like_the_default_step(part, tmp_path):
  """``xla_loss`` / ``xla_objective`` are timing experiments, but they must compute the same
  step: same losses and weights as the unpatched trainer from the same initialisation."""
  import numpy as np
  import tensorflow as tf

  from train import data as data_lib
  from train.config import RunConfig
  from train.trainer import Trainer

  tiny = data_lib.load("synthetic", num_users=40, num_items=30, min_len=4, max_len=8)
  results = []
  for patched in (False, True):
    cfg = RunConfig.create(
      model="sasrec",
      max_len=8,
      embedding_dim=8,
      num_blocks=1,
      dropout=0.0,
      batch_size=8,
      num_negatives=8,
      negatives="mixed",
      uniform_negatives="sequence",
      logq="corrected",
      steps_per_epoch=3,
      epochs=1,
      progress=False,
      model_dir=str(tmp_path / f"{part}{patched}"),
    )
    trainer = Trainer(cfg, data=tiny, strategy=tf.distribute.get_strategy())
    if patched:
      ours.compile_separately(trainer, part)
    results.append(
      np.array(
        [[float(x) for x in trainer.train_step(batch)] for batch in trainer.distributed_epoch(0)]
      )
    )
  assert results[0].shape == (3, 2) and np.all(np.isfinite(results[0]))
  np.testing.assert_allclose(results[1], results[0], rtol=2e-4, atol=1e-5)
