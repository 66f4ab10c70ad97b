"""The package layout: ``tfrs_logq.tf_keras`` and ``tfrs_logq.keras3`` are twins, and importing
``tfrs_logq`` (or its core) changes nothing in the process.

Both fronts must have the same module files and, module by module, the same public names (their
``__all__``); what one front has and the other has not is listed below with its reason, so that
a new difference fails here until it is either mirrored or listed.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tfrs_logq"

# Modules of one front only (private helpers, those starting with "_", are not compared).
ONLY_TF_KERAS = {
  "sharded": "rows of tables sharded over tf.distribute parameter servers",
  "negatives.kmeans": "MIDX's k-means in TensorFlow (keras3 uses core.kmeans through midx_index)",
  "negatives.midx_refresh": "the MIDX index refresh under tf.distribute strategies",
}
ONLY_KERAS3: dict = {}

# Public names one front's module has and its twin has not: {module: (tf-keras only, keras3 only)}.
NAME_EXCEPTIONS = {
  # a TensorFlow function reads its variables at every call; jax needs them passed in.
  "compiled": ((), ("compile_with_state",)),
  # keras3 keeps log(1 - Q) with the estimators; tf-keras has it as log_q.log1mexp.
  "frequency": ((), ("log1m_exp",)),
  "frequency.base": ((), ("group_sorted", "log1m_exp")),
  # 64-bit key mixing for tf.int64 / strings against keras.ops' 32-bit integer mixing.
  "frequency.hashing": (("ids_to_keys", "mix64"), ("GOLDEN32", "MIX1", "MIX2", "mix32")),
  "lazy_adam": ((), ("DEFAULT_TABLE_PATTERN",)),
  "log_q": (("log_inclusion_probability",), ()),
  "logq_correction": (("LogQCorrection",), ()),  # the deprecated former name
  # tf-keras has dynamic-shape paths: dedup to [U] rows (tf.unique), per-query / per-segment
  # scoring with a speed rule between them (MATMUL_GATHER_RATIO), and the drop-in task's
  # candidate rows; Keras 3 keeps static shapes (pools masked, blocks scored by score_blocks),
  # and composes the pool's steps as functions (in_batch_pool, in_batch_negatives; the tf-keras
  # InBatchNegatives has them as methods), with the segments of a static dedup.
  "negatives": (
    (
      "MATMUL_GATHER_RATIO",
      "dedup_first_occurrence",
      "per_query_scores",
      "per_segment_scores",
      "task_candidates",
    ),
    ("first_occurrence_segments", "in_batch_negatives", "in_batch_pool", "score_blocks"),
  ),
  # Keras 3 keeps the static-shape dedup beside Negatives; tf-keras has it with the in-batch
  # sampler (its base holds the dynamic-shape checks only).
  "negatives.base": ((), ("CONVENTIONS", "first_occurrence_mask", "first_occurrence_segments")),
  # tf.distribute's replica contexts against keras.distribution's device mesh.
  "negatives.cross_replica": (
    ("METHODS", "in_replica_context_with_peers"),
    ("data_parallel_mesh",),
  ),
  "negatives.in_batch": (
    ("CONVENTIONS", "dedup_first_occurrence", "first_occurrence_mask"),
    ("convention_log_q", "in_batch_negatives", "in_batch_pool"),
  ),
  "negatives.midx": (("RefreshEveryNSteps",), ()),
  "negatives.midx_index": (
    ("QUANTIZERS", "check_int", "split_dims", "split_query"),
    ("derive_seed", "kmeans", "nearest_centroid"),
  ),
  "negatives.mixed": (("CONVENTIONS",), ()),
  "negatives.scoring": (
    (
      "MATMUL_GATHER_RATIO",
      "per_query_scores",
      "per_segment_scores",
      "task_candidates",
    ),
    ("BLOCK_LAYOUTS", "score_blocks"),
  ),
  "retrieval": ((), ("REDUCTIONS",)),
  # tf-keras's top_k also re-exports core.ranking's metrics (the evaluation binaries use them).
  "top_k": (
    (
      "EMPTY_SLOT",
      "PAD_ID",
      "as_item_table",
      "as_queries",
      "filter_rated",
      "filtered_top_k_from_scores",
      "filtered_top_k_tf",
      "mean_by_group",
      "multi_target_recall_at_k",
      "ndcg_at_k",
      "ndcg_at_k_tf",
      "popularity_deciles",
      "recall_at_k",
      "recall_at_k_tf",
      "retrieval_metrics",
      "target_ranks",
    ),
    (),
  ),
}


# Arguments of the two Retrieval tasks that one front has and the other has not, by method:
# {method: (tf-keras only, keras3 only)}; every other argument has the same name, position, kind
# and default on both fronts.
TASK_ARGUMENT_EXCEPTIONS = {
  # the switches of TFRS's metric objects (Keras 3 has none: the constructor's metrics,
  # batch_metrics and loss_metrics keep their positions and accept None only).
  "call": (("compute_metrics", "compute_batch_metrics"), ()),
}


def _modules(front: str) -> set:
  base = PACKAGE / front
  names = set()
  for path in base.rglob("*.py"):
    parts = path.relative_to(base).with_suffix("").parts
    if parts[-1] == "__init__":
      parts = parts[:-1]
    if any(p.startswith("_") for p in parts):
      continue
    names.add(".".join(parts))
  return names


def test_the_fronts_have_the_same_module_files():
  tf_keras, keras3 = _modules("tf_keras"), _modules("keras3")
  assert tf_keras - keras3 == set(ONLY_TF_KERAS)
  assert keras3 - tf_keras == set(ONLY_KERAS3)


def _run(code: str, **env_update) -> subprocess.CompletedProcess:
  env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
  env.update(PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3", **env_update)
  return subprocess.run(
    [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT
  )


_PUBLIC_NAMES = """
import importlib, json
import tfrs_logq.tf_keras, tfrs_logq.keras3
out = {}
for module in MODULES:
  for front in ("tf_keras", "keras3"):
    mod = importlib.import_module("tfrs_logq." + front + ("." + module if module else ""))
    out[front + ":" + module] = sorted(mod.__all__)
import inspect
for front in ("tf_keras", "keras3"):
  task = importlib.import_module("tfrs_logq." + front + ".retrieval").Retrieval
  for method in ("__init__", "call"):
    out["signature:" + front + ":" + method] = [
      [p.name, p.kind.name, repr(p.default)]
      for p in inspect.signature(getattr(task, method)).parameters.values()
    ]
for front in ("tf_keras", "keras3"):
  negatives = importlib.import_module("tfrs_logq." + front + ".negatives")
  for sampler in SAMPLERS:
    for method in SAMPLER_METHODS:
      out["sampler:" + front + ":" + sampler + "." + method] = [
        [p.name, p.kind.name, repr(p.default)]
        for p in inspect.signature(getattr(getattr(negatives, sampler), method)).parameters.values()
      ]
for front in ("tf_keras", "keras3"):
  negatives = importlib.import_module("tfrs_logq." + front + ".negatives")
  out["fields:" + front] = list(negatives.Negatives._fields)
print(json.dumps(out))
"""

# The sampler classes of both fronts' negatives package: the same arguments, in the same order,
# for the constructor and the protocol's two methods.
SAMPLERS = (
  "InBatchNegatives",
  "UniformNegatives",
  "MixedNegatives",
  "CrossBatchNegatives",
  "JoinedNegatives",
  "MIDXSampler",
)
SAMPLER_METHODS = ("__init__", "sample_negatives", "score")
# {(sampler, method): (tf-keras only, keras3 only)}, each with its reason.
SAMPLER_ARGUMENT_EXCEPTIONS = {
  # A Keras 3 sampler that draws is a Layer: its randomness is a keras.random.SeedGenerator made
  # from a constructor seed (state that advances inside a compiled JAX step); tf-keras takes a
  # stateless seed per call. **kwargs: the Layer's own arguments (name, dtype).
  ("UniformNegatives", "__init__"): ((), ("seed", "kwargs")),
  ("MixedNegatives", "__init__"): ((), ("kwargs",)),
  ("CrossBatchNegatives", "__init__"): ((), ("kwargs",)),
  ("JoinedNegatives", "__init__"): ((), ("kwargs",)),
  # the former Keras 3 keyword candidate_embedder=, kept with a DeprecationWarning.
  ("MIDXSampler", "score"): ((), ("deprecated",)),
}

# {(sampler, method): arguments whose defaults differ}: the Keras 3 constructors still parse
# their former forms, UniformNegatives(k, id_range) and MixedNegatives(k_u, id_range=...)
# (DeprecationWarning), so these arguments default to None there and are required on tf-keras.
SAMPLER_DEFAULT_EXCEPTIONS = {
  ("UniformNegatives", "__init__"): ("candidate_embedder", "num_negatives"),
  ("MixedNegatives", "__init__"): ("uniform",),
}


@pytest.fixture(scope="module")
def public_names():
  """Both fronts' public names and their Retrieval signatures, in one fresh process."""
  common = sorted(_modules("tf_keras") & _modules("keras3"))
  out = _run(
    f"MODULES = {common!r}\nSAMPLERS = {SAMPLERS!r}\nSAMPLER_METHODS = {SAMPLER_METHODS!r}\n"
    f"{_PUBLIC_NAMES}",
    KERAS_BACKEND="jax",
  )
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_twin_modules_export_the_same_public_names(public_names):
  common = sorted(_modules("tf_keras") & _modules("keras3"))
  names = public_names
  for module in common:
    tf_only = set(names[f"tf_keras:{module}"]) - set(names[f"keras3:{module}"])
    k3_only = set(names[f"keras3:{module}"]) - set(names[f"tf_keras:{module}"])
    expected = NAME_EXCEPTIONS.get(module, ((), ()))
    assert (tf_only, k3_only) == (set(expected[0]), set(expected[1])), module
  assert set(NAME_EXCEPTIONS) <= set(common)
  assert names["tf_keras:"] == names["keras3:"]  # the packages' own names: identical


def test_the_negatives_record_has_one_field_order(public_names):
  """Negatives(ids, embeddings, log_q, valid, positive_log_q) on both fronts."""
  fields = ["ids", "embeddings", "log_q", "valid", "positive_log_q"]
  assert public_names["fields:tf_keras"] == public_names["fields:keras3"] == fields


@pytest.mark.parametrize("method", ["__init__", "call"])
def test_both_retrieval_tasks_take_the_same_arguments(public_names, method):
  """Same names, order, kinds (positional / keyword-only) and defaults, but the listed ones."""
  tf_only, k3_only = TASK_ARGUMENT_EXCEPTIONS.get(method, ((), ()))
  tf_keras = public_names[f"signature:tf_keras:{method}"]
  keras3 = public_names[f"signature:keras3:{method}"]
  assert {p[0] for p in tf_keras} - {p[0] for p in keras3} == set(tf_only)
  assert {p[0] for p in keras3} - {p[0] for p in tf_keras} == set(k3_only)
  assert [p for p in tf_keras if p[0] not in tf_only] == [p for p in keras3 if p[0] not in k3_only]


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_both_fronts_samplers_take_the_same_arguments(public_names, sampler):
  """Constructor, sample_negatives and score: same names, order, kinds and defaults, but the
  listed ones (SAMPLER_ARGUMENT_EXCEPTIONS)."""
  for method in SAMPLER_METHODS:
    tf_only, k3_only = SAMPLER_ARGUMENT_EXCEPTIONS.get((sampler, method), ((), ()))
    tf_keras = public_names[f"sampler:tf_keras:{sampler}.{method}"]
    keras3 = public_names[f"sampler:keras3:{sampler}.{method}"]
    where = f"{sampler}.{method}"
    assert {p[0] for p in tf_keras} - {p[0] for p in keras3} == set(tf_only), where
    assert {p[0] for p in keras3} - {p[0] for p in tf_keras} == set(k3_only), where
    loose = SAMPLER_DEFAULT_EXCEPTIONS.get((sampler, method), ())
    same = lambda p: p[:2] if p[0] in loose else p
    assert [same(p) for p in tf_keras if p[0] not in tf_only] == [
      same(p) for p in keras3 if p[0] not in k3_only
    ], where
  assert {s for s, _ in SAMPLER_ARGUMENT_EXCEPTIONS} <= set(SAMPLERS)
  assert {s for s, _ in SAMPLER_DEFAULT_EXCEPTIONS} <= set(SAMPLERS)


def test_importing_the_package_or_its_core_changes_nothing():
  out = _run(
    "import os, sys; before = (dict(os.environ), list(sys.meta_path), set(sys.modules))\n"
    "import tfrs_logq, tfrs_logq.core, tfrs_logq.core.ops\n"
    "new = {m.split('.')[0] for m in set(sys.modules) - before[2]}\n"
    "assert (dict(os.environ), list(sys.meta_path)) == before[:2], 'environment changed'\n"
    "assert not new & {'tensorflow', 'tf_keras', 'keras', 'jax', 'torch'}, new\n"
    "from tfrs_logq import keras3\n"  # a form the former root could not import
    "assert 'TF_USE_LEGACY_KERAS' not in os.environ\n"
    "print('ok')",
    KERAS_BACKEND="jax",
  )
  assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_the_tf_keras_front_selects_legacy_keras_and_fails_clearly_when_too_late():
  ok = _run(
    "import tfrs_logq.tf_keras, os, tensorflow as tf; "
    "print(os.environ['TF_USE_LEGACY_KERAS'], tf.keras.Model.__module__)"
  )
  assert ok.returncode == 0, ok.stderr[-3000:]
  assert ok.stdout.split()[0] == "1" and ok.stdout.split()[1].startswith("tf_keras")
  late = _run("import tensorflow as tf; tf.keras.Model; import tfrs_logq.tf_keras")
  assert late.returncode != 0
  assert "TF_USE_LEGACY_KERAS=1" in late.stderr and "ImportError" in late.stderr


FORMER_NAMES = [
  ("tfrs_logq.tasks.Retrieval", "tfrs_logq.tf_keras.Retrieval"),
  ("tfrs_logq.Retrieval", "tfrs_logq.tf_keras.Retrieval"),
  ("tfrs_logq.metrics.recall_at_k", "tfrs_logq.tf_keras.top_k.recall_at_k"),
  ("tfrs_logq.frequency.ExactCounts", "tfrs_logq.tf_keras.frequency.ExactCounts"),
  ("tfrs_logq.negatives.MixedNegatives", "tfrs_logq.tf_keras.negatives.MixedNegatives"),
  ("tfrs_logq.losses.full_softmax_loss", "tfrs_logq.tf_keras.full_softmax.full_softmax_loss"),
  ("tfrs_logq.losses.GBCELoss", "tfrs_logq.tf_keras.gbce.GBCELoss"),
]

_FORMER_NAMES = """
import json, warnings
import tfrs_logq.tf_keras, tfrs_logq
from tfrs_logq import frequency, losses, negatives, tasks  # the documented from-import
out = {}
for old, new in PAIRS:
  with warnings.catch_warnings():
    warnings.simplefilter("error", DeprecationWarning)
    try:
      eval(old)
      warning = None
    except DeprecationWarning as e:
      warning = str(e)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    out[old] = {"warning": warning, "same": eval(old) is eval(new)}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def former_names():
  """Every former name resolved in one fresh process (one TensorFlow start-up for all)."""
  out = _run(f"PAIRS = {FORMER_NAMES!r}\n{_FORMER_NAMES}")
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("old, new", FORMER_NAMES)
def test_the_former_names_still_resolve_with_a_deprecation_warning(former_names, old, new):
  """The first releases' documented forms: `import tfrs_logq` (before TensorFlow) and attribute
  access, `from tfrs_logq import frequency, losses, negatives, tasks`."""
  got = former_names[old]
  assert got["warning"] is not None and "moved to" in got["warning"], got
  assert got["same"], f"{old} is not {new}"
