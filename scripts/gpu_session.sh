#!/usr/bin/env bash
# The prepared GPU session: one script for a lent device machine (JAX + PyTorch, no
# TensorFlow), run from the repository root; each part is capped by the time left and skipped
# when its result is already in OUT (rerun the same command to continue):
#
#   bash scripts/gpu_session.sh OUT MINUTES [DATA_ROOT]
#
#   1. env         the machine: nvidia-smi, python, jax, torch, keras       -> OUT/env.txt
#   2. step        the SASRec step on ML-1M, Keras 3 JAX (the paper's configuration and the
#                  binaries' defaults, bare jitted steps) beside the paper code's PyTorch step
#                  on the GPU, interleaved in one invocation (bench/step)
#                                                                            -> OUT/step
#   3. ttc_ml1m    time to a converged model: ML-1M leave-one-out, mixed corrected, patience 20,
#                  `python -m train.keras3 --backend=jax` alone (bench/time_to_converge.py)
#                                                                            -> OUT/ttc_ml1m
#      ttc_ml1m_warm  the same run again, its programs from the compilation cache
#                                                                            -> OUT/ttc_ml1m_warm
#   4. concurrent  eight Amazon Sports runs (leave-one-out, 3,000 validation users, patience
#                  20, seeds 0..7) at once on the GPU (bench/concurrent_runs.py; a time budget
#                  per run with CONCURRENT_MINUTES > 0)                      -> OUT/concurrent
#   5. paper_ml1m  ours beside the paper's training loop (bench/paper_loop.py, PyTorch on the
#                  GPU) in one invocation, same data, row and patience; the paper loop capped at
#                  PAPER_SECONDS of its epoch loop                           -> OUT/paper_ml1m
#   6. table1_mixed_<arm>, table1_inbatch, table1_<row>_<arm>, table1_full_softmax
#                  Table 1's long runs with the time left: the mixed rows of TABLE1_ROWS
#                  (mixed_none, mixed_standard = standard_no_positive, mixed_corrected) x 5
#                  seeds as one program per arm (--seeds=0,1,2,3,4 --logqs=...), the in-batch
#                  rows (inbatch_none / _standard / _corrected) as one program (once: no
#                  uniform negatives), ss_uniform, bce and gbce (bench/table1/rows.py) each a
#                  5-seed program per arm, full softmax's 5 seeds once; patience
#                  200, the test split evaluated at every
#                  improving epoch (--test_curve: every shorter patience's result is in the same
#                  run, python -m bench.analysis patience); arm = the uniform negatives (query: drawn per
#                  position, as the paper's code; sequence: once per sequence)
#                  -> OUT/table1/mixed_<arm>/<logq>/seed<s>, OUT/table1/inbatch/<logq>/seed<s>,
#                     OUT/table1/<row>_<arm>/seed<s>, OUT/table1/full_softmax/seed<s>
#                  A run cut by the time left keeps its curve: each seed's last checkpoint's
#                  state (history included) is written to <seed>/last_state.json.
#   7. paper_runs_<logq>_s<seed>  the paper's own scripts converged (bench/paper_loop.py,
#                  PyTorch on the GPU): logq in PAPER_LOGQS (corrected standard), seeds
#                  PAPER_SEEDS (0 1 2), patience PAPER_PATIENCE (200); each resumable from its
#                  checkpoint (--checkpoint_dir, on the same machine) and paused by --max_seconds
#                  before its part's cap (PAPER_RUNS_CAP, 600 s)  -> OUT/paper/<logq>/seed<s>
#
# Environment: PYTHON (default python), PARTS (the parts to run, space-separated names or their
# first word before "_"; default all; e.g. "ttc_ml1m table1"), STEP_ROUNDS (5), STEP_STEPS (20),
# CONCURRENT_RUNS (8), CONCURRENT_MINUTES (0: none; else each concurrent run's
# --time_budget_minutes), CONCURRENT_CAP (seconds for the whole part; default 225 with no
# budget), PAPER_SECONDS (240), TABLE1_ROWS
# (mixed_corrected mixed_standard mixed_none full_softmax; all ten rows: add inbatch_none
# inbatch_standard inbatch_corrected ss_uniform bce gbce), TABLE1_ARMS (query), TABLE1_CAP
# (seconds per table1 part, 900), TABLE1_FLAGS (more flags of the table1 runs, e.g.
# --checkpoint_every_seconds=15), PAPER_LOGQS, PAPER_SEEDS, PAPER_PATIENCE, PAPER_RUNS_CAP (7.).
# On a machine with JAX and PyTorch but no keras (as on 2026-11-27): bring keras 3.15.1, namex and
# optree as wheels and the data inside the tree (ignored folders, e.g. .whl and .devdata), then
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
#   export PYTHONPATH=/tmp/site:$PWD && PYTHON=python3 bash scripts/gpu_session.sh /tmp/gs 9 \
#     "$PWD/.devdata"
# (the repository root must be on PYTHONPATH: the bench scripts import bench.*). That lease's
# results: docs/results/time_to_converge/h200_2026-11-27/. The next lease (prepared 2026-11-28,
# when loans were paused): the ML-1M run after the token floor, then Table 1's negatives factor
# with both arms at patience 200 (patience 20 read off the same runs: python -m bench.analysis patience),
#   PARTS="ttc_ml1m table1" TABLE1_ROWS=mixed_corrected TABLE1_ARMS="query sequence" \
#   TABLE1_CAP=220 TABLE1_FLAGS=--checkpoint_every_seconds=15 PYTHON=python3 \
#   bash scripts/gpu_session.sh /tmp/gs 9 "$PWD/.devdata"
# No TensorFlow there: the Keras 3 runs shuffle with numpy (--shuffle_rng=numpy) and
# bench/step takes the same windows from the numpy stream. Only OUT's first two levels
# come back from the device: everything small is also packed into OUT/session.tar.gz.
set -uo pipefail
OUT=${1:?usage: scripts/gpu_session.sh OUT MINUTES [DATA_ROOT]}
MINUTES=${2:?usage: scripts/gpu_session.sh OUT MINUTES [DATA_ROOT]}
DATA=${3:-../shared/data}
PY=${PYTHON:-python}
mkdir -p "$OUT"
deadline=$(( $(date +%s) + MINUTES * 60 ))
left() { echo $(( deadline - $(date +%s) )); }
log() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$OUT/session.log"; }
export KERAS_BACKEND=jax TFRS_LOGQ_DATA="$DATA" PYTHONUNBUFFERED=1

# part NAME DONE_FILE MIN_SECONDS MAX_SECONDS COMMAND...: runs COMMAND for at most MAX_SECONDS
# (and the time left) unless DONE_FILE exists or less than MIN_SECONDS are left.
part() {
  local name=$1 done_file=$2 need=$3 cap=$4
  shift 4
  case " ${PARTS:-all} " in
    *" all "* | *" $name "* | *" ${name%%_*} "*) ;;
    *) log "$name: not in PARTS, skipped"; return 0 ;;
  esac
  if [ -e "$done_file" ]; then log "$name: done before, skipped"; return 0; fi
  if [ "$(left)" -lt "$need" ]; then log "$name: $(left) s left < $need s, not started"; return 1; fi
  local limit; limit=$(left)
  [ "$cap" -lt "$limit" ] && limit=$cap
  log "$name: start (limit $limit s of $(left) s left)"
  local t0; t0=$(date +%s)
  timeout -k 30 "$limit" "$@" >> "$OUT/$name.log" 2>&1
  log "$name: exit $? after $(( $(date +%s) - t0 )) s"
}

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PY" -c "import sys, numpy, jax, torch, keras; print(sys.version); print('numpy', numpy.__version__, 'jax', jax.__version__, jax.devices(), 'torch', torch.__version__, torch.cuda.is_available(), 'keras', keras.__version__)"
  nproc
} > "$OUT/env.txt" 2>&1
log "env: $(tr '\n' ' ' < "$OUT/env.txt" | cut -c1-400)"

# Three step workers share the GPU (they take turns): JAX may not take 75 % of it in each.
part step "$OUT/step/train_speed.json" 60 150 \
  env XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 "$PY" -m bench.step \
  --configs=paper+jax,defaults+jax --rounds="${STEP_ROUNDS:-5}" --steps="${STEP_STEPS:-20}" \
  --matmul_n=8192 --data_path="$DATA/ml1m" --threads=8 --out="$OUT/step"
part ttc_ml1m "$OUT/ttc_ml1m/time_to_converge.json" 60 180 \
  "$PY" bench/time_to_converge.py --setting=ml1m_loo --row=mixed_corrected --patience=20 \
  --sides=keras3_jax --data_root="$DATA" --extra_flags=--shuffle_rng=numpy \
  --out="$OUT/ttc_ml1m"
# The same run again: its programs now come from the compilation cache (--compilation_cache).
part ttc_ml1m_warm "$OUT/ttc_ml1m_warm/time_to_converge.json" 60 180 \
  "$PY" bench/time_to_converge.py --setting=ml1m_loo --row=mixed_corrected --patience=20 \
  --sides=keras3_jax --data_root="$DATA" --extra_flags=--shuffle_rng=numpy \
  --out="$OUT/ttc_ml1m_warm"
budget=${CONCURRENT_MINUTES:-0}
part concurrent "$OUT/concurrent/concurrent_runs.json" 90 "${CONCURRENT_CAP:-225}" \
  "$PY" bench/concurrent_runs.py --runs="${CONCURRENT_RUNS:-8}" --setting=amazon_sports_loo \
  --row=mixed_corrected --patience=20 --budget_minutes="$budget" --data_root="$DATA" \
  --extra_flags=--shuffle_rng=numpy --out="$OUT/concurrent"
part paper_ml1m "$OUT/paper_ml1m/time_to_converge.json" 60 300 \
  "$PY" bench/time_to_converge.py --setting=ml1m_loo --row=mixed_corrected --patience=20 \
  --sides=keras3_jax,paper --data_root="$DATA" --extra_flags=--shuffle_rng=numpy \
  --paper_flags="--max_seconds=${PAPER_SECONDS:-240}" \
  --out="$OUT/paper_ml1m"
# Table 1's long runs with the time left, patience 200, per arm of uniform negatives
# (TABLE1_ARMS): the mixed rows (they differ only in --logq) as one program, 5 seeds each
# (--seeds --logqs: 3 rows x 5 seeds = 15 models in one step), the in-batch rows likewise, the
# uniform-only rows (sampled softmax, BCE, gBCE) and full softmax each as its own program.
# The paper's "standard logQ" row is standard_no_positive (bench/table1/rows.py). A program cut
# by the deadline resumes from its checkpoints only on the same machine (they stay out of
# session.tar.gz: 15 runs' checkpoints are tens of MiB).
logqs=""
inbatch=""
singles=""
full=""
for row in ${TABLE1_ROWS:-mixed_corrected mixed_standard mixed_none full_softmax}; do
  case $row in
    mixed_none | inbatch_none) logq=none ;;
    mixed_standard | inbatch_standard) logq=standard_no_positive ;;
    mixed_corrected | inbatch_corrected) logq=corrected ;;
    ss_uniform | bce | gbce) singles="$singles $row"; continue ;;
    full_softmax) full=1; continue ;;
    *) echo "TABLE1_ROWS: unknown row $row" >&2; exit 2 ;;
  esac
  if [ "${row%%_*}" = mixed ]; then
    logqs="${logqs:+$logqs,}$logq"
  else
    inbatch="${inbatch:+$inbatch,}$logq"
  fi
done
common=(--backend=jax --dataset=ml1m --data_path="$DATA/ml1m" --seeds=0,1,2,3,4 --noprogress
  --early_stopping_patience=200 --shuffle_rng=numpy --test_curve)
for arm in ${TABLE1_ARMS:-query}; do
  if [ -n "$logqs" ]; then
    # shellcheck disable=SC2086
    part "table1_mixed_$arm" "$OUT/table1/mixed_$arm/${logqs##*,}/seed4/metrics.json" 120 \
      "${TABLE1_CAP:-900}" \
      "$PY" -m train.keras3 "${common[@]}" --logqs="$logqs" --uniform_negatives="$arm" \
      --loss=sampled_softmax --negatives=mixed ${TABLE1_FLAGS:-} \
      --model_dir="$OUT/table1/mixed_$arm"
  fi
  # The rows with uniform negatives only (bench/table1/rows.py's settings), a program each.
  for row in $singles; do
    case $row in
      ss_uniform) flags=(--loss=sampled_softmax) ;;
      bce) flags=(--loss=bce --num_negatives=1) ;;
      gbce) flags=(--loss=gbce) ;;
    esac
    # shellcheck disable=SC2086
    part "table1_${row}_$arm" "$OUT/table1/${row}_$arm/seed4/metrics.json" 120 \
      "${TABLE1_CAP:-900}" \
      "$PY" -m train.keras3 "${common[@]}" "${flags[@]}" --negatives=uniform --logq=none \
      --uniform_negatives="$arm" ${TABLE1_FLAGS:-} --model_dir="$OUT/table1/${row}_$arm"
  done
done
# The in-batch rows: no uniform negatives, so one program whatever the arms.
if [ -n "$inbatch" ]; then
  # shellcheck disable=SC2086
  part "table1_inbatch" "$OUT/table1/inbatch/${inbatch##*,}/seed4/metrics.json" 120 \
    "${TABLE1_CAP:-900}" \
    "$PY" -m train.keras3 "${common[@]}" --logqs="$inbatch" --loss=sampled_softmax \
    --negatives=in_batch ${TABLE1_FLAGS:-} --model_dir="$OUT/table1/inbatch"
fi
# Full softmax scores every item: no uniform negatives, so one program whatever the arms.
if [ -n "$full" ]; then
  # shellcheck disable=SC2086
  part "table1_full_softmax" "$OUT/table1/full_softmax/seed4/metrics.json" 120 \
    "${TABLE1_CAP:-900}" \
    "$PY" -m train.keras3 "${common[@]}" --loss=full_softmax ${TABLE1_FLAGS:-} \
    --model_dir="$OUT/table1/full_softmax"
fi
# The paper's own scripts to their early stop, one part per run; "done" once the run has stopped
# (its metrics.json is written at every pause too: the best epoch so far).
for logq in ${PAPER_LOGQS:-corrected standard}; do
  for seed in ${PAPER_SEEDS:-0 1 2}; do
    dir="$OUT/paper/$logq/seed$seed"
    cap=${PAPER_RUNS_CAP:-600}
    [ "$(left)" -lt "$cap" ] && cap=$(left)
    part "paper_runs_${logq}_s$seed" "$dir/done" 120 "$cap" \
      bash -c '"$0" -m bench.paper_loop --dataset=ml1m --data_path="$1/ml1m" --logq="$2" \
        --seed="$3" --patience="$4" --checkpoint_dir="$5" --max_seconds="$6" \
        --metrics_json="$5/metrics.json" && touch "$5/done"' \
      "$PY" "$DATA" "$logq" "$seed" "${PAPER_PATIENCE:-200}" "$dir" "$(( cap - 90 ))"
  done
done
# The curves of runs cut by the deadline: each seed's last checkpoint's state.
if [ -d "$OUT/table1" ]; then
  "$PY" - "$OUT/table1" <<'PYEOF' >> "$OUT/session.log" 2>&1
import glob, json, os, sys
import numpy as np
from train.keras3.checkpoints import latest
dirs = glob.glob(os.path.join(sys.argv[1], "*", "seed*", "ckpt"))
dirs += glob.glob(os.path.join(sys.argv[1], "*", "*", "seed*", "ckpt"))  # a --logqs program's
for ckpt_dir in sorted(dirs):
  path = latest(ckpt_dir)
  if path:
    with np.load(path) as ckpt:
      state = json.loads(str(ckpt["state"]))
    with open(os.path.join(os.path.dirname(ckpt_dir), "last_state.json"), "w") as f:
      json.dump(state, f)
    print(ckpt_dir, "epoch", state.get("epoch"), "best", state.get("best_epoch"))
PYEOF
fi
log "session over ($(left) s left)"
# Everything but the weights, in one file (the device returns at most 8 files, 2 levels deep).
pack=$(mktemp "${TMPDIR:-/tmp}/gpu_session.XXXXXX")  # outside OUT, which it packs
tar -czf "$pack" -C "$OUT" --exclude='*.keras' --exclude='*.weights.h5' --exclude='*.npz' \
  --exclude='*.ckpt*' --exclude='checkpoint*' --exclude='*.pt' --exclude='session.tar.gz' . \
  && mv "$pack" "$OUT/session.tar.gz" && log "packed $(du -h "$OUT/session.tar.gz" | cut -f1)"
