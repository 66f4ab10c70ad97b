"""Evaluation of exported retrieval models: ScaNN index, exact top-k, metrics, serving.

Modules: ``eval.index`` (ScaNN and exact top-k with rated-item filtering), ``eval.evaluate``
(absl binary ``python -m eval.evaluate``), ``eval.serving`` (SavedModel mapping a history to
top-k items through the ScaNN TF ops, and its loader).
"""
