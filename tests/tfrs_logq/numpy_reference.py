"""Independent numpy implementations of the four loss formulas and their score gradients.

Written from the formulas in the paper (§3.2, §3.3, appendix B), row by row with explicit
loops over the valid negatives, so that they share no code or vectorisation trick with the
TensorFlow implementation they check.
"""

import math

import numpy as np


def _lse(values):
  values = list(values)
  m = max(values)
  return m + math.log(sum(math.exp(v - m) for v in values))


def row_loss_and_grad(s_p, s_n, lq_n, lq_p, valid, correction, q_prime="exact"):
  """Loss of one row and d loss / d(s_p, s_n) (stop-gradient on the corrected weight).

  Returns: (loss, weight, grad_pos, grad_neg [N]).
  """
  idx = [i for i in range(len(s_n)) if valid[i]]
  grad_neg = np.zeros(len(s_n))
  if correction == "corrected":
    if not idx:
      return 0.0, 0.0, 0.0, grad_neg
    shift = math.log(1.0 - math.exp(lq_p)) if q_prime == "exact" else 0.0
    logits = {i: s_n[i] - (lq_n[i] - shift) for i in idx}
    z = _lse(logits.values())
    n = len(idx)
    # P̂ = e^{s_p} / (e^{s_p} + (1/n) sum_i e^{s_i - log Q'_i})
    t = z - math.log(n) - s_p
    # w = 1 - P̂ = 1 - 1 / (1 + e^t), written without overflow for large |t|.
    w = 1.0 / (1.0 + math.exp(-t)) if t > -700 else math.exp(t)
    loss = -w * (s_p - z)
    for i in idx:
      grad_neg[i] = w * math.exp(logits[i] - z)
    return loss, w, -w, grad_neg
  if correction == "none":
    pos = s_p
    logits = {i: s_n[i] for i in idx}
  elif correction == "standard":
    pos = s_p - lq_p
    logits = {i: s_n[i] - lq_n[i] for i in idx}
  elif correction == "standard_no_positive":
    pos = s_p
    logits = {i: s_n[i] - lq_n[i] for i in idx}
  else:
    raise ValueError(correction)
  z = _lse([pos] + list(logits.values()))
  loss = z - pos
  grad_pos = math.exp(pos - z) - 1.0
  for i in idx:
    grad_neg[i] = math.exp(logits[i] - z)
  return loss, 1.0, grad_pos, grad_neg


def loss_and_grads(s_p, s_n, lq_n, lq_p, valid, correction, q_prime="exact"):
  """Vector version over rows: lq_n may be [N] (shared) or [A, N]."""
  s_p = np.asarray(s_p, np.float64)
  s_n = np.asarray(s_n, np.float64)
  a, n = s_n.shape
  lq_n = np.broadcast_to(np.asarray(lq_n, np.float64), (a, n))
  losses, weights, gp, gn = [], [], [], []
  for r in range(a):
    out = row_loss_and_grad(s_p[r], s_n[r], lq_n[r], lq_p[r], valid[r], correction, q_prime)
    losses.append(out[0])
    weights.append(out[1])
    gp.append(out[2])
    gn.append(out[3])
  return np.array(losses), np.array(weights), np.array(gp), np.stack(gn)
