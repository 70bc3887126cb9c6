#!/usr/bin/env bash
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -c "import torch, torch_geometric; print(torch.__version__, torch_geometric.__version__)"; nproc; } > $OUT/machine.txt 2>&1
cat $OUT/machine.txt
start=$(date +%s)
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts="" --continue-on-collection-errors tests/test_gpu_step.py tests/test_prefetch.py tests/test_monitor.py tests/test_batching.py tests/test_tasks.py tests/test_strategies.py tests/test_preparation.py > $OUT/test-gpu.log 2>&1
echo "pytest exit $? after $(( $(date +%s) - start )) s" >> $OUT/test-gpu.log
tail -4 $OUT/test-gpu.log
timeout 320 python3 bench/gpu.py --time-limit 270 --only eager host busy compiled prep --out $OUT/gpu.jsonl > $OUT/gpu.txt 2> $OUT/gpu.progress.txt
echo "bench exit $?"
tail -75 $OUT/gpu.txt
grep -v Warning $OUT/gpu.progress.txt | tail -30
