"""The machine's fp32 matmul peak in each framework a step side runs: GFLOP/s of an n x n
product, best of ``repeats`` after a warm-up, each product waited for."""

from __future__ import annotations

from bench.common.timing import time_calls

__all__ = ["matmul_peak_jax", "matmul_peak_tf", "matmul_peak_torch"]


def _gflops(n: int, product, repeats: int) -> float:
  return 2 * n**3 / time_calls(product, repeats)[0] / 1e9


def matmul_peak_tf(n: int, repeats: int = 5) -> float:
  import tensorflow as tf

  a = tf.random.stateless_normal([n, n], seed=[1, 2])
  b = tf.random.stateless_normal([n, n], seed=[3, 4])
  return _gflops(n, lambda: tf.matmul(a, b).numpy(), repeats)


def matmul_peak_torch(n: int, repeats: int = 5, device="cpu") -> float:
  import torch

  from bench.paper_code_torch import synchronize

  a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
  return _gflops(n, lambda: (torch.matmul(a, b), synchronize(device)), repeats)


def matmul_peak_jax(n: int, repeats: int = 5) -> float:
  import jax

  a = jax.random.normal(jax.random.key(1), (n, n), "float32")
  b = jax.random.normal(jax.random.key(2), (n, n), "float32")
  matmul = jax.jit(lambda x, y: x @ y)
  return _gflops(n, lambda: matmul(a, b).block_until_ready(), repeats)
