"""The parts of bench/serving_scale.py: data (catalog, exact top-k, recall), indexes (ScaNN and
FAISS sides), report (markdown, PNG, summary)."""
