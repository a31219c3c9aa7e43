#!/usr/bin/env bash
# The GPU check of docs/performance.md ("On a GPU"), prepared to finish in about 8 minutes of GPU
# time. GPU time is scarce (a session is lent 15 minutes, start-up included): prepare here, run once.
#
#   bash docs/gpu_check.sh --prepare [DATA_DIR]   on this machine: the data (gzipped) into .gpu_data/ and
#                                                 the packages the GPU image lacks (wheels) into .whl/,
#                                                 both git-ignored (.git/info/exclude); prints the size of
#                                                 what travels
#   bash docs/gpu_check.sh [OUT]                  on the GPU machine, from the repository root (OUT: $OUT or
#                                                 gpu_check): everything below, into OUT/gpu_check.tar.gz
#                                                 and OUT/gpu_check.log
#
# Stages, each cut at its own time limit so the whole fits: the CUDA tests; bench perf of the paper and
# seed MLPs at 25 and 400 networks, graph and eager steps; the paper-fmnist table from scratch with 10
# seeds (resumable: what finishes in its limit is kept), compared cell by cell with the CPU table; a
# re-run of the first pack, whose records must be bitwise the same.
set -uo pipefail
WHEELS="relplot==1.0.3 deprecation==2.1.0 laplace-torch==0.3 asdfghjkl==0.1a4 backpack-for-pytorch==1.7.1
        curvlinops-for-pytorch==3.0.1 unfoldNd==0.2.3 einconv==0.1.0"
CPU_TABLE=results/paper-fmnist-packed   # the CPU paper table the GPU cells are held to (one sd)

if [[ "${1:-}" == "--prepare" ]]; then
    DATA=${2:-${DARE_BENCH_DATA:-../shared/data}}
    mkdir -p .gpu_data .whl .git/info
    for folder in /.gpu_data/ /.whl/; do grep -qx "$folder" .git/info/exclude 2>/dev/null || echo "$folder" >> .git/info/exclude; done
    tar czf .gpu_data/data.tar.gz -C "$(dirname "$DATA")" "$(basename "$DATA")/MNIST" "$(basename "$DATA")/FashionMNIST"
    # shellcheck disable=SC2086
    python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl $WHEELS
    echo "prepared .gpu_data/ and .whl/; carry both. What travels (tracked + untracked, not ignored), MiB:"
    { git ls-files -z; git ls-files -z --others --exclude-standard; } | du -cm --files0-from=- | tail -1
    echo "over 64 MiB? leave the committed results out first (git sparse-checkout, docs/performance.md)"
    exit 0
fi

OUT=${1:-${OUT:-gpu_check}}
WORK=$(mktemp -d)
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
export PYTHONUNBUFFERED=1
stage() { echo "== $1 ($(date +%T), ${SECONDS}s)"; }

stage "set-up"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
tar xzf .gpu_data/data.tar.gz -C "$WORK" && DATA="$WORK/$(tar tzf .gpu_data/data.tar.gz | head -1 | cut -d/ -f1)"
nvidia-smi -L
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
git log -1 --format='commit %h %s' 2>/dev/null || true

stage "CUDA tests (graph = eager bitwise, no host sync inside an epoch, packs)"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_device_epoch.py tests/test_packs.py 2>&1 \
    | tee "$WORK/pytest_cuda.txt" | tail -5

stage "bench perf: paper MLP (784-100-100-100-10, batch 128) and seed MLP (784-256-256-10, batch 256)"
for step in graph eager; do
    timeout 120 python3 -m bench perf --device cuda --preset paper-fmnist --networks 25,400 --epochs 1 \
        --step "$step" --data-dir "$DATA" --out "$WORK/perf_paper_$step"
done
timeout 90 python3 -m bench perf --device cuda --networks 25,400 --epochs 1 --step graph --data-dir "$DATA" \
    --out "$WORK/perf_seed_graph"

stage "the paper table from scratch, 10 seeds (cut at 270 s; resumable)"
time timeout 270 python3 run_all.py --preset paper-fmnist --seeds 0 1 2 3 4 5 6 7 8 9 --device cuda \
    --data-dir "$DATA" --out "$WORK/paper-fmnist-gpu" --no-plots -q
timeout 60 python3 -m bench report --out "$WORK/paper-fmnist-gpu" --no-plots --compare-to "$CPU_TABLE" | tail -3

stage "a re-run of the deep ensembles and DARE (the same packs as above): bitwise the same records?"
timeout 90 python3 run_all.py --preset paper-fmnist --seeds 0 1 2 3 4 5 6 7 8 9 --methods deep_ensemble dare --device cuda \
    --data-dir "$DATA" --out "$WORK/rerun" --no-plots -q >/dev/null
python3 - "$WORK/paper-fmnist-gpu/records" "$WORK/rerun/records" <<'EOF'
import json, sys
from pathlib import Path
first, again = Path(sys.argv[1]), Path(sys.argv[2])
same = differ = 0
for path in sorted(again.glob("*.json")):
    if not (first / path.name).is_file():
        continue
    a, b = json.loads((first / path.name).read_text()), json.loads(path.read_text())
    keys = [k for k in a if k.startswith(("id_", "ood_", "member_val", "epochs_run", "history", "param_abs"))]
    equal = all(a.get(k) == b.get(k) for k in keys)
    same, differ = same + equal, differ + (not equal)
    print(f"{path.stem} {a['variant']}: {'bitwise the same' if equal else 'DIFFERENT'}")
print(f"re-run: {same} records the same, {differ} different")
EOF

stage "packing the results"
(cd "$WORK" && find paper-fmnist-gpu rerun -name predictions -prune -o -type f -print \
    | tar czf pack.tgz -T - pytest_cuda.txt perf_*/perf_packs.csv)
cp "$WORK/pack.tgz" "$OUT/gpu_check.tar.gz"
stage "done"
