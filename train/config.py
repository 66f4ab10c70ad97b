"""`RunConfig`: every setting of a training run, declared once.

The flags of `python -m train` (and the base settings of `bench.launch`'s experiments) are
generated from the fields below (`train.config_flags`: help text and choices live in each field's
metadata); the configuration is validated once, on construction (`RunConfig.validate`). The data
settings are a nested `train.data.DataConfig` (flags --dataset, --data_path, --split, --tfds_name,
--synthetic_*); the settings only `python -m train.keras3` reads are the nested
`train.keras3.config.Keras3Config` (flags --backend, --shuffle_rng, --compilation_cache, --seeds,
--logqs; `python -m train` refuses them), left out of the recorded settings (`to_dict`). The
trainer, the objective (`train.objective.Objective(config, ...)`), the metrics JSON and the
export metadata all take or record this one object:

    cfg = RunConfig.create(dataset="ml1m", negatives="mixed", logq="corrected")
    cfg.to_flags()        # ["--dataset=ml1m", ..., "--logq=corrected", ...] for a subprocess
    RunConfig.from_dict(json.load(f)["run_config"])     # back from an export's metadata

Defaults of the frequency-estimator settings are read from the library's constructors
(`tfrs_logq.tf_keras.frequency`), so the binary follows the library's choices.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Sequence, Tuple

from models.sasrec_settings import BLOCK_STYLES, DEFAULT_ATTENTION_BLOCKS, DEFAULT_PACK_TOKENS
from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import cross_batch as cross_batch_core
from tfrs_logq.core.frequency import DEFAULTS as ESTIMATOR_DEFAULTS
from train import config_flags
from train.choices import NEGATIVES, PS_MIN_SHARD_BYTES, STRATEGIES
from train.config_flags import setting
from train.data import DataConfig
from train.host_memory import HOST_ALLOCATORS
from train.keras3.config import Keras3Config
from train.validation import FILTER_RATED

__all__ = [
  "CROSS_BATCH_MODES",
  "FILTER_RATED",
  "FREQUENCIES",
  "LOG_Q_CONVENTIONS",
  "LOSSES",
  "MODELS",
  "NEGATIVES",
  "RunConfig",
  "TABLE_OPTIMIZERS",
  "UNIFORM_NEGATIVES",
]

MODELS = ("sasrec", "two_tower")
LOSSES = core_checks.LOSSES
UNIFORM_NEGATIVES = core_checks.UNIFORM_PER
LOG_Q_CONVENTIONS = core_checks.LOG_Q_CONVENTIONS
FREQUENCIES = ("exact", "hash_array", "count_min")
CROSS_BATCH_MODES = cross_batch_core.MODES
TABLE_OPTIMIZERS = ("adam", "lazy_adam")


@dataclasses.dataclass
class RunConfig:
  """Every setting of a run (module docstring); validated on construction."""

  # ------------------------------------------------------------------------------------ data
  data: DataConfig = dataclasses.field(default_factory=DataConfig)
  # ----------------------------------------------------------------------------------- model
  model: str = setting(
    "sasrec",
    "sasrec (sequential) or two_tower (history / user-id query tower and item tower).",
    choices=MODELS,
  )
  max_len: int = setting(200, "Sequence / history length L (the last L items, left-padded).")
  embedding_dim: int = setting(128, "Embedding size d.")
  num_blocks: int = setting(2, "SASRec transformer blocks.")
  num_heads: int = setting(1, "SASRec attention heads.")
  dropout: float = setting(0.5, "SASRec dropout rate.")
  sasrec_block: str = setting(
    "reference",
    "SASRec block: reference (the original SASRec block as the paper's "
    "gSASRec-pytorch code builds it; the default, the block that learned best at equal steps: "
    "docs/training.md) or pre_ln (pre-LayerNorm transformer, inputs scaled by sqrt(d)).",
    choices=BLOCK_STYLES,
  )
  sasrec_pack_tokens: bool = setting(
    DEFAULT_PACK_TOKENS,
    "SASRec: run the per-token layers (embeddings, LayerNorms, "
    "projections, feed-forward) on the non-padding tokens only; false = the padded L grid. "
    "Same model and results, different speed.",
  )
  sasrec_attention_blocks: int = setting(
    DEFAULT_ATTENTION_BLOCKS,
    "SASRec: query blocks of the blocked causal attention (1 = the "
    "full L x L grid; k skips the blocks above the diagonal). Same results, different speed.",
  )
  tie_embeddings: bool = setting(
    False,
    "SASRec: score with the input item-embedding table (gSASRec's "
    "reuse_item_embeddings) instead of a separate output table.",
  )
  hidden_dims: Tuple[int, ...] = setting(
    (), "two_tower: hidden layer sizes of the query tower's MLP (comma-separated; empty = no MLP)."
  )
  use_user_id: bool = setting(False, "two_tower: a user-id embedding in the query tower.")
  use_history: bool = setting(True, "two_tower: the pooled history in the query tower.")
  # ------------------------------------------------------------------------------------ loss
  loss: str = setting(
    "sampled_softmax",
    "full_softmax (all items), sampled_softmax (--negatives, --logq), bce "
    "(uniform negatives; --num_negatives=1 for SASRec's original), gbce (gSASRec).",
    choices=LOSSES,
  )
  negatives: str = setting(
    "mixed",
    "Negatives of the sampled losses: uniform, in_batch (positives of the global "
    "batch, deduplicated), mixed (num_negatives // 2 in-batch + the rest uniform), midx "
    "(adaptive MIDX proposal).",
    choices=NEGATIVES,
  )
  num_negatives: int = setting(
    256, "Negatives per query (mixed: k // 2 in-batch, k - k // 2 uniform)."
  )
  uniform_negatives: str = setting(
    "sequence",
    "How uniform negatives are shared: sequence (one set per sequence, shared by "
    "its positions; the default: as accurate as per-query draws at 720 ML-1M steps and "
    "cheaper), query (fresh ones per query/position, as the paper's code) or batch (one set "
    "for the whole batch, one matmul; fastest, learns slower).",
    choices=UNIFORM_NEGATIVES,
  )
  logq: str = setting(
    "corrected", "logQ correction of the sampled softmax.", choices=core_checks.CORRECTIONS
  )
  q_prime: str = setting(
    "exact",
    "corrected: log Q' = log Q - log(1 - Q(p)) (exact) or log Q (proxy).",
    choices=core_checks.Q_PRIME_MODES,
  )
  log_q_convention: str = setting(
    "unigram",
    "log Q of in-batch / mixed negatives: unigram (the per-draw frequency, the "
    "paper's), mixture (per-slot mixture of the in-batch and uniform proposals) or "
    "expected_count (log of the expected number of copies among the negatives, minus log n).",
    choices=LOG_Q_CONVENTIONS,
  )
  ratio_floor: float = setting(
    0.0,
    "corrected: floor of the ratio inside the log (the paper's corrected script clamps it "
    "at 1e-10, so rows with a loss above ~23 nats get no gradient); 0 = off; > 0 needs "
    "--logq=corrected. Only for exact reproduction of the paper's code.",
  )
  temperature: float = setting(1.0, "Scores are <q, c> / temperature.")
  gbce_t: float = setting(0.75, "gBCE calibration parameter t in [0, 1].")
  midx_codewords: int = setting(32, "MIDX codewords per codebook.")
  cross_batch: int = setting(
    0,
    "Cross-batch memory: the positives of the last M batches as more negatives, one more "
    "block beside any --negatives (0 = off); its log Q follows --log_q_convention "
    "(docs/negatives.md). Needs --loss=sampled_softmax.",
  )
  cross_batch_slots: int = setting(
    0,
    "Memory slots per batch: a uniform subset of at most this many distinct positives of "
    "each batch is kept (0 = --num_negatives); the memory has M times as many.",
  )
  cross_batch_mode: str = setting(
    "ids",
    "ids (the memory keeps ids, scored with the current item table: exact for id towers) or "
    "embeddings (it keeps the item tower's outputs, stop-gradient: up to M steps stale).",
    choices=CROSS_BATCH_MODES,
  )
  # ------------------------------------------------------------------------ frequency of Q(d)
  frequency: str = setting(
    "exact",
    "Q(d) estimator: exact training counts, or streaming hash_array / count_min "
    "(updated every step with the global batch's positives).",
    choices=FREQUENCIES,
  )
  frequency_seed: Optional[int] = setting(
    None,
    "Seed of the streaming estimators' hash functions (hash_array, count_min); "
    "default: --seed. One value for several runs lets their steps be one program (--seeds).",
  )
  frequency_buckets: int = setting(
    0, "Hash-array size H / count-min width (0 = max(1024, 4 x (number of items + 1)))."
  )
  frequency_min_count: float = setting(
    ESTIMATOR_DEFAULTS["min_count"],
    "exact / count_min: floor of a count (log Q stays finite for unseen items).",
  )
  hash_array_hashes: int = setting(
    ESTIMATOR_DEFAULTS["num_hashes"], "hash_array: number of hash functions m."
  )
  hash_array_alpha: float = setting(
    ESTIMATOR_DEFAULTS["alpha"], "hash_array: EMA rate alpha of the step gaps."
  )
  hash_array_warmup: bool = setting(
    ESTIMATOR_DEFAULTS["warmup"], "hash_array: running mean (1/j) before the EMA takes over."
  )
  hash_array_pending_gap: bool = setting(
    ESTIMATOR_DEFAULTS["pending_gap"],
    "hash_array: items not seen for a while decay (reads max(B, the gap so far)).",
  )
  count_min_depth: int = setting(4, "count_min: number of rows (hash functions).")
  count_min_conservative: bool = setting(
    ESTIMATOR_DEFAULTS["conservative"],
    "count_min: conservative update (raise only the smallest cells).",
  )
  count_min_half_life: Optional[float] = setting(
    ESTIMATOR_DEFAULTS["half_life"],
    "count_min: half-life of the counts in steps (unset = no decay).",
  )
  # ---------------------------------------------------------------------------- optimisation
  batch_size: int = setting(128, "GLOBAL batch size (sequences or pairs), split over replicas.")
  learning_rate: float = setting(1e-3, "Adam learning rate.")
  table_optimizer: str = setting(
    "adam",
    "Optimizer: adam (tf-keras's Adam: every row of the item / user tables decays at "
    "every step, O(|I| d) per step) or lazy_adam (tfrs_logq.tf_keras.LazyAdam: sparse table "
    "gradients update only their rows, with per-row bias correction; dense weights get Adam's "
    "update; a step's cost does not grow with the catalog).",
    choices=TABLE_OPTIMIZERS,
  )
  epochs: int = setting(200, "Maximum number of epochs.")
  steps_per_epoch: int = setting(100, "Steps per epoch (0 = one pass over the training data).")
  early_stopping_patience: int = setting(
    200, "Stop after this many epochs without a better validation NDCG@10."
  )
  test_curve: bool = setting(
    False,
    "Also evaluate the test split after every epoch that improves the best validation "
    "NDCG@10 and record it in the history (test_* keys; never used to select the model): any "
    "shorter patience selects one of those epochs, so one run at a long patience reports the "
    "shorter ones too (python -m bench.analysis patience). Costs one test evaluation per improving "
    "epoch.",
  )
  seed: int = setting(0, "Seed of initialisation, data order, negatives and dropout.")
  jit_compile: bool = setting(False, "Compile the SASRec encoder and scoring with XLA.")
  mixed_precision: str = setting(
    "float32",
    "float32, or bfloat16: the encoder computes in bfloat16 (its weights, the "
    "optimizer and the item table stay float32), the queries, item embeddings, scores, log Q "
    "and the loss in float32. Measured beside float32 in docs/results/time_to_converge/.",
    choices=("float32", "bfloat16"),
  )
  jit_compile_step: bool = setting(
    False,
    "Compile the whole train step (objective, gradients, optimizer, estimator update) "
    "into one static-shape XLA program (single device or TPU; MirroredStrategy on GPUs).",
  )
  # ---------------------------------------------------------------------------- distribution
  strategy: str = setting(
    "default",
    "tf.distribute strategy: default, mirrored (local "
    "devices), multi_worker (TF_CONFIG), tpu (--tpu), parameter_server "
    "(TF_CONFIG with chief, worker and ps tasks; docs/distributed.md).",
    choices=STRATEGIES,
  )
  ps_min_shard_bytes: int = setting(
    PS_MIN_SHARD_BYTES,
    "parameter_server: variables of at least this many bytes (item / user "
    "tables, large estimator state) are partitioned over the ps tasks, at most one shard per "
    "ps and no shard smaller than this; smaller variables live whole on one ps.",
  )
  tpu: Optional[str] = setting(
    None, "TPU name or address for --strategy=tpu ('local' on a TPU VM)."
  )
  cpu_replicas: int = setting(
    0,
    "Split the CPU into this many logical devices (for "
    "--strategy=mirrored on a CPU-only machine); 0 = leave as is.",
  )
  host_allocator: str = setting(
    "retain",
    "How the host's malloc treats TensorFlow's freed buffers: retain (keep them "
    "mapped, one heap for all threads: no page faults on every step; ~1.2x faster SASRec steps "
    "on a CPU, and a lower peak than glibc's defaults) or default (glibc's own; "
    "train/host_memory.py).",
    choices=HOST_ALLOCATORS,
  )
  # ---------------------------------------------------------------------- validation, output
  filter_rated: str = setting(
    "all",
    "Rated-item filtering at validation: all (every input item is removed, the target "
    "too when it occurs in the input: the paper's protocol) or except_target (the target is "
    "never removed).",
    choices=FILTER_RATED,
  )
  eval_batch_size: int = setting(512, "Queries per validation batch.")
  model_dir: str = setting("/tmp/tfrs_logq_run", "Checkpoints, TensorBoard, metrics.json.")
  export_dir: Optional[str] = setting(None, "Write the serving SavedModels here (train/export.py).")
  metrics_json: Optional[str] = setting(
    None, "Final metrics JSON (default: model_dir/metrics.json)."
  )
  max_checkpoints: int = setting(3, "Checkpoints kept in model_dir/ckpt.")
  checkpoint_every_seconds: float = setting(
    0.0,
    "Write the full checkpoint (model, optimizer, estimator, seeds, history) at the end of "
    "an epoch only when this many seconds have passed since the last one, and always at the "
    "last epoch (early stop, --epochs) and before a --time_budget_minutes pause; 0 = at every "
    "epoch. For short epochs on an accelerator; a crash or Ctrl-C then resumes from the last "
    "checkpoint written (still exactly: the epochs after it are trained again). The best "
    "weights are still written whenever they improve.",
  )
  time_budget_minutes: float = setting(
    0.0,
    "Pause before an epoch that would end past this many minutes of training in this "
    "process (counted from the start of training; the next epoch's length is estimated by the "
    "last one, less the process's first step (its compilation); every process does at least "
    "one epoch): the checkpoint of the last epoch is "
    "kept, nothing is evaluated or exported, and `python -m train` exits with status 3; rerun "
    "the same command to continue exactly. 0 = no limit. For machines lent in chunks of time.",
  )
  progress: bool = setting(True, "Show a progress bar.")
  # ------------------------------------------------------------- python -m train.keras3 only
  keras3: Keras3Config = dataclasses.field(default_factory=Keras3Config)

  def __post_init__(self):
    if isinstance(self.data, dict):
      self.data = DataConfig(**self.data)
    if isinstance(self.keras3, dict):
      self.keras3 = Keras3Config(**self.keras3)
    config_flags.coerce(self)
    self.validate()

  def validate(self) -> "RunConfig":
    """Checks every setting and their combinations; raises ValueError naming the setting."""
    self.data.validate()
    for name in (
      "max_len",
      "embedding_dim",
      "num_blocks",
      "num_heads",
      "sasrec_attention_blocks",
      "num_negatives",
      "midx_codewords",
      "hash_array_hashes",
      "count_min_depth",
      "batch_size",
      "epochs",
      "early_stopping_patience",
      "eval_batch_size",
      "max_checkpoints",
      "ps_min_shard_bytes",
    ):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
    for name in (
      "steps_per_epoch",
      "cross_batch",
      "cross_batch_slots",
      "frequency_buckets",
      "cpu_replicas",
      "ratio_floor",
      "time_budget_minutes",
      "checkpoint_every_seconds",
    ):
      if getattr(self, name) < 0:
        raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
    for name in ("temperature", "learning_rate", "frequency_min_count"):
      if not getattr(self, name) > 0:
        raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
    if not 0.0 <= self.dropout < 1.0:
      raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
    if not 0.0 <= self.gbce_t <= 1.0:
      raise ValueError(f"gbce_t must be in [0, 1], got {self.gbce_t}")
    if not self.ratio_floor < 1.0:
      raise ValueError(f"ratio_floor must be < 1, got {self.ratio_floor}")
    if self.ratio_floor > 0 and self.logq != "corrected":
      raise ValueError(
        f"ratio_floor={self.ratio_floor} clamps the corrected loss only: it needs "
        f"logq=corrected, got logq={self.logq} (set ratio_floor=0)"
      )
    if not 0.0 < self.hash_array_alpha <= 1.0:
      raise ValueError(f"hash_array_alpha must be in (0, 1], got {self.hash_array_alpha}")
    if self.count_min_half_life is not None and not self.count_min_half_life > 0:
      raise ValueError(f"count_min_half_life must be > 0, got {self.count_min_half_life}")
    if any(h < 1 for h in self.hidden_dims):
      raise ValueError(f"hidden_dims must be positive, got {self.hidden_dims}")
    if self.model == "sasrec" and self.embedding_dim % self.num_heads:
      raise ValueError(
        f"embedding_dim={self.embedding_dim} is not divisible by num_heads={self.num_heads}"
      )
    if self.model == "two_tower" and not (self.use_user_id or self.use_history):
      raise ValueError("two_tower needs use_history, use_user_id or both")
    if self.loss in ("bce", "gbce") and self.negatives != "uniform":
      raise ValueError(
        f"loss={self.loss} draws uniform negatives (gSASRec's alpha is the "
        f"uniform sampling rate); got negatives={self.negatives}"
      )
    if self.loss == "sampled_softmax" and self.negatives == "mixed" and self.num_negatives < 2:
      raise ValueError("mixed negatives need num_negatives >= 2 (split in-batch / uniform)")
    if self.cross_batch and self.loss != "sampled_softmax":
      raise ValueError(
        f"cross_batch={self.cross_batch}: the memory's negatives are for the sampled softmax "
        f"(--loss=sampled_softmax), got loss={self.loss}"
      )
    if self.cross_batch and self.strategy == "parameter_server":
      raise ValueError(
        "strategy=parameter_server does not support cross_batch (the memory is replicated "
        "state written by every replica; it is not placed on the ps tasks)"
      )
    if self.table_optimizer == "lazy_adam" and self.jit_compile_step:
      raise ValueError(
        "table_optimizer=lazy_adam updates the distinct rows of a sparse gradient "
        "(dynamic shapes): it cannot run inside jit_compile_step's XLA program"
      )
    if self.strategy == "parameter_server" and self.jit_compile_step:
      raise ValueError(
        "strategy=parameter_server runs the step uncompiled (its variables live on "
        "the ps tasks): drop jit_compile_step"
      )
    if (
      self.strategy == "parameter_server"
      and self.negatives == "midx"
      and self.loss == "sampled_softmax"
    ):
      raise ValueError(
        "strategy=parameter_server does not support negatives=midx (the MIDX "
        "index is refreshed from the whole table on one process)"
      )
    if self.mixed_precision != "float32" and self.model != "sasrec":
      raise ValueError(
        f"mixed_precision={self.mixed_precision} is implemented for the SASRec "
        f"encoder; model={self.model} trains in float32"
      )
    if self.checkpoint_every_seconds > 0 and self.strategy == "multi_worker":
      raise ValueError(
        "checkpoint_every_seconds: multi_worker processes would each decide by "
        "their own clock whether to save (a collective save); leave it at 0"
      )
    if self.strategy == "tpu" and self.tpu is None:
      raise ValueError("strategy=tpu needs tpu (a name, an address or 'local')")
    return self

  # ------------------------------------------------------------------------------ conversions
  @classmethod
  def create(cls, **settings) -> "RunConfig":
    """A RunConfig from flat settings named as the flags (data settings included)."""
    return config_flags.from_dict(cls, settings)

  def replace(self, **settings) -> "RunConfig":
    """A copy with the given flat settings changed (validated)."""
    return config_flags.from_dict(type(self), settings, base=self)

  def to_flags(self, *, exclude: Sequence[str] = (), only_changed: bool = False) -> list:
    """["--name=value", ...] that make `python -m train` build this configuration."""
    return config_flags.to_flags(self, exclude=exclude, only_changed=only_changed)

  def to_dict(self) -> Dict[str, Any]:
    """The recorded settings: a JSON-ready nested dict ({"data": {...}, "model": ..., ...}),
    without the ``keras3`` group (a process's settings, not the run's: module docstring);
    `from_dict` inverts it (the group at its defaults)."""
    out = dataclasses.asdict(self)
    del out["keras3"]
    out["hidden_dims"] = list(self.hidden_dims)
    return out

  @classmethod
  def from_dict(cls, values: Dict[str, Any]) -> "RunConfig":
    """Inverse of `to_dict`; raises TypeError for unknown settings."""
    values = dict(values)
    data = values.pop("data", {})
    keras3 = values.pop("keras3", {})
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - names
    if unknown:
      raise TypeError(f"RunConfig has no settings named {sorted(unknown)}")
    return cls(data=DataConfig(**data), keras3=Keras3Config(**keras3), **values)
