"""The rows of the Table 1 reproduction: what each row trains and the paper's figures.

Every row is a set of `train.config.RunConfig` settings on top of an experiment's base settings
(`bench.launch.plan`); the pairs of rows the report compares seed by seed are
`bench.analysis.table1.paired_rows`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

# The paper code's model and negatives (--reference_model), and the corrected script's clamp.
PAPER_CODE = dict(sasrec_block="reference", uniform_negatives="query")
PAPER_CORRECTED_RATIO_FLOOR = 1e-10
# The paper's rows correct the deduplicated in-batch negatives with the per-draw unigram Q,
# whatever the binary's default convention is.
PAPER_CONVENTION = "unigram"
EXPECTED = "expected_count"
NO_POSITIVE = "standard_no_positive"


def _row(label: str, loss: str, **settings: Any) -> Tuple[str, Dict[str, Any]]:
  """(label, RunConfig settings) of a row without log Q."""
  return label, dict(loss=loss, **settings, logq="none")


def _ss(
  label: str, negatives: str, logq: str, convention: str = PAPER_CONVENTION, **more: Any
) -> Tuple[str, Dict[str, Any]]:
  """(label, RunConfig settings) of a sampled-softmax row: ``negatives`` corrected by ``logq``
  (``convention``: --log_q_convention), with ``more`` settings."""
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
  # Not in the paper: the TFRS form of standard logQ (the positive's column corrected too).
  "mixed_standard_tfrs": _ss(
    "Mixed, standard logQ as TFRS (positive corrected)", "mixed", "standard"
  ),
  # Not in the paper: the deduplicated in-batch half corrected with log of its expected count
  # (inclusion probability) instead of the per-draw unigram Q (--log_q_convention).
  "mixed_expected_count_standard": _ss(
    "Mixed, standard logQ, expected-count log Q", "mixed", NO_POSITIVE, EXPECTED
  ),
  "mixed_expected_count_corrected": _ss(
    "Mixed, improved logQ, expected-count log Q", "mixed", "corrected", EXPECTED
  ),
  # Not in the paper: mixed_corrected with the tables trained by LazyAdam (sparse rows, per-row
  # bias correction) instead of tf-keras's dense Adam (--table_optimizer).
  "mixed_corrected_lazy_adam": _ss(
    "Mixed, improved logQ, LazyAdam tables", "mixed", "corrected", table_optimizer="lazy_adam"
  ),
  # Not in the paper: mixed negatives joined with a cross-batch memory of the last 16 batches'
  # positives (--cross_batch: 16 pushes of at most --num_negatives distinct ids each), the memory's
  # log Q by the row's convention.
  "xbatch16_corrected": _ss(
    "Mixed + memory of 16 batches, improved logQ", "mixed", "corrected", cross_batch=16
  ),
  "xbatch16_expected_count_corrected": _ss(
    "Mixed + memory of 16 batches, improved logQ, expected-count log Q",
    "mixed",
    "corrected",
    EXPECTED,
    cross_batch=16,
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
ROWS.update(
  {
    k3: (f"{ROWS[row][0]}, Keras 3 {backend.upper()}", dict(ROWS[row][1]))
    for k3, (row, backend) in KERAS3_ROWS.items()
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


# The rows run when --rows is empty (the paper's Table 1).
PAPER_ROWS = [
  r
  for r in ROWS
  if r != "mixed_standard_tfrs"
  and not r.startswith(("mixed_expected_count", "xbatch"))
  and not r.endswith("_lazy_adam")
  and r not in KERAS3_ROWS
]

# `bench/paper_loop.py --logq` -> the Table 1 row its script trains.
PAPER_LOOP_ROWS = {
  "corrected": "mixed_corrected",
  "standard": "mixed_standard",
  "none": "mixed_none",
}

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
