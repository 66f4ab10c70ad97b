r"""A cross-batch memory: the candidates of the last M pushes reused as negatives, with log Q.

Layout. M blocks of S slots each (capacity M S). Push t (t = 0, 1, ...; one per training step,
after the step has scored against the memory) writes block t mod M::

    slots of push t = (t mod M) S + [0, S)

so after T pushes the memory holds the last min(T, M) pushes (FIFO: the oldest block is
overwritten). The read order is newest first: block (T - 1) mod M, then (T - 2) mod M, ...
A slot holds an id (``ids`` mode: scored with the current item embeddings, exact for id towers)
or an id and the item tower's output at push time (``embeddings`` mode: stop-gradient, up to M
steps stale), and a flag ``filled``; slots never written (warm-up) and padding rows of a push are
empty. A push of B rows keeps all of them (S = B) or, with ``slots_per_batch = k < B``, the
uniform subset of min(U, k) distinct ids of the in-batch rule
(``tfrs_logq.core.negatives.subsample_first_occurrences``).

Each push m is a pool of draws from the positive stream: B_m valid rows (draws), U_m distinct ids
among them, n_m kept slots (n_m = U_m, or min(U_m, k)). An id takes part once: the memory is
deduplicated over all its slots (the newest copy of an id wins), U_M distinct ids in all, and
each row masks its own positive (accidental hits). With q = q_uni(d) the estimator's per-draw
probability at read time, log Q of a memory slot is::

    unigram (the paper's):  log Q(d) = log q_uni(d)                     (one draw per slot)
    expected_count:         rho_m(d)  = (1 - (1 - q)^{B_m}) n_m / U_m   P(d in push m's slots)
                            pi_M(d)   = 1 - prod_m (1 - rho_m(d))       P(d in the memory)
                            log Q(d)  = log pi_M(d) - log max(U_M, 1)

(``mixture`` is ``unigram`` for one block.) Without a subsample (n_m = U_m),
pi_M(d) = 1 - (1 - q)^{sum_m B_m}: the inclusion probability of M B draws. ``expected_count``
makes e^{s} / (n Q) a Horvitz-Thompson weight e^{s} / E[count], as for in-batch negatives; a
memory slot is never given log Q = 0. A slot whose log Q is not finite (an estimator that no
longer counts its id) is left out, as an empty one.

Joined blocks. A memory is one block of a step's negatives beside in-batch, uniform or MIDX ones;
each block keeps its own proposal's Q(p) in Q', while the loss takes one positive log Q per row,
the first block's Q_1(p). ``rebased_block_log_q`` shifts a block's log Q so that the loss's one
Q' step yields the block's own::

    log Q_s(d) - (log(1 - Q_s(p)) - log(1 - Q_1(p)))   ->   loss: - log(1 - Q_1(p))
                                                        = log Q_s(d) - log(1 - Q_s(p))

(under ``q_prime="proxy"``, ``standard`` and ``standard_no_positive`` log Q is used unchanged;
entries a block masks keep their own log Q).
"""

import numbers
from typing import Optional, Tuple

from tfrs_logq.core import checks as core_checks
from tfrs_logq.core import log_q as log_q_lib
from tfrs_logq.core.ops import Ops, Tensor

__all__ = [
  "MODES",
  "CONVENTIONS",
  "check_memory",
  "check_memory_inputs",
  "write_slots",
  "newest_first_slots",
  "log_push_inclusion",
  "memory_log_q",
  "rebased_block_log_q",
]

MODES = ("ids", "embeddings")
CONVENTIONS = core_checks.LOG_Q_CONVENTIONS


def _positive_int(value: object, name: str) -> int:
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
    raise ValueError(f"{name} must be a positive int, got {value!r}")
  return int(value)


def check_memory(
  num_batches: object,
  batch_size: object,
  slots_per_batch: object = None,
  mode: str = "ids",
  convention: str = "unigram",
) -> Tuple[int, int, int]:
  """(M, B, S) of a memory's arguments; ValueError for bad ones (the same on both fronts).

  S = ``slots_per_batch`` (at most B; None: B).
  """
  m = _positive_int(num_batches, "num_batches")
  b = _positive_int(batch_size, "batch_size")
  s = b if slots_per_batch is None else _positive_int(slots_per_batch, "slots_per_batch")
  if s > b:
    raise ValueError(f"slots_per_batch ({s}) must be at most batch_size ({b})")
  if mode not in MODES:
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
  if convention not in CONVENTIONS:
    raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
  return m, b, s


def check_memory_inputs(
  mode: str,
  embedding_dim: object,
  frequency_estimator: object,
  candidate_embedder: object,
  seed: object,
) -> Tuple[Optional[int], Optional[int]]:
  """(d, seed) of a memory's other arguments (d: ``embedding_dim``, required in ``embeddings``
  mode); TypeError / ValueError for bad ones, the same on both fronts."""
  if not callable(getattr(frequency_estimator, "log_q", None)):
    raise TypeError(
      f"frequency_estimator must have a log_q(ids) method, got {type(frequency_estimator).__name__}"
    )
  if mode == "embeddings" and embedding_dim is None:
    raise ValueError("mode='embeddings' needs embedding_dim (the stored embeddings' d)")
  d = None if embedding_dim is None else _positive_int(embedding_dim, "embedding_dim")
  if candidate_embedder is not None and not callable(candidate_embedder):
    raise TypeError(
      "candidate_embedder must be callable (ids -> embeddings) or None, got "
      f"{type(candidate_embedder).__name__}"
    )
  if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
    raise ValueError(f"seed must be an int or None, got {seed!r}")
  return d, None if seed is None else int(seed)


def write_slots(ops: Ops, num_pushed: Tensor, num_batches: int, slots_per_batch: int) -> Tensor:
  """int32 [S]: the slots push number ``num_pushed`` writes, (t mod M) S + [0, S)."""
  block = ops.mod(ops.cast(num_pushed, "int32"), num_batches)
  return block * slots_per_batch + ops.arange(slots_per_batch, dtype="int32")


def newest_first_slots(
  ops: Ops, num_pushed: Tensor, num_batches: int, slots_per_batch: int
) -> Tensor:
  """int32 [M S]: every slot, the newest push's block first (block (T - 1 - j) mod M j-th)."""
  j = ops.arange(num_batches, dtype="int32")
  block = ops.mod(ops.cast(num_pushed, "int32") - 1 - j + num_batches, num_batches)
  slots = ops.expand_dims(block * slots_per_batch, 1) + ops.expand_dims(
    ops.arange(slots_per_batch, dtype="int32"), 0
  )
  return ops.reshape(slots, (num_batches * slots_per_batch,))


def log_push_inclusion(
  ops: Ops, log_q_unigram: Tensor, num_draws: Tensor, num_distinct: Tensor, num_kept: Tensor
) -> Tensor:
  """log rho_m(d) = log(1 - (1 - q)^{B_m}) + log n_m - log max(U_m, 1): [N] x [M] -> [N, M].

  An empty push (B_m = 0 or n_m = 0) gives -inf (it holds nothing)."""
  log_q = ops.expand_dims(log_q_unigram, -1)
  b = ops.expand_dims(num_draws, 0)
  n = ops.expand_dims(num_kept, 0)
  u = ops.expand_dims(num_distinct, 0)
  log_pi = log_q_lib.log_inclusion_probability(ops, log_q, ops.maximum(b, 1.0))
  log_pi = ops.where(b > 0.0, log_pi, -float("inf"))
  return log_pi + ops.log(n) - ops.log(ops.maximum(u, 1.0))


def memory_log_q(
  ops: Ops,
  log_q_unigram: Tensor,
  convention: str,
  num_draws: Optional[Tensor] = None,
  num_distinct: Optional[Tensor] = None,
  num_kept: Optional[Tensor] = None,
  memory_distinct: Optional[Tensor] = None,
) -> Tensor:
  """log Q of memory slots (or of positives) under ``convention`` from log q_uni [N].

  ``expected_count`` needs the pushes' B_m, U_m, n_m (float [M]) and U_M (float scalar):
  log pi_M(d) - log max(U_M, 1), log pi_M = log1mexp(sum_m log1mexp(log rho_m)).
  """
  if convention != "expected_count":
    return log_q_unigram
  if num_draws is None or num_distinct is None or num_kept is None or memory_distinct is None:
    raise ValueError(
      "convention='expected_count' needs the pushes' num_draws, num_distinct, num_kept and "
      "the memory's memory_distinct"
    )
  log_rho = log_push_inclusion(ops, log_q_unigram, num_draws, num_distinct, num_kept)
  log_not_in = ops.sum(log_q_lib.log1mexp(ops, ops.minimum(log_rho, 0.0), 0.0), axis=-1)
  log_pi = log_q_lib.log1mexp(ops, log_not_in, 0.0)
  return log_pi - ops.log(ops.maximum(memory_distinct, 1.0))


def rebased_block_log_q(
  ops: Ops,
  block_log_q: Tensor,
  block_positive_log_q: Tensor,
  reference_positive_log_q: Tensor,
  valid: Optional[Tensor] = None,
) -> Tensor:
  """log Q_s(d) - (log(1 - Q_s(p)) - log(1 - Q_1(p))) per row: [N] or [A, N] -> [A, N].

  With ``valid`` (bool [A, N]) entries that take no part keep their own log Q (finite, <= 0;
  the shift could lift them above 0)."""
  shift = log_q_lib.log1mexp(ops, block_positive_log_q) - log_q_lib.log1mexp(
    ops, reference_positive_log_q
  )
  rebased = block_log_q - ops.expand_dims(shift, -1)
  if valid is None:
    return rebased
  return ops.where(valid, rebased, block_log_q + ops.zeros_like(rebased))
