#!/usr/bin/env bash
# Fill .whl/ (here, where PyPI is reachable) with the wheels the GPU machine's image lacks, for its
# Python 3.12 on x86_64: datasets, evaluate and their dill and multiprocess; bitsandbytes with only the
# native libraries for the device's CUDA and the CPU (BNB_CUDA, default 130: the image's torch is
# 2.11.0+cu130); and pyarrow and fsspec at versions datasets 5.2.0 accepts (pyarrow>=24,
# fsspec<=2026.9.0), installed there only if the image's own do not satisfy it.
#
# .whl/ is ignored by git (.gitignore), so it does NOT travel with the working tree: a device call
# takes it only when its carry names it. The call (benchmarks/README.md):
#     carry [".whl"], command "bash benchmarks/gpu_check.sh --budget_s 480"
# Last, this prints what the call sends against its 64 MiB limit, and fails if it is over.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${GPU_WHEELS_DIR:-.whl}
BNB_CUDA=${BNB_CUDA:-130}
PY=${PYTHON:-python3}
CARRIED=(
    datasets==5.2.0 evaluate==0.4.6 dill==0.4.1 multiprocess==0.70.19
    bitsandbytes==0.50.2 pyarrow==24.0.0 fsspec==2026.9.0
)
download=$(mktemp -d)
trap 'rm -rf "$download"' EXIT
for requirement in "${CARRIED[@]}"; do
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
        --platform any -d "$download" "$requirement"
done
"$PY" benchmarks/gpu_preflight.py slim-bitsandbytes "$download" --keep cpu "cuda$BNB_CUDA"
# One version of each package: two would stop the whole install there.
rm -rf "$WHEELS"
mkdir -p "$WHEELS"
mv "$download"/*.whl "$WHEELS"/
ls -la "$WHEELS"
"$PY" benchmarks/gpu_preflight.py carry-size "$WHEELS"
