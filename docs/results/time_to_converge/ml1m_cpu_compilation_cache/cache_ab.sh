#!/bin/bash
# ML-1M, 3 steps, Keras 3 JAX binary: a cold compilation cache against a warm one, 2 rounds.
cd "$(dirname "$0")/../../../.."  # the repository root
for r in 1 2; do
  rm -rf /tmp/cc_$r
  for kind in cold warm; do
    rm -rf /tmp/ccrun
    s=$(date +%s.%N)
    KERAS_BACKEND=jax .venv/bin/python -m train.keras3 --backend=jax --dataset=ml1m --shuffle_rng=numpy --epochs=1 --steps_per_epoch=3 --noprogress --model_dir=/tmp/ccrun --compilation_cache=/tmp/cc_$r > /tmp/cache_$kind$r.log 2>&1
    e=$(date +%s.%N)
    python3 -c "
import json; m=json.load(open('/tmp/ccrun/metrics.json')); p=m['phases']
print('$kind r$r wall %.1f first_step %.1f validation %.1f test %.1f  test_ndcg20 %.4f' % ($e-$s, p['first_step'], p['validation'], p['test'], m['test']['ndcg@20']))"
  done
done
