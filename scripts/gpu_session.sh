#!/usr/bin/env bash
# The prepared GPU session: one resumable script for a lent device machine (JAX + PyTorch, no
# TensorFlow), run from the repository root, every part skipped when its result is already in
# OUT and started only with time left:
#
#   bash scripts/gpu_session.sh OUT MINUTES [DATA_ROOT]
#
#   1. time to a converged model (bench/time_to_converge.py): ML-1M leave-one-out, mixed
#      corrected, patience 20, `python -m train.keras3 --backend=jax` beside the paper's loop
#      (bench/paper_loop.py, PyTorch) in one invocation                     -> OUT/ttc_ml1m
#   2. the step, float32 against bfloat16, Keras 3 on jax (bench/step_ab.py) -> OUT/bf16_step
#   3. N seeds as one program against N processes and N in a row (bench/seeds_program.py,
#      ML-1M, 3 epochs)                                                      -> OUT/seeds_program
#   4. Table 1's long runs: each row's 5 seeds as one program (--seeds=0,1,2,3,4, patience 200),
#      killed at the deadline and resumed by the next session from their checkpoints
#                                                                            -> OUT/table1/<row>
#
# OUT comes back from the device; to continue in a later session put it back in the tree (an
# ignored path, e.g. bench/out/gpu) and name it in the run's carry, then rerun the same command.
# No TensorFlow there: the Keras 3 runs shuffle with numpy (--shuffle_rng=numpy).
set -uo pipefail
OUT=${1:?usage: scripts/gpu_session.sh OUT MINUTES [DATA_ROOT]}
MINUTES=${2:?usage: scripts/gpu_session.sh OUT MINUTES [DATA_ROOT]}
DATA=${3:-../shared/data}
PY=${PYTHON:-python}
mkdir -p "$OUT"
deadline=$(( $(date +%s) + MINUTES * 60 ))
left() { echo $(( deadline - $(date +%s) )); }
log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$OUT/session.log"; }
export KERAS_BACKEND=jax TFRS_LOGQ_DATA="$DATA"

# part NAME DONE_FILE MIN_SECONDS COMMAND...: runs COMMAND under the time left unless DONE_FILE
# exists or less than MIN_SECONDS are left.
part() {
  local name=$1 done_file=$2 need=$3
  shift 3
  if [ -e "$done_file" ]; then log "$name: done before, skipped"; return 0; fi
  if [ "$(left)" -lt "$need" ]; then log "$name: $(left) s left < $need s, not started"; return 1; fi
  log "$name: start ($(left) s left)"
  timeout "$(left)" "$@" >> "$OUT/$name.log" 2>&1
  log "$name: exit $?"
}

part ttc_ml1m "$OUT/ttc_ml1m/time_to_converge.json" 300 \
  "$PY" bench/time_to_converge.py --setting=ml1m_loo --row=mixed_corrected --patience=20 \
  --sides=keras3_jax,paper --data_root="$DATA" --extra_flags=--shuffle_rng=numpy \
  --out="$OUT/ttc_ml1m"
part bf16_step "$OUT/bf16_step/step_ab.md" 180 \
  "$PY" bench/step_ab.py --before=. --after=. --binary=keras3_jax --rounds=10 --steps=5 \
  --settings_after='{"mixed_precision": "bfloat16"}' --out="$OUT/bf16_step"
part seeds_program "$OUT/seeds_program/seeds_program.json" 300 \
  "$PY" -m bench.seeds_program --seeds=0,1,2,3,4 --repeats=1 \
  --flags="--dataset=ml1m --epochs=3 --early_stopping_patience=100 --shuffle_rng=numpy" \
  --out="$OUT/seeds_program"
for row in mixed_corrected mixed_standard mixed_none full_softmax; do
  case $row in
    mixed_corrected) flags="--loss=sampled_softmax --negatives=mixed --logq=corrected" ;;
    mixed_standard) flags="--loss=sampled_softmax --negatives=mixed --logq=standard" ;;
    mixed_none) flags="--loss=sampled_softmax --negatives=mixed --logq=none" ;;
    full_softmax) flags="--loss=full_softmax" ;;
  esac
  # shellcheck disable=SC2086
  part "table1_$row" "$OUT/table1/$row/seed4/metrics.json" 120 \
    "$PY" -m train.keras3 --backend=jax --dataset=ml1m --seeds=0,1,2,3,4 --noprogress \
    --early_stopping_patience=200 --shuffle_rng=numpy --uniform_negatives=query $flags \
    --model_dir="$OUT/table1/$row"
done
log "session over ($(left) s left)"
