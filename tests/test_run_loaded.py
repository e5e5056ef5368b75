"""What a default full_ft run has loaded by its end (tools/run_loaded_lines.py, the figure issue 56 bounds):
the code a default run skips stays unloaded through the whole run, not only at start-up, and the lines
it carries do not creep back up."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.helpers.repo import REPO_ROOT
from tests.helpers.wandb_runs import isolated_wandb_env

# Each loads where the option or command that needs it runs, never in a default run of full_ft.
DEFERRED = {
    "recipes_lib.config.adamw_8bit_options": "adamw_8bit's options",
    "recipes_lib.config.distill_options": "distill's options",
    "recipes_lib.data.quoting": "an ambiguous CSV's quoting evidence",
    "recipes_lib.data.split_column": "--split_column",
    "recipes_lib.evaluation.collapse_note": "a run whose predictions collapsed",
    "recipes_lib.evaluation.threshold_tuning": "multi-label runs and --decision_threshold",
    "recipes_lib.modeling.adapters": "LoRA and QLoRA",
    "recipes_lib.modeling.score_head": "regression",
    "recipes_lib.tracking.auth": "W&B asked to run online",
    "recipes_lib.tracking.hub": "--push_to_hub",
    "recipes_lib.training.autofit": "--auto_batch_size",
    "recipes_lib.training.class_weights": "--class_weights",
    "recipes_lib.training.distillation": "distill",
    "recipes_lib.training.resume": "--resume_from_checkpoint",
    "recipes_lib.typed_json": "the readers of results.json",
    "recipes_lib.evaluation.inference": "distill's teacher and --merge_adapter's scoring",
    "recipes_lib.run.merged": "--merge_adapter",
    "recipes_lib.tracking.card_export": "a run whose ONNX export passed its gate",
    "recipes_lib.tracking.card_windowed": "head_tail and sliding_window runs",
    "recipes_lib.modeling.load_failures": "a model, config or tokenizer that does not load",
    "recipes_lib.training.failures": "a save the disk refuses, a diverged run",
    "recipes_lib.data.multi_label": "multi-label labels",
    "recipes_lib.data.scores": "regression labels",
    "recipes_lib.data.label_names": "--label_names_file",
    "recipes_lib.data.hidden_labels": "a test split",
    "recipes_lib.data.length_advice": "a split where max_seq_length cuts many examples",
    "recipes_lib.data.hub_dataset": "--dataset_name",
    "recipes_lib.evaluation.windows": "long texts read as windows",
}
# 57 modules, 9,615 lines at session 60 (the first count); 58 modules, 8,626 lines at session 61 (issue 56's
# target: at most 9,000). Lowered as cuts land, so growth fails here.
MAX_LINES = 8_626


def test_a_default_full_ft_run_loads_none_of_what_it_skips_and_stays_within_its_lines(tmp_path):
    # Without the W&B variables an earlier in-process run of this worker left (its service's socket).
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    environment = isolated_wandb_env(tmp_path, WANDB_MODE="offline", OMP_NUM_THREADS="1", **offline)
    command = [sys.executable, "tools/run_loaded_lines.py", "full_ft", str(tmp_path / "run"), "-v"]
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figure = re.search(r"^LOADED (\d+) modules, (\d+) lines$", done.stdout, re.MULTILINE)
    assert figure, done.stdout[-2000:]
    loaded = set(re.findall(r"^\d+ (recipes_\w+(?:\.\w+)*)$", done.stdout, re.MULTILINE))
    assert len(loaded) == int(figure[1])
    assert "recipes_lib.run.record" in loaded  # the run got to writing its results
    assert not any(name.startswith("recipes_workbench") for name in loaded)
    assert {name: why for name, why in DEFERRED.items() if name in loaded} == {}
    assert int(figure[2]) <= MAX_LINES, f"a default run now loads {figure[2]} project lines"
