"""Evaluation of exported retrieval models: ScaNN index, metrics, serving.

Modules: ``eval.config`` (``EvalConfig``, the settings of the binary), ``eval.evaluate`` (absl
binary ``python -m eval.evaluate`` / ``tfrs-logq-evaluate``), ``eval.index`` (ScaNN index with
rated-item filtering by over-fetching; the exact top-k is ``tfrs_logq.tf_keras.top_k.exact_top_k``),
``eval.serving`` (SavedModel mapping a history to top-k items through the ScaNN TF ops, and its
loader), ``eval.demo`` (``python -m eval.demo``, `make demo`: none / standard / corrected logQ
against the truth of ``eval.synthetic_world``, a synthetic world that knows P(d|u); its parts are
a package: ``config``, ``training``, ``metrics``, ``stats``, ``report`` and
``plots``),
``eval.paired_stats`` (Student's t, mean ± s.e. and paired differences over seeds, shared by the
demo and ``bench.analysis``).
"""
