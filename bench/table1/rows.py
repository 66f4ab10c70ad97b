"""The rows of the Table 1 reproduction: what each row trains, the paper's figures, the pairs.

Every row is a set of `train.config.RunConfig` settings on top of an experiment's base settings
(`bench.launch.plan`); a pair (A, B) of rows is compared seed by seed in the report
(`bench.analysis table1`).
"""

from __future__ import annotations

from typing import Dict, List, Sequence

# The paper code's model and negatives (--reference_model), and the corrected script's clamp.
PAPER_CODE = dict(sasrec_block="reference", uniform_negatives="query")
PAPER_CORRECTED_RATIO_FLOOR = 1e-10
# The paper's rows correct the deduplicated in-batch negatives with the per-draw unigram Q,
# whatever the binary's default convention is.
PAPER_CONVENTION = "unigram"

# Row name -> (label, RunConfig settings). Mixed negatives: 128 uniform + 128 in-batch with
# unigram log Q (the paper's convention) is the train binary's `mixed` sampler. "Standard logQ" of
# the paper's Table 1 is what its code runs (train_mns_log_old.py): negatives corrected by
# log Q(d) = log(#d / N), the positive's score left uncorrected in the denominator, i.e. our
# `standard_no_positive`; `mixed_standard_tfrs` is the TFRS form for comparison.
ROWS: Dict[str, tuple] = {
  "bce": (
    "BCE (1 uniform negative)",
    dict(loss="bce", negatives="uniform", num_negatives=1, logq="none"),
  ),
  "gbce": ("gBCE", dict(loss="gbce", negatives="uniform", logq="none")),
  "ss_uniform": (
    "Sampled softmax, uniform negatives",
    dict(loss="sampled_softmax", negatives="uniform", logq="none"),
  ),
  "inbatch_none": (
    "In-batch, without logQ",
    dict(
      loss="sampled_softmax", negatives="in_batch", logq="none", log_q_convention=PAPER_CONVENTION
    ),
  ),
  "inbatch_standard": (
    "In-batch, standard logQ",
    dict(
      loss="sampled_softmax",
      negatives="in_batch",
      logq="standard_no_positive",
      log_q_convention=PAPER_CONVENTION,
    ),
  ),
  "inbatch_corrected": (
    "In-batch, improved logQ",
    dict(
      loss="sampled_softmax",
      negatives="in_batch",
      logq="corrected",
      log_q_convention=PAPER_CONVENTION,
    ),
  ),
  "mixed_none": (
    "Mixed, without logQ",
    dict(loss="sampled_softmax", negatives="mixed", logq="none", log_q_convention=PAPER_CONVENTION),
  ),
  "mixed_standard": (
    "Mixed, standard logQ",
    dict(
      loss="sampled_softmax",
      negatives="mixed",
      logq="standard_no_positive",
      log_q_convention=PAPER_CONVENTION,
    ),
  ),
  "mixed_corrected": (
    "Mixed, improved logQ",
    dict(
      loss="sampled_softmax", negatives="mixed", logq="corrected", log_q_convention=PAPER_CONVENTION
    ),
  ),
  "full_softmax": ("Full softmax", dict(loss="full_softmax", logq="none")),
  # Not in the paper: the TFRS form of standard logQ (the positive's column corrected too).
  "mixed_standard_tfrs": (
    "Mixed, standard logQ as TFRS (positive corrected)",
    dict(
      loss="sampled_softmax", negatives="mixed", logq="standard", log_q_convention=PAPER_CONVENTION
    ),
  ),
  # Not in the paper: the deduplicated in-batch half corrected with log of its expected count
  # (inclusion probability) instead of the per-draw unigram Q (--log_q_convention).
  "mixed_expected_count_standard": (
    "Mixed, standard logQ, expected-count log Q",
    dict(
      loss="sampled_softmax",
      negatives="mixed",
      logq="standard_no_positive",
      log_q_convention="expected_count",
    ),
  ),
  "mixed_expected_count_corrected": (
    "Mixed, improved logQ, expected-count log Q",
    dict(
      loss="sampled_softmax", negatives="mixed", logq="corrected", log_q_convention="expected_count"
    ),
  ),
  # Not in the paper: mixed_corrected with the tables trained by LazyAdam (sparse rows, per-row
  # bias correction) instead of tf-keras's dense Adam (--table_optimizer).
  "mixed_corrected_lazy_adam": (
    "Mixed, improved logQ, LazyAdam tables",
    dict(
      loss="sampled_softmax",
      negatives="mixed",
      logq="corrected",
      log_q_convention=PAPER_CONVENTION,
      table_optimizer="lazy_adam",
    ),
  ),
  # Not in the paper: mixed negatives joined with a cross-batch memory of the last 16 batches'
  # positives (--cross_batch: 16 pushes of at most --num_negatives distinct ids each), the memory's
  # log Q by the row's convention.
  "xbatch16_corrected": (
    "Mixed + memory of 16 batches, improved logQ",
    dict(
      loss="sampled_softmax",
      negatives="mixed",
      cross_batch=16,
      logq="corrected",
      log_q_convention=PAPER_CONVENTION,
    ),
  ),
  "xbatch16_expected_count_corrected": (
    "Mixed + memory of 16 batches, improved logQ, expected-count log Q",
    dict(
      loss="sampled_softmax",
      negatives="mixed",
      cross_batch=16,
      logq="corrected",
      log_q_convention="expected_count",
    ),
  ),
}
# Not in the paper: rows trained by the Keras 3 binary (python -m train.keras3 --backend=B, the
# same run settings) instead of python -m train; row -> (the tf-keras row, backend). Their test
# metrics are the binary's own (train.validation, the protocol of eval.evaluate's exact search).
KERAS3_ROWS = {
  f"{row}_keras3_{backend}": (row, backend)
  for row in (
    "mixed_none",
    "mixed_standard",
    "mixed_corrected",
    "mixed_expected_count_standard",
    "mixed_expected_count_corrected",
    "full_softmax",
  )
  for backend in ("jax",)
}
# The suffixes of a binary's rows: "" (python -m train) and each Keras 3 backend's.
BINARY_SUFFIXES = ("",) + tuple(sorted({f"_keras3_{b}" for _, b in KERAS3_ROWS.values()}))
ROWS.update(
  {
    k3: (f"{ROWS[row][0]}, Keras 3 {backend.upper()}", dict(ROWS[row][1]))
    for k3, (row, backend) in KERAS3_ROWS.items()
  }
)


def train_binary(row: str) -> List[str]:
  """The module arguments of the binary that trains ``row``: ``-m train``, or
  ``-m train.keras3 --backend=B`` for a Keras 3 row."""
  if row in KERAS3_ROWS:
    return ["-m", "train.keras3", f"--backend={KERAS3_ROWS[row][1]}"]
  return ["-m", "train"]


# The rows run when --rows is empty (the paper's Table 1).
PAPER_ROWS = [
  r
  for r in ROWS
  if r != "mixed_standard_tfrs"
  and not r.startswith("mixed_expected_count")
  and not r.endswith("_lazy_adam")
  and not r.startswith("xbatch")
  and r not in KERAS3_ROWS
]

# Table 1 of the paper: (Recall@20, NDCG@20) on MovieLens-1M.
PAPER = {
  "ml1m_loo": {
    "bce": (0.3468, 0.1564),
    "gbce": (0.3949, 0.1964),
    "ss_uniform": (0.3889, 0.1921),
    "inbatch_none": (0.3838, 0.1868),
    "inbatch_standard": (0.3889, 0.1942),
    "inbatch_corrected": (0.3947, 0.1969),
    "mixed_none": (0.3853, 0.1882),
    "mixed_standard": (0.3893, 0.1952),
    "mixed_corrected": (0.3937, 0.1972),
    "full_softmax": (0.3911, 0.1937),
  },
  "ml1m_temporal": {
    "bce": (0.2318, 0.0997),
    "gbce": (0.2632, 0.1210),
    "ss_uniform": (0.2609, 0.1186),
    "inbatch_none": (0.2481, 0.1117),
    "inbatch_standard": (0.2762, 0.1270),
    "inbatch_corrected": (0.2766, 0.1269),
    "mixed_none": (0.2514, 0.1130),
    "mixed_standard": (0.2800, 0.1292),
    "mixed_corrected": (0.2792, 0.1281),
    "full_softmax": (0.2640, 0.1205),
  },
}


# Base settings a --settings entry changes unless the flag is given (the literature's protocol
# for that dataset): Amazon's sequences are short (median 6) and its epoch is the paper code's
# min(100, batches per pass).
SETTING_DEFAULTS = {"amazon_sports_loo": dict(max_len=50, steps_per_epoch=100)}

# The metrics reported (those a run's eval_results.json holds), in table order, and their names.
METRICS = ("recall@10", "recall@20", "ndcg@10", "ndcg@20", "recall@100")
METRIC_NAMES = {
  "recall@10": "R@10",
  "recall@20": "R@20",
  "ndcg@10": "NDCG@10",
  "ndcg@20": "NDCG@20",
  "recall@100": "R@100",
}
# The paired differences: (family_first − family_second) for every family, where both rows exist.
PAIR_FAMILIES = ("mixed", "inbatch", "mixed_expected_count")
PAIR_CONTRASTS = (("corrected", "standard"), ("corrected", "none"), ("standard", "none"))
# The log Q convention of the deduplicated in-batch half, at equal correction.
CONVENTION_PAIRS = tuple(
  (f"mixed_expected_count_{c}", f"mixed_{c}", f"{c}: expected-count − unigram log Q")
  for c in ("corrected", "standard")
)
# The table optimizer, at equal loss and negatives.
OPTIMIZER_PAIRS = (
  ("mixed_corrected_lazy_adam", "mixed_corrected", "corrected: LazyAdam − Adam tables"),
)
# The negatives source, at equal loss and convention: a memory joined to mixed − mixed.
SOURCE_PAIRS = (
  ("xbatch16_corrected", "mixed_corrected", "corrected: mixed + memory of 16 batches − mixed"),
  (
    "xbatch16_expected_count_corrected",
    "mixed_expected_count_corrected",
    "corrected, expected-count log Q: mixed + memory of 16 batches − mixed",
  ),
  (
    "xbatch16_expected_count_corrected",
    "xbatch16_corrected",
    "corrected, memory of 16 batches: expected-count − unigram log Q",
  ),
)
# The binary, at equal settings: Keras 3 on a backend − tf-keras.
BINARY_PAIRS = tuple(
  (k3, row, f"{row.replace('mixed_', '', 1)}: Keras 3 {backend.upper()} − tf-keras")
  for k3, (row, backend) in KERAS3_ROWS.items()
)
# The validation metrics drawn by the learning curves (keys of model/history.json).
CURVES = ("val_recall@20", "val_ndcg@10")


def paired_rows(rows: Sequence[str]) -> List[tuple]:
  """(first row, second row, label) of every pair of PAIR_FAMILIES x PAIR_CONTRASTS and of
  CONVENTION_PAIRS whose two rows are both in `rows`, within the rows of one binary (suffix
  "" or "_keras3_B"), then the OPTIMIZER_PAIRS, SOURCE_PAIRS and BINARY_PAIRS there."""
  pairs = []
  for suffix in BINARY_SUFFIXES:
    tag = f" (Keras 3 {suffix.rsplit('_', 1)[1].upper()})" if suffix else ""
    for family in PAIR_FAMILIES:
      for first, second in PAIR_CONTRASTS:
        a, b = f"{family}_{first}{suffix}", f"{family}_{second}{suffix}"
        if a in rows and b in rows:
          pairs.append((a, b, f"{family}: {first} − {second}{tag}"))
    for a, b, label in CONVENTION_PAIRS:
      if a + suffix in rows and b + suffix in rows:
        pairs.append((a + suffix, b + suffix, label + tag))
  for a, b, label in OPTIMIZER_PAIRS + SOURCE_PAIRS + BINARY_PAIRS:
    if a in rows and b in rows:
      pairs.append((a, b, label))
  return pairs
