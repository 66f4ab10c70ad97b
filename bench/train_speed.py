r"""Seconds per SASRec training step, ours against the paper's PyTorch code in the same run.

    python bench/train_speed.py                 # paper-code config + fastest default vs paper code
    python bench/train_speed.py --quick         # 1 warm-up step, 2 rounds of 2 steps
    python bench/train_speed.py --configs=paper,batch+xla,sequence+xla,query+xla
    python bench/train_speed.py --no_yardstick  # ours only (no PyTorch needed)
    python bench/train_speed.py --profile       # where the time of our step goes (no PyTorch)

Workload (the paper's ML-1M setup): batch B = 128 windows of length L = 200 from the training
pipeline (`train.data.sasrec_train_dataset`, the same batches for every side), d = 128, 2 blocks,
1 head, dropout 0.5, 256 negatives = 128 in-batch (deduplicated, shared) + 128 uniform, corrected
logQ, Adam. A step is forward, loss, backward and the optimizer update (and, for the streaming
estimators, the estimator update); not the data pipeline.

Sides. Each runs in its own subprocess, all set up (and warmed up: tracing, XLA) before timing:
* ``paper code``: `bench/paper_code_torch.py`, a PyTorch re-implementation of the paper code's
  step (eager, float64 scores, [A, 256, d] gathered negatives; see that module). It needs the
  optional extra ``pip install ".[bench]"`` (PyTorch; tested with torch 2.13.0 CPU).
* ours, one per ``--configs`` entry: `train.trainer.Trainer.train_step` with the configuration
  named by ``+``-joined tokens: ``batch`` | ``sequence`` | ``query`` (who shares the 128 uniform
  negatives: the batch, each sequence, or nobody = the paper code's per-position draws; aliases
  ``shared``, ``per_position``), ``xla`` (jit_compile: encoder and scoring), ``step``
  (jit_compile_step: the whole step as one static-shape XLA program), ``reference`` (the paper
  code's block, else the default pre-LN block), ``hash_array`` | ``count_min`` (streaming Q(d)
  estimator updated every step, else exact counts), ``nopack`` (the encoder's per-token layers on
  the padded grid: `models.sasrec.SASRec` ``pack_tokens=False``), ``blocks<k>`` (causal attention
  in k query blocks, e.g. ``blocks1`` = the full L x L grid; else the model's default),
  ``malloc_default`` (glibc's own malloc settings; else ``--host_allocator=retain``, the
  binary's default: `train/host_memory.py`), ``malloc_arenas`` (retain, but glibc's per-thread
  heaps instead of one), ``noloss`` (a bound, not a trainable configuration: the step with the
  negatives' sampling and scoring and the sampled loss replaced by -<q, c_p>, i.e. what the step
  would cost if they were free), ``xla_loss`` / ``xla_objective`` (experiments, measured not to
  pay on CPU: the sampled loss alone, or the negatives' sampling, scoring and the loss together,
  compiled as one XLA program on rows zero-padded to a multiple of 3,200, i.e. <= 8 shapes). ``paper`` = ``query+reference+xla`` (the
  paper-code configuration), ``fastest`` = ``batch+xla``. The paper-code side runs with glibc's
  defaults, as it does when run (``--yardstick_allocator=retain`` gives it ours).

Timing: ``--rounds`` rounds; in each, every side runs ``--steps`` steps in a rotated order while
the others wait, so drift from other jobs on a shared machine hits every side alike. Reported: min
and median seconds per step over all timed steps, and the ratios paper code / ours of the mins
and of the medians. Only these same-run ratios mean anything: absolute times move 2-3x between
machines and with the load of a shared one.

Arithmetic: model FLOPs per step, counted analytically and the same for every implementation of
a configuration (multiply-add = 2 FLOPs; forward + backward = 3 x the forward matmul FLOPs, the
backward pass computing two matmuls per forward one):

    encoder  = 2 B L n_blocks (P d^2 + 2 d f + 2 L d)   P = 3 (reference: W_q, W_k, W_v) or
                                                        4 (pre-LN: W_qkv, W_out); f = FFN width = d;
                                                        2 L d: Q K^T and attn V on the full L x L
                                                        grid, as both sides compute it (a causal
                                                        kernel would need half)
    scoring  = 2 A (1 + N) d                            A = non-padding positions, N = 256
    step     = 3 (encoder + scoring)                    (ML-1M batch: ~44 GFLOP)

Element-wise work (LayerNorm, softmax, dropout, the loss, Adam) is not counted, nor extra work an
implementation chooses (e.g. per-query negatives scored as an [A, |I|] matmul plus a gather).
"GFLOP/s" is that count over the median step time, "% peak" against the fp32 matmul peak
measured in the same run, in the side's own framework (a 2048 x 2048 matmul, best of 5, at the
start and end of the run; the higher is kept).

Memory: peak resident set size (VmHWM) of each side's process during the timed steps (the peak
is reset after the warm-up), the same above the process's footprint right after importing its
framework ("step" = what the model, optimizer and step need), and above the process after the
warm-up ("work" = the step's working set: activations, gradients, temporaries). Every side
returns its free heap to the kernel after the warm-up (`train.host_memory.release_free_memory`,
glibc's malloc_trim), so the warm-up's garbage is not counted as the step's.

``--profile`` times the pieces of our step for each config (encoder forward, encoder forward +
backward, scores + loss + backward from fixed queries, the estimator update, the optimizer
update, the whole step), interleaved, and prints their medians as fractions of the step.

The last line is a one-line summary.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import pathlib
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

PER_TOKENS = {"batch": "batch", "shared": "batch", "sequence": "sequence", "query": "query",
              "per_position": "query"}
ESTIMATORS = ("exact", "hash_array", "count_min")
NAMED = {"paper": "query+reference+xla", "fastest": "batch+xla"}
YARDSTICK = "paper code (torch)"
_REPLY = "@@"


# ------------------------------------------------------------------------------------ configs
@dataclasses.dataclass(frozen=True)
class SideConfig:
  """One of our configurations (module docstring)."""
  name: str
  uniform: str = "batch"
  xla: bool = False
  block: str = "pre_ln"
  estimator: str = "exact"
  step_xla: bool = False
  pack: bool = True
  attention_blocks: int = 0                 # 0: the model's default
  allocator: str = "retain"                 # train.host_memory: the binary's default
  one_heap: bool = True                     # retain's M_ARENA_MAX = 1
  no_loss: bool = False                     # the bound: scoring + sampled loss removed
  xla_part: str = ""                        # "", "loss" or "objective": compiled separately

  @property
  def label(self) -> str:
    block = "reference" if self.block == "reference" else "pre-LN"
    xla = ", XLA step" if self.step_xla else (", XLA" if self.xla else "")
    execution = ("" if self.pack else ", no pack") + (
        f", {self.attention_blocks} attn blocks" if self.attention_blocks else "") + (
        ", glibc malloc" if self.allocator == "default" else "") + (
        ", malloc heap per thread" if not self.one_heap else "") + (
        ", bound: no scoring/loss" if self.no_loss else "") + (
        f", XLA {self.xla_part} on padded rows" if self.xla_part else "")
    return (f"ours: {self.uniform} uniform, {block}{xla}"
            f"{', ' + self.estimator if self.estimator != 'exact' else ''}{execution}")


def parse_config(name: str) -> SideConfig:
  """Tokens joined by ``+`` (``paper`` and ``fastest`` expand to theirs; module docstring)."""
  tokens = [t for part in name.split("+") for t in NAMED.get(part, part).split("+")]
  uniform = [PER_TOKENS[t] for t in tokens if t in PER_TOKENS]
  estimator = [t for t in tokens if t in ESTIMATORS]
  blocks = [int(t[6:]) for t in tokens if re.fullmatch(r"blocks[1-9][0-9]*", t)]
  unknown = [t for t in tokens if t not in PER_TOKENS and t not in ESTIMATORS
             and t not in ("xla", "reference", "step", "nopack", "malloc_default",
                           "malloc_arenas", "noloss", "xla_loss", "xla_objective")
             and not re.fullmatch(r"blocks[1-9][0-9]*", t)]
  if unknown or len(uniform) > 1 or len(estimator) > 1 or len(blocks) > 1:
    raise ValueError(f"--configs entry {name!r}: expected paper, fastest or tokens "
                     f"{sorted(PER_TOKENS)} + xla + step + reference + nopack + blocks<k> + "
                     "malloc_default + malloc_arenas + noloss + xla_loss|xla_objective + "
                     f"{ESTIMATORS} (one of each kind)")
  return SideConfig(name=name, uniform=uniform[0] if uniform else "batch", xla="xla" in tokens,
                    block="reference" if "reference" in tokens else "pre_ln",
                    estimator=estimator[0] if estimator else "exact", step_xla="step" in tokens,
                    pack="nopack" not in tokens, attention_blocks=blocks[0] if blocks else 0,
                    allocator="default" if "malloc_default" in tokens else "retain",
                    one_heap="malloc_arenas" not in tokens, no_loss="noloss" in tokens,
                    xla_part="objective" if "xla_objective" in tokens else
                    "loss" if "xla_loss" in tokens else "")


def step_flops(num_queries: float, *, batch: int, length: int, dim: int, num_blocks: int,
               block: str, num_negatives: int, ffn_dim: int = None) -> float:
  """Model FLOPs of one training step (forward + backward; module docstring)."""
  if block not in ("pre_ln", "reference"):
    raise ValueError(f"block must be pre_ln or reference, got {block!r}")
  f = dim if ffn_dim is None else ffn_dim
  projections = 3 if block == "reference" else 4
  encoder = 2 * batch * length * num_blocks * (projections * dim * dim + 2 * dim * f
                                               + 2 * length * dim)
  scoring = 2 * num_queries * (1 + num_negatives) * dim
  return 3.0 * (encoder + scoring)


# ------------------------------------------------------------------------------------ workers
def _status_kib(field: str) -> int:
  text = pathlib.Path("/proc/self/status").read_text()
  m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
  return int(m.group(1)) if m else 0


def _reset_peak_rss() -> bool:
  try:
    pathlib.Path("/proc/self/clear_refs").write_text("5")
    return True
  except OSError:
    return False


def _our_trainer(spec: dict, cfg: SideConfig):
  """A `train.trainer.Trainer` for one of our configurations."""
  from train import data as data_lib  # pylint: disable=g-import-not-at-top
  from train.config import RunConfig  # pylint: disable=g-import-not-at-top
  from train.trainer import Trainer  # pylint: disable=g-import-not-at-top
  data = data_lib.load("ml1m", spec["data_path"])
  run_config = RunConfig.create(
      dataset="ml1m", data_path=spec["data_path"], model="sasrec", loss="sampled_softmax",
      negatives="mixed", num_negatives=256, uniform_negatives=cfg.uniform, logq=spec["logq"],
      sasrec_block=cfg.block, frequency=cfg.estimator, frequency_buckets=spec["buckets"],
      batch_size=spec["batch_size"], max_len=spec["max_len"], jit_compile=cfg.xla,
      jit_compile_step=cfg.step_xla, sasrec_pack_tokens=cfg.pack,
      **({"sasrec_attention_blocks": cfg.attention_blocks} if cfg.attention_blocks else {}),
      dropout=spec["dropout"], seed=spec["seed"], steps_per_epoch=1,
      model_dir=tempfile.mkdtemp(prefix="train_speed_"), progress=False)
  return Trainer(run_config, data=data), data


def _remove_scoring_and_loss(trainer) -> None:
  """The ``noloss`` bound: the objective's per-query loss becomes -<q_a, c_{p_a}> (no negatives
  are drawn or scored, no log Q is read); the encoder, its gradient, the embedding lookups, the
  padding mask and Adam are the real step's."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfrs_logq import losses  # pylint: disable=g-import-not-at-top
  objective = trainer.objective

  def per_query_loss(q, pos_ids, seq_ids, seed, valid=None):  # pylint: disable=unused-argument
    score = tf.reduce_sum(q * objective.model.item_embeddings(pos_ids), axis=-1)
    return losses.LossOutput(-score, tf.ones_like(score), tf.zeros_like(score, tf.int32))
  objective.per_query_loss = per_query_loss


_PAD_ROWS = 3200          # ceil(B L / 8) for the ML-1M batch: the encoder's capacity step


def _compile_separately(trainer, part: str) -> None:
  """The ``xla_loss`` / ``xla_objective`` experiments: the sampled loss (``loss``), or the
  negatives' sampling and scoring and the loss (``objective``), as one XLA program on the A rows
  zero-padded to a multiple of `_PAD_ROWS` (padding rows have positive id 0: masked by the
  objective's static-shape path, and sliced off)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfrs_logq import losses  # pylint: disable=g-import-not-at-top
  objective = trainer.objective

  def pad(x, rows):
    return tf.pad(x, [[0, rows - tf.shape(x)[0]]] + [[0, 0]] * (x.shape.rank - 1))

  def rows_of(x):
    a = tf.shape(x)[0]
    return a, (a + _PAD_ROWS - 1) // _PAD_ROWS * _PAD_ROWS

  if part == "objective":
    per_query_loss = objective.per_query_loss
    compiled = tf.function(
        lambda q, p, s, seed: tuple(per_query_loss(q, p, s, seed, valid=tf.not_equal(p, 0))),
        jit_compile=True)

    def padded_objective(q, pos_ids, seq_ids, seed, valid=None):
      if valid is not None:
        raise ValueError("xla_objective runs on the dynamic-shape step only")
      a, c = rows_of(q)
      out = compiled(pad(q, c), pad(pos_ids, c), pad(seq_ids, c), seed)
      return losses.LossOutput(*(t[:a] for t in out))
    objective.per_query_loss = padded_objective
  elif part == "loss":
    loss_layer = objective.loss
    compiled = tf.function(lambda *args: tuple(loss_layer(*args)), jit_compile=True)

    def padded_loss(s_p, s_n, log_q, pos_log_q, valid_mask):
      a, c = rows_of(s_p)
      log_q = pad(log_q, c) if log_q.shape.rank == 2 else log_q
      out = compiled(pad(s_p, c), pad(s_n, c), log_q, pad(pos_log_q, c), pad(valid_mask, c))
      return losses.LossOutput(*(t[:a] for t in out))
    objective.loss = padded_loss
  else:
    raise ValueError(f"unknown part {part!r}")


def _matmul_peak_tf(n: int, repeats: int = 5) -> float:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  a = tf.random.stateless_normal([n, n], seed=[1, 2])
  b = tf.random.stateless_normal([n, n], seed=[3, 4])
  best = float("inf")
  for i in range(repeats + 1):
    start = time.perf_counter()
    tf.matmul(a, b).numpy()
    if i:
      best = min(best, time.perf_counter() - start)
  return 2 * n ** 3 / best / 1e9


def _matmul_peak_torch(n: int, repeats: int = 5) -> float:
  import torch  # pylint: disable=g-import-not-at-top
  a, b = torch.randn(n, n), torch.randn(n, n)
  best = float("inf")
  for i in range(repeats + 1):
    start = time.perf_counter()
    torch.matmul(a, b)
    if i:
      best = min(best, time.perf_counter() - start)
  return 2 * n ** 3 / best / 1e9


def _worker(spec: dict) -> None:
  """Subprocess: sets up one side, then answers commands read from stdin (one JSON a line)."""
  proto = os.fdopen(os.dup(1), "w", buffering=1)
  os.dup2(2, 1)                      # anything a library prints goes to stderr, not the protocol
  reply = lambda obj: proto.write(f"{_REPLY} {json.dumps(obj)}\n")
  arrays = np.load(spec["batches"])
  inputs, targets, windows = arrays["inputs"], arrays["targets"], arrays["windows"]
  threads = spec["threads"]
  from train import host_memory  # pylint: disable=g-import-not-at-top
  if spec["side"] == "torch":
    host_memory.configure(spec["allocator"])
  else:
    host_memory.configure(spec["config"]["allocator"], one_heap=spec["config"]["one_heap"])
  if spec["side"] == "torch":
    import torch  # pylint: disable=g-import-not-at-top
    torch.set_num_threads(threads)
    rss_import = _status_kib("VmRSS")
    from bench import paper_code_torch  # pylint: disable=g-import-not-at-top
    step_fn = paper_code_torch.PaperCodeStep(
        int(arrays["num_items"]), arrays["item_counts"], max_len=spec["max_len"],
        dropout=spec["dropout"], threads=threads, seed=spec["seed"])
    run = lambda i: step_fn(windows[i])
    peak = _matmul_peak_torch
    info = dict(threads=torch.get_num_threads(), framework=f"torch {torch.__version__}")
  else:
    import tfrs_logq  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.get_logger().setLevel("ERROR")
    rss_import = _status_kib("VmRSS")
    cfg = SideConfig(**spec["config"])
    trainer, _ = _our_trainer(spec, cfg)
    if cfg.no_loss:
      _remove_scoring_and_loss(trainer)
    if cfg.xla_part:
      _compile_separately(trainer, cfg.xla_part)
    batches = [dict(inputs=tf.constant(inputs[i]), targets=tf.constant(targets[i]))
               for i in range(len(inputs))]

    def run(i):
      loss, w = trainer.train_step(batches[i])
      return float(loss), float(w)
    peak = _matmul_peak_tf
    info = dict(threads=threads, framework=f"tensorflow {tf.__version__}")
  num_batches = len(windows)
  cursor = [0]

  def steps(n):
    times, out = [], None
    for _ in range(n):
      start = time.perf_counter()
      out = run(cursor[0] % num_batches)
      times.append(time.perf_counter() - start)
      cursor[0] += 1
    return times, out

  for _ in range(spec["warmup"]):
    steps(1)
  cursor[0] = 0
  host_memory.release_free_memory()      # the warm-up's garbage (tracing, XLA) is not the step's
  rss_ready = _status_kib("VmRSS")
  reset = _reset_peak_rss()
  reply(dict(ready=True, **info))
  profiler = None
  for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["cmd"] == "steps":
      times, (loss, w) = steps(cmd["n"])
      reply(dict(times=times, loss=loss, w=w))
    elif cmd["cmd"] == "peak":
      reply(dict(gflops=peak(cmd["n"])))
    elif cmd["cmd"] == "profile":
      if profiler is None:
        profiler = _Profiler(trainer, batches)
      reply(profiler.round(cmd["n"]))
    elif cmd["cmd"] == "quit":
      reply(dict(peak_rss_kib=_status_kib("VmHWM") if reset else None,
                 lifetime_peak_rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                 rss_import_kib=rss_import, rss_ready_kib=rss_ready))
      return


class _Profiler:
  """Times the pieces of our step through the model / objective interfaces (no internals):

  encoder_fwd: model.training_queries (forward only);  encoder_fwd_bwd: the same + the gradient
  of sum(queries * fixed random) w.r.t. every variable;  loss_fwd_bwd: the objective with the
  model's queries replaced by fixed ones (negatives, scores, log Q, loss, estimator update) and
  its gradient w.r.t. the queries and the variables;  estimator: the estimator update alone;
  optimizer: Adam applying the gradients of one real step;  step: Trainer.train_step.
  """

  PIECES = ("step", "encoder_fwd", "encoder_fwd_bwd", "loss_fwd_bwd", "estimator", "optimizer")

  def __init__(self, trainer, batches):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    self.tf, self.trainer, self.batches = tf, trainer, batches
    model, objective, step = trainer.model, trainer.objective, trainer.step
    variables = model.trainable_variables
    seed = tf.constant([1, 2], tf.int64)
    queries = lambda out: out[0]                     # TrainingQueries(queries, ...) or a tuple

    @tf.function
    def encoder_fwd(batch):
      return tf.reduce_sum(queries(model.training_queries(batch, training=True, seed=seed)))

    @tf.function
    def encoder_fwd_bwd(batch):
      with tf.GradientTape() as tape:
        q = queries(model.training_queries(batch, training=True, seed=seed))
        loss = tf.reduce_sum(q * tf.random.stateless_normal(tf.shape(q), [5, 6]))
      return [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables) if g is not None]

    frozen = _FixedQueries(model, batches, seed)
    loss_objective = copy.copy(objective)
    loss_objective.model = frozen

    def loss_fwd_bwd_fn(batch, i):
      frozen.index = i
      with tf.GradientTape() as tape:
        terms = loss_objective(batch, step, training=True)
      grads = tape.gradient(terms["loss"], [frozen.last] + variables)
      return [tf.convert_to_tensor(g) for g in grads if g is not None]
    loss_fns = [tf.function(lambda b, i=i: loss_fwd_bwd_fn(b, i)) for i in range(len(batches))]

    estimator = trainer.estimator
    positives = [tf.boolean_mask(b["targets"], b["targets"] != 0) for b in batches]
    self.has_estimator = (estimator is not None and
                          type(estimator).__name__ != "ExactCounts")
    estimator_update = tf.function(lambda i: estimator.update(positives[i]))

    @tf.function
    def grads_of_step(batch):
      with tf.GradientTape() as tape:
        terms = objective(batch, step, training=True)
      return tape.gradient(terms["loss"], variables)
    grads = [grads_of_step(b) for b in batches]
    shadow = [tf.Variable(v) for v in variables]
    optimizer = tf.keras.optimizers.Adam(1e-3)
    optimizer.build(shadow)
    apply = tf.function(lambda g: optimizer.apply_gradients(
        [(gi, v) for gi, v in zip(g, shadow) if gi is not None]))
    self.fns = dict(step=lambda i: trainer.train_step(batches[i]),
                    encoder_fwd=lambda i: encoder_fwd(batches[i]),
                    encoder_fwd_bwd=lambda i: encoder_fwd_bwd(batches[i]),
                    loss_fwd_bwd=lambda i: loss_fns[i](batches[i]),
                    estimator=estimator_update if self.has_estimator else None,
                    optimizer=lambda i: apply(grads[i]))
    self.cursor = 0
    self.round(len(batches))                                 # tracing, one per batch shape

  def round(self, n: int) -> dict:
    times = {p: [] for p in self.PIECES}
    for _ in range(n):
      i = self.cursor % len(self.batches)
      self.cursor += 1
      for piece in self.PIECES:
        if self.fns[piece] is None:
          continue
        start = time.perf_counter()
        out = self.fns[piece](i)
        self.tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, out)
        times[piece].append(time.perf_counter() - start)
    return times


class _FixedQueries:
  """A query model whose training queries are fixed: the real model's for batch ``index`` with the
  same arguments, computed once (eagerly, outside the traced step) and held in a variable, so a
  traced objective sees a constant encoder; everything else is the real model."""

  def __init__(self, model, batches, seed):
    self._model, self._batches, self._seed = model, batches, seed
    self._cache = {}
    self.index, self.last = 0, None

  def __getattr__(self, name):
    return getattr(self._model, name)

  def training_queries(self, batch, training=True, seed=None,  # pylint: disable=unused-argument
                       **kwargs):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    key = (self.index, repr(sorted(kwargs.items())))
    if key not in self._cache:
      with tf.init_scope():
        out = self._model.training_queries(self._batches[self.index], training=True,
                                           seed=self._seed, **kwargs)
        self._cache[key] = (tf.Variable(out[0]), out)
    self.last, out = self._cache[key]
    rest = tuple(out)[1:]
    return type(out)(self.last, *rest) if hasattr(out, "_fields") else (self.last,) + rest


# ------------------------------------------------------------------------------------ parent
class _Side:
  """A worker subprocess and its results."""

  def __init__(self, name: str, spec: dict, log_dir: str):
    self.name, self.spec = name, spec
    self.log_path = os.path.join(log_dir, re.sub(r"[^a-z0-9]+", "_", name.lower()) + ".log")
    self.log = open(self.log_path, "w")
    self.proc = subprocess.Popen([sys.executable, "-m", "bench.train_speed", "--_worker",
                                  json.dumps(spec)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                 text=True, bufsize=1, cwd=str(ROOT))
    self.times, self.loss, self.w, self.info, self.memory = [], None, None, {}, {}

  def send(self, **cmd):
    self.proc.stdin.write(json.dumps(cmd) + "\n")
    self.proc.stdin.flush()

  def receive(self) -> dict:
    for line in self.proc.stdout:
      if line.startswith(_REPLY + " "):
        return json.loads(line[len(_REPLY) + 1:])
    self.log.flush()
    tail = pathlib.Path(self.log_path).read_text()[-3000:]
    raise RuntimeError(f"side {self.name!r} died (exit {self.proc.wait()}); log tail:\n{tail}")

  def ask(self, **cmd) -> dict:
    self.send(**cmd)
    return self.receive()

  def close(self):
    try:
      self.memory = self.ask(cmd="quit")
    finally:
      self.proc.wait(timeout=120)
      self.log.close()


def _load_batches(args) -> tuple:
  """The first --num_batches batches of the training pipeline, as numpy, + the dataset."""
  from train import data as data_lib  # pylint: disable=g-import-not-at-top
  data = data_lib.load("ml1m", args.data_path)
  ds = data_lib.sasrec_train_dataset(data, batch_size=args.batch_size, max_len=args.max_len,
                                     seed=args.seed)
  batches = [{k: v.numpy() for k, v in b.items()} for b in ds.take(args.num_batches)]
  inputs = np.stack([b["inputs"] for b in batches])
  targets = np.stack([b["targets"] for b in batches])
  # windows [B, L + 1] of the paper code: inputs followed by the last target.
  windows = np.concatenate([inputs, targets[:, :, -1:]], axis=2)
  if not np.array_equal(np.where(inputs != 0, windows[:, :, 1:], 0), targets):
    raise AssertionError("the pipeline's targets are not the next items of its inputs")
  return inputs, targets, windows, data


def _gib(kib) -> str:
  return "-" if kib is None else f"{kib / 2 ** 20:.2f}"


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true", help="1 warm-up step, 2 rounds of 2 steps")
  parser.add_argument("--configs", default="paper,fastest",
                      help="comma-separated configurations of ours (module docstring)")
  parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
  parser.add_argument("--steps", type=int, default=2, help="timed steps per side and round")
  parser.add_argument("--warmup", type=int, default=None,
                      help="untimed steps (tracing, XLA; default --num_batches: every batch once, "
                      "so each token-capacity shape of the packed XLA encoder is compiled)")
  parser.add_argument("--no_yardstick", action="store_true",
                      help="do not run the paper code (PyTorch) side")
  parser.add_argument("--profile", action="store_true",
                      help="time the pieces of our step instead (implies --no_yardstick)")
  parser.add_argument("--data_path", default=None, help="ml1m folder (default: the data root)")
  parser.add_argument("--batch_size", type=int, default=128)
  parser.add_argument("--max_len", type=int, default=200)
  parser.add_argument("--num_batches", type=int, default=4, help="distinct batches, cycled")
  parser.add_argument("--dropout", type=float, default=0.5, help="dropout (paper: 0.5)")
  parser.add_argument("--logq", default="corrected",
                      help="our logQ correction (tfrs_logq.losses.CORRECTIONS); the paper "
                      "code side is always corrected")
  parser.add_argument("--buckets", type=int, default=2 ** 22,
                      help="hash-array size / count-min width for +hash_array / +count_min")
  parser.add_argument("--threads", type=int, default=os.cpu_count(),
                      help="intra-op threads of every side")
  parser.add_argument("--matmul_n", type=int, default=2048, help="size of the peak matmul")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--yardstick_allocator", default="default", choices=("default", "retain"),
                      help="the paper code's malloc: default (as it runs) or retain (ours; "
                      "train/host_memory.py)")
  parser.add_argument("--out", default="bench/out",
                      help="folder for train_speed.json (every side's times, ratios, GFLOP/s, RSS)")
  parser.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args._worker:  # pylint: disable=protected-access
    _worker(json.loads(args._worker))  # pylint: disable=protected-access
    return
  if args.warmup is None:
    args.warmup = args.num_batches
  if args.quick:
    args.rounds, args.steps, args.warmup, args.matmul_n = 2, 2, 1, 1024
  if args.profile:
    args.no_yardstick = True
  configs = [parse_config(c) for c in args.configs.split(",") if c]
  if not configs:
    raise ValueError("--configs is empty")
  inputs, targets, windows, data = _load_batches(args)
  num_queries = float(np.mean([(t != 0).sum() for t in targets]))
  tmp = tempfile.mkdtemp(prefix="train_speed_")
  batches_path = os.path.join(tmp, "batches.npz")
  np.savez(batches_path, inputs=inputs, targets=targets, windows=windows,
           item_counts=np.asarray(data.item_counts, np.float32), num_items=data.num_items)
  base = dict(batches=batches_path, data_path=args.data_path, batch_size=args.batch_size,
              max_len=args.max_len, dropout=args.dropout, logq=args.logq, buckets=args.buckets,
              threads=args.threads, warmup=args.warmup, seed=args.seed)
  yardstick = not args.no_yardstick
  if yardstick:
    try:
      import importlib.util  # pylint: disable=g-import-not-at-top
      yardstick = importlib.util.find_spec("torch") is not None
    except ImportError:
      yardstick = False
    if not yardstick:
      print("PyTorch is not installed: no paper-code side (pip install torch, e.g. "
            "`.venv/bin/pip install torch==2.13.0`)")
  flops = {c.name: step_flops(num_queries, batch=args.batch_size, length=args.max_len, dim=128,
                              num_blocks=2, block=c.block,
                              num_negatives=0 if c.no_loss else 256) for c in configs}
  flops[YARDSTICK] = step_flops(num_queries, batch=args.batch_size, length=args.max_len,
                                dim=128, num_blocks=2, block="reference", num_negatives=256)
  print(f"SASRec ML-1M: batch {args.batch_size} x {args.max_len}, A = {num_queries:.0f} queries "
        f"per batch (mean of {args.num_batches} batches), d 128, 2 blocks, 1 head, dropout "
        f"{args.dropout}, 128 in-batch + 128 uniform negatives, {args.logq} logQ (ours); "
        f"{args.threads} threads per side, {os.cpu_count()} CPUs; {args.warmup} warm-up steps, "
        f"{args.rounds} interleaved rounds x {args.steps} steps. Shared machine: only same-run "
        "ratios count.", flush=True)
  sides = {}
  try:
    if yardstick:
      sides[YARDSTICK] = _Side(YARDSTICK, dict(base, side="torch",
                                               allocator=args.yardstick_allocator), tmp)
    for c in configs:
      sides[c.name] = _Side(c.name, dict(base, side="ours", config=dataclasses.asdict(c)), tmp)
    for side in sides.values():
      side.info = side.receive()
    if args.profile:
      _profile(sides, configs, args)
      return
    ours_tf = sides[configs[0].name]
    peaks = {"tensorflow": [], "torch": []}

    def measure_peaks():
      peaks["tensorflow"].append(ours_tf.ask(cmd="peak", n=args.matmul_n)["gflops"])
      if yardstick:
        peaks["torch"].append(sides[YARDSTICK].ask(cmd="peak", n=args.matmul_n)["gflops"])

    measure_peaks()
    names = list(sides)
    for r in range(args.rounds):
      for name in names[r % len(names):] + names[:r % len(names)]:
        out = sides[name].ask(cmd="steps", n=args.steps)
        sides[name].times += out["times"]
        sides[name].loss, sides[name].w = out["loss"], out["w"]
      print(f"round {r + 1}/{args.rounds}: " + ", ".join(
          f"{n} {statistics.median(s.times):.2f} s" for n, s in sides.items()), flush=True)
    measure_peaks()
  finally:
    for side in sides.values():
      if side.proc.poll() is None:
        side.close()
  peak = {k: max(v) if v else None for k, v in peaks.items()}
  print(f"fp32 matmul peak ({args.matmul_n}^2, {args.threads} threads): TensorFlow "
        f"{peak['tensorflow']:.1f} GFLOP/s" + (f", PyTorch {peak['torch']:.1f} GFLOP/s"
                                               if peak["torch"] else ""))
  pre_ln = step_flops(num_queries, batch=args.batch_size, length=args.max_len, dim=128,
                      num_blocks=2, block="pre_ln", num_negatives=256)
  print(f"model FLOPs per step: {flops[YARDSTICK] / 1e9:.1f} G (reference block), "
        f"{pre_ln / 1e9:.1f} G (pre-LN block)")
  ref = sides.get(YARDSTICK)
  header = (f"{'side':<44}{'min s':>7}{'med s':>7}{'x min':>7}{'x med':>7}{'GFLOP/s':>9}"
            f"{'%peak':>7}{'RSS GiB':>9}{'step GiB':>9}{'work GiB':>9}{'loss':>8}{'w':>7}")
  print(header)
  print("-" * len(header))
  results = {}
  for name, side in sides.items():
    mn, med = min(side.times), statistics.median(side.times)
    results[name] = (mn, med)
    framework = "torch" if name == YARDSTICK else "tensorflow"
    label = YARDSTICK if name == YARDSTICK else parse_config(name).label
    gflops = flops[name] / med / 1e9
    mem = side.memory
    step_mem = (None if mem.get("peak_rss_kib") is None
                else mem["peak_rss_kib"] - mem["rss_import_kib"])
    work_mem = (None if mem.get("peak_rss_kib") is None
                else mem["peak_rss_kib"] - mem["rss_ready_kib"])
    ratio_min = f"{ref and min(ref.times) / mn:>7.2f}" if ref else f"{'-':>7}"
    ratio_med = f"{ref and statistics.median(ref.times) / med:>7.2f}" if ref else f"{'-':>7}"
    print(f"{label:<44}{mn:>7.2f}{med:>7.2f}{ratio_min}{ratio_med}{gflops:>9.1f}"
          f"{100 * gflops / peak[framework]:>7.0f}{_gib(mem.get('peak_rss_kib')):>9}"
          f"{_gib(step_mem):>9}{_gib(work_mem):>9}{side.loss:>8.3f}{side.w:>7.3f}")
  _write_json(args.out, dict(
      argv=sys.argv[1:], peak_gflops=peak,
      model_gflop_per_step={n: f / 1e9 for n, f in flops.items()},
      sides={name: dict(times=side.times, min_s=min(side.times),
                        median_s=statistics.median(side.times), memory=side.memory,
                        x_min=(min(ref.times) / min(side.times)) if ref else None,
                        x_median=(statistics.median(ref.times) / statistics.median(side.times))
                        if ref else None)
             for name, side in sides.items()}))
  print("x min / x med: the paper code's min / median over ours (same run); RSS: peak resident "
        "set during the timed steps; step: the same above the framework's import footprint; work: "
        "above the process after the warm-up (model, optimizer, compiled programs; free heap "
        "returned to the kernel first): the step's working set. "
        "Losses differ by definition (the paper code's loss has no log-sum-exp shift).")
  ours = [c.name for c in configs]
  trainable = [c.name for c in configs if not c.no_loss] or ours     # a bound is not a contender
  best = min(trainable, key=lambda n: results[n][1])
  if ref:
    rmin, rmed = min(ref.times), statistics.median(ref.times)
    parts = [f"{n} {rmin / results[n][0]:.2f}x / {rmed / results[n][1]:.2f}x" for n in ours]
    mem_ratio = (ref.memory["peak_rss_kib"] / sides[best].memory["peak_rss_kib"]
                 if ref.memory.get("peak_rss_kib") and sides[best].memory.get("peak_rss_kib")
                 else float("nan"))
    print(f"summary: faster than the paper's PyTorch code (min / median, same run): "
          f"{'; '.join(parts)}; best {best} at {flops[best] / results[best][1] / 1e9:.1f} "
          f"GFLOP/s = {100 * flops[best] / results[best][1] / 1e9 / peak['tensorflow']:.0f}% "
          f"of peak, peak RSS {mem_ratio:.1f}x smaller (shared machine: ratios only)")
  else:
    print(f"summary: best {best} {results[best][0]:.2f} s min / {results[best][1]:.2f} s median "
          f"per step, {flops[best] / results[best][1] / 1e9:.1f} GFLOP/s = "
          f"{100 * flops[best] / results[best][1] / 1e9 / peak['tensorflow']:.0f}% of the "
          f"TensorFlow matmul peak (no paper-code side; shared machine: absolute times noisy)")


def _write_json(out_dir, report) -> None:
  """Writes the run's figures to OUT/train_speed.json."""
  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "train_speed.json"), "w") as f:
    json.dump(report, f, indent=2, default=float)


def _profile(sides, configs, args):
  """Interleaved timing of the pieces of each config's step (module docstring)."""
  times = {c.name: {} for c in configs}
  for r in range(args.rounds):
    for c in configs:
      out = sides[c.name].ask(cmd="profile", n=args.steps)
      for piece, t in out.items():
        times[c.name].setdefault(piece, []).extend(t)
    print(f"profile round {r + 1}/{args.rounds}", flush=True)
  for side in sides.values():
    side.close()
  header = f"{'config':<44}" + "".join(f"{p:>17}" for p in _Profiler.PIECES)
  print("median seconds (fraction of the step) per piece:")
  print(header)
  print("-" * len(header))
  summary = []
  for c in configs:
    med = {p: statistics.median(t) for p, t in times[c.name].items() if t}
    step = med["step"]
    cells = "".join(f"{med[p]:>9.3f} ({med[p] / step:>4.0%})" if p in med else f"{'-':>17}"
                    for p in _Profiler.PIECES)
    print(f"{parse_config(c.name).label:<44}{cells}")
    rest = step - med["encoder_fwd_bwd"] - med["loss_fwd_bwd"] - med["optimizer"]
    summary.append(f"{c.name}: encoder {med['encoder_fwd_bwd'] / step:.0%}, scores+loss "
                   f"{med['loss_fwd_bwd'] / step:.0%}, Adam {med['optimizer'] / step:.0%}, rest "
                   f"{rest / step:.0%}")
  print("encoder_fwd_bwd + loss_fwd_bwd + optimizer ~ step (the rest: glue, the real gradients "
        "w.r.t. the item table meeting, tf.function overhead); estimator is inside loss_fwd_bwd.")
  print(f"summary: share of the step (median, shared machine): {'; '.join(summary)}")


if __name__ == "__main__":
  main()
