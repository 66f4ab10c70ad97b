"""eval.synthetic_world and eval.demo: the world's true P(d|u), the demo's metrics, the losses
the demo composes from the library, and the CLI (all against numpy oracles written from the
formulas in the module docstrings)."""

import json
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from eval import demo
from eval import synthetic_world as sw

ROOT = pathlib.Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- the world


def test_true_probabilities_are_softmax_of_tau_x_v_plus_zipf_bias():
  world = sw.make_world(num_items=7, feature_dim=3, zipf=1.3, tau=2.5, seed=4)
  x = np.random.default_rng(0).normal(size=(5, 3))
  p = sw.true_probabilities(world, x)
  for u in range(5):
    logits = [
      2.5 * sum(x[u, j] * world.item_vectors[d, j] for j in range(3)) - 1.3 * math.log(d + 1)
      for d in range(7)
    ]
    z = sum(math.exp(t) for t in logits)
    np.testing.assert_allclose(p[u], [math.exp(t) / z for t in logits], rtol=1e-12)


def test_without_preferences_the_next_item_follows_zipf_in_the_item_id():
  world = sw.make_world(num_items=50, feature_dim=4, zipf=1.1, tau=0.0)
  p = sw.true_probabilities(world, np.ones((2, 4)))
  ranks = np.arange(1, 51, dtype=np.float64)
  np.testing.assert_allclose(p[1], ranks**-1.1 / np.sum(ranks**-1.1), rtol=1e-12)


@pytest.mark.parametrize("chunk", [None, 2])
def test_training_stream_draws_each_rows_item_from_its_users_distribution(chunk):
  world = sw.make_world(num_items=6, feature_dim=2, zipf=1.0, tau=1.5, seed=1)
  stream = sw.training_stream(world, num_users=3, steps=400, batch_size=250, seed=2, chunk=chunk)
  p = sw.true_probabilities(world, stream.user_features)
  if chunk:  # the same pool and users as the unchunked stream; its own item draws
    whole = sw.training_stream(world, num_users=3, steps=400, batch_size=250, seed=2)
    np.testing.assert_array_equal(stream.users, whole.users)
    np.testing.assert_array_equal(stream.user_features, whole.user_features)
  for u in range(3):
    drawn = stream.items[stream.users == u]
    assert abs(drawn.size / stream.items.size - 1 / 3) < 0.01  # users uniform over the pool
    freq = np.bincount(drawn, minlength=6) / drawn.size
    assert np.all(np.abs(freq - p[u]) < 5 * np.sqrt(p[u] * (1 - p[u]) / drawn.size) + 1e-9)


def test_popularity_and_rank_bins_sort_by_popularity_ties_lower_id_first():
  pop = np.array([0.1, 0.5, 0.2, 0.2])  # ranks: item 1, item 2, item 3, item 0
  np.testing.assert_array_equal(sw.popularity_bins(pop, num_bins=2), [1, 0, 0, 1])
  bins, labels = demo.rank_bins(pop, edges=(1, 2, 4))
  np.testing.assert_array_equal(bins, [2, 0, 1, 1])
  assert labels == ["1", "2–3", "4"]


# ----------------------------------------------------------------------------- metrics


def _top(row, k):
  return sorted(range(len(row)), key=lambda d: (-row[d], d))[:k]


def test_metrics_match_plain_python_oracles():
  rng = np.random.default_rng(3)
  num_users, num_items, k, num_bins = 6, 12, 3, 3
  p = rng.dirichlet(np.full(num_items, 0.5), size=num_users)
  logits = rng.normal(size=(num_users, num_items))
  log_p_hat = np.array(
    [[t - math.log(sum(math.exp(v) for v in row)) for t in row] for row in logits]
  )
  bins = np.arange(num_items) % num_bins
  head = np.arange(num_items) < 2
  got = demo.evaluate_model(p, log_p_hat, bins, k, num_bins, head=head)

  kl = np.mean(
    [
      sum(p[u, d] * (math.log(p[u, d]) - log_p_hat[u, d]) for d in range(num_items) if p[u, d] > 0)
      for u in range(num_users)
    ]
  )
  recall = np.mean(
    [len(set(_top(log_p_hat[u], k)) & set(_top(p[u], k))) / k for u in range(num_users)]
  )
  hit = np.mean([sum(p[u, d] for d in _top(log_p_hat[u], k)) for u in range(num_users)])
  hit_bin, cal_bin = [], []
  for j in range(num_bins):
    cell = [(u, d) for u in range(num_users) for d in range(num_items) if bins[d] == j]
    mass = sum(p[u, d] for u, d in cell)
    hit_bin.append(sum(p[u, d] for u, d in cell if d in _top(log_p_hat[u], k)) / mass)
    cal_bin.append(sum(p[u, d] * (log_p_hat[u, d] - math.log(p[u, d])) for u, d in cell) / mass)
  top = [(u, d) for u in range(num_users) for d in range(2)]
  cal_head = sum(p[u, d] * (log_p_hat[u, d] - math.log(p[u, d])) for u, d in top) / sum(
    p[u, d] for u, d in top
  )
  tail = [(u, d) for u in range(num_users) for d in range(num_items) if bins[d] != 0]
  hit_tail = sum(p[u, d] for u, d in tail if d in _top(log_p_hat[u], k)) / sum(
    p[u, d] for u, d in tail
  )

  assert got["kl"] == pytest.approx(kl, rel=1e-10)
  assert got["recall_vs_oracle"] == pytest.approx(recall)
  assert got["hit_rate"] == pytest.approx(hit, rel=1e-12)
  assert got["hit_rate_tail"] == pytest.approx(hit_tail, rel=1e-12)
  np.testing.assert_allclose(got["hit_rate_by_bin"], hit_bin, rtol=1e-12)
  np.testing.assert_allclose(got["calibration_by_bin"], cal_bin, rtol=1e-10)
  assert got["calibration_head"] == pytest.approx(cal_head, rel=1e-10)


def test_recall_at_counts_the_common_items_of_the_two_top_k_lists():
  model = np.array([[1, 2, 3], [7, 8, 9]])
  oracle = np.array([[3, 4, 1], [7, 8, 9]])
  # k = 1: {1} vs {3}; k = 2: {1, 2} vs {3, 4}; k = 3: {1, 2, 3} vs {3, 4, 1} -> 2 of 3
  np.testing.assert_allclose(demo.recall_at(model, oracle, (1, 2, 3)), [[0, 0, 2 / 3], [1, 1, 1]])


def test_hit_rate_at_sums_the_truth_over_the_model_top_k():
  p = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
  top = np.array([[1, 0, 2], [2, 0, 1]])  # best first
  np.testing.assert_allclose(demo.hit_rate_at(p, top, (1, 2)), [[0.3, 0.8], [0.8, 0.9]])


def test_the_truth_scores_perfectly_and_top_k_breaks_ties_by_lower_index():
  p = np.random.default_rng(1).dirichlet(np.ones(9), size=4)
  got = demo.evaluate_model(p, np.log(p), np.arange(9) % 3, 2, 3)
  assert got["kl"] == pytest.approx(0.0, abs=1e-12)
  assert got["recall_vs_oracle"] == 1.0
  np.testing.assert_allclose(got["calibration_by_bin"], 0.0, atol=1e-12)
  np.testing.assert_array_equal(demo.top_k(np.array([[1.0, 3.0, 3.0, 0.0]]), 2), [[1, 2]])


def test_mean_se_and_paired_difference_use_the_t_interval():
  mean, se = demo.mean_and_se([1.0, 2.0, 4.0])
  assert mean == pytest.approx(7 / 3)
  assert se == pytest.approx(np.std([1.0, 2.0, 4.0], ddof=1) / math.sqrt(3))
  d = np.array([0.5, 1.0, 2.5])
  mean, half = demo.paired_difference([1.0, 2.0, 4.0], [0.5, 1.0, 1.5])
  assert mean == pytest.approx(d.mean())
  assert half == pytest.approx(stats.t.ppf(0.975, 2) * np.std(d, ddof=1) / math.sqrt(3))
  # 40 seeds of deciles: t_{0.975, 39} element-wise (no 1.96 past a table)
  rng = np.random.default_rng(2)
  a, b = rng.normal(size=(40, 10)), rng.normal(size=(40, 10))
  mean, half = demo.paired_difference(a, b)
  np.testing.assert_allclose(mean, (a - b).mean(axis=0), rtol=1e-12)
  np.testing.assert_allclose(
    half, stats.t.ppf(0.975, 39) * (a - b).std(axis=0, ddof=1) / math.sqrt(40), rtol=1e-9
  )
  # one seed: summary.json marks the missing spread with nan, in the mean's shape
  mean, se = demo.mean_and_se([[1.0, 2.0, 3.0]])
  assert np.isnan(se).all() and np.shape(se) == (3,)
  assert np.isnan(demo.paired_difference([1.0], [0.5])[1])


def test_parse_row_names_what_is_wrong():
  assert demo.parse_row("full") == demo.RowSpec("full")
  assert demo.parse_row("in_batch:corrected") == demo.RowSpec("in_batch", "corrected")
  for text, word in (
    ("in_batch", "SOURCE:CORRECTION"),
    ("bogus:none", "source"),
    ("in_batch:bogus", "correction"),
    ("in_batch:standard:bogus", "convention"),
    ("uniform:corrected:mixture", "uniform"),
  ):
    with pytest.raises(ValueError, match=word):
      demo.parse_row(text)


# ----------------------------------------------------------------------------- the losses


def _lse(v):
  m = max(v)
  return m + math.log(sum(math.exp(x - m) for x in v))


def _oracle_loss(row, s, ids, log_q, batch):
  """Mean loss over the batch from the formulas (module docstring of tfrs_logq.tf_keras.losses)."""
  distinct = sorted(set(ids.tolist()))
  if row.convention == "expected_count":  # log pi(d) - log U, pi = 1 - (1 - Q)^B
    log_q = np.log1p(-np.exp(batch * np.log1p(-np.exp(log_q)))) - math.log(len(distinct))
  losses = []
  for a, pos in enumerate(ids):
    if row.source == "full":
      losses.append(_lse(list(s[a])) - s[a, pos])
      continue
    negs = [d for d in distinct if d != pos]
    if row.correction == "none":
      losses.append(_lse([s[a, pos]] + [s[a, d] for d in negs]) - s[a, pos])
    elif row.correction == "standard":
      pos_logit = s[a, pos] - log_q[pos]
      losses.append(_lse([pos_logit] + [s[a, d] - log_q[d] for d in negs]) - pos_logit)
    else:  # corrected, Q' = Q / (1 - Q(p))
      z = _lse([s[a, d] - log_q[d] + math.log(1 - math.exp(log_q[pos])) for d in negs])
      w = 1 / (1 + math.exp(s[a, pos] - (z - math.log(len(negs)))))
      losses.append(-w * (s[a, pos] - z))
  return np.mean(losses)


def test_each_rows_loss_is_its_formula_on_the_first_batch():
  from tfrs_logq.tf_keras import negatives

  rows = [
    demo.parse_row(r) for r in ("full", "in_batch:none", "in_batch:standard", "in_batch:corrected")
  ]
  if "expected_count" in negatives.CONVENTIONS:
    rows += [
      demo.parse_row("in_batch:standard:expected_count"),
      demo.parse_row("in_batch:corrected:expected_count"),
    ]
  cfg = demo.validate_config(
    demo.DemoConfig(
      rows=tuple(rows),
      seeds=(5,),
      steps=2,
      batch_size=24,
      num_negatives=64,
      embedding_dim=4,
      num_items=30,
      feature_dim=4,
      train_users=10,
      eval_users=10,
      curve_points=0,
    )
  )
  world = sw.make_world(cfg.num_items, cfg.feature_dim, 1.1, 3.0, 0)
  stream = sw.training_stream(world, cfg.train_users, cfg.steps, cfg.batch_size, 5)
  trainer = demo.Trainer(cfg, [stream])
  got = trainer.batch_losses(0)

  counts = np.bincount(stream.items.ravel(), minlength=cfg.num_items)
  log_q = np.log(np.maximum(counts, 1) / counts.sum())  # ExactCounts, floor of one count
  ids = stream.items[0]
  x = stream.user_features[stream.users[0]]
  for (r, _, user_var, item_var, _), value in zip(trainer.models, got):
    q = np.concatenate([x @ user_var.numpy(), np.ones((len(ids), 1))], axis=1)
    s = q @ item_var.numpy().T
    assert value == pytest.approx(_oracle_loss(rows[r], s, ids, log_q, len(ids)), rel=2e-5), rows[
      r
    ].name
  # paired: every row starts from the same weights
  first = [m[3].numpy() for m in trainer.models]
  assert all(np.array_equal(first[0], w) for w in first)


# ----------------------------------------------------------------------------- the CLI


def _run(args):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.run(
    [sys.executable, "-m", "eval.demo", *args],
    cwd=ROOT,
    capture_output=True,
    text=True,
    env=env,
    timeout=600,
  )


def test_help_lists_the_flags():
  out = _run(["--help"])
  assert out.returncode in (0, 1), out.stderr  # absl's --help exits 1 after printing
  assert "--rows" in out.stdout and "--seeds" in out.stdout


def test_cli_writes_summary_table_and_plots(tmp_path):
  out = _run(
    [
      f"--output_dir={tmp_path}",
      "--rows=in_batch:standard,in_batch:corrected",
      "--seeds=0,1",
      "--steps=6",
      "--batch_size=16",
      "--num_negatives=16",
      "--num_items=40",
      "--train_users=20",
      "--eval_users=15",
      "--curve_users=5",
      "--curve_points=2",
      "--k=3",
    ]
  )
  assert out.returncode == 0, out.stderr[-3000:]
  assert "in-batch, standard" in out.stdout and "in-batch, corrected" in out.stdout
  for name in (
    "summary.json",
    "summary.md",
    "calibration.png",
    "recall_by_decile.png",
    "learning_curve.png",
  ):
    assert (tmp_path / name).stat().st_size > 0, name
  summary = json.loads((tmp_path / "summary.json").read_text())
  assert set(summary["rows"]) == {"in_batch:standard", "in_batch:corrected"}
  assert len(summary["rows"]["in_batch:standard"]["per_seed"]) == 2
  diff = summary["paired_differences"][0]
  assert (diff["a"], diff["b"]) == ("in_batch:corrected", "in_batch:standard")
  per_seed = [r["kl"] for r in summary["rows"]["in_batch:corrected"]["per_seed"]]
  base = [r["kl"] for r in summary["rows"]["in_batch:standard"]["per_seed"]]
  assert diff["kl"]["mean"] == pytest.approx(np.mean(np.subtract(per_seed, base)))
  assert summary["learning_curve"]["steps"] == [3, 6]
  assert len(diff["kl_curve"]["mean"]) == 2
  assert "verdict: in-batch, unigram log Q:" in out.stdout


def test_cli_rejects_a_bad_row():
  out = _run(["--rows=in_batch:bogus", "--steps=1"])
  assert out.returncode != 0
  assert "correction must be one of" in out.stderr


def test_demo_binary_speaks_plainly(tmp_path):
  """python -m eval.demo: no TensorFlow start-up lines by default; a bad flag or value is one
  `error:` line and status 2."""
  root = pathlib.Path(__file__).resolve().parents[2]
  env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
  env.pop("TF_CPP_MIN_LOG_LEVEL", None)
  run = lambda *a: subprocess.run(
    [sys.executable, "-m", "eval.demo", *a],
    cwd=root,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  bad = run("--nosuch_flag=1")
  assert bad.returncode == 2, bad.stderr
  assert [l for l in bad.stderr.splitlines() if l.strip()] == [
    "error: Unknown command line flag 'nosuch_flag' (see --help)"
  ]
  bad_value = run("--rows=nonsense", f"--output_dir={tmp_path}/x")
  assert bad_value.returncode == 2 and bad_value.stderr.strip().startswith("error: "), (
    bad_value.stderr
  )
  assert len(bad_value.stderr.strip().splitlines()) == 1, bad_value.stderr
  ok = run(
    "--steps=4",
    "--seeds=0",
    "--rows=in_batch:corrected",
    "--noplot",
    f"--output_dir={tmp_path}/demo",
  )
  assert ok.returncode == 0, ok.stderr
  for noise in ("cuda", "oneDNN", "cpu_feature_guard", "absl::InitializeLog"):
    assert noise not in ok.stderr + ok.stdout, (noise, ok.stderr)
  assert (tmp_path / "demo" / "summary.json").exists()
