#!/usr/bin/env bash
# The GPU check of docs/performance.md, for a machine with a CUDA GPU: pack throughput per pack size
# (paper and seed MLPs) against the GPU's fp32 matmul peak, then one seed of the paper table.
#   bash docs/gpu_check.sh DATA_DIR [OUT]      (from the repository root, with the venv active)
set -euo pipefail
DATA=${1:?usage: bash docs/gpu_check.sh DATA_DIR [OUT]}
OUT=${2:-gpu_check}
python -m pytest -q tests/test_packs.py || true               # the CUDA test runs here, skipped elsewhere
python -m bench perf --device cuda --preset paper-fmnist --networks 1,5,25,100,200,400,800 --epochs 1 \
    --data-dir "$DATA" --out "$OUT/paper-fmnist"
python -m bench perf --device cuda --networks 1,5,25,100,200,400,800 --epochs 1 --data-dir "$DATA" --out "$OUT/seed"
# one seed of the paper table: over 20 min on an H200 (6 of its 22 runs in 330 s), cut at 25 min
time timeout 1500 python run_all.py --preset paper-fmnist --seeds 0 --device cuda --data-dir "$DATA" \
    --out "$OUT/paper-fmnist-seed0" --no-plots -q
