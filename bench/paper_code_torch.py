r"""A PyTorch yardstick for bench/step: the logQ paper's SASRec training step.

Written for this bench from the description of the paper's code (a gSASRec-pytorch fork; the
mixed-negatives script with the corrected logQ loss), reproducing its computation, dtypes and
memory layout in eager PyTorch (imported lazily: an optional extra); tested with the whole loop in
tests/bench/test_paper_loop.py.

One step on a batch of left-padded windows ``w`` int [B, L + 1] (0 = padding; ML-1M: B = 128,
L = 200, d = 128, 2 blocks, 1 head, dropout 0.5 everywhere):

    inputs = w[:, :-1], labels = w[:, 1:], m = (inputs != 0)          A = #m queries
    x_0    = dropout(E_in[inputs] + P[0..L-1]) * m                     learned positions
    block (original SASRec, as gSASRec-pytorch builds it; every block the same):
      z    = LN1(x)
      a    = dropout(mask_q * softmax(mask_k,causal(Q(z) K(x)^T / sqrt(d_head)))) V(x)
      h    = LN2(a + z)
      x'   = (h + dropout(F2(dropout(relu(F1(h)))))) * m              F1, F2: d -> d linear maps
                                                                       (gSASRec-pytorch's current
                                                                       block; an early version had
                                                                       no ReLU:
                                                                       ffn_activation=False)
    H      = LN(x_L)[m]                                                [A, d]
    negatives of query a: 128 ids uniform over 1..|I| drawn per position, then the first
      occurrences of the batch's unique labels (a [U, A] comparison), shuffled, the first 128,
      shared by all queries: ids [A, 256] and their embeddings E_out[ids] [A, 256, d]
    s_p    = <H_a, E_out[p_a]>,  s_n = <H_a, E_out[ids]>   (einsum, then cast to float64)
    s_n    = -inf where ids == p_a (accidental hits)               n_a = #(ids != p_a)
    then the loss of the script (``logq``; c = training-set item counts; `row_losses`):
      corrected (train_mns_log_new):
        r    = max(c(ids) / (sum(c) - c(p_a)), 1e-10)         Q'(d)
        L_a  = -log max(exp(s_p) / max(sum_n exp(s_n - log r), 1e-10), 1e-10)
        w_a  = sg(1 - softmax([s_p, s_n - log r - log max(n_a, 1e-10)])_0)
      standard (train_mns_log_old: the negatives corrected by log Q(d) = log(c(d) / sum(c)), the
        positive's score uncorrected, in the denominator; Q floored at 1e-10 as r is, so that an
        item unseen in training gives a finite loss):
        L_a  = -log_softmax([s_p, s_n - log Q(ids)])_0,        w_a = 1
      none (the same script without a correction):
        L_a  = -log_softmax([s_p, s_n])_0,                     w_a = 1
    loss   = mean_a(w_a L_a); backward; Adam(lr 1e-3) step

Weights: truncated normal (std 0.02, cut at +-0.04), LayerNorm gains 1, biases 0.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["LOGQS", "PaperCodeStep", "row_losses", "synchronize"]

# The scripts' losses (module docstring), by the name of the row they train.
LOGQS = ("corrected", "standard", "none")


def _torch():
  import torch

  return torch


def synchronize(device) -> None:
  """Waits for the work queued on ``device`` (a no-op on the CPU), so a timer stops after it."""
  torch = _torch()
  if torch.device(device).type == "cuda":
    torch.cuda.synchronize(device)


def row_losses(logq: str, s_p, s_n, valid, neg_counts, pos_counts, total):
  """Per-query loss L_a and weight w_a of the script ``logq`` (module docstring), as it computes
  them: s_p float64 [A, 1], s_n float64 [A, N], valid bool [A, N] (ids != p_a), neg_counts
  c(ids) [A, N], pos_counts c(p_a) [A], total sum(c). Masks s_n where not valid (a copy)."""
  torch = _torch()
  s_n = s_n.masked_fill(~valid, -math.inf)
  if logq == "corrected":
    ratio = torch.clamp(neg_counts / (total - pos_counts)[:, None], min=1e-10)
    s_c = s_n - torch.log(ratio)
    loss = -torch.log(
      torch.clamp(torch.exp(s_p[:, 0]) / torch.clamp(torch.exp(s_c).sum(-1), min=1e-10), min=1e-10)
    )
    n = torch.clamp(valid.sum(-1, keepdim=True).to(torch.float64), min=1e-10)
    weight = (1.0 - torch.softmax(torch.cat([s_p, s_c - torch.log(n)], 1), -1)[:, 0]).detach()
    return loss, weight
  if logq == "standard":
    s_n = s_n - torch.log(torch.clamp(neg_counts / total, min=1e-10))
  elif logq != "none":
    raise ValueError(f"logq must be one of {LOGQS}, got {logq!r}")
  loss = -torch.log_softmax(torch.cat([s_p, s_n], 1), -1)[:, 0]
  return loss, torch.ones_like(loss)


def _build_model(
  num_items: int,
  max_len: int,
  dim: int,
  num_blocks: int,
  num_heads: int,
  dropout: float,
  ffn_activation: bool,
):
  """The paper code's SASRec as a torch.nn.Module (module docstring)."""
  torch = _torch()
  nn = torch.nn

  class Attention(nn.Module):
    """SASRec attention: queries from LN(x), keys and values from raw x, no output map."""

    def __init__(self):
      super().__init__()
      self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
      self.drop = nn.Dropout(dropout)

    def forward(self, queries, keys):
      heads = lambda t: torch.cat(t.chunk(num_heads, dim=2), dim=0)  # [H*B, L, d/H]
      q, k, v = heads(self.q(queries)), heads(self.k(keys)), heads(self.v(keys))
      logits = torch.matmul(q, k.transpose(1, 2)) / math.sqrt(k.size(-1))
      length = queries.size(1)
      key_real = torch.sign(keys.abs().sum(-1)).repeat(num_heads, 1)  # [H*B, L]
      logits = logits.masked_fill((key_real == 0)[:, None, :].expand_as(logits), float("-inf"))
      causal = torch.tril(torch.ones_like(logits[0]))[None].expand_as(logits)
      logits = logits.masked_fill(causal == 0, float("-inf"))
      attn = torch.nan_to_num(torch.softmax(logits, dim=-1), nan=0.0, posinf=0.0, neginf=0.0)
      query_real = torch.sign(queries.abs().sum(-1)).repeat(num_heads, 1)
      attn = self.drop(attn * query_real[:, :, None].expand(-1, -1, length))
      out = torch.matmul(attn, v)
      return torch.cat(out.chunk(num_heads, dim=0), dim=2)

  class Block(nn.Module):
    def __init__(self):
      super().__init__()
      self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
      self.attention = Attention()
      self.ffn1, self.ffn2 = nn.Linear(dim, dim), nn.Linear(dim, dim)
      self.drop = nn.Dropout(dropout)

    def forward(self, x, mask):
      z = self.norm1(x)
      h = self.norm2(self.attention(z, x) + z)
      f = self.ffn1(h)
      if ffn_activation:
        f = torch.relu(f)
      f = self.drop(self.ffn2(self.drop(f)))
      return (h + f) * mask

  class Model(nn.Module):
    def __init__(self):
      super().__init__()
      self.item_embedding = nn.Embedding(num_items + 1, dim)
      self.position_embedding = nn.Embedding(max_len, dim)
      self.output_embedding = nn.Embedding(num_items + 1, dim)
      self.blocks = nn.ModuleList([Block() for _ in range(num_blocks)])
      self.final_norm = nn.LayerNorm(dim)
      self.drop = nn.Dropout(dropout)
      with torch.no_grad():
        for name, p in self.named_parameters():
          if name.endswith("bias"):
            nn.init.zeros_(p)
          elif "norm" in name:
            nn.init.ones_(p)
          else:
            nn.init.trunc_normal_(p, std=0.02, a=-0.04, b=0.04)

    def forward(self, inputs):
      mask = (inputs != 0).float()[..., None]
      positions = torch.arange(inputs.size(1), device=inputs.device)[None].repeat(inputs.size(0), 1)
      x = self.drop(self.item_embedding(inputs) + self.position_embedding(positions)) * mask
      for block in self.blocks:
        x = block(x, mask)
      return self.final_norm(x)

  return Model()


class PaperCodeStep:
  """One optimisation step of the paper code (module docstring) on numpy windows [B, L + 1]:
  item ids 1..num_items (0 = padding), item_counts c [num_items + 1]; num_uniform + num_in_batch
  negatives; torch's global ``seed`` (weights, dropout, negatives); ``ffn_activation``: ReLU
  between the FFN maps (False: none); ``device``: default cuda when torch sees a GPU."""

  def __init__(
    self,
    num_items: int,
    item_counts,
    *,
    max_len: int = 200,
    dim: int = 128,
    num_blocks: int = 2,
    num_heads: int = 1,
    dropout: float = 0.5,
    num_uniform: int = 128,
    num_in_batch: int = 128,
    threads=None,
    seed: int = 0,
    ffn_activation: bool = True,
    device=None,
    logq: str = "corrected",
  ):
    torch = _torch()
    if logq not in LOGQS:
      raise ValueError(f"logq must be one of {LOGQS}, got {logq!r}")
    self.logq = logq
    self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if threads:
      torch.set_num_threads(int(threads))
    torch.manual_seed(seed)
    counts = np.asarray(item_counts, np.float32)
    if counts.shape != (num_items + 1,):
      raise ValueError(
        f"item_counts must be [num_items + 1] = [{num_items + 1}], got {counts.shape}"
      )
    self.torch = torch
    self.num_items, self.max_len = num_items, max_len
    self.num_uniform, self.num_in_batch = num_uniform, num_in_batch
    model = _build_model(num_items, max_len, dim, num_blocks, num_heads, dropout, ffn_activation)
    self.model = model.to(self.device).train()
    self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
    self.counts = torch.from_numpy(counts).to(self.device)
    self.total = self.counts.sum()

  def state_dict(self) -> dict:
    """What a resumed run needs: the weights, Adam's state and torch's random generators (the
    dropout, the negatives and the loader's shuffling all draw from them)."""
    torch = self.torch
    state = dict(
      model=self.model.state_dict(),
      optimizer=self.optimizer.state_dict(),
      cpu_rng=torch.get_rng_state(),
    )
    if self.device.type == "cuda":
      state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
    return state

  def load_state_dict(self, state: dict) -> None:
    """Restores `state_dict`'s output (on this step's device)."""
    torch = self.torch
    self.model.load_state_dict(state["model"])
    self.optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["cpu_rng"])
    if self.device.type == "cuda" and "cuda_rng" in state:
      torch.cuda.set_rng_state(state["cuda_rng"], self.device)

  def __call__(self, windows):
    """Runs one step on int windows [B, L + 1]; returns (mean loss, mean weight w) as floats."""
    torch = self.torch
    windows = torch.as_tensor(np.asarray(windows, np.int64))
    if windows.dim() != 2 or windows.size(1) != self.max_len + 1:
      raise ValueError(f"windows must be [B, {self.max_len + 1}], got {tuple(windows.shape)}")
    windows, device = windows.to(self.device), self.device
    inputs = windows[:, :-1]
    mask = inputs != 0
    hidden = self.model(inputs)[mask]  # [A, d]
    labels = windows[:, 1:][mask]  # [A]
    a = labels.size(0)
    uniform = torch.randint(
      1, self.num_items + 1, (*inputs.shape, self.num_uniform), device=device
    )[mask]
    unique, inverse = torch.unique(labels, sorted=False, return_inverse=True)
    first = torch.argmax(
      (torch.arange(unique.size(0), device=device)[:, None] == inverse[None]).int(), dim=1
    )  # [U]
    first = first[torch.randperm(first.size(0), device=device)[: self.num_in_batch]]
    in_batch = labels[first]
    ids = torch.cat([uniform, in_batch[None].tile([a, 1])], dim=-1)  # [A, N]
    table = self.model.output_embedding
    s_p = torch.einsum("ad,ad->a", hidden, table(labels))[:, None].to(torch.float64)
    s_n = torch.einsum("ad,and->an", hidden, table(ids)).to(torch.float64)
    valid = labels[:, None] != ids
    loss, weight = row_losses(
      self.logq, s_p, s_n, valid, self.counts[ids], self.counts[labels], self.total
    )
    loss = (loss * weight).mean()
    loss.backward()
    self.optimizer.step()
    self.optimizer.zero_grad()
    return float(loss.item()), float(weight.mean().item())
