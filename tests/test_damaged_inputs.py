"""Damaged inputs of every kind get one paragraph naming the file and what to do (issue 54): every file of a
checkpoint x {truncated, garbage of the same size, empty} before a resume (the completion marker keeps each
file's SHA-256, not only its size); the run's weights, adapter and ONNX files for predict and export."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from recipes_lib.errors import OutputDirError
from recipes_lib.results import RESULTS_FILE
from recipes_lib.training.checkpoints import COMPLETE_MARKER
from recipes_lib.training.resume import resolve_resume_checkpoint
from tests.helpers.runs import QUICK, run_args, run_in_process

DAMAGES = ("truncated", "garbage", "empty")


def damage(path: Path, how: str) -> None:
    size = path.stat().st_size
    if how == "truncated":
        path.write_bytes(path.read_bytes()[: size // 2])
    elif how == "garbage":  # the same size: only the content tells
        path.write_bytes(os.urandom(size))
    else:
        path.write_bytes(b"")


@pytest.fixture(scope="module")
def checkpointed_run(tiny_bert, learnable_data, tmp_path_factory) -> Path:
    output_dir = tmp_path_factory.mktemp("checkpointed")
    args = run_args(
        tiny_bert, learnable_data, output_dir, "--save_steps", "2", **{**QUICK, "save_strategy": "steps"}
    )
    run_in_process("full_ft", args)
    return output_dir


def checkpoint_files(run: Path) -> list[str]:
    checkpoint = run / "checkpoint-2"
    return sorted(
        str(p.relative_to(checkpoint))
        for p in checkpoint.rglob("*")
        if p.is_file() and p.name != COMPLETE_MARKER
    )


def test_a_checkpoint_holds_the_files_the_issue_names(checkpointed_run):
    names = set(checkpoint_files(checkpointed_run))
    assert {
        "trainer_state.json",
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pth",
        "model.safetensors",
    } <= names


@pytest.mark.parametrize("how", DAMAGES)
def test_every_damaged_checkpoint_file_is_named_before_the_resume(checkpointed_run, tmp_path, how):
    for name in checkpoint_files(checkpointed_run):
        output_dir = tmp_path / f"{how}-{name.replace('/', '_')}"
        output_dir.mkdir()
        shutil.copytree(checkpointed_run / "checkpoint-2", output_dir / "checkpoint-2")
        damage(output_dir / "checkpoint-2" / name, how)
        with pytest.raises(
            OutputDirError, match=rf"no complete checkpoint .*checkpoint-2 \({name} "
        ) as caught:
            resolve_resume_checkpoint("last", str(output_dir), RESULTS_FILE)
        assert "Start the run again" in str(caught.value), name
        with pytest.raises(OutputDirError, match=rf"is incomplete \({name} "):
            resolve_resume_checkpoint(str(output_dir / "checkpoint-2"), str(output_dir), RESULTS_FILE)


# --- a full disk during the final save ----------------------------------------------------------------


def _refusing_write(error: Exception):
    def save_file(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"\0" * 100)  # what the disk took before it was full
        raise error

    return save_file


@pytest.mark.parametrize(
    "error",
    [OSError(28, os.strerror(28)), "SafetensorError"],
    ids=["OSError-ENOSPC", "SafetensorError"],
)
def test_a_full_disk_during_the_final_save_leaves_no_partial_model_and_one_paragraph(
    tiny_bert, learnable_data, tmp_path, monkeypatch, capsys, error
):
    import transformers.modeling_utils
    from safetensors import SafetensorError

    from recipes_lib.run import run_main
    from tests.helpers.repo import load_recipe

    if error == "SafetensorError":  # what safetensors raises on a full disk
        error = SafetensorError(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'
        )
    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", _refusing_write(error))
    output_dir = tmp_path / "full-disk"
    with pytest.raises(SystemExit) as stopped:
        run_main(load_recipe("full_ft").main, run_args(tiny_bert, learnable_data, output_dir, **QUICK))
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\nerror: ") == 1 and "Traceback" not in err, err
    assert f"Saving the final model in '{output_dir}' failed: the disk is full" in err, err
    assert "model.safetensors" in err and "Free space on that disk" in err
    left = {path.name for path in output_dir.iterdir()} if output_dir.exists() else set()  # an empty one goes
    assert not left & {"model.safetensors", "config.json", RESULTS_FILE}, left


# --- the run's model files, for predict and export ----------------------------------------------------


@pytest.fixture(scope="module")
def lora_run(tiny_bert, learnable_data, tmp_path_factory) -> Path:
    output_dir = tmp_path_factory.mktemp("lora-run")
    run_in_process("lora", run_args(tiny_bert, learnable_data, output_dir, **QUICK))
    return output_dir


MODEL_FILES = [("full", "model.safetensors"), ("full", "config.json"), ("lora", "adapter_model.safetensors"),
               ("lora", "adapter_config.json")]  # fmt: skip
MODEL_CASES = [
    (kind, name, how, command)
    for kind, name in MODEL_FILES
    for how in DAMAGES
    for command in ("predict", "export")
]


@pytest.mark.workbench  # predict, export (the export extra: onnx) or crossval
@pytest.mark.parametrize(
    "kind, name, how, command", MODEL_CASES, ids=[f"{k}-{n}-{h}-{c}" for k, n, h, c in MODEL_CASES]
)
def test_a_damaged_model_file_is_named_by_predict_and_export(
    checkpointed_run, lora_run, tmp_path, capsys, kind, name, how, command
):
    from recipes_workbench.cli.main import main as cli

    run = tmp_path / "run"
    shutil.copytree(
        checkpointed_run if kind == "full" else lora_run, run, ignore=shutil.ignore_patterns("checkpoint-*")
    )
    damage(run / name, how)
    texts = tmp_path / "texts.csv"
    texts.write_text("text\nwarm day\n")
    argv = ["predict", str(run), "--input", str(texts)] if command == "predict" else ["export", str(run)]
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == 1 and "Traceback" not in err, err
    assert f"{run / name} (" in err and ("Restore the run's directory" in err or "restore" in err.lower()), (
        err
    )
    assert not (run / "export").exists()


def _tiny_onnx(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.mark.workbench  # predict, export (the export extra: onnx) or crossval
@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_onnx_model_is_named(tmp_path, how):
    from recipes_lib.whole_files import DamagedFileError
    from recipes_workbench.export.runtime import onnx_session

    path = tmp_path / "model.onnx"
    _tiny_onnx(path)
    assert onnx_session(path) is not None
    damage(path, how)
    with pytest.raises(DamagedFileError, match=rf"{path} \(an ONNX model, .*Export the run again"):
        onnx_session(path)


# --- a cross-validation fold's predictions cut mid-line -----------------------------------------------


@pytest.mark.workbench  # predict, export (the export extra: onnx) or crossval
@pytest.mark.parametrize("reader", ["held_out", "test"])
@pytest.mark.parametrize("cut", ["mid-line", "garbage-line"])
def test_a_fold_s_predictions_cut_mid_line_are_named_with_what_to_do(tmp_path, reader, cut):
    import json

    from recipes_lib.whole_files import DamagedFileError
    from recipes_workbench.crossval.ensemble import read_test_predictions
    from recipes_workbench.crossval.oof import read_fold_predictions

    fold = tmp_path / "fold-1"
    fold.mkdir()
    name = "eval_predictions.jsonl" if reader == "held_out" else "test_predictions.jsonl"
    text = "".join(
        json.dumps({"label": "warm", "probabilities": {"warm": 0.7, "cool": 0.3}}) + "\n" for _ in range(3)
    )
    text = text[: len(text) - 20] if cut == "mid-line" else text.replace("warm", "\x00\xff", 1)
    (fold / name).write_text(text)
    with pytest.raises(
        DamagedFileError, match=rf"{fold / name} .*line \d .*Delete the fold's directory \({fold}\)"
    ):
        read_fold_predictions(fold, 3) if reader == "held_out" else read_test_predictions(fold)
