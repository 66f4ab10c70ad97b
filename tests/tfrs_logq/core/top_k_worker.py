"""Runs the Keras 3 on-device top-k (`tfrs_logq.keras3.top_k`) on one backend over the cases of
top_k_cases.py and writes the ids and scores to an npz; test_top_k.py compares them with the
numpy search. KERAS_BACKEND=jax python top_k_worker.py OUT.npz"""

import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import top_k_cases

from tfrs_logq.keras3 import top_k

results = top_k_cases.run_cases(top_k.exact_top_k)
arrays = {}
for name, (ids, scores) in results.items():
  arrays[f"{name}/ids"], arrays[f"{name}/scores"] = ids, scores
try:
  top_k.exact_top_k(np.ones((2, 3), np.float32), np.ones((9, 3), np.float32), 5, item_chunk=4)
  arrays["item_chunk_below_k_error"] = np.array("")
except ValueError as e:
  arrays["item_chunk_below_k_error"] = np.array(str(e))
np.savez(sys.argv[1], **arrays)
