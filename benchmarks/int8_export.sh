#!/usr/bin/env bash
# The int8 export figures of docs/export.md, and their record (benchmarks/results/int8-export-*.json):
# full_ft and lora of all-MiniLM-L6-v2 on the first 4,000 rows of SST-2's train.tsv (1 epoch, learning
# rate 1e-4 for full_ft and 1e-3 for lora, evaluated on the 872 rows of dev.tsv), and full_ft on make
# demo's config (recipes/configs/demo.yaml), each exported with `recipes-lib export RUN --quantize int8`.
# The three run at once, one thread each; a refused export is recorded too (its report is in
# RUN/export.failed/).
#
#   bash benchmarks/int8_export.sh SST2_DIR OUT_DIR     # SST2_DIR: GLUE SST-2's train.tsv and dev.tsv
#   PYTHON=.venv/bin/python bash benchmarks/int8_export.sh ...
set -euo pipefail
if [ $# -ne 2 ] || [ ! -f "$1/train.tsv" ] || [ ! -f "$1/dev.tsv" ]; then
    echo "usage: bash benchmarks/int8_export.sh SST2_DIR OUT_DIR (SST2_DIR holds SST-2's train.tsv and dev.tsv)" >&2
    exit 2
fi
sst2=$(cd "$1" && pwd) out=$(mkdir -p "$2" && cd "$2" && pwd) python=${PYTHON:-python}
cd "$(dirname "$0")/.."  # the repository: demo.yaml's data paths are relative to it
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline OMP_NUM_THREADS=1
$python benchmarks/publish.py start "$out/.started"
common=(--report_to none --save_strategy no --disable_tqdm true --overwrite_output_dir true)
sst2_args=(--model_name_or_path sentence-transformers/all-MiniLM-L6-v2 --train_file "$sst2/train.tsv"
           --validation_file "$sst2/dev.tsv" --max_train_samples 4000 --num_train_epochs 1)

train_and_export() {  # RUN_DIR RECIPE ARGS...: train, then export; a gate that refuses is not an error here
    local run_dir=$1 recipe=$2
    shift 2
    $python -m accelerate.commands.launch --config_file accelerate_configs/cpu.yaml "recipes/$recipe.py" \
        "$@" "${common[@]}" --output_dir "$run_dir" > "$run_dir.log" 2>&1
    $python -m recipes_workbench.cli export "$run_dir" --quantize int8 >> "$run_dir.log" 2>&1 || true
    test -f "$run_dir/export/export_report.json" || test -f "$run_dir/export.failed/export_report.json" || {
        echo "error: $run_dir has no export report; see $run_dir.log" >&2
        return 1
    }
}

# LoRA at its recipe's default, 1e-3 (LORA_LEARNING_RATE, config/recipe_options.py), written out so the
# run stays the one of benchmarks/results/int8-export-lora-2026-12-04T212512Z.json: at full_ft's 1e-4
# LoRA learned nothing on these 4,000 rows (51.03%, every row one class; docs/export.md).
train_and_export "$out/sst2_full_ft" full_ft "${sst2_args[@]}" --learning_rate 1e-4 & full_ft=$!
train_and_export "$out/sst2_lora" lora "${sst2_args[@]}" --learning_rate 1e-3 & lora=$!
train_and_export "$out/demo_full_ft" full_ft --config recipes/configs/demo.yaml & demo=$!
wait $full_ft && wait $lora && wait $demo
$python benchmarks/publish.py record int8-export "$out/sst2_full_ft" "$out/sst2_lora" "$out/demo_full_ft" \
    --started "$out/.started" --command "bash benchmarks/int8_export.sh $1 $2"
