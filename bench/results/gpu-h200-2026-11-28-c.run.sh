#!/usr/bin/env bash
# The third call on a lent H200 (2026-11-28): the gpu tests of the step's modules, then the eager
# fp32 cells with data on the GPU and on the host, and the busy fractions, after the step's
# bookkeeping was cut (gradient checks in one row a step, sums added in place).
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -c "import torch, torch_geometric; print(torch.__version__, torch_geometric.__version__)"; nproc; } > $OUT/machine.txt 2>&1
cat $OUT/machine.txt
start=$(date +%s)
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts="" --continue-on-collection-errors tests/test_gpu_step.py tests/test_monitor.py tests/test_batching.py tests/test_prefetch.py > $OUT/test-gpu.log 2>&1
echo "pytest exit $? after $(( $(date +%s) - start )) s" >> $OUT/test-gpu.log
tail -4 $OUT/test-gpu.log
timeout 200 python3 bench/gpu.py --time-limit 150 --only eager host busy --out $OUT/gpu.jsonl > $OUT/gpu.txt 2> $OUT/gpu.progress.txt
echo "bench exit $?"
head -40 $OUT/gpu.txt
grep -i "busy\|MISSED\|met" $OUT/gpu.txt
