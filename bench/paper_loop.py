r"""The logQ paper's training script as a whole run: its epoch loop around `PaperCodeStep`.

    python -m bench.paper_loop --metrics_json=/tmp/paper/metrics.json     # ML-1M, patience 200
    python -m bench.paper_loop --dataset=sequences --val_users=3000 --max_len=50 \
        --data_path=../shared/data/amazon-sports/sequences.txt --metrics_json=/tmp/sports.json
    python -m bench.paper_loop --max_epochs=1 --metrics_json=/tmp/smoke.json   # one epoch
    python -m bench.paper_loop --logq=standard --patience=20 --seed=1 \
        --checkpoint_dir=/tmp/p/ckpt --metrics_json=/tmp/p/metrics.json    # resumable

Written for the time to converge (`bench/experiments/time_to_converge.toml`) from the
description of the paper's script (a gSASRec-pytorch fork; the mixed-negatives script with the
corrected logQ loss), so that "the
paper's own training loop" is timed from start to final metrics beside our binaries. The step is
`bench/paper_code_torch.py`'s (eager PyTorch, as the paper code runs); this module adds what the
script does around it: its data loader, its "epochs", validation, early stopping and the final
evaluation. PyTorch is imported lazily, as in paper_code_torch, so ``--help`` needs no torch.

Data: the project's reader (`train.data.DataConfig`): --dataset=ml1m (or gsasrec: any folder in
the gSASRec layout, --data_path) or sequences (a file 'user item item ...', leave-one-out,
--val_users validation users drawn as gSASRec does). c = the training set's item counts.

    loader = DataLoader(training users, shuffle=True, batch_size=128, num_workers=--loader_workers,
                        collate = the last L + 1 items of each user, left-padded with 0)
                                                                      -> windows int [B, L + 1]
    E      = min(100, len(loader))                                    one "epoch" (ML-1M: 48)
    best, bad = -inf, 0
    for e = 1 .. --max_epochs while bad < --patience:
      it = iter(loader); E times: loss, w = PaperCodeStep(windows = next(it))
      model.eval(), no_grad: m = metrics(val); model.train()
      if m.NDCG@10 > best: best, best_e, bad = m.NDCG@10, e, 0; W* = copy(state_dict)
      else: bad += 1
    load W*; metrics(val), metrics(test)                              -> --metrics_json

The model, the step and the scoring run on --device (default: cuda when torch sees a GPU, as
the paper's script puts its model there; the loader and the metrics' bookkeeping stay on the
host). --max_seconds > 0 starts no epoch (after the first) past that much wall of the loop: a
capped run, whose per-epoch wall and curve bound a full run's time (stopped_by_time in the JSON).
--logq picks the script: corrected (train_mns_log_new), standard (train_mns_log_old) or none
(`paper_code_torch.row_losses`).

Resumable (--checkpoint_dir): after every epoch the weights, Adam's state, torch's generators,
the best weights and the loop's counters and history go to <dir>/paper_loop.pt (written
atomically); the same command continues from there, and on the CPU the resumed run is the
uninterrupted one, epoch for epoch (tests/bench/test_paper_loop.py). With --max_seconds it is a
run in chunks: each invocation writes the best weights' metrics so far and exits with status 3
until the run has stopped (`while python -m bench.paper_loop ... --checkpoint_dir=D
--max_seconds=540; [ $? -eq 3 ]; do :; done`). A stopped run resumed with a larger --patience
goes on as a run with that patience would have: the patience-20 run is the start of the
patience-200 one. A checkpoint of another run (other data, model, seed or --logq) is refused.

    metrics(split), per query u (input H_u, target t_u), in batches of --eval_batch_size:
      h_u    = model(left_pad(last L items of H_u))[last position]    [d]
      s_u    = h_u E_out^T                                             [|I| + 1], all items
      s_u[0] = s_u[i] = -inf for every i in H_u (the full history: "filter rated")
      r_u    = 0-based rank of t_u in top-20(s_u) (none: a miss; a filtered t_u is a miss)
      Recall@k = mean_u 1[r_u < k],  NDCG@k = mean_u 1[r_u < k] / log2(r_u + 2),  k = 10, 20

The metrics JSON has the keys of the binaries' (`train.epochs`): global_step, epochs_done,
best_epoch, best_step, best_val_ndcg10, stopped_early, val and test ({recall,ndcg}@{10,20},
num_queries), history (`train.epochs.epoch_record` per epoch: mean loss and weight, seconds of
the epoch's steps, wall seconds with its validation and weight copy, val_* metrics) and phases
(`train.epochs.Phases`, time.perf_counter seconds): first_step (the first batch and step),
steps (the other steps, data loading included), validation (every epoch's and the final one),
checkpoints (the state_dict copies and the final restore), test, export (always 0).
"""

from __future__ import annotations

import inspect
import json
import math
import os
import sys
import time
from typing import Dict, List, Sequence

import numpy as np
from absl import app, flags

from bench.common.report import write_json
from bench.paper_code_torch import LOGQS, PaperCodeStep, _torch, synchronize
from train import data as data_lib
from train import epochs as epochs_lib

FLAGS = flags.FLAGS

KS = (10, 20)
BATCH_SIZE = 128
MAX_BATCHES_PER_EPOCH = 100
CHECKPOINT = "paper_loop.pt"
PAUSED = 3  # the exit status of a run paused by --max_seconds with --checkpoint_dir


# The binary's flags: run()'s keywords (their defaults are run()'s), with their help.
CHOICES = {"dataset": ["ml1m", "gsasrec", "sequences"], "logq": list(LOGQS)}
FLAG_HELP = {
  "dataset": "ml1m (gSASRec files, --data_path default <data root>/ml1m), gsasrec (any "
  "gSASRec-layout folder, --data_path), sequences (a file 'user item item ...', "
  "--data_path, leave-one-out).",
  "data_path": "Folder (ml1m, gsasrec) or file (sequences) of the data.",
  "val_users": "sequences: validate on this many users drawn as gSASRec "
  "does (train.data.DataConfig.val_users); 0 = the dataset's own validation "
  "users (every user for a sequence file).",
  "max_len": "L: the model's window (ML-1M 200, Amazon Sports 50).",
  "dim": "Model width d.",
  "num_blocks": "Transformer blocks.",
  "patience": "Early stopping: epochs without a better validation NDCG@10 (the paper: 200).",
  "max_epochs": "At most this many epochs.",
  "max_seconds": "> 0: start no epoch after this many seconds of the epoch loop (the first always "
  "runs): a capped run, its history and phases, not a converged model (stopped_by_time in the "
  "JSON).",
  "device": "torch device of the model and the step; default cuda when torch sees one.",
  "seed": "torch's global seed (weights, dropout, negatives, shuffling).",
  "logq": "The script's loss: corrected (mixed negatives, corrected logQ), standard (the paper's "
  "'standard logQ' row: negatives corrected, the positive not) or none.",
  "checkpoint_dir": "Resumable run: the state after every epoch goes to <dir>/paper_loop.pt, and "
  "the same command resumes from it (a larger --patience or --max_epochs goes on from where it "
  "stopped). A run paused by --max_seconds exits with status 3.",
  "threads": "torch intra-op threads; 0 = torch's default.",
  "loader_workers": "DataLoader num_workers.",
  "eval_batch_size": "Validation / test queries per batch.",
  "progress": "A line per step (on stderr) besides the line per epoch.",
}


def define_flags() -> None:
  """The binary's flags (FLAG_HELP, typed by run()'s defaults, and --metrics_json), defined when
  it runs as a program (not on import: the module's functions are imported by tests in a
  process where other binaries' flags, such as --dataset, already exist)."""
  defaults = inspect.signature(run).parameters
  define = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, float: flags.DEFINE_float}
  for name, text in FLAG_HELP.items():
    default = defaults[name].default
    if name in CHOICES:
      flags.DEFINE_enum(name, default, CHOICES[name], text)
    else:
      define.get(type(default), flags.DEFINE_string)(name, default, text)
  flags.DEFINE_string(
    "metrics_json",
    None,
    "Required: where to write the run's metrics (JSON). "
    "--out is an alias (every bench script takes --out).",
  )
  flags.DEFINE_alias("out", "metrics_json")
  flags.mark_flag_as_required("metrics_json")


def collate(max_len: int):
  """The loader's collate function: user sequences -> windows int64 [B, max_len + 1] (the last
  max_len + 1 items of each, left-padded with 0)."""

  def fn(sequences):
    return data_lib.left_pad(sequences, max_len + 1)

  return fn


def train_loader(sequences: Sequence, max_len: int, workers: int = 0):
  """torch DataLoader over the training users (shuffled, 128 per batch, last batch kept)."""
  torch = _torch()
  return torch.utils.data.DataLoader(
    list(sequences),
    batch_size=BATCH_SIZE,
    shuffle=True,
    collate_fn=collate(max_len),
    num_workers=workers,
  )


def filtered_top_k(scores, inputs: Sequence, k: int):
  """Top-k of each row of ``scores`` float [B, |I| + 1] after setting padding id 0 and every item
  of the row's input to -inf (in place). Returns (ids int [B, k], finite bool [B, k]): the ids by
  decreasing score and whether each score is finite (a -inf one is never a hit)."""
  torch = _torch()
  lengths = [len(h) for h in inputs]
  if sum(lengths):
    rows = torch.from_numpy(np.repeat(np.arange(len(inputs)), lengths)).to(scores.device)
    cols = torch.from_numpy(np.concatenate([np.asarray(h, np.int64) for h in inputs]))
    cols = cols.to(scores.device)
    scores[rows, cols] = -math.inf
  scores[:, 0] = -math.inf
  values, ids = torch.topk(scores, min(k, scores.shape[1]), dim=1)
  return ids.cpu().numpy(), torch.isfinite(values).cpu().numpy()


def metric_sums(top_ids, finite, targets, ks: Sequence[int] = KS) -> Dict[str, float]:
  """Sums over queries of Recall@k and NDCG@k (module docstring) from ranked ids [B, K] (K >=
  max ks), their finiteness [B, K] and the targets [B]."""
  top_ids, finite = np.asarray(top_ids), np.asarray(finite, bool)
  hits = (top_ids == np.asarray(targets).reshape(-1, 1)) & finite
  found = hits.any(axis=1)
  rank = np.where(found, hits.argmax(axis=1), np.iinfo(np.int64).max)
  out = {}
  for k in ks:
    hit = found & (rank < k)
    out[f"recall@{k}"] = float(hit.sum())
    out[f"ndcg@{k}"] = float(np.sum(1.0 / np.log2(rank[hit] + 2.0)))
  return out


def evaluate(
  model, split, *, max_len: int, batch_size: int = 512, ks: Sequence[int] = KS
) -> Dict[str, float]:
  """{recall@k, ndcg@k, num_queries} of ``model`` on an `EvalSplit` (module docstring); leaves
  the model in training mode."""
  torch = _torch()
  sums = {f"{m}@{k}": 0.0 for k in ks for m in ("recall", "ndcg")}
  n = split.num_queries
  model.eval()
  try:
    with torch.no_grad():
      table = model.output_embedding.weight
      for s in range(0, n, batch_size):
        inputs = split.inputs[s : s + batch_size]
        x = torch.from_numpy(data_lib.left_pad(inputs, max_len)).to(table.device)
        hidden = model(x)[:, -1, :]
        ids, finite = filtered_top_k(hidden @ table.T, inputs, max(ks))
        for key, v in metric_sums(ids, finite, split.targets[s : s + batch_size], ks).items():
          sums[key] += v
  finally:
    model.train()
  out = {key: v / max(n, 1) for key, v in sums.items()}
  out["num_queries"] = int(n)
  return out


def _save(path: str, step_fn, best_state, loop: dict) -> None:
  """Writes the checkpoint atomically (a temporary file, then a rename)."""
  torch = _torch()
  tmp = path + ".tmp"
  torch.save(
    dict(step=step_fn.state_dict(), best_state=best_state, loop=json.dumps(loop, default=float)),
    tmp,
  )
  os.replace(tmp, path)


def read_checkpoint(path) -> tuple:
  """(the checkpoint's tensors and states, its loop dict: identity, counters, history) at
  ``path``; ValueError when the file is not a checkpoint of this loop."""
  state = _torch().load(path, map_location="cpu", weights_only=True)
  if not isinstance(state, dict) or "loop" not in state:
    raise ValueError(f"{path}: not a bench.paper_loop checkpoint (no 'loop')")
  return state, json.loads(state["loop"])


def _load(path: str, identity: dict):
  """(step state, best state, loop dict) of the checkpoint at ``path``; ValueError when it was
  written by a run that differs in ``identity`` (the run's settings and its data)."""
  state, loop = read_checkpoint(path)
  differ = {
    k: (loop["identity"].get(k), v) for k, v in identity.items() if loop["identity"].get(k) != v
  }
  if differ:
    raise ValueError(
      f"{path} was written by another run; (its, this command's) settings differ: {differ}. "
      "Use another --checkpoint_dir, or the run's own settings."
    )
  return state["step"], state["best_state"], loop


def run(
  *,
  dataset: str = "ml1m",
  data_path=None,
  val_users: int = 0,
  max_len: int = 200,
  dim: int = 128,
  num_blocks: int = 2,
  patience: int = 200,
  max_epochs: int = 100000,
  max_seconds: float = 0.0,
  device=None,
  seed: int = 0,
  logq: str = "corrected",
  checkpoint_dir=None,
  threads: int = 0,
  loader_workers: int = 0,
  eval_batch_size: int = 512,
  progress: bool = False,
  report=print,
) -> dict:
  """Trains as the paper's script does (module docstring); returns the metrics JSON's dict.

  With ``checkpoint_dir`` the run's state is saved after every epoch and a later call with the
  same settings (data, model, seed, logq) goes on from it: the same epochs, losses and metrics
  as one call, on the CPU exactly (torch's generators are part of the state)."""
  torch = _torch()
  data = data_lib.DataConfig(dataset=dataset, data_path=data_path, val_users=val_users).load()
  phases = epochs_lib.Phases()
  step_fn = PaperCodeStep(
    data.num_items,
    data.item_counts,
    max_len=max_len,
    dim=dim,
    num_blocks=num_blocks,
    threads=threads or None,
    seed=seed,
    device=device,
    logq=logq,
  )
  sync = lambda: synchronize(step_fn.device)
  model = step_fn.model
  loader = train_loader(data.train_sequences, max_len, loader_workers)
  steps_per_epoch = min(MAX_BATCHES_PER_EPOCH, len(loader))
  evaluate_split = lambda split: evaluate(model, split, max_len=max_len, batch_size=eval_batch_size)
  # What a checkpoint must agree on with the command that resumes it (the patience, the caps,
  # the device, threads and evaluation batches may change).
  settings = dict(
    dataset=dataset,
    val_users=val_users,
    max_len=max_len,
    dim=dim,
    num_blocks=num_blocks,
    seed=seed,
    logq=logq,
  )
  identity = dict(settings, data_fingerprint=data_lib.fingerprint(data))

  history: List[dict] = []
  best, best_epoch, bad, step, best_state = -math.inf, 0, 0, 0, None
  resumed_at: List[int] = []
  path = os.path.join(checkpoint_dir, CHECKPOINT) if checkpoint_dir else None
  if path and os.path.exists(path):
    step_state, best_state, loop = _load(path, identity)
    step_fn.load_state_dict(step_state)
    history, step, bad = loop["history"], loop["step"], loop["bad"]
    best, best_epoch = loop["best"], loop["best_epoch"]
    resumed_at = loop["resumed_at"] + [len(history)]
    phases = epochs_lib.Phases(loop["phases"])
    report(f"resumed from {path}: epoch {len(history)}, step {step}, best epoch {best_epoch}")
  elif path:
    os.makedirs(checkpoint_dir, exist_ok=True)
  first_done = stopped_by_time = False
  epoch = len(history)
  loop_start = time.perf_counter()
  while epoch < max_epochs and bad < patience:
    if max_seconds > 0 and first_done and time.perf_counter() - loop_start >= max_seconds:
      stopped_by_time = True
      break
    epoch_start = tick = time.perf_counter()
    loss_sum = weight_sum = 0.0
    batches = iter(loader)
    for b in range(steps_per_epoch):
      loss, weight = step_fn(next(batches))
      step += 1
      loss_sum, weight_sum = loss_sum + loss, weight_sum + weight
      if not first_done:
        sync()
        now = time.perf_counter()
        phases.add("first_step", now - tick)
        tick, first_done = now, True
      if progress:
        print(
          f"\repoch {epoch + 1} batch {b + 1}/{steps_per_epoch} loss {loss:.4f} w {weight:.4f}",
          end="",
          file=sys.stderr,
          flush=True,
        )
    del batches
    sync()
    now = time.perf_counter()
    phases.add("steps", now - tick)
    seconds = now - epoch_start
    if progress:
      print(file=sys.stderr, flush=True)
    with phases("validation"):
      metrics = evaluate_split(data.val)
    improved = metrics["ndcg@10"] > best
    if improved:
      best, best_epoch, bad = metrics["ndcg@10"], epoch + 1, 0
      with phases("checkpoints"):
        best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    else:
      bad += 1
    epoch += 1
    record = epochs_lib.epoch_record(
      epoch,
      step,
      loss_sum,
      weight_sum,
      steps_per_epoch,
      seconds,
      time.perf_counter() - epoch_start,
      metrics,
    )
    history.append(record)
    if path:
      with phases("checkpoints"):
        loop = dict(
          identity=identity,
          history=history,
          step=step,
          bad=bad,
          best=best,
          best_epoch=best_epoch,
          resumed_at=resumed_at,
          phases=phases.as_dict(),
        )
        _save(path, step_fn, best_state, loop)
    report(epochs_lib.report_line(record, improved))

  if best_state is not None:
    with phases("checkpoints"):
      model.load_state_dict(best_state)
  result = dict(
    paper_loop=dict(
      settings,
      data_path=data_path,
      patience=patience,
      max_epochs=max_epochs,
      max_seconds=max_seconds,
      device=str(step_fn.device),
      checkpoint_dir=checkpoint_dir,
      resumed_at_epochs=resumed_at,
      threads=torch.get_num_threads(),
      loader_workers=loader_workers,
      eval_batch_size=eval_batch_size,
      batch_size=BATCH_SIZE,
      torch=torch.__version__,
    ),
    data_fingerprint=identity["data_fingerprint"],
    num_items=data.num_items,
    steps_per_epoch=steps_per_epoch,
    global_step=step,
    epochs_done=epoch,
    best_epoch=best_epoch,
    best_step=epochs_lib.best_step(history, best_epoch),
    best_val_ndcg10=float(best) if best_state is not None else -1.0,
    train_wall_seconds=float(sum(h["wall_seconds"] for h in history)),
    stopped_early=bad >= patience,
    stopped_by_time=stopped_by_time,
    history=history,
  )
  with phases("validation"):
    result["val"] = evaluate_split(data.val)
  with phases("test"):
    result["test"] = evaluate_split(data.test)
  result["phases"] = phases.as_dict()
  return result


def main(argv):
  del argv
  result = run(**{n: FLAGS[n].value for n in FLAG_HELP}, report=lambda s: print(s, flush=True))
  path = FLAGS.metrics_json
  write_json(os.path.dirname(os.path.abspath(path)), os.path.basename(path), result)
  print(
    f"best epoch {result['best_epoch']} (step {result['best_step']}) of "
    f"{result['epochs_done']}: val NDCG@10 {result['val']['ndcg@10']:.4f}, test R@20 "
    f"{result['test']['recall@20']:.4f} N@20 {result['test']['ndcg@20']:.4f} -> {path}",
    flush=True,
  )
  if FLAGS.checkpoint_dir and result["stopped_by_time"]:
    print(f"paused by --max_seconds: the same command resumes from {FLAGS.checkpoint_dir}")
    sys.exit(PAUSED)


if __name__ == "__main__":
  define_flags()
  app.run(main)
