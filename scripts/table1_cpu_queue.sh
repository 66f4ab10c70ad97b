#!/usr/bin/env bash
# Table 1's long runs on a CPU machine (docs/results/table1/), as a queue that outlives a
# session: every run resumes from its last checkpoint in WORK, and every finished run's results
# are copied under docs/results/table1/ and committed at once (that folder only). Run from the
# repository root, each queue in a session of its own (setsid) so that NICE lowers only it:
#
#   bash scripts/table1_cpu_queue.sh QUEUE WORK [DATA_ROOT]
#
#   QUEUE  patience  the patience factor (docs/results/table1/patience_factor/): our tf-keras
#                    binary through bench/reproduce.py with the negatives factor's flags,
#                    patience 200 and --test_curve (the patience-20 result is the same run's
#                    prefix: python -m bench.analysis patience), per-position uniform negatives, trained
#                    from scratch; PATIENCE_RUNS in order (default: mixed none seed 2, then
#                    mixed corrected and mixed standard seeds 0-2), from a worktree at
#                    OURS_COMMIT (default e2e26cb, the negatives factor's code)
#                    -> docs/results/table1/patience_factor/runs/p200_query/ml1m_loo/<row>/seed<s>/
#          paper     the paper's own scripts at patience 20 (docs/results/table1/paper_code/):
#                    bench/paper_loop.py on the CPU, PAPER_RUNS in order (default: corrected
#                    and standard, seeds 0-2, alternating), from a worktree at PAPER_COMMIT
#                    (default 3076b96)
#                    -> docs/results/table1/paper_code/cpu_patience20/<logq>/seed<s>/metrics.json
#   WORK   a folder outside the repository: the pinned worktrees (WORK/src_<commit>) and the
#          runs' folders with their checkpoints (WORK/<queue>/); the same WORK resumes.
#   DATA_ROOT  the data (default ../shared/data).
#
# A run whose results are already committed is skipped. The checkpoints live only in WORK: a
# machine that is replaced loses the runs in progress (they start again from scratch).
# Environment: PYTHON (default .venv/bin/python), NICE (this queue's niceness, default 0; 19
# gives the CPU to the other queue first), DRY_RUN=1 (print each run's state and command, run
# nothing), PATIENCE_RUNS / PAPER_RUNS ("row:seed ..." / "logq:seed ...").
set -u
if [ $# -lt 2 ] || { [ "$1" != patience ] && [ "$1" != paper ]; }; then
  echo "usage: scripts/table1_cpu_queue.sh {patience|paper} WORK [DATA_ROOT]" >&2
  exit 2
fi
QUEUE=$1
ROOT=$(pwd)
WORK=$(mkdir -p "$2" && cd "$2" && pwd)
DATA=$(cd "${3:-$ROOT/../shared/data}" && pwd) || exit 2
PY=${PYTHON:-$ROOT/.venv/bin/python}
DRY=${DRY_RUN:-0}
RESULTS=$ROOT/docs/results/table1
OURS=${OURS_COMMIT:-e2e26cb}
PAPER=${PAPER_COMMIT:-3076b96}
if [ "${NICE:-0}" -gt 0 ] && [ "$DRY" != 1 ]; then
  # Under the scheduler's autogroups a thread's nice counts only inside its session's group:
  # lower the group too (this queue's own session when started with setsid).
  echo "${NICE}" > /proc/self/autogroup 2> /dev/null
  renice -n "${NICE}" -p $$ > /dev/null
fi

log() { echo "$(date -u +%FT%TZ) $QUEUE: $*"; }

worktree() { # worktree COMMIT -> prints the path of a worktree pinned at COMMIT
  local dir=$WORK/src_$1
  if [ ! -d "$dir" ] && [ "$DRY" != 1 ]; then
    git -C "$ROOT" worktree add -q --detach "$dir" "$1" >&2 || return 1
  fi
  echo "$dir"
}

commit() { # commit MESSAGE PATH: commits PATH alone, retried while another git command runs
  local i
  for i in $(seq 1 60); do
    [ -z "$(git -C "$ROOT" status --porcelain -- "$2")" ] && return 0
    git -C "$ROOT" add -- "$2" && git -C "$ROOT" commit -q -m "$1" -- "$2" && return 0
    sleep 10
  done
  log "could not commit $2"
  return 1
}

run() { # run MARKER SRC COMMAND...: runs COMMAND in the worktree SRC unless MARKER exists
  local marker=$1 src=$2
  shift 2
  if [ -e "$marker" ]; then
    log "committed before, skipped: ${marker#"$ROOT"/}"
    return 1
  fi
  if [ "$DRY" = 1 ]; then
    log "to run: $*"
    return 1
  fi
  log "start: $*"
  (cd "$src" && PYTHONPATH=$src "$@")
}

patience_queue() {
  local src out row seed folder dest
  src=$(worktree "$OURS") || exit 1
  out=$WORK/patience
  for spec in ${PATIENCE_RUNS:-mixed_none:2 mixed_corrected:0 mixed_corrected:1 \
    mixed_corrected:2 mixed_standard:0 mixed_standard:1 mixed_standard:2}; do
    row=${spec%%:*}
    seed=${spec##*:}
    folder=$out/full/ml1m_loo/$row/seed$seed
    dest=$RESULTS/patience_factor/runs/p200_query/ml1m_loo/$row/seed$seed
    run "$dest/eval/eval_results.json" "$src" "$PY" -m bench.reproduce \
      --noreference_model --jit_compile=true --budget=full --patience=200 --test_curve \
      --settings=ml1m_loo --ml1m_dir="$DATA/ml1m" --rows="$row" --seeds="$seed" \
      --uniform_negatives=query --out="$out" || continue
    if [ ! -f "$folder/eval/eval_results.json" ]; then
      log "$row seed $seed did not finish"
      continue
    fi
    mkdir -p "$dest/model" "$dest/eval"
    cp "$folder/train_metrics.json" "$folder/timing.json" "$dest/"
    cp "$folder/model/history.json" "$dest/model/"
    cp "$folder/eval/eval_results.json" "$dest/eval/"
    commit "table1 patience run: ml1m_loo $row seed $seed (query negatives), patience 200 from \
scratch with --test_curve, cpu (code $OURS)" "$dest" && log "committed $row seed $seed"
  done
}

paper_queue() {
  local src logq seed ckpt dest
  src=$(worktree "$PAPER") || exit 1
  for spec in ${PAPER_RUNS:-corrected:0 standard:0 corrected:1 standard:1 corrected:2 \
    standard:2}; do
    logq=${spec%%:*}
    seed=${spec##*:}
    ckpt=$WORK/paper/$logq/seed$seed
    dest=$RESULTS/paper_code/cpu_patience20/$logq/seed$seed
    run "$dest/metrics.json" "$src" "$PY" -m bench.paper_loop \
      --dataset=ml1m --data_path="$DATA/ml1m" --patience=20 --seed="$seed" --logq="$logq" \
      --device=cpu --checkpoint_dir="$ckpt" --metrics_json="$ckpt/metrics.json" || continue
    mkdir -p "$dest"
    cp "$ckpt/metrics.json" "$dest/"
    commit "table1 paper-code run: ml1m $logq seed $seed, patience 20, cpu (code $PAPER)" \
      "$dest" && log "committed $logq seed $seed"
  done
}

"${QUEUE}_queue"
log "queue over"
