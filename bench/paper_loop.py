r"""The logQ paper's training script as a whole run: its epoch loop around `PaperCodeStep`.

    python -m bench.paper_loop --metrics_json=/tmp/paper/metrics.json     # ML-1M, patience 200
    python -m bench.paper_loop --dataset=sequences --val_users=3000 --max_len=50 \
        --data_path=../shared/data/amazon-sports/sequences.txt --metrics_json=/tmp/sports.json
    python -m bench.paper_loop --max_epochs=1 --metrics_json=/tmp/smoke.json   # one epoch
    python -m bench.paper_loop --logq=standard --patience=20 --seed=1 \
        --checkpoint_dir=/tmp/p/ckpt --metrics_json=/tmp/p/metrics.json    # resumable

Written from the description of the paper's script for the time to converge
(`bench/experiments/time_to_converge.toml`): the step is `bench/paper_code_torch.py`'s, this
module adds the script's data loader, "epochs", validation, early stopping, final evaluation and
(ours) resumable checkpoints. The loop, the metrics and the JSON's keys: bench/README.md, section
`paper_loop.py`. PyTorch is imported lazily, so ``--help`` needs no torch.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import sys
import time
import types
from typing import Dict, Sequence

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
# What a checkpoint must agree on with the command that resumes it (with the data's fingerprint;
# the patience, the caps, the device, threads and evaluation batches may change).
IDENTITY = ("dataset", "val_users", "max_len", "dim", "num_blocks", "seed", "logq")
# The metrics JSON's "paper_loop": the run's settings, in this order.
RECORDED = IDENTITY + tuple(
  "data_path patience max_epochs max_seconds device checkpoint_dir resumed_at_epochs threads "
  "loader_workers eval_batch_size batch_size torch".split()
)


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
  return lambda sequences: data_lib.left_pad(sequences, max_len + 1)


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
  """Sums over queries of Recall@k and NDCG@k (bench/README.md) from ranked ids [B, K] (K >=
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
  """{recall@k, ndcg@k, num_queries} of ``model`` on an `EvalSplit` (bench/README.md); leaves
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
  state = dict(
    step=step_fn.state_dict(), best_state=best_state, loop=json.dumps(loop, default=float)
  )
  _torch().save(state, path + ".tmp")
  os.replace(path + ".tmp", path)


def read_checkpoint(path) -> tuple:
  """(the checkpoint's tensors and states, its loop dict: identity, counters, history) at
  ``path``; ValueError when the file is not a checkpoint of this loop."""
  state = _torch().load(path, map_location="cpu", weights_only=True)
  if not isinstance(state, dict) or "loop" not in state:
    raise ValueError(f"{path}: not a bench.paper_loop checkpoint (no 'loop')")
  return state, json.loads(state["loop"])


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
  """Trains as the paper's script does (bench/README.md); returns the metrics JSON's dict.

  With ``checkpoint_dir`` the run's state is saved after every epoch and a later call with the
  same settings (data, model, seed, logq) goes on from it: the same epochs, losses and metrics
  as one call, on the CPU exactly (torch's generators are part of the state)."""
  args = dict(locals())
  torch = _torch()
  data = data_lib.DataConfig(dataset=dataset, data_path=data_path, val_users=val_users).load()
  phases = epochs_lib.Phases()
  step_fn = PaperCodeStep(
    data.num_items,
    data.item_counts,
    threads=threads or None,
    **{k: args[k] for k in ("max_len", "dim", "num_blocks", "seed", "device", "logq")},
  )
  sync = lambda: synchronize(step_fn.device)
  model = step_fn.model
  loader = torch.utils.data.DataLoader(  # the training users, shuffled, the last batch kept
    list(data.train_sequences),
    batch_size=BATCH_SIZE,
    shuffle=True,
    collate_fn=collate(max_len),
    num_workers=loader_workers,
  )
  steps_per_epoch = min(MAX_BATCHES_PER_EPOCH, len(loader))
  evaluate_split = lambda split: evaluate(model, split, max_len=max_len, batch_size=eval_batch_size)
  identity = dict({k: args[k] for k in IDENTITY}, data_fingerprint=data_lib.fingerprint(data))
  # the loop's state: what a checkpoint holds besides the tensors
  loop = types.SimpleNamespace(
    identity=identity, history=[], step=0, bad=0, best=-math.inf, best_epoch=0, resumed_at=[]
  )
  best_state = None
  path = os.path.join(checkpoint_dir, CHECKPOINT) if checkpoint_dir else None
  if path and os.path.exists(path):
    ckpt, saved = read_checkpoint(path)
    differ = {
      k: (saved["identity"].get(k), v) for k, v in identity.items() if saved["identity"].get(k) != v
    }
    if differ:
      raise ValueError(
        f"{path} was written by another run; (its, this command's) settings differ: {differ}. "
        "Use another --checkpoint_dir, or the run's own settings."
      )
    step_fn.load_state_dict(ckpt["step"])
    best_state, phases = ckpt["best_state"], epochs_lib.Phases(saved.pop("phases"))
    resumed_at = saved["resumed_at"] + [len(saved["history"])]
    loop = types.SimpleNamespace(**dict(saved, resumed_at=resumed_at))
    epoch_step = f"epoch {len(loop.history)}, step {loop.step}"
    report(f"resumed from {path}: {epoch_step}, best epoch {loop.best_epoch}")
  elif path:
    os.makedirs(checkpoint_dir, exist_ok=True)
  first_done = stopped_by_time = False
  epoch = len(loop.history)
  loop_start = time.perf_counter()
  while epoch < max_epochs and loop.bad < patience:
    if max_seconds > 0 and first_done and time.perf_counter() - loop_start >= max_seconds:
      stopped_by_time = True
      break
    epoch_start = tick = time.perf_counter()
    loss_sum = weight_sum = 0.0
    batches = iter(loader)
    for b in range(steps_per_epoch):
      loss, weight = step_fn(next(batches))
      loop.step += 1
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
    improved = metrics["ndcg@10"] > loop.best
    if improved:
      loop.best, loop.best_epoch, loop.bad = metrics["ndcg@10"], epoch + 1, 0
      with phases("checkpoints"):
        best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    else:
      loop.bad += 1
    epoch += 1
    wall = time.perf_counter() - epoch_start
    record = epochs_lib.epoch_record(
      epoch, loop.step, loss_sum, weight_sum, steps_per_epoch, seconds, wall, metrics
    )
    loop.history.append(record)
    if path:
      with phases("checkpoints"):
        _save(path, step_fn, best_state, dict(vars(loop), phases=phases.as_dict()))
    report(epochs_lib.report_line(record, improved))

  if best_state is not None:
    with phases("checkpoints"):
      model.load_state_dict(best_state)
  recorded = dict(args, resumed_at_epochs=loop.resumed_at, threads=torch.get_num_threads())
  recorded.update(device=str(step_fn.device), batch_size=BATCH_SIZE, torch=torch.__version__)
  result = dict(
    paper_loop={k: recorded[k] for k in RECORDED},
    data_fingerprint=identity["data_fingerprint"],
    num_items=data.num_items,
    steps_per_epoch=steps_per_epoch,
    global_step=loop.step,
    epochs_done=epoch,
    best_epoch=loop.best_epoch,
    best_step=epochs_lib.best_step(loop.history, loop.best_epoch),
    best_val_ndcg10=float(loop.best) if best_state is not None else -1.0,
    train_wall_seconds=float(sum(h["wall_seconds"] for h in loop.history)),
    stopped_early=loop.bad >= patience,
    stopped_by_time=stopped_by_time,
    history=loop.history,
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
