#!/usr/bin/env bash
# `make demo`: the full pipeline on the embedded synthetic data, no download.
# For each logQ correction (none, standard, corrected) with mixed negatives:
#   train SASRec (python -m train) -> export SavedModels -> evaluate through a ScaNN index
#   (eval.evaluate; the corrected model is also exported as a ScaNN serving SavedModel in
#   $OUT/serving), then print one comparison table and write a PNG (scripts/demo_report.py).
# Sizes are small enough for a few minutes on 2 CPU cores; see README "Demo" to scale up.
set -euo pipefail
OUT=${1:-runs/demo}
PY=${PY:-.venv/bin/python}
EPOCHS=${DEMO_EPOCHS:-6}
STEPS=${DEMO_STEPS:-40}
rm -rf "$OUT"
mkdir -p "$OUT"
export TF_CPP_MIN_LOG_LEVEL=2
for LOGQ in none standard corrected; do
  echo "=== SASRec, mixed negatives, logq=$LOGQ ==="
  "$PY" -m train --dataset=synthetic --model=sasrec --loss=sampled_softmax \
    --negatives=mixed --num_negatives=128 --logq="$LOGQ" --frequency=exact \
    --embedding_dim=64 --max_len=50 --dropout=0.2 --batch_size=128 \
    --epochs="$EPOCHS" --steps_per_epoch="$STEPS" --early_stopping_patience=100 --seed=0 \
    --model_dir="$OUT/$LOGQ" --export_dir="$OUT/$LOGQ/export" --noprogress
  SERVING=()
  if [ "$LOGQ" = corrected ]; then SERVING=(--serving_dir="$OUT/serving"); fi
  "$PY" -m eval.evaluate --export_dir="$OUT/$LOGQ/export" --dataset=synthetic \
    --output_dir="$OUT/$LOGQ/eval" --timing_repeats=1 "${SERVING[@]}"
done
"$PY" scripts/demo_report.py "$OUT" none standard corrected
