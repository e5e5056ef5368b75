"""A recipe loads the run library (data, modeling, training, run, tracking, evaluation, config), never
the workbench beside it (recipes_workbench: planner, sweep, crossval, export, tools, dashboard, command
line); autofit loads only under --auto_batch_size, the LoRA code only with a LoRA recipe."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.repo import REPO_ROOT

# recipes/full_ft.py's closure: 66 modules, 12,492 lines with the planner loaded at import (before
# issue 38); 56 modules, 9,995 lines without it; 54 modules, 9,364 lines with autofit and
# modeling.adapters loaded only when used; 9,731 lines once the same session's other work merged (the
# delimiter read from content, CPU bf16 detection, the neglected-class note: code a default run uses);
# 9,605 once `recipes-lib push`'s upload, `families`' table, compare's W&B group names and crossval's
# held-out neglect test moved to the commands that use them; 9,808 with the next session's other work merged
# (the flash_attention_2 choice and GTE's transformers floor at load, the end-of-run training-loss check);
# 53 modules, 9,011 lines once what only the workbench reads moved to it (workbench.py, the decision files'
# readers, the planner catalogue's published values, the 8-bit AdamW builder), code a default run skips
# loads with its option (--push_to_hub's check, --merge_adapter's scoring, sliding_window's windows, an
# ambiguous CSV's quoting evidence) and each module was read again for what said more than it does.
# 53 modules, 8,880 lines once issue 48 moved the planner's per-family forward terms to the planner
# (recipes_workbench/planner/forwards.py) and the bitsandbytes handling into blocks undone when they end.
# 58 modules, 10,284 lines after session 46 (issues 48-50 merged): the run's preparation as values
# (run/preparation.py), the typed results record, whole-file writes (whole_files.py), the output_dir lock
# and secrets' hand-over (locking.py, credentials.py), collapse detection (evaluation/collapse.py), and
# the label formats and per-label report.
# 48 modules, 7,988 lines after session 47 (issue 48's aim: 48 modules, 8,000 lines), measured with
# `python /work/shared/hooks/import_closure.py . recipes/full_ft.py` (module-level imports followed):
# the end-of-run writers (run/record.py and the card, predictions and end-of-run checks it imports) load
# when the run writes its results, tracking/wandb_run.py when report_to names wandb, run_main joined
# recipe_run.py, and module docstrings that restated docs/ or the code were cut to what they add.
# 7,921 lines after s47-trim-core (issue 48's "src net negative": folds and docstrings that repeated
# docs/ or the code, in data/, config/, training/, evaluation/, memory/, tracking/ and run/), measured
# with the same command.
# 50 modules, 8,669 lines after session 53 (issues 54, 55, 58 merged, then issue 56's move): what every run
# now does on its path, not what it skips: the checkpoint checksums (training/checkpoints.py), the whole-run
# loss logged for a resume (training/run_totals.py), secrets refused and redacted (credentials.py), the lock's
# leftovers and unwritable-directory paragraph (locking.py), typed results (results.py), --split_column's
# check (data/split_column.py), the fp32 regression head (modeling/score_head.py), the measured length
# figures (data/long_text.py); the move took the registry (-90) out. Measured by the LOADED script below.
# 48 modules, 7,696 lines after session 60 (issue 56's cuts): the version check is transformers'
# require_version, what only --class_weights, --split_column, regression, resume, threshold tuning,
# a collapse note or the workbench uses loads where it is used or moved to the workbench, and docstrings
# that restated a field's help or the code were cut. Measured by the LOADED script below.
# 49 modules, 6,939 lines after session 61: multi-label and score labels, label names, a Hub dataset, a
# test split's hidden labels, the length advice, load and save failures and the merged model's scoring
# load where used; the label column reader became a module of its own (data/label_column.py, the 49th)
# that labels.py and the deferred label modules share. Measured by the LOADED script below.
# A bound, so that what a recipe does not use creeping back fails.
FULL_FT_MAX_MODULES = 49
FULL_FT_MAX_LINES = 6_939

LOADED = """
import importlib.util, json, pathlib, sys
loaded = {}
for name in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location(f"_recipe_{name}", f"recipes/{name}.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    modules = {m: getattr(sys.modules[m], "__file__", None) for m in sys.modules if m.startswith("recipes_")}
    lines = sum(len(pathlib.Path(f).read_text().splitlines()) for f in modules.values() if f)
    loaded[name] = {"modules": sorted(modules), "lines": lines}
print(json.dumps(loaded))
"""


def test_a_recipe_imports_the_library_and_not_the_workbench():
    from recipes_workbench.recipes import RECIPES

    names = ["full_ft", *(name for name in RECIPES if name != "full_ft")]
    output = subprocess.run(
        [sys.executable, "-c", LOADED, *names], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    loaded = json.loads(output.splitlines()[-1])
    for name, found in loaded.items():
        workbench = [m for m in found["modules"] if m.split(".")[0] == "recipes_workbench"]
        assert workbench == [], f"recipes/{name}.py loads the workbench: {', '.join(workbench)}"
    assert "recipes_lib.training.trainer" in loaded["full_ft"]["modules"]  # the check saw the library
    full_ft = set(loaded["full_ft"]["modules"])
    only_some = {
        "recipes_lib.training.autofit",
        "recipes_lib.modeling.adapters",
        "recipes_lib.modeling.adamw_8bit",
        "recipes_lib.tracking.hub",  # --push_to_hub's token check, loaded by that option only
        "recipes_lib.evaluation.inference",  # --merge_adapter's scoring (and a distillation's teacher)
        "recipes_lib.evaluation.windows",  # --long_text sliding_window's documents (and a distillation's)
        "recipes_lib.data.split_column",  # --split_column
        "recipes_lib.data.hub_dataset",  # a Hub dataset (the demo reads local files)
        "recipes_lib.data.multi_label",  # multi-label labels
        "recipes_lib.data.scores",  # regression labels
        "recipes_lib.data.label_names",  # --label_names_file
        "recipes_lib.data.hidden_labels",  # a test split
        "recipes_lib.data.length_advice",  # many texts cut by max_seq_length
        "recipes_lib.modeling.score_head",  # a regression model's head
        "recipes_lib.training.class_weights",  # --class_weights
        "recipes_lib.tracking.auth",  # W&B online: is there a key
        "recipes_lib.training.resume",  # --resume_from_checkpoint
        "recipes_lib.training.failures",  # a refused save's or a diverged run's paragraph
        "recipes_lib.modeling.load_failures",  # why a model did not load
        "recipes_lib.evaluation.collapse_note",  # a collapsed model's paragraph
    }
    assert only_some.isdisjoint(full_ft), full_ft
    assert "recipes_lib.modeling.adapters" in loaded["lora"]["modules"]
    assert "recipes_lib.modeling.adamw_8bit" in loaded["adamw_8bit"]["modules"]
    assert loaded["full_ft"]["lines"] <= FULL_FT_MAX_LINES, loaded["full_ft"]["lines"]
    assert len(loaded["full_ft"]["modules"]) <= FULL_FT_MAX_MODULES, loaded["full_ft"]["modules"]
