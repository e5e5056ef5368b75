#!/usr/bin/env bash
# GPU check for an H200-class machine with no network (< 8 minutes): every recipe on bert-base and
# bert-large shapes, batch 32, seq 128, bf16; prints samples/s, tokens/s, MFU and measured vs
# planned peak memory last. Prepare the wheels first, where PyPI is reachable:
#     bash benchmarks/gpu_wheels.sh
# then, on the GPU machine, from the repository root (with .whl/ beside it):
#     bash benchmarks/gpu_check.sh
# On a CPU, the same code path in about a minute: bash benchmarks/gpu_check.sh --cpu --tiny
#
# Catalogue mode (benchmarks/gpu_catalogue.py): every model of the planner's catalogue that the GPU
# can hold, smallest first, each built with random weights from its config.json values (no download,
# no tokenizer) and trained a few steps in this process by each recipe (full_ft, adamw_8bit, lora,
# qlora; a recipe the plan says does not fit is skipped, and its row says so); prints and writes
# model, recipe, batch, planned and measured peak GiB (torch.cuda.max_memory_allocated) and their
# ratio, stopping in time for one device call (--max_minutes 8) and listing what it did not reach:
#     bash benchmarks/gpu_check.sh --catalogue [--models NAME ...] [--recipes ...] [--output FILE]
# The JSON goes to --output, by default $OUT/gpu_catalogue_check.json (benchmarks/results/ without
# $OUT). On a CPU, with every config scaled down, in about a minute:
#     bash benchmarks/gpu_check.sh --catalogue --cpu --tiny
set -euo pipefail
cd "$(dirname "$0")/.."
PY=python3
# --cpu uses the project's own virtual environment when there is one.
case " $* " in *" --cpu "*) [ -x .venv/bin/python ] && PY=.venv/bin/python ;; esac
if [ -d .whl ] && ! "$PY" -c "import datasets, evaluate, bitsandbytes" 2>/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# The package is used from the source tree: no `pip install -e .` (it would try to reach PyPI).
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
"$PY" -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)"
exec "$PY" benchmarks/gpu_check.py "$@"
