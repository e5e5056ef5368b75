"""Nothing lost: interruption, kill -9, incomplete checkpoints, NaN losses, repeatability, safe loading.

The runs that are killed or signalled are separate `python recipes/<recipe>.py` processes, as a
user (or a scheduler) would stop them. Every run here is bit-for-bit repeatable: the tiny BERT has
no dropout, data order and RNG states are restored on resume, and one CPU thread is used (float
sums in a different order would differ in the last bit).

full_ft runs by default; adamw_8bit, lora and qlora (CPU-capable too) are marked slow.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from recipes_lib.errors import OutputDirError
from recipes_lib.training.checkpoints import COMPLETE_MARKER, mark_complete
from recipes_lib.training.resume import incomplete_reason, last_complete_checkpoint, resolve_resume_checkpoint
from tests.helpers.repo import RECIPES, REPO_ROOT, load_recipe
from tests.helpers.runs import QUICK, run_args, run_in_process, with_teacher

# 256 examples / 16 per batch = 16 steps per epoch: 40 steps cross two epoch boundaries, and a
# checkpoint every 4 steps lands both mid-epoch and on an epoch end.
RUN_ARGS = ("--max_steps", "40", "--save_strategy", "steps", "--save_steps", "4", "--save_total_limit", "2",
            "--eval_strategy", "no")  # fmt: skip
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


def recipe_args(recipe: str, tiny_bert: Path, data, output_dir: Path, *extra: str) -> list[str]:
    # LoRA's own dropout (0.1 by default) is turned off like the model's, so runs can be compared.
    lora = ["--lora_dropout", "0"] if recipe in ("lora", "qlora") else []
    return with_teacher(recipe, run_args(tiny_bert, data, output_dir, *RUN_ARGS, *lora, *extra))


def same_teacher(recipe: str, reference: Path) -> list[str]:
    """distill's --teacher of the reference run, so the resumed run learns from the very same teacher."""
    return ["--teacher", str(reference.with_name(f"{reference.name}-teacher"))] if recipe == "distill" else []


def start(recipe: str, args: list[str], **popen) -> subprocess.Popen:
    command = [sys.executable, str(REPO_ROOT / "recipes" / f"{recipe}.py"), *args]
    return subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=ONE_THREAD,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def finish(process: subprocess.Popen, timeout: int = 300) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=timeout)
    return process.returncode, stderr


def weights(output_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor the run saved as its final model (the adapter, for LoRA and QLoRA)."""
    files = sorted(output_dir.glob("*.safetensors"))
    assert files, f"no final weights in {output_dir}: {sorted(p.name for p in output_dir.iterdir())}"
    return {f"{path.name}:{key}": value for path in files for key, value in load_file(path).items()}


def assert_same_weights(actual: Path, expected: Path) -> None:
    got, want = weights(actual), weights(expected)
    assert got.keys() == want.keys()
    for key in want:
        assert torch.equal(got[key], want[key]), key


def complete_checkpoint_steps(output_dir: Path) -> list[int]:
    return sorted(
        int(path.parent.name.split("-")[1]) for path in output_dir.glob(f"checkpoint-*/{COMPLETE_MARKER}")
    )


def wait_for_checkpoint(output_dir: Path, process: subprocess.Popen, at_least: int) -> None:
    deadline = time.monotonic() + 300
    while not any(step >= at_least for step in complete_checkpoint_steps(output_dir)):
        assert process.poll() is None, finish(process)[1][-3000:]
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def uninterrupted(tiny_bert, learnable_data, tmp_path_factory):
    """The reference: each recipe run once from start to end (cached per recipe)."""
    runs: dict[str, Path] = {}

    def run(recipe: str) -> Path:
        if recipe not in runs:
            output_dir = tmp_path_factory.mktemp(f"uninterrupted-{recipe}")
            code, stderr = finish(start(recipe, recipe_args(recipe, tiny_bert, learnable_data, output_dir)))
            assert code == 0, stderr[-3000:]
            runs[recipe] = output_dir
        return runs[recipe]

    return run


# --- kill -9, SIGTERM, SIGINT ------------------------------------------------------------------------


# Slow (~35 s a recipe on 2 cores): by default the SIGTERM test below stops a real process and resumes
# it, test_resume_skips_a_checkpoint_cut_short_while_saving covers a kill during a save, and
# test_recipes.py's resumed run ends with the uninterrupted weights for full_ft, adamw_8bit and lora.
@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES)
def test_kill_9_at_a_random_step_then_resume_last_ends_with_the_uninterrupted_weights(
    recipe, uninterrupted, tiny_bert, learnable_data, tmp_path
):
    reference = uninterrupted(recipe)
    output_dir = tmp_path / "killed"
    rng = random.Random()
    # Checkpoints in epochs 0 and 1 (16 steps each), then a kill up to 0.1 s later: mid-step or mid-save.
    after_checkpoint, delay = rng.choice([4, 12, 20]), rng.uniform(0.0, 0.1)
    where = f"killed {delay:.3f} s after checkpoint {after_checkpoint} or later was complete"
    teacher = same_teacher(recipe, reference)
    process = start(recipe, recipe_args(recipe, tiny_bert, learnable_data, output_dir, *teacher))
    wait_for_checkpoint(output_dir, process, after_checkpoint)
    time.sleep(delay)
    process.kill()  # SIGKILL: no handler runs, files are left as they are, mid-step or mid-save
    assert finish(process)[0] == -signal.SIGKILL, where
    assert not (output_dir / "results.json").exists(), f"the run had finished before the kill ({where})"

    code, stderr = finish(
        start(
            recipe,
            recipe_args(
                recipe, tiny_bert, learnable_data, output_dir, *teacher, "--resume_from_checkpoint", "last"
            ),
        )
    )
    assert code == 0, where + stderr[-3000:]
    assert_same_weights(output_dir, reference)
    assert json.loads((output_dir / "results.json").read_text())["train_steps"] == 40


def test_sigterm_saves_a_checkpoint_writes_no_results_and_the_resumed_run_matches(
    uninterrupted, tiny_bert, learnable_data, tmp_path
):
    reference = uninterrupted("full_ft")
    output_dir = tmp_path / "terminated"
    process = start("full_ft", recipe_args("full_ft", tiny_bert, learnable_data, output_dir))
    wait_for_checkpoint(output_dir, process, 4)
    process.send_signal(signal.SIGTERM)
    code, stderr = finish(process)

    assert code == 128 + signal.SIGTERM, stderr[-3000:]
    assert "Traceback" not in stderr
    message = stderr.rsplit("\ninterrupted: ", 1)[1]
    stopped_at = int(re.search(r"stopped training at step (\d+) of 40", message).group(1))
    assert f"Checkpoint saved: {output_dir / f'checkpoint-{stopped_at}'}" in message
    assert "--resume_from_checkpoint last" in message
    # The checkpoint of the step where it stopped (not necessarily a multiple of save_steps) is complete.
    assert incomplete_reason(output_dir / f"checkpoint-{stopped_at}") is None
    assert complete_checkpoint_steps(output_dir)[-1] == stopped_at < 40
    # An interrupted run is not a finished one: no results.json, no final model beside the checkpoints.
    assert not (output_dir / "results.json").exists() and not (output_dir / "model.safetensors").exists()

    code, stderr = finish(
        start(
            "full_ft",
            recipe_args("full_ft", tiny_bert, learnable_data, output_dir, "--resume_from_checkpoint", "last"),
        )
    )
    assert code == 0, stderr[-3000:]
    assert_same_weights(output_dir, reference)


@pytest.mark.slow
def test_ctrl_c_under_accelerate_launch_stops_the_recipe_with_a_checkpoint(
    tiny_bert, learnable_data, tmp_path
):
    """Ctrl-C in a terminal signals the whole foreground process group: the launcher and the recipe."""
    output_dir = tmp_path / "ctrl-c"
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(REPO_ROOT / "accelerate_configs" / "cpu.yaml"),
        str(REPO_ROOT / "recipes" / "full_ft.py"),
        *recipe_args("full_ft", tiny_bert, learnable_data, output_dir),
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=ONE_THREAD, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    wait_for_checkpoint(output_dir, process, 4)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = finish(process)  # the pipes close when the recipe process, not just the launcher, has exited
    # The recipe receives the terminal's SIGINT before the launcher's SIGTERM, and names the first.
    assert "\ninterrupted: SIGINT stopped training at step" in stderr, stderr[-3000:]
    assert complete_checkpoint_steps(output_dir) and not (output_dir / "results.json").exists()


# --- incomplete checkpoints ---------------------------------------------------------------------------


def test_resume_skips_a_checkpoint_cut_short_while_saving(
    uninterrupted, tiny_bert, learnable_data, tmp_path, one_thread, caplog, monkeypatch
):
    """A kill during a save leaves checkpoint-N without its marker: `last` takes the one before.

    The run resumes in-process, so torch.load can be watched: everything the Trainer reads back
    (optimizer, scheduler, RNG states) must be loaded with weights_only=True, no arbitrary unpickling.
    """
    from recipes_lib.run import run_main

    reference = uninterrupted("full_ft")  # keeps checkpoint-36 and checkpoint-40 (save_total_limit 2)
    output_dir = tmp_path / "cut-short"
    output_dir.mkdir()
    shutil.copytree(reference / "checkpoint-36", output_dir / "checkpoint-36")
    cut = shutil.copytree(reference / "checkpoint-40", output_dir / "checkpoint-40")
    (cut / COMPLETE_MARKER).unlink()  # the kill came before the marker...
    optimizer_file = cut / "optimizer.pt"
    optimizer_file.write_bytes(optimizer_file.read_bytes()[:100])  # ...while the optimizer state was written

    loads = []
    real_load = torch.load

    def watched_load(*args, **kwargs):
        loads.append((str(args[0] if args else kwargs.get("f")), kwargs.get("weights_only")))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", watched_load)
    caplog.set_level(logging.WARNING, logger="recipes_lib.training.checkpoints")
    run_main(
        load_recipe("full_ft").main,
        recipe_args("full_ft", tiny_bert, learnable_data, output_dir, "--resume_from_checkpoint", "last"),
    )
    assert "Skipping" in caplog.text and "checkpoint-40 (no completion marker" in caplog.text
    assert_same_weights(output_dir, reference)
    # It resumed from checkpoint-36 and saved checkpoint-40 again, completely this time.
    assert incomplete_reason(output_dir / "checkpoint-40") is None
    read_back = {Path(path).name for path, _ in loads}
    assert {"optimizer.pt", "scheduler.pt", "rng_state.pth"} <= read_back, loads
    assert all(weights_only is True for _, weights_only in loads), loads
    assert all("checkpoint-36" in path for path, _ in loads), loads


def test_last_complete_checkpoint_ignores_missing_markers_and_truncated_files(tmp_path, caplog):
    for step in (4, 8, 12):
        checkpoint = tmp_path / f"checkpoint-{step}"
        checkpoint.mkdir()
        (checkpoint / "model.safetensors").write_bytes(b"w" * 64)
        (checkpoint / "trainer_state.json").write_text("{}")
        mark_complete(checkpoint, step)
    (tmp_path / "checkpoint-12" / COMPLETE_MARKER).unlink()
    (tmp_path / "checkpoint-8" / "model.safetensors").write_bytes(b"w" * 10)  # truncated after the marker
    (tmp_path / "checkpoint-not-a-step").mkdir()

    assert last_complete_checkpoint(tmp_path) == tmp_path / "checkpoint-4"
    assert "no completion marker" in incomplete_reason(tmp_path / "checkpoint-12")
    assert incomplete_reason(tmp_path / "checkpoint-8") == "model.safetensors has 10 bytes, 64 were written"
    assert resolve_resume_checkpoint("last", str(tmp_path), "results.json") == str(tmp_path / "checkpoint-4")
    with pytest.raises(OutputDirError, match=r"checkpoint-8' is incomplete .* Resume from '.*checkpoint-4'"):
        resolve_resume_checkpoint(str(tmp_path / "checkpoint-8"), str(tmp_path), "results.json")
    # Named explicitly and without any marker (a plain Trainer's checkpoint): taken, with a warning.
    with caplog.at_level(logging.WARNING, logger="recipes_lib.training.checkpoints"):
        assert resolve_resume_checkpoint(str(tmp_path / "checkpoint-12"), str(tmp_path), "results.json")
    assert "has no checkpoint_complete.json" in caplog.text
    shutil.rmtree(tmp_path / "checkpoint-4")
    with pytest.raises(
        OutputDirError, match="its checkpoints are all incomplete: checkpoint-8 .*, checkpoint-12"
    ):
        resolve_resume_checkpoint("last", str(tmp_path), "results.json")


# --- numeric faults -----------------------------------------------------------------------------------


def test_a_nan_loss_stops_the_run_naming_the_step_and_saves_no_nan_model(
    tiny_bert, learnable_data, tmp_path, capsys, one_thread
):
    """A learning rate of 1e6 (say, 1e-6 with its minus sign lost) turns the loss NaN within a few steps.

    Step 1 runs at the full rate (no warmup) and sends the weights to ~1e6; a forward pass soon
    overflows. The Trainer's default would log the NaN away, keep training and save the NaN
    weights as the model.
    """
    from recipes_lib.run import run_main

    output_dir = tmp_path / "diverged"
    args = run_args(
        tiny_bert, learnable_data, output_dir,
        "--learning_rate", "1e6", "--warmup_steps", "0", "--max_steps", "20",
        "--save_strategy", "steps", "--save_steps", "1", "--eval_strategy", "no",
    )  # fmt: skip
    with pytest.raises(SystemExit) as exited:
        run_main(load_recipe("full_ft").main, args)
    stderr = capsys.readouterr().err
    assert exited.value.code == 3, stderr[-3000:]
    message = stderr.rsplit("\nerror: ", 1)[1]
    step = int(re.match(r"The training loss became nan at step (\d+) ", message).group(1))
    assert 2 <= step < 20, message
    for hint in ("--learning_rate 1e+05 (this run: 1e+06)", "--bf16", "--max_grad_norm 1"):
        assert hint in message, message
    last = output_dir / f"checkpoint-{step - 1}"
    assert f"The last complete checkpoint, from before the fault, is {last}." in message
    # No final model, no results: only the checkpoints written before the fault, with finite weights.
    saved = sorted(output_dir.iterdir())
    assert all(path.name.startswith("checkpoint-") for path in saved) and last in saved, saved
    for checkpoint in saved:
        for tensor in load_file(checkpoint / "model.safetensors").values():
            assert torch.isfinite(tensor).all(), checkpoint


def test_weights_holding_nan_are_never_saved(tiny_bert, learnable_data, tmp_path):
    """The second guard: a model whose weights went NaN (with a finite loss, say) is refused at save time."""
    from transformers import AutoModelForSequenceClassification

    from recipes_lib.config.arguments import RecipeTrainingArguments
    from recipes_lib.errors import TrainingDiverged
    from recipes_lib.training.trainer import RecipeTrainer

    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert)
    with torch.no_grad():
        model.bert.encoder.layer[1].output.dense.weight[0, 0] = float("inf")
    arguments = RecipeTrainingArguments(
        output_dir=str(tmp_path / "out"), report_to="none", use_cpu=True, eval_strategy="no"
    )
    trainer = RecipeTrainer(model=model, args=arguments)
    with pytest.raises(TrainingDiverged, match="first in 'bert.encoder.layer.1.output.dense.weight'"):
        trainer.save_model()
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_gradient_clipping_is_on_by_default():
    from recipes_lib.config.parsing import parse_arguments
    from recipes_lib.config.recipe_spec import RecipeSpec

    assert parse_arguments(RecipeSpec("full_ft"), []).training.max_grad_norm == 1.0  # the Trainer's default


# --- repeatability ------------------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_metrics_and_another_seed_different_ones(
    tiny_bert, learnable_data, tmp_path, one_thread
):
    from recipes_lib.run import run_main

    def metrics(name: str, seed: str) -> dict:
        args = run_args(
            tiny_bert,
            learnable_data,
            tmp_path / name,
            "--max_steps",
            "24",
            "--eval_strategy",
            "no",
            "--seed",
            seed,
        )
        results = run_main(load_recipe("full_ft").main, args)
        return {key: results.value(key) for key in ("eval_accuracy", "eval_f1", "eval_loss", "train_loss")}

    first, again, other = metrics("first", "42"), metrics("again", "42"), metrics("other", "7")
    assert first == again
    # The seed orders the training data, so the losses differ (accuracy on 64 examples may not).
    assert first["train_loss"] != other["train_loss"] and first["eval_loss"] != other["eval_loss"]


# --- what is saved and how it is loaded ---------------------------------------------------------------


def test_weights_are_safetensors_and_checkpoint_state_loads_with_weights_only(uninterrupted):
    from transformers.trainer_pt_utils import safe_globals

    output_dir = uninterrupted("full_ft")
    assert (output_dir / "model.safetensors").is_file()
    pickles = sorted(
        str(p.relative_to(output_dir)) for p in output_dir.rglob("*") if p.suffix in (".bin", ".pt", ".pth")
    )
    # No weights outside safetensors. training_args.bin is the Trainer's pickle of its arguments:
    # nothing here loads it (results.json holds the same configuration as JSON).
    for name in pickles:
        path = output_dir / name
        if path.name == "training_args.bin":
            continue
        assert path.name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"), name
        # Tensors and containers (and numpy's RNG state, which the Trainer allowlists): no arbitrary code.
        with safe_globals():
            torch.load(path, weights_only=True)


def test_trust_remote_code_is_off_unless_asked_and_warns_when_on(caplog):
    from recipes_lib.config.parsing import parse_arguments
    from recipes_lib.config.recipe_spec import RecipeSpec

    with caplog.at_level(logging.WARNING):
        assert parse_arguments(RecipeSpec("full_ft"), []).model.trust_remote_code is False
        assert "trust_remote_code" not in caplog.text
        assert parse_arguments(RecipeSpec("full_ft"), ["--trust_remote_code", "true"]).model.trust_remote_code
    assert (
        "trust_remote_code is on: Python code from 'bert-base-uncased' will run on this machine"
        in caplog.text
    )


def test_overwriting_a_lora_run_with_full_ft_leaves_no_adapter_to_load_by_mistake(
    tiny_bert, learnable_data, tmp_path
):
    from recipes_lib.modeling.adapters import load_trained_model

    output_dir = tmp_path / "run"
    run_in_process(
        "lora", run_args(tiny_bert, learnable_data, output_dir, "--merge_adapter", "true", **QUICK)
    )
    assert (output_dir / "adapter_config.json").is_file() and (output_dir / "merged").is_dir()
    # An export of the old model (`recipes-lib export`), passed and failed: not the new model's.
    (output_dir / "export").mkdir()
    (output_dir / "export" / "export_report.json").write_text('{"passed": true, "models": {}}')
    (output_dir / "export.failed").mkdir()
    run_in_process("full_ft", run_args(tiny_bert, learnable_data, output_dir, **QUICK))  # QUICK overwrites
    assert not (output_dir / "adapter_config.json").exists() and not (output_dir / "merged").exists()
    assert not (output_dir / "export").exists() and not (output_dir / "export.failed").exists()
    assert type(load_trained_model(output_dir)).__name__ == "BertForSequenceClassification"
