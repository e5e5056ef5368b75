#!/usr/bin/env bash
# Download, on a machine with PyPI access, the wheels the GPU machine lacks (its image has torch,
# transformers, accelerate and peft but not datasets, evaluate or bitsandbytes) into .whl/, which
# travels with the working tree to the GPU machine. Python 3.12 there, x86_64.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
PY=${PYTHON:-python3}
for requirement in datasets==5.2.0 evaluate==0.4.6 bitsandbytes==0.50.2 dill==0.4.1 multiprocess==0.70.19; do
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
        --platform any -d .whl "$requirement"
done
ls -la .whl
