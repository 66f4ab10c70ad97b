"""bench/world_scale.py: the metrics against hand-checkable cases and the oracle, chunking, the
rows' grammar, the settings' product and one-at-a-time sweep, one-line argument errors, a tiny
grid end to end (outputs, sanity, resume) and a tiny sweep's corrected − standard report."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from bench import world_scale
from bench.world import metrics, report, rows
from eval import synthetic_world as world_lib

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny():
  world = world_lib.make_world(num_items=60, feature_dim=4, seed=3)
  x = world_lib.sample_users(world, 23, np.random.default_rng(0))
  p = world_lib.true_probabilities(world, x)
  bins = world_lib.popularity_bins(p.mean(axis=0), 5)
  return world, x, p, bins


def test_the_truth_itself_has_recall_one_kl_zero_and_is_calibrated(tiny):
  world, x, p, bins = tiny
  out = metrics.evaluate(world, x, {"oracle": lambda x, p: np.log(p)}, bins, (1, 5, 20), 5, 7)
  m = out["oracle"]
  assert m["users"] == 23
  assert m["kl"] == pytest.approx(0.0, abs=1e-12)
  assert m["recall"] == {"1": 1.0, "5": 1.0, "20": 1.0}
  top20 = np.sort(p, axis=1)[:, ::-1][:, :20].sum(axis=1).mean()
  assert m["hit_rate"]["20"] == pytest.approx(top20, rel=1e-12)
  np.testing.assert_allclose(m["calibration_by_decile"], 0.0, atol=1e-12)
  np.testing.assert_allclose(m["mass_by_decile"]["model"], m["mass_by_decile"]["truth"])
  assert sum(m["mass_by_decile"]["truth"]) == pytest.approx(1.0)
  # the held-out draw lands in the oracle's top k: HR by decile is the mass retrieved, <= 1
  assert all(0 <= h <= 1 + 1e-12 for h in m["hit_rate_by_decile"]["20"])


def test_kl_of_a_uniform_model_is_log_d_minus_the_entropy(tiny):
  world, x, p, bins = tiny
  uniform = lambda x, p: np.full(p.shape, -np.log(p.shape[1]))
  m = metrics.evaluate(world, x, {"u": uniform}, bins, (5,), 5, 4)["u"]
  entropy = -(p * np.log(p)).sum(axis=1).mean()
  assert m["kl"] == pytest.approx(np.log(60) - entropy, rel=1e-10)
  assert m["kl"] > 0


def test_chunking_gives_the_unchunked_result(tiny):
  world, x, p, bins = tiny
  rng = np.random.default_rng(1)
  model = metrics.model_log_probs(rng.normal(size=(4, 3)), rng.normal(size=(60, 4)))
  whole = metrics.evaluate(world, x, {"m": model}, bins, (1, 5, 20), 5, 23)["m"]
  for chunk in (1, 5):
    part = metrics.evaluate(world, x, {"m": model}, bins, (1, 5, 20), 5, chunk)["m"]
    assert part["users"] == whole["users"]
    assert part["kl"] == pytest.approx(whole["kl"], rel=1e-12)
    assert part["recall"] == pytest.approx(whole["recall"])
    assert part["hit_rate"] == pytest.approx(whole["hit_rate"], rel=1e-12)
    np.testing.assert_allclose(part["calibration_by_decile"], whole["calibration_by_decile"])
    np.testing.assert_allclose(part["mass_by_decile"]["model"], whole["mass_by_decile"]["model"])


def test_model_log_probs_is_the_softmax_of_the_two_tower_scores():
  w = np.array([[1.0, 0.0], [0.0, 2.0]])
  table = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, -0.5], [1.0, 1.0, 0.0]])  # [e_d, beta_d]
  x = np.array([[1.0, 1.0]])
  logits = np.array([[1.0 + 0.5, 2.0 - 0.5, 3.0]])
  expected = logits - np.log(np.exp(logits).sum())
  np.testing.assert_allclose(metrics.model_log_probs(w, table)(x), expected)


def test_rows_grammar():
  assert rows.parse_row("xbatch16:standard").memory == 16
  assert rows.parse_row("mixed:corrected", "expected_count").name == (
    "mixed:corrected:expected_count"
  )
  assert rows.parse_row("midx:corrected", "expected_count").name == "midx:corrected"
  assert rows.parse_row("full").name == "full"
  for bad, match in (
    ("foo:corrected", "source"),
    ("mixed:logq", "correction"),
    ("mixed:corrected:other", "convention"),
    ("midx:corrected:expected_count", "no convention"),
    ("xbatch0:none", "source"),
  ):
    with pytest.raises(ValueError, match=match):
      rows.parse_row(bad)
  settings = rows.Settings(num_items=100_000, batch_size=512)
  names = [r.name for r in rows.default_rows(settings)]
  assert len(names) == 19 and names[-1] == "full" and "xbatch64:corrected" in names
  assert "full" not in [r.name for r in rows.default_rows(settings._replace(num_items=10**6))]


def test_default_pairs_pair_corrections_and_conventions():
  names = ["mixed:none", "mixed:standard", "mixed:corrected", "mixed:corrected:expected_count"]
  pairs = report.default_pairs(names)
  assert ("correction", "mixed:corrected", "mixed:standard") in pairs
  assert ("correction", "mixed:standard", "mixed:none") in pairs
  assert ("convention", "mixed:corrected:expected_count", "mixed:corrected") in pairs


def test_settings_cross_the_lists_or_move_one_at_a_time_and_the_tag_names_the_point():
  argv = ["--batch_size=256,64,1024", "--tau=4,2", "--steps=2000"]
  star = world_scale.settings_from(
    world_scale.build_parser().parse_args(argv + ["--one_at_a_time"])
  )
  assert [(s.batch_size, s.tau) for s in star] == [(256, 4.0), (64, 4.0), (1024, 4.0), (256, 2.0)]
  assert [rows.settings_tag(s) for s in star][-1] == "items100000_batch256_steps2000_tau2"
  cross = world_scale.settings_from(world_scale.build_parser().parse_args(argv))
  assert len(cross) == 6 and {s.steps for s in cross} == {2000}
  assert rows.settings_tag(rows.Settings()) == "items100000_batch512"  # defaults: not named


@pytest.mark.parametrize(
  "verdict,higher_is_better,expected",
  [
    ("behind", False, "corrected ahead"),  # ΔKL interval below 0
    ("ahead", False, "standard ahead"),
    ("ahead", True, "corrected ahead"),  # ΔHR interval above 0
    ("within noise", False, "within noise"),
    ("one seed: no interval", True, "within noise"),
  ],
)
def test_correction_verdict(verdict, higher_is_better, expected):
  assert report.correction_verdict({"verdict": verdict}, higher_is_better) == expected


# One arm's sparse step (rows of the step gathered, updated by the core's LazyAdam rule,
# scattered back) against a dense step: the gradient of the same library loss with respect to
# the whole table, applied by the library's tfrs_logq.keras3.LazyAdam (same draws: the same
# sampler state). Run in a subprocess: this process may hold Keras on another backend.
SPARSE_VS_LAZY_ADAM = """
import jax, jax.numpy as jnp, keras, numpy as np
import tfrs_logq.keras3 as tlk
from bench.world import data, rows, training
from eval import synthetic_world as world_lib

s = rows.Settings(num_items=200, batch_size=16, steps=10**9, feature_dim=4, embedding_dim=3)
stream = data.training_stream(world_lib.make_world(200, 4, seed=1), 32, 2, 16, seed=0)
feats = jnp.asarray(stream.user_features, jnp.float32)
# xbatch2: the Keras 3 memory (the memory is pushed at step 0)
for name in ["mixed:corrected", "in_batch:corrected:expected_count", "xbatch2:corrected"]:
  arm = training.Arm(rows.parse_row(name), s, 0, stream.counts)
  w0, t0 = data.initial_weights(s, 0)
  state = arm.initial_state(w0, t0)
  values = list(state["values"])
  w_var, t_var = keras.Variable(w0, name="w"), keras.Variable(t0, name="table")
  opt = tlk.LazyAdam(learning_rate=0.02, table_pattern=r"table$")  # cosine at t << steps
  opt.build([w_var, t_var])

  def dense(w, table, values, users, ids):
    arm._embed_fn = lambda i: jnp.take(table, i, axis=0)
    q = arm._queries(w, feats, users)
    pos = jnp.take(table, ids, axis=0)

    def body():
      out = arm._loss(q, ids, pos)
      if arm.memory is not None:  # score, then push (the step's order)
        arm.memory.update(ids, None)
      return out

    (loss, _), new = arm._with_state(values, body)
    return loss, new

  dense = jax.jit(jax.value_and_grad(dense, (0, 1), has_aux=True))
  for t in range(2):
    users, ids = jnp.asarray(stream.users[t]), jnp.asarray(stream.items[t], jnp.int32)
    (loss, new), grads = dense(w_var.value, t_var.value, values, users, ids)
    values = [o if n is None else n for n, o in zip(new, values)]
    opt.apply_gradients(zip(grads, [w_var, t_var]))
    sparse_loss, _ = arm.step(state, feats, stream.users[t], stream.items[t])
    assert abs(float(loss) - sparse_loss) < 1e-5, (name, t, float(loss), sparse_loss)
  w1, t1 = arm.weights(state)
  np.testing.assert_allclose(t1, np.asarray(t_var.value), atol=1e-5, err_msg=name)
  np.testing.assert_allclose(w1, np.asarray(w_var.value), atol=1e-5, err_msg=name)
  moved = int((np.abs(t1 - t0).max(axis=1) > 0).sum())
  assert 0 < moved < 200, (name, moved)  # only the rows of the steps moved
print("ok")
"""


def test_sparse_row_step_equals_the_library_lazy_adam_on_the_dense_gradient():
  env = dict(os.environ, KERAS_BACKEND="jax")
  proc = subprocess.run(
    [sys.executable, "-c", SPARSE_VS_LAZY_ADAM],
    capture_output=True,
    text=True,
    cwd=ROOT,
    env=env,
    timeout=300,
  )
  assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


@pytest.mark.parametrize(
  "argv,match",
  [
    (["--rows=foo:corrected"], "source must be"),
    (["--num_items=300", "--ks=10,1000"], "--ks"),
    (["--steps=0"], "--steps must be a positive int"),
    (["--seeds=0,0"], "distinct"),
    (["--num_items=1e6", "--batch_size=512", "--rows=full"], "does not fit"),
    (["--compare=mixed:corrected"], "A,B"),
    (["--tau=4,x"], "--tau: 'x' is not a number"),
  ],
)
def test_bad_arguments_give_a_one_line_error(argv, match, tmp_path, capsys):
  with pytest.raises(SystemExit) as done:
    world_scale.main(argv + [f"--out={tmp_path}"])
  assert done.value.code == 2
  err = capsys.readouterr().err
  assert match in err and len(err.strip().splitlines()) == 1, err


def test_tiny_grid_end_to_end_and_resume(tmp_path):
  out = tmp_path / "ws"
  cmd = [
    sys.executable,
    "bench/world_scale.py",
    "--num_items=300",
    "--batch_size=32",
    "--steps=20",
    "--seeds=0,1",
    "--rows=in_batch:standard,in_batch:corrected,mixed:corrected",
    "--train_users=128",
    "--eval_users=40",
    "--ks=10,100",
    "--timing_rounds=1",
    "--timing_steps=2",
    f"--out={out}",
  ]
  env = dict(os.environ, KERAS_BACKEND="jax")
  proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  last = proc.stdout.strip().splitlines()[-1]
  assert last.startswith("summary: world_scale:") and "6 new / 0 done" in last, last
  folder = out / "items300_batch32_steps20"
  runs = sorted((folder / "runs").glob("*.json"))
  assert len(runs) == 6
  for path in runs:
    run = json.loads(path.read_text())
    m = run["metrics"]
    assert m["users"] == 40 and m["kl"] >= 0
    assert all(0 <= v <= 1 for v in list(m["recall"].values()) + list(m["hit_rate"].values()))
    assert run["train"]["steps"] == 20 and run["train"]["step_ms_median"] > 0
    assert run["step_vs_mixed"] > 0 and run["machine"]
  summary = json.loads((folder / "summary.json").read_text())
  pair = next(p for p in summary["pairs"] if p["a"] == "in_batch:corrected")
  assert pair["b"] == "in_batch:standard" and pair["metrics"]["recall@100"]["n"] == 2
  assert "growth" in pair
  assert "| mixed:corrected | 2 |" in (folder / "report.md").read_text()
  assert (folder / "recall_at_k.png").stat().st_size > 0
  assert json.loads((folder / "references.json").read_text())["oracle"]["recall"]["10"] == 1.0
  mtimes = [p.stat().st_mtime_ns for p in runs]
  proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "0 new / 6 done / 0 left" in proc.stdout.strip().splitlines()[-1]
  assert [p.stat().st_mtime_ns for p in runs] == mtimes
  # a budget too small for one more run: the new seed's runs are left for the next session
  budget = cmd + ["--seeds=0,1,2", "--timing_rounds=0", "--time_budget_minutes=0.0001"]
  proc = subprocess.run(budget, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "0 new / 6 done / 3 left" in proc.stdout.strip().splitlines()[-1]
  other = cmd[:-1] + ["--embedding_dim=8", f"--out={out}"]
  proc = subprocess.run(other, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
  assert proc.returncode == 2 and "use another --out" in proc.stderr


def test_tiny_one_at_a_time_sweep_reports_corrected_minus_standard_per_convention(tmp_path):
  out = tmp_path / "sweep"
  conventions = ("unigram", "expected_count")
  names = [f"in_batch:{c}:{v}" for v in conventions for c in ("standard", "corrected")]
  cmd = [sys.executable, "bench/world_scale.py", "--num_items=300", "--batch_size=32"]
  cmd += ["--steps=20", "--tau=4,2", "--one_at_a_time", "--seeds=0,1", f"--rows={','.join(names)}"]
  cmd += [
    "--train_users=128",
    "--eval_users=40",
    "--ks=10,100",
    "--timing_rounds=0",
    f"--out={out}",
  ]
  env = dict(os.environ, KERAS_BACKEND="jax")
  proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads((out / "sweep.json").read_text())
  assert result["varying"] == ["tau"]
  points = [(p["values"]["tau"], p["convention"]) for p in result["points"]]
  assert sorted(points) == [(t, c) for t in (2.0, 4.0) for c in sorted(conventions)]
  for p in result["points"]:
    summary = json.loads((out / p["folder"] / "summary.json").read_text())
    suffix = "" if p["convention"] == "unigram" else ":expected_count"
    kl = [summary["rows"][f"in_batch:{c}{suffix}"]["kl"]["mean"] for c in ("standard", "corrected")]
    # the paired mean difference is the difference of the row means (same seeds)
    assert p["kl"]["mean"] == pytest.approx(kl[1] - kl[0], abs=1e-9)
    assert p["kl_standard_corrected"] == pytest.approx(kl)
    assert p["kl"]["half_width"] > 0 and p["hr"]["n"] == 2 and p["hr"]["k"] == "10"
  text = (out / "sweep.md").read_text()
  assert "| 2.0 | in_batch:corrected − in_batch:standard |" in text
  assert (out / "sweep.png").stat().st_size > 0
  (out / "sweep.md").unlink()
  proc = subprocess.run(
    [sys.executable, "bench/world_scale.py", "--report_only", f"--out={out}"],
    capture_output=True,
    text=True,
    cwd=ROOT,
    env=env,
    timeout=300,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert (out / "sweep.md").read_text() == text
