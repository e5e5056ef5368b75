"""Whole files or none (issue #49, part 3): what a run writes for other commands to read (results.json,
the model card, the decision thresholds, the predictions, the export bundle) appears whole under its
name or not at all, whenever the writer dies; a reader refuses a damaged file in one paragraph.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import random
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors import SafetensorError

from recipes_lib.data.files import write_jsonl
from recipes_lib.errors import TrainingDiverged
from recipes_lib.evaluation.predictions import (
    EVAL_PREDICTIONS_FILE,
    THRESHOLDS_FILE,
    EvaluationOutputs,
    prediction_files,
    write_decision_files,
)
from recipes_lib.results import RESULTS_FILE, RunResults, read_results, write_results
from recipes_lib.tracking.model_card import write_card
from recipes_lib.training.checkpoints import mark_complete
from recipes_lib.training.failures import CheckpointNotSaved
from recipes_lib.training.resume import incomplete_reason, resolve_resume_checkpoint
from recipes_lib.training.safeguards import complete_or_removed
from recipes_lib.whole_files import DamagedFileError, read_json, written_whole
from recipes_workbench.cli.main import main as recipes_lib_cli
from recipes_workbench.crossval.oof import read_jsonl
from recipes_workbench.export.bundle import (
    FP32_MODEL,
    REPORT_FILE,
    SETTINGS_FILE,
    find_export,
    settle_export,
)
from tests.helpers.repo import REPO_ROOT
from tests.helpers.runs import run_args

NAMES = ["cool", "warm"]
MULTI_LABEL = "multi_label_classification"
RESULTS = RunResults.from_dict(
    {
        "recipe": "full_ft",
        "model_name_or_path": "bert-base-uncased",
        "dataset": "glue/sst2",
        "problem_type": MULTI_LABEL,
        "eval_split": "validation",
        "test_split": "test",
        "config": {"train_file": "train.csv", "validation_file": "validation.csv", "max_seq_length": 128},
        "output_dir": "outputs/full_ft",
        "label_thresholds": {"cool": 0.35, "warm": 0.6},
        "eval_accuracy": 0.5,
        "eval_f1": 0.6,
        "eval_f1_micro": 0.7,
        "text_columns": ["sentence"],
    }
)
# Enough rows that the predictions take a while to write (about 1.4 MB): a kill lands inside files, not between them.
LOGITS = np.random.default_rng(49).normal(size=(10_000, 2))
OUTPUTS = EvaluationOutputs(
    logits=LOGITS, references=None, test_logits=LOGITS[:2000], thresholds=[0.35, 0.6],
    results={"confusion_matrix": None},
)  # fmt: skip
ONNX_BYTES = np.random.default_rng(50).bytes(2 << 20)


@functools.cache
def predictions() -> dict[str, list]:
    return prediction_files(OUTPUTS, NAMES, MULTI_LABEL)


def write_finished_run(run_dir: Path) -> None:
    """What a finished multi-label run writes at its end, in run/record.py's order, then its export bundle
    (built in a hidden directory as export/command.py builds it, and settled the same way)."""
    write_decision_files([run_dir], OUTPUTS, NAMES, "validation.csv", "full_ft, validation.csv")
    for name, rows in predictions().items():
        write_jsonl(run_dir / name, rows)
    write_results(run_dir, RESULTS)
    write_card(run_dir, RESULTS)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=run_dir))
    (staging / FP32_MODEL).write_bytes(ONNX_BYTES)
    (staging / SETTINGS_FILE).write_text(json.dumps({"run": RESULTS.to_dict(), "exporter": "dynamo"}))
    (staging / REPORT_FILE).write_text(json.dumps({"passed": True, "reason": None}))
    settle_export(staging, run_dir, passed=True)


def visible_files(directory: Path) -> dict[str, bytes]:
    """{path under directory: bytes} of every file a reader would open (hidden temporaries left out)."""
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in directory.rglob("*")
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(directory).parts)
    }


def hidden_leftovers(directory: Path) -> list[str]:
    return [path.name for path in directory.iterdir() if path.name.startswith(".")]


def test_a_run_killed_at_random_points_while_writing_leaves_every_file_whole_or_absent(tmp_path):
    """20 writers, each killed (SIGKILL) after a random delay while it writes a finished run's files over
    and over: every file present is byte for byte a whole one, and each reader reads it."""
    reference = tmp_path / "reference"
    reference.mkdir()
    write_finished_run(reference)
    expected = visible_files(reference)
    started = time.perf_counter()
    write_finished_run(reference)
    one_round = time.perf_counter() - started
    rng = random.Random(49)
    killed_inside_a_write = 0
    for attempt in range(20):
        run_dir = tmp_path / f"run-{attempt}"
        run_dir.mkdir()
        pid = os.fork()
        if pid == 0:  # the writer: it only ends by the kill
            try:
                while True:
                    write_finished_run(run_dir)
            finally:
                os._exit(1)
        # Over the first two rounds: the first kills find files absent, later ones files being replaced.
        time.sleep(rng.uniform(0, 2 * one_round))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
            "the writer ended before the kill"
        )
        found = visible_files(run_dir)
        assert set(found) <= set(expected)
        for name, content in found.items():
            assert content == expected[name], f"{name} is not whole after kill {attempt + 1}"
        if (run_dir / "export").is_dir():
            assert {name for name in found if name.startswith("export/")} == {
                name for name in expected if name.startswith("export/")
            }
            assert find_export(run_dir / "export").run_results == RESULTS
        if (run_dir / RESULTS_FILE).is_file():
            assert read_results(run_dir) == RESULTS
        if (run_dir / EVAL_PREDICTIONS_FILE).is_file():
            assert len(read_jsonl(run_dir / EVAL_PREDICTIONS_FILE, "predictions", "")) == len(LOGITS)
        killed_inside_a_write += bool(hidden_leftovers(run_dir))
    # The kills did land inside writes (their temporaries are left), not only between them.
    assert killed_inside_a_write >= 5


def test_an_error_while_writing_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "results.json"
    target.write_text('{"old": true}\n')
    with pytest.raises(RuntimeError), written_whole(target) as handle:
        handle.write('{"new": ')
        raise RuntimeError("disk gone")
    assert target.read_text() == '{"old": true}\n'
    assert sorted(path.name for path in tmp_path.iterdir()) == ["results.json"]


def test_a_file_written_whole_has_the_mode_a_plain_open_gives(tmp_path):
    umask = os.umask(0o022)
    try:
        write_results(tmp_path, RunResults.from_dict({"recipe": "full_ft"}))
        (tmp_path / "plain").write_text("")
    finally:
        os.umask(umask)
    mode = stat.S_IMODE((tmp_path / RESULTS_FILE).stat().st_mode)
    assert mode == stat.S_IMODE((tmp_path / "plain").stat().st_mode) == 0o644


def cut_in_half(path: Path) -> None:
    content = path.read_bytes()
    path.write_bytes(content[: len(content) // 2])


def test_damaged_files_are_refused_in_one_paragraph_naming_the_file_and_line(tmp_path):
    write_finished_run(tmp_path)
    cut_in_half(tmp_path / RESULTS_FILE)
    with pytest.raises(
        DamagedFileError, match=r"results.json \(a run's results\) ends too early at line \d+"
    ):
        read_results(tmp_path)
    cut_in_half(tmp_path / EVAL_PREDICTIONS_FILE)
    with pytest.raises(
        DamagedFileError, match=r"eval_predictions.jsonl .* line \d+ ends in the middle of a record"
    ):
        read_jsonl(tmp_path / EVAL_PREDICTIONS_FILE, "a run's predictions", "Run the recipe again.")
    cut_in_half(tmp_path / "export" / SETTINGS_FILE)
    with pytest.raises(DamagedFileError, match="export_config.json .*ends too early"):
        find_export(tmp_path / "export")
    (tmp_path / "export" / REPORT_FILE).write_bytes(b"\xff\xfe{")
    with pytest.raises(DamagedFileError, match="export_report.json .*is not UTF-8 text at byte 0"):
        find_export(tmp_path / "export")
    (tmp_path / "nested.json").write_text("[" * 100_000)
    with pytest.raises(DamagedFileError, match="nests deeper"):
        read_json(tmp_path / "nested.json", "a test file", "")


def test_recipes_lib_show_on_a_damaged_results_json_says_so_in_one_paragraph(tmp_path, capsys):
    write_results(tmp_path, RESULTS)
    cut_in_half(tmp_path / RESULTS_FILE)
    assert recipes_lib_cli(["show", str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: ") and "\n" not in error and "Traceback" not in error
    assert f"{tmp_path / RESULTS_FILE} (a run's results) ends too early" in error


def test_the_decision_files_and_card_are_not_written_in_place(tmp_path, monkeypatch):
    """Mutation guard: every writer goes through written_whole (a plain open of the target fails here)."""
    import builtins
    import io

    real_open = builtins.open

    def refuse_visible_targets(file, mode="r", *args, **kwargs):
        name = Path(str(file)).name if not isinstance(file, int) else ".descriptor"
        if any(flag in str(mode) for flag in "wax") and not name.startswith("."):
            raise AssertionError(f"{file} opened for writing in place")
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refuse_visible_targets)
    monkeypatch.setattr(io, "open", refuse_visible_targets)  # Path.write_text's
    outputs = EvaluationOutputs(
        logits=LOGITS[:10], references=None, thresholds=[0.35, 0.6], results={"confusion_matrix": None}
    )
    write_decision_files([tmp_path], outputs, NAMES, "validation.csv", "title")
    write_jsonl(tmp_path / EVAL_PREDICTIONS_FILE, [{"a": 1}])
    write_results(tmp_path, RESULTS)
    write_card(tmp_path, RESULTS)
    assert {path.name for path in tmp_path.iterdir()} == {
        THRESHOLDS_FILE, EVAL_PREDICTIONS_FILE, RESULTS_FILE, "README.md",
    }  # fmt: skip


def complete_checkpoint(run_dir: Path, step: int) -> Path:
    checkpoint = run_dir / f"checkpoint-{step}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_bytes(ONNX_BYTES[:4096])
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    mark_complete(checkpoint, step)
    return checkpoint


@pytest.mark.parametrize(
    "failure",
    [
        OSError(errno.EFBIG, os.strerror(errno.EFBIG)),
        OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
        SafetensorError("Error while serializing: I/O error: File too large (os error 27)"),
        RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"),  # torch.save's
    ],
)
def test_a_checkpoint_the_disk_refuses_is_removed_and_the_last_complete_one_named(tmp_path, failure):
    earlier = complete_checkpoint(tmp_path, 2)
    before = visible_files(earlier)
    partial = tmp_path / "checkpoint-4"
    with pytest.raises(CheckpointNotSaved) as raised, complete_or_removed(partial, tmp_path):
        partial.mkdir()
        (partial / "model.safetensors").write_bytes(b"\0" * 100)
        raise failure
    said = str(raised.value)
    assert (
        "Saving the checkpoint checkpoint-4" in said
        and "the last complete checkpoint, checkpoint-2, is intact" in said
    )
    assert ("the disk is full" in said) == (not isinstance(failure, RuntimeError))
    assert not partial.exists() and visible_files(earlier) == before
    assert resolve_resume_checkpoint("last", str(tmp_path), RESULTS_FILE) == str(earlier)


def test_a_refusal_of_the_save_itself_is_not_taken_for_a_full_disk(tmp_path):
    partial = tmp_path / "checkpoint-4"
    partial.mkdir()
    with pytest.raises(TrainingDiverged), complete_or_removed(partial, tmp_path):
        raise TrainingDiverged("the weights became NaN")


@pytest.mark.slow  # two tiny recipe runs: 160 s on the loaded 2-core test machine
def test_a_full_disk_while_a_run_saves_a_checkpoint_ends_in_one_paragraph_and_the_run_resumes(
    tiny_bert, learnable_data, tmp_path
):
    """A real run (full_ft, the tiny BERT): its file-size limit drops after checkpoint-2 is complete, so
    saving checkpoint-4 fails with EFBIG as on a full disk. Then, with the limit gone, it resumes."""
    output_dir = tmp_path / "run"
    args = run_args(
        tiny_bert, learnable_data, output_dir, "--save_steps", "2", steps=4, save_strategy="steps"
    )
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    script = REPO_ROOT / "tests" / "helpers" / "scripts" / "disk_full_after_first_checkpoint.py"
    full = subprocess.run(
        [sys.executable, str(script), str(REPO_ROOT / "recipes" / "full_ft.py"), *args],
        cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert full.returncode == 2, full.stderr[-3000:]
    paragraph = full.stderr.strip().split("\n\n")[-1]
    assert "Traceback" not in full.stderr, full.stderr[-3000:]
    assert (
        paragraph.startswith("error: Saving the checkpoint checkpoint-4") and "the disk is full" in paragraph
    )
    assert "the last complete checkpoint, checkpoint-2, is intact" in paragraph
    assert sorted(path.name for path in output_dir.glob("checkpoint-*")) == ["checkpoint-2"]
    assert incomplete_reason(output_dir / "checkpoint-2") is None and not (output_dir / RESULTS_FILE).exists()

    resumed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "recipes" / "full_ft.py"), *args, "--resume_from_checkpoint", "last"],
        cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert read_results(output_dir).train_steps == 4
