#!/usr/bin/env bash
# On a machine with a GPU whose own python3 has torch, torch_geometric and Lightning (no venv, no
# network): the gpu-marked tests, then the GPU benchmark, their raw output under $OUT (default
# bench/results/). Test modules whose optional dependencies that python lacks are skipped at
# collection; the gpu tests themselves need none of them.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/results}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
python3 -m pytest -q -m gpu -p no:cacheprovider --continue-on-collection-errors tests \
    2>&1 | tee "$out/test-gpu.log" | tail -25
python3 bench/gpu.py --out "$out/gpu.jsonl" "$@" 2>&1 | tee -a "$out/gpu.txt"
