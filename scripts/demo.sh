#!/usr/bin/env bash
# `make demo`: does the corrected logQ matter, and where? (eval/demo/, about 2 min on 2 CPU cores)
# A synthetic world that knows the true next-item distribution P(d|u) (2,000 items, Zipf 1.1,
# peaked preferences); a matrix-factorisation two-tower trained with full softmax and with in-batch
# sampled softmax under none / standard / corrected logQ (and the expected_count log Q), 3 paired
# seeds; prints KL to the truth, Recall@k against the oracle top-k, HR@k by popularity decile and
# the paired differences corrected - standard, and writes summary.md/.json and the PNGs to $OUT.
#   DEMO_FLAGS="--steps=4000 --seeds=0,1,2,3,4" make demo     # longer / more seeds (python -m eval.demo --help)
#   DEMO_PIPELINE=1 make demo    # then also train -> export -> ScaNN evaluation -> serving SavedModel
set -euo pipefail
OUT=${1:-runs/demo}
PY=${PY:-.venv/bin/python}
rm -rf "$OUT"
mkdir -p "$OUT"
export TF_CPP_MIN_LOG_LEVEL=3
# shellcheck disable=SC2086
"$PY" -m eval.demo --output_dir="$OUT" ${DEMO_FLAGS:-}
if [ "${DEMO_PIPELINE:-0}" = 1 ]; then
  echo "=== pipeline: two-tower on the embedded synthetic sequences -> export -> ScaNN -> serving ==="
  "$PY" -m train --dataset=synthetic --model=two_tower --loss=sampled_softmax \
    --negatives=mixed --num_negatives=64 --logq=corrected --frequency=exact \
    --embedding_dim=32 --max_len=20 --batch_size=128 --epochs=2 --steps_per_epoch=20 \
    --early_stopping_patience=100 --seed=0 \
    --model_dir="$OUT/pipeline/run" --export_dir="$OUT/pipeline/export" --noprogress
  "$PY" -m eval.evaluate --export_dir="$OUT/pipeline/export" --output_dir="$OUT/pipeline/eval" \
    --timing_repeats=1 --serving_dir="$OUT/pipeline/serving"
fi
