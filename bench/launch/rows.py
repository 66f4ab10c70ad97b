"""The rows of the Table 1 reproduction (each a set of `train.config.RunConfig` settings over an
experiment's base, `bench.launch.plan`), its data settings and the paper's figures. The pairs of
rows the report compares seed by seed: `bench.analysis.table1.paired_rows`."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

# The paper code's model and negatives (reference_model), and the corrected script's clamp.
PAPER_CODE = dict(sasrec_block="reference", uniform_negatives="query")
PAPER_CORRECTED_RATIO_FLOOR = 1e-10
EXPECTED = "expected_count"
NO_POSITIVE = "standard_no_positive"


def _row(label: str, loss: str, **settings: Any) -> Tuple[str, Dict[str, Any]]:
  """(label, RunConfig settings) of a row without log Q."""
  return label, dict(loss=loss, **settings, logq="none")


def _ss(
  label: str, negatives: str, logq: str, convention: str = "unigram", **more: Any
) -> Tuple[str, Dict[str, Any]]:
  """A sampled-softmax row: ``negatives`` corrected by ``logq`` with the --log_q_convention
  ``convention`` (the paper's rows: the per-draw unigram Q, whatever the binary's default)."""
  settings = dict(loss="sampled_softmax", negatives=negatives, **more)
  return label, dict(settings, logq=logq, log_q_convention=convention)


# Row name -> (label, RunConfig settings). Mixed negatives: 128 uniform + 128 in-batch with
# unigram log Q (the paper's convention) is the train binary's `mixed` sampler. "Standard logQ" of
# the paper's Table 1 is what its code runs (train_mns_log_old.py): negatives corrected by
# log Q(d) = log(#d / N), the positive's score left uncorrected in the denominator, i.e. our
# `standard_no_positive`; `mixed_standard_tfrs` is the TFRS form for comparison.
ROWS: Dict[str, Tuple[str, Dict[str, Any]]] = {
  "bce": _row("BCE (1 uniform negative)", "bce", negatives="uniform", num_negatives=1),
  "gbce": _row("gBCE", "gbce", negatives="uniform"),
  "ss_uniform": _row("Sampled softmax, uniform negatives", "sampled_softmax", negatives="uniform"),
  "inbatch_none": _ss("In-batch, without logQ", "in_batch", "none"),
  "inbatch_standard": _ss("In-batch, standard logQ", "in_batch", NO_POSITIVE),
  "inbatch_corrected": _ss("In-batch, improved logQ", "in_batch", "corrected"),
  "mixed_none": _ss("Mixed, without logQ", "mixed", "none"),
  "mixed_standard": _ss("Mixed, standard logQ", "mixed", NO_POSITIVE),
  "mixed_corrected": _ss("Mixed, improved logQ", "mixed", "corrected"),
  "full_softmax": _row("Full softmax", "full_softmax"),
}
PAPER_ROWS = list(ROWS)  # the paper's Table 1: the rows run when --rows is empty
# Not in the paper: the TFRS form of standard logQ (the positive's column corrected too); the
# deduplicated in-batch half corrected with the log of its expected count (inclusion probability)
# instead of the per-draw unigram Q (--log_q_convention); the tables trained by LazyAdam (sparse
# rows, per-row bias correction) instead of tf-keras's dense Adam (--table_optimizer); mixed
# negatives joined with a cross-batch memory of the last 16 batches' positives (--cross_batch: 16
# pushes of at most --num_negatives distinct ids each), its log Q by the row's convention.
ROWS.update(
  mixed_standard_tfrs=_ss("Mixed, standard logQ as TFRS (positive corrected)", "mixed", "standard"),
  mixed_expected_count_standard=_ss(
    "Mixed, standard logQ, expected-count log Q", "mixed", NO_POSITIVE, EXPECTED
  ),
  mixed_expected_count_corrected=_ss(
    "Mixed, improved logQ, expected-count log Q", "mixed", "corrected", EXPECTED
  ),
  mixed_corrected_lazy_adam=_ss(
    "Mixed, improved logQ, LazyAdam tables", "mixed", "corrected", table_optimizer="lazy_adam"
  ),
  xbatch16_corrected=_ss(
    "Mixed + memory of 16 batches, improved logQ", "mixed", "corrected", cross_batch=16
  ),
  xbatch16_expected_count_corrected=_ss(
    "Mixed + memory of 16 batches, improved logQ, expected-count log Q",
    "mixed",
    "corrected",
    EXPECTED,
    cross_batch=16,
  ),
)
# Not in the paper: rows trained by the Keras 3 binary (python -m train.keras3 --backend=B, the
# same run settings) instead of python -m train; row -> (the tf-keras row, backend). Their test
# metrics are the binary's own (train.validation, the protocol of eval.evaluate's exact search).
KERAS3_ROWS = {
  f"{row}_keras3_jax": (row, "jax")
  for row in (
    "mixed_none",
    "mixed_standard",
    "mixed_corrected",
    "mixed_expected_count_standard",
    "mixed_expected_count_corrected",
    "full_softmax",
  )
}
ROWS.update(
  {
    k3: (f"{ROWS[r][0]}, Keras 3 {b.upper()}", dict(ROWS[r][1]))
    for k3, (r, b) in KERAS3_ROWS.items()
  }
)


def label(row: str) -> str:
  """A row's label (an unknown row: its name)."""
  return ROWS[row][0] if row in ROWS else row


def train_binary(row: str) -> List[str]:
  """The module arguments of the binary that trains ``row``: ``-m train``, or
  ``-m train.keras3 --backend=B`` for a Keras 3 row."""
  if row in KERAS3_ROWS:
    return ["-m", "train.keras3", f"--backend={KERAS3_ROWS[row][1]}"]
  return ["-m", "train"]


# `bench/paper_loop.py --logq` -> the Table 1 row its script trains.
PAPER_LOOP_ROWS = {logq: f"mixed_{logq}" for logq in ("corrected", "standard", "none")}

# Table 1 of the paper on MovieLens-1M: (Recall@20, NDCG@20) of each of PAPER_ROWS, in order.
PAPER = {
  setting: dict(zip(PAPER_ROWS, zip(recall, ndcg)))
  for setting, recall, ndcg in [
    (
      "ml1m_loo",
      [0.3468, 0.3949, 0.3889, 0.3838, 0.3889, 0.3947, 0.3853, 0.3893, 0.3937, 0.3911],
      [0.1564, 0.1964, 0.1921, 0.1868, 0.1942, 0.1969, 0.1882, 0.1952, 0.1972, 0.1937],
    ),
    (
      "ml1m_temporal",
      [0.2318, 0.2632, 0.2609, 0.2481, 0.2762, 0.2766, 0.2514, 0.2800, 0.2792, 0.2640],
      [0.0997, 0.1210, 0.1186, 0.1117, 0.1270, 0.1269, 0.1130, 0.1292, 0.1281, 0.1205],
    ),
  ]
}

# The data settings: setting -> (dataset, its [paths] key, its default under the data root; None:
# [paths] must give it); the split is the name's, leave-one-out (_loo) or temporal. `synthetic`
# is a small generated catalog (no download).
DATA = {
  "ml1m_loo": ("ml1m", "ml1m_dir", "ml1m"),
  "ml100k_temporal": ("movielens_raw", "ml100k_dir", "ml-100k"),
  "ml1m_temporal": ("movielens_raw", "ml1m_ratings", None),
  "gsasrec_loo": ("gsasrec", "gsasrec_dir", None),
  "amazon_sports_loo": ("sequences", "amazon_sports", "amazon-sports/sequences.txt"),
}
SYNTHETIC = dict(
  dataset="synthetic",
  synthetic_users=300,
  synthetic_items=120,
  synthetic_min_len=5,
  synthetic_max_len=25,
)
SETTINGS = (*DATA, "synthetic")
# Base settings a setting changes unless [base] gives them: Amazon's sequences are short (median
# 6) and its epoch is the paper code's min(100, batches per pass); the synthetic model is small.
SETTING_DEFAULTS = {
  "amazon_sports_loo": dict(max_len=50, steps_per_epoch=100),
  "synthetic": dict(
    max_len=20, steps_per_epoch=5, embedding_dim=16, num_blocks=1, batch_size=32, num_negatives=16
  ),
}
