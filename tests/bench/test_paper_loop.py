"""bench/paper_loop.py: the paper script's epoch loop as a binary, on a small gSASRec folder.

The run (a subprocess, as python -m bench.launch starts it) writes the metrics JSON with the
binaries' keys; the metric function is checked against ranks counted from the definition."""

import json
import math
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NUM_USERS, NUM_ITEMS, NUM_VAL = 60, 40, 12


def write_gsasrec_folder(root: pathlib.Path, seed: int = 0) -> pathlib.Path:
  """A gSASRec leave-one-out folder (../shared/data/README.md): NUM_USERS users of 5..15
  distinct items out of 1..NUM_ITEMS; the first NUM_VAL users (every 5th) are validation users."""
  rng = np.random.default_rng(seed)
  seqs = [rng.choice(NUM_ITEMS, rng.integers(5, 16), replace=False) + 1 for _ in range(NUM_USERS)]
  val_users = set(range(0, NUM_USERS, NUM_USERS // NUM_VAL))
  line = lambda items: " ".join(str(int(i)) for i in items) + "\n"
  files = {
    "train/input.txt": "",
    "val/input.txt": "",
    "val/output.txt": "",
    "test/input.txt": "",
    "test/output.txt": "",
  }
  for u, s in enumerate(seqs):
    files["train/input.txt"] += line(s[:-3] if u in val_users else s[:-2])
    if u in val_users:
      files["val/input.txt"] += line(s[:-2])
      files["val/output.txt"] += line(s[-2:-1])
    files["test/input.txt"] += line(s[:-1])
    files["test/output.txt"] += line(s[-1:])
  for name, text in files.items():
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(text)
  (root / "dataset_stats.json").write_text(
    json.dumps(
      dict(num_users=NUM_USERS, num_items=NUM_ITEMS, num_interactions=int(sum(map(len, seqs))))
    )
  )
  return root


def _command(data, *flags):
  """The binary on a small folder with a small model (one thread)."""
  return [
    sys.executable,
    "-m",
    "bench.paper_loop",
    "--dataset=gsasrec",
    f"--data_path={data}",
    "--max_len=20",
    "--dim=16",
    "--num_blocks=1",
    "--threads=1",
    *flags,
  ]


def test_binary_writes_the_metrics_json(tmp_path):
  pytest.importorskip("torch")
  data = write_gsasrec_folder(tmp_path / "data")
  out = tmp_path / "run" / "metrics.json"
  env = dict(os.environ, OMP_NUM_THREADS="1")
  start = time.perf_counter()
  proc = subprocess.run(
    _command(data, "--max_epochs=3", "--patience=2", f"--metrics_json={out}"),
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
    timeout=180,
  )
  wall = time.perf_counter() - start
  assert proc.returncode == 0, proc.stderr[-3000:]
  m = json.loads(out.read_text())

  for key in (
    "global_step",
    "epochs_done",
    "best_epoch",
    "best_step",
    "best_val_ndcg10",
    "stopped_early",
    "val",
    "test",
    "history",
    "phases",
  ):
    assert key in m, key
  assert 1 <= m["epochs_done"] <= 3 and len(m["history"]) == m["epochs_done"]
  assert m["steps_per_epoch"] == 1  # 60 users, batches of 128
  assert m["global_step"] == m["epochs_done"]
  assert m["stopped_early"] == (m["epochs_done"] - m["best_epoch"] >= 2)  # patience 2
  assert 1 <= m["best_epoch"] <= m["epochs_done"] and m["best_step"] == m["best_epoch"]
  best = max(h["val_ndcg@10"] for h in m["history"])
  assert m["best_val_ndcg10"] == pytest.approx(best)
  assert m["val"]["ndcg@10"] == pytest.approx(best, abs=1e-6)  # the best weights, restored
  for e, h in enumerate(m["history"], 1):
    for key in (
      "epoch",
      "step",
      "loss",
      "mean_weight",
      "seconds",
      "seconds_per_step",
      "wall_seconds",
      "val_recall@10",
      "val_ndcg@10",
      "val_recall@20",
      "val_ndcg@20",
    ):
      assert key in h, (e, key)
    assert h["epoch"] == e and h["step"] == e and math.isfinite(h["loss"])
    assert 0 <= h["seconds"] <= h["wall_seconds"]
  assert len(proc.stdout.strip().splitlines()) == m["epochs_done"] + 1  # epochs + summary

  assert m["paper_loop"]["device"] == "cpu" and m["stopped_by_time"] is False  # no GPU here
  phases = m["phases"]
  assert set(phases) == {"first_step", "steps", "validation", "checkpoints", "test", "export"}
  assert all(v >= 0 for v in phases.values()) and phases["export"] == 0.0
  assert phases["first_step"] > 0 and phases["validation"] > 0 and phases["test"] > 0
  assert sum(phases.values()) < wall

  for split, n in (("val", NUM_VAL), ("test", NUM_USERS)):
    metrics = m[split]
    assert metrics["num_queries"] == n
    for key in ("recall@10", "recall@20", "ndcg@10", "ndcg@20"):
      assert 0.0 <= metrics[key] <= 1.0, (split, key)
    assert metrics["recall@10"] <= metrics["recall@20"]
    assert metrics["ndcg@10"] <= metrics["recall@10"]


def brute_force(scores, inputs, targets, k):
  """Recall@k and NDCG@k from the definition: the target's rank among the items that are not
  padding and not in the input (a target in its input is filtered: a miss)."""
  recall = ndcg = 0.0
  for row, history, t in zip(scores, inputs, targets):
    if t in set(history):
      continue
    rank = sum(
      1 for i in range(1, len(row)) if i not in set(history) and i != t and row[i] > row[t]
    )
    if rank < k:
      recall += 1.0
      ndcg += 1.0 / math.log2(rank + 2)
  return recall / len(targets), ndcg / len(targets)


def test_metrics_match_the_definition():
  import torch  # the test extra installs it: never skipped

  from bench import paper_loop

  # By hand: 5 items; user 0 has target 3 at rank 1 (item 2 above it; item 4 is filtered),
  # user 1's target 1 is in its input (a miss), user 2's target 5 is first.
  scores = torch.tensor(
    [
      [9.0, 0.5, 0.9, 0.7, 0.95, 0.1],
      [9.0, 0.9, 0.1, 0.2, 0.3, 0.4],
      [9.0, 0.1, 0.2, 0.3, 0.4, 0.5],
    ]
  )
  inputs = [np.array([4]), np.array([1, 2]), np.array([], np.int64)]
  targets = np.array([3, 1, 5])
  ids, finite = paper_loop.filtered_top_k(scores.clone(), inputs, 4)
  assert ids[0].tolist() == [2, 3, 1, 5] and ids[2].tolist() == [5, 4, 3, 2]
  assert finite.tolist() == [[True] * 4, [True] * 3 + [False], [True] * 4]  # 3 left for user 1
  sums = paper_loop.metric_sums(ids, finite, targets, ks=(1, 2))
  assert sums == pytest.approx(
    {"recall@1": 1.0, "ndcg@1": 1.0, "recall@2": 2.0, "ndcg@2": 1.0 + 1.0 / math.log2(3)}
  )

  # Random: ties impossible (distinct scores), some targets in their input, few items left.
  rng = np.random.default_rng(1)
  num_items, q = 30, 40
  scores = torch.from_numpy(
    rng.permutation(q * (num_items + 1)).reshape(q, num_items + 1).astype(np.float32)
  )
  inputs = [rng.choice(num_items, rng.integers(0, 25), replace=False) + 1 for _ in range(q)]
  targets = rng.integers(1, num_items + 1, q)
  ids, finite = paper_loop.filtered_top_k(scores.clone(), inputs, 20)
  sums = paper_loop.metric_sums(ids, finite, targets, ks=(10, 20))
  for k in (10, 20):
    recall, ndcg = brute_force(scores.numpy(), inputs, targets, k)
    assert sums[f"recall@{k}"] / q == pytest.approx(recall)
    assert sums[f"ndcg@{k}"] / q == pytest.approx(ndcg)


def test_collate_keeps_the_last_items_left_padded():
  from bench import paper_loop

  windows = paper_loop.collate(3)([np.array([1, 2, 3, 4, 5]), np.array([7, 8])])
  assert windows.tolist() == [[2, 3, 4, 5], [0, 0, 7, 8]]


def test_max_seconds_caps_the_loop_after_a_whole_epoch(tmp_path):
  from bench import paper_loop

  data = write_gsasrec_folder(tmp_path / "data")
  common = dict(dataset="gsasrec", data_path=str(data), max_len=20, dim=16, num_blocks=1)
  capped = paper_loop.run(**common, max_epochs=5, patience=5, max_seconds=1e-9, report=len)
  assert capped["stopped_by_time"] and not capped["stopped_early"]
  assert capped["epochs_done"] == 1 and capped["global_step"] == capped["steps_per_epoch"]
  assert capped["paper_loop"]["max_seconds"] == 1e-9 and capped["paper_loop"]["device"] == "cpu"
  assert capped["test"]["num_queries"] == NUM_USERS  # a capped run still ends with its metrics
  free = paper_loop.run(**common, max_epochs=2, patience=5, report=len)
  assert free["epochs_done"] == 2 and not free["stopped_by_time"]


def _np_script_losses(logq, s_p, s_n, valid, neg_counts, pos_counts, total):
  """The scripts' per-query loss and weight from bench/paper_code_torch.py's description, in
  numpy float64, with the gradients of w_a L_a (w a constant) with respect to s_p and s_n."""
  s_n = np.where(valid, s_n, -np.inf)
  if logq == "corrected":
    ratio = np.maximum(neg_counts / (total - pos_counts)[:, None], 1e-10)
    s_c = s_n - np.log(ratio)
    z = np.exp(s_c).sum(1)
    loss = -np.log(np.maximum(np.exp(s_p) / np.maximum(z, 1e-10), 1e-10))
    n = np.maximum(valid.sum(1), 1e-10)
    p_hat = np.exp(s_p) / (np.exp(s_p) + z / n)
    w = 1.0 - p_hat
    # Away from the clamps: L = -s_p + log z, dL/ds_p = -1, dL/ds_n = softmax(s_c).
    return loss, w, -w, w[:, None] * np.exp(s_c) / z[:, None]
  if logq == "standard":
    s_n = s_n - np.log(neg_counts / total)
  logits = np.concatenate([s_p[:, None], s_n], 1)
  probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
  return -np.log(probs[:, 0]), np.ones_like(s_p), probs[:, 0] - 1.0, probs[:, 1:]


@pytest.mark.parametrize("logq", ["corrected", "standard", "none"])
def test_script_losses_and_gradients_match_the_description(logq):
  import torch

  from bench import paper_code_torch

  rng = np.random.default_rng(3)
  a, n = 9, 12
  s_p = rng.normal(size=a) * 3 + 4  # around log(1/Q'): P^ spread over (0, 1)
  s_n = rng.normal(size=(a, n)) * 2
  valid = rng.random((a, n)) > 0.2
  valid[0] = True
  neg_counts = rng.integers(1, 50, (a, n)).astype(np.float32)
  pos_counts = rng.integers(1, 50, a).astype(np.float32)
  total = np.float32(2000.0)
  sp_t = torch.tensor(s_p[:, None], requires_grad=True)
  sn_t = torch.tensor(s_n, requires_grad=True)
  loss, w = paper_code_torch.row_losses(
    logq,
    sp_t,
    sn_t,
    torch.from_numpy(valid),
    torch.from_numpy(neg_counts),
    torch.from_numpy(pos_counts),
    torch.tensor(total),
  )
  (loss * w).sum().backward()
  want_loss, want_w, want_gp, want_gn = _np_script_losses(
    logq, s_p, s_n, valid, neg_counts.astype(np.float64), pos_counts.astype(np.float64), total
  )
  np.testing.assert_allclose(loss.detach().numpy(), want_loss, rtol=1e-6)
  np.testing.assert_allclose(w.numpy(), want_w, rtol=1e-6)
  assert not w.requires_grad  # the weight is a constant of the gradient
  np.testing.assert_allclose(sp_t.grad.numpy()[:, 0], want_gp, rtol=1e-6, atol=1e-9)
  np.testing.assert_allclose(sn_t.grad.numpy(), np.where(valid, want_gn, 0.0), rtol=1e-6, atol=1e-9)
  if logq == "corrected":
    assert np.all((w.numpy() > 0) & (w.numpy() < 1)) and np.ptp(w.numpy()) > 0.05
  with pytest.raises(ValueError, match="logq must be one of"):
    paper_code_torch.PaperCodeStep(5, np.ones(6), logq="tfrs")


def _strip_times(history):
  return [{k: v for k, v in h.items() if "seconds" not in k} for h in history]


@pytest.mark.parametrize("logq", ["corrected", "standard"])
def test_a_resumed_run_is_the_uninterrupted_run(tmp_path, logq):
  from bench import paper_loop

  data = write_gsasrec_folder(tmp_path / "data")
  common = dict(
    dataset="gsasrec", data_path=str(data), max_len=20, dim=16, num_blocks=1, threads=1, seed=0
  )
  common["logq"] = logq
  whole = paper_loop.run(**common, max_epochs=12, patience=2, report=len)
  assert whole["stopped_early"] and 3 < whole["epochs_done"] < 12  # stops by patience 2

  ckpt = str(tmp_path / "ckpt")
  lines: list = []
  first = paper_loop.run(**common, max_epochs=3, patience=2, checkpoint_dir=ckpt, report=len)
  assert first["epochs_done"] == 3 and (tmp_path / "ckpt" / paper_loop.CHECKPOINT).exists()
  second = paper_loop.run(
    **common, max_epochs=12, patience=2, checkpoint_dir=ckpt, report=lines.append
  )
  assert lines[0].startswith("resumed from") and "epoch 3" in lines[0]
  assert second["paper_loop"]["resumed_at_epochs"] == [3]
  assert _strip_times(second["history"]) == _strip_times(whole["history"])
  for key in ("epochs_done", "global_step", "best_epoch", "best_step", "stopped_early"):
    assert second[key] == whole[key], key
  assert second["val"] == whole["val"] and second["test"] == whole["test"]
  w = [h["mean_weight"] for h in whole["history"]]
  assert all(x < 1 for x in w) if logq == "corrected" else all(x == 1 for x in w)

  # The stopped run, resumed with a larger patience, is the start of the longer-patience run.
  longer = paper_loop.run(**common, max_epochs=14, patience=4, report=len)
  more = paper_loop.run(**common, max_epochs=14, patience=4, checkpoint_dir=ckpt, report=len)
  assert more["epochs_done"] > whole["epochs_done"] and more["paper_loop"]["resumed_at_epochs"]
  assert _strip_times(more["history"]) == _strip_times(longer["history"])
  assert more["test"] == longer["test"]

  with pytest.raises(ValueError, match="seed"):
    paper_loop.run(**dict(common, seed=5), max_epochs=14, patience=4, checkpoint_dir=ckpt)


def test_a_paused_binary_exits_3_and_resumes(tmp_path):
  data = write_gsasrec_folder(tmp_path / "data")
  out, ckpt = tmp_path / "run" / "metrics.json", tmp_path / "ckpt"
  cmd = _command(
    data,
    "--max_epochs=3",
    "--patience=5",
    "--logq=none",
    "--max_seconds=1e-9",
    f"--checkpoint_dir={ckpt}",
    f"--metrics_json={out}",
  )
  env = dict(os.environ, OMP_NUM_THREADS="1")
  rcs, epochs = [], []
  for _ in range(4):
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    rcs.append(proc.returncode)
    epochs.append(json.loads(out.read_text())["epochs_done"])
  assert rcs == [3, 3, 0, 0], proc.stderr[-3000:]  # an epoch per call, then done
  assert epochs == [1, 2, 3, 3]
  assert json.loads(out.read_text())["paper_loop"]["logq"] == "none"
