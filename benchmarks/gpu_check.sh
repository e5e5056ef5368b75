#!/usr/bin/env bash
# The GPU check in one command, under one deadline (benchmarks/gpu_check.py says what it runs):
#     bash benchmarks/gpu_check.sh --budget_s 480
# on the lent H200, called with carry [".whl"] (benchmarks/README.md has the exact call). Prepare
# .whl/ first, here, where PyPI is reachable: bash benchmarks/gpu_wheels.sh
#
# The same code path on a CPU, in a virtual environment pinned to the GPU machine's versions, with
# the carried wheels installed the same way (make gpu-rehearsal):
#     GPU_CHECK_PYTHON=.venv-gpu/bin/python bash benchmarks/gpu_check.sh --cpu --tiny
#
# First the carried wheels the Python lacks go into GPU_CHECK_SITE (pip, offline, no dependencies), then
# gpu_check.py imports everything it needs and stops with one line if anything is missing, before any
# row runs. Results: gpu_check.json and .txt in $OUT (else benchmarks/results/), rewritten after every row.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${GPU_CHECK_PYTHON:-python3}
# --cpu uses the project's own virtual environment when there is one and no Python is named.
case " $* " in *" --cpu "*) [ -z "${GPU_CHECK_PYTHON:-}" ] && [ -x .venv/bin/python ] && PY=.venv/bin/python ;; esac
WHEELS=${GPU_WHEELS_DIR:-.whl}
SITE=${GPU_CHECK_SITE:-/tmp/gpu_check_site}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
rm -rf "$SITE"  # this script's own: a package left by an earlier run must not shadow the image's
"$PY" benchmarks/gpu_preflight.py install --wheels "$WHEELS" --target "$SITE"
# The package is used from the source tree: no `pip install -e .` (it would try to reach PyPI).
export PYTHONPATH="$PWD/src:$SITE${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" benchmarks/gpu_check.py "$@"
