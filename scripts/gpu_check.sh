#!/usr/bin/env bash
# The GPU check of docs/performance.md ("The prepared GPU check"), prepared to finish in about 8
# minutes of GPU time (the stages' limits add up to 460 s). GPU time is scarce (a session is lent 15
# minutes, start-up included): prepare here, run once.
#
#   bash scripts/gpu_check.sh --prepare [DATA_DIR]   on this machine: the data (gzipped) and the CPU table's
#                                                 paper_table.csv into .gpu_data/, the packages the GPU
#                                                 image lacks (wheels) into .whl/, both git-ignored
#                                                 (.git/info/exclude); prints the size of what travels
#   bash scripts/gpu_tree.sh off | on                on this machine, around the device call: leave the
#                                                 committed results/ (about 500 MB) out of what travels
#   bash scripts/gpu_check.sh [OUT]                  on the GPU machine, from the repository root, with
#                                                 .gpu_data and .whl carried (OUT: $OUT or gpu_check).
#                                                 JOBS=N: the table's --jobs (default 1)
#   DEVICE=cpu SEEDS=0 TABLE_ARGS="--epochs 1" PATH=.venv/bin:$PATH bash scripts/gpu_check.sh /tmp/rehearsal
#                                                 here: a rehearsal of every stage on the CPU (perf is cut
#                                                 at its limit; the CUDA tests skip), to find a fault in
#                                                 the script before GPU time is spent on it
#
# Stages, each cut at its own time limit: the CUDA tests (pytest_cuda.txt); bench perf at 25 and 400
# networks, 3 epochs: the paper MLP with graph and with eager steps, the seed MLP with graph steps
# (perf_*.csv); the paper-fmnist table's 11 rows from scratch with 10 seeds, resumable, cut at 210 s, compared
# cell by cell with the CPU table (compare_to_*.csv; records, selections and tables in paper_fmnist_gpu.tar.gz,
# without the predictions). Every file lands in OUT as its stage ends (7 files, with gpu_check.log).
set -uo pipefail
WHEELS="relplot==1.0.3 deprecation==2.1.0 laplace-torch==0.3 asdfghjkl==0.1a4 backpack-for-pytorch==1.7.1
        curvlinops-for-pytorch==3.0.1 unfoldNd==0.2.3 einconv==0.1.0"
CPU_TABLE=results/paper-fmnist-packed   # the CPU paper table the GPU cells are held to (one sd)
# the CPU table's 11 rows (the issue's table); the preset's later rows (MIMO, MultiSWAG, Laplace,
# snapshot ensembles) have no CPU cells to be held to
TABLE_METHODS="deep_ensemble dare mc_dropout anchor_net mod negcorr rde single_network batch_ensemble packed_ensemble"
DEVICE=${DEVICE:-cuda}  # cpu: the rehearsal
EXCLUDE=$(git rev-parse --git-common-dir 2>/dev/null || echo .git)/info/exclude

if [[ "${1:-}" == "--prepare" ]]; then
    DATA=${2:-${DARE_BENCH_DATA:-../shared/data}}
    mkdir -p .gpu_data .whl "$(dirname "$EXCLUDE")"
    for folder in /.gpu_data/ /.whl/; do grep -qx "$folder" "$EXCLUDE" 2>/dev/null || echo "$folder" >> "$EXCLUDE"; done
    tar czf .gpu_data/data.tar.gz -C "$(dirname "$DATA")" "$(basename "$DATA")/MNIST" "$(basename "$DATA")/FashionMNIST"
    mkdir -p ".gpu_data/$(basename "$CPU_TABLE")" && cp "$CPU_TABLE/paper_table.csv" ".gpu_data/$(basename "$CPU_TABLE")/" || exit 1
    # shellcheck disable=SC2086
    python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl $WHEELS
    echo "prepared .gpu_data/ and .whl/; carry both. What travels (tracked + untracked, not ignored), MiB:"
    { git ls-files -z; git ls-files -z --others --exclude-standard; } | du -cm --files0-from=- | tail -1
    echo "over 64 MiB? leave the committed results out first: bash scripts/gpu_tree.sh off"
    exit 0
fi

OUT=${1:-${OUT:-gpu_check}}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)  # absolute: the stages change directory
WORK=$(mktemp -d)
exec > >(tee "$OUT/gpu_check.log") 2>&1
export PYTHONUNBUFFERED=1
stage() { echo "== $1 ($(date +%T), ${SECONDS}s)"; }

stage "set-up"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
tar xzf .gpu_data/data.tar.gz -C "$WORK" && DATA="$WORK/$(tar tzf .gpu_data/data.tar.gz | head -1 | cut -d/ -f1)"
nvidia-smi -L
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
git log -1 --format='commit %h %s' 2>/dev/null || true

stage "CUDA tests: graph = eager bitwise, a re-run bitwise, no host sync inside an epoch, a pack on the GPU"
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/training/test_device_epoch.py \
    tests/training/test_packs.py::test_a_pack_trains_on_the_gpu_as_on_the_cpu_within_float_rounding > "$OUT/pytest_cuda.txt" 2>&1
tail -3 "$OUT/pytest_cuda.txt"

stage "bench perf: paper MLP (784-100-100-100-10, batch 128) graph and eager, seed MLP (784-256-256-10, batch 256) graph"
for shape in "paper graph --preset paper-fmnist" "paper eager --preset paper-fmnist" "seed graph"; do
    read -r name step preset <<<"$shape"
    # shellcheck disable=SC2086
    timeout 45 python3 -m bench perf --device "$DEVICE" $preset --networks 25,400 --epochs 3 --step "$step" \
        --data-dir "$DATA" --out "$WORK/perf_${name}_$step" && cp "$WORK/perf_${name}_$step/perf_packs.csv" "$OUT/perf_${name}_$step.csv"
done

stage "the paper table (its 11 rows) from scratch, seeds ${SEEDS:-0-9}, --jobs ${JOBS:-1} (cut at 210 s; resumable)"
TABLE="$WORK/paper-fmnist-gpu"
# shellcheck disable=SC2086
time timeout 210 python3 run_all.py --preset paper-fmnist --methods $TABLE_METHODS --seeds ${SEEDS:-0 1 2 3 4 5 6 7 8 9} \
    --device "$DEVICE" --jobs "${JOBS:-1}" ${TABLE_ARGS:-} \
    --data-dir "$DATA" --no-download --out "$TABLE" --no-plots -q
REFERENCE=".gpu_data/$(basename "$CPU_TABLE")"  # carried (--prepare); results/ stays behind
[[ -f "$REFERENCE/paper_table.csv" ]] || REFERENCE=$CPU_TABLE
timeout 30 python3 -m bench report --out "$TABLE" --no-plots --compare-to "$REFERENCE" | tail -2
cp "$TABLE"/compare_to_*.csv "$OUT/" 2>/dev/null
(cd "$TABLE" && tar czf "$OUT/paper_fmnist_gpu.tar.gz" records selections ./*.csv ./*.md 2>/dev/null) || true  # no predictions: too large
stage "done"
sleep 1  # let tee write the log's end
