#!/usr/bin/env bash
# The fourth call on a lent H200 (2026-11-28), the final step: the eager and the compiled fp32
# cells with data on the GPU in one call, so that compiled qg compares with Lightning's and the
# other loops' eager epochs on the same machine.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 -c "import torch, torch_geometric; print(torch.__version__, torch_geometric.__version__)"; nproc; } > $OUT/machine.txt 2>&1
timeout 210 python3 bench/gpu.py --time-limit 170 --only eager compiled --out $OUT/gpu.jsonl > $OUT/gpu.txt 2> $OUT/gpu.progress.txt
echo "bench exit $?"
head -30 $OUT/gpu.txt
grep -i "compiled\|MISSED\|met" $OUT/gpu.txt | head -20
