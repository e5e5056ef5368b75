"""Bad input, run the way a user runs it: every case must end with

- one paragraph on stderr that names the bad value and says how to fix it,
- no traceback (unless --debug), and a non-zero exit code (2),
- an existing output directory left byte for byte as it was, even with --overwrite_output_dir,
- and, where the information allows, the error before tokenization or loading the model weights.

Each case runs in-process through `run_recipe` (the whole recipe entry point, fast) and as a
separate `python recipes/full_ft.py ...` process; the process variant of most cases is marked slow,
a few representatives (one per stage where errors arise) run by default.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.data import write_csv
from tests.helpers.repo import REPO_ROOT, load_recipe
from tests.helpers.runs import run_args


@dataclass(frozen=True)
class Case:
    name: str
    # (files, tiny model dir) -> arguments appended to a valid tiny run (the last value of an option wins)
    argv: Callable[[dict[str, Path], Path], list[str]]
    expected: tuple[str, ...]  # each must appear in the error paragraph
    # "previous": an earlier run's files are in output_dir and --overwrite_output_dir is given;
    # "previous-no-overwrite": the same without the flag; "fresh": output_dir does not exist.
    output_dir: str = "previous"


def _config(text: str) -> Callable[[dict[str, Path], Path], list[str]]:
    """A case that passes a config file holding `text`."""

    def argv(files, model):
        path = files["dir"] / f"config-{hashlib.sha1(text.encode()).hexdigest()[:8]}.yaml"
        path.write_text(text)
        return ["--config", str(path)]

    return argv


def _image_model(files: dict[str, Path], model: Path) -> list[str]:
    """A ViT config (an image model, which transformers has no text classifier for) with the tiny BERT's tokenizer."""
    from transformers import ViTConfig

    directory = files["dir"] / "image-model"
    if not directory.exists():
        directory.mkdir()
        for path in model.iterdir():
            if path.name.startswith(("tokenizer", "vocab", "special_tokens")):
                shutil.copy(path, directory)
        ViTConfig(
            hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
        ).save_pretrained(directory)
    return ["--model_name_or_path", str(directory)]


CASES = [
    # arguments and config files
    Case("unknown-cli-key", lambda f, m: ["--learning_rat", "1e-4"], ("'--learning_rat'", "Did you mean 'learning_rate'")),
    Case("unknown-yaml-key", _config("learning_rat: 1.0e-4\n"), ("unknown key 'learning_rat'", "Did you mean 'learning_rate'")),
    Case("key-of-another-recipe", _config("lora_r: 8\n"), ("'lora_r'", "LoraArguments", "full_ft.py does not parse")),
    Case("wrong-type-in-yaml", _config("learning_rate: fast\n"), ("'learning_rate' has value 'fast'", "not a valid finite number")),
    Case("wrong-type-on-command-line", lambda f, m: ["--num_train_epochs", "three"], ("--num_train_epochs", "'three'", "--help")),
    Case("missing-config-file", lambda f, m: ["--config", "no/such/config.yaml"], ("'no/such/config.yaml' does not exist",)),
    Case("unparsable-yaml", _config("learning_rate: [1e-4\nseed: 3\n"), ("is not valid YAML at line", "Fix that line")),
    Case("empty-config-file", _config("# nothing here yet\n"), ("is empty", "leave --config out")),
    Case("max-train-samples-zero", lambda f, m: ["--max_train_samples", "0"], ("max_train_samples is 0", "positive integer")),
    Case("negative-learning-rate", lambda f, m: ["--learning_rate=-2e-5"], ("learning_rate is -2e-05", "must be positive")),
    Case("zero-epochs", lambda f, m: ["--num_train_epochs", "0"], ("num_train_epochs is 0", "--max_steps")),
    Case("negative-batch-size", lambda f, m: ["--per_device_train_batch_size", "-4"], ("per_device_train_batch_size is -4",)),
    Case("negative-max-grad-norm", lambda f, m: ["--max_grad_norm", "-1"], ("max_grad_norm is -1", "0 to turn clipping off")),
    # data files
    Case("train-file-is-a-directory", lambda f, m: ["--train_file", str(f["dir"])], ("is a directory", "train.csv")),
    Case("train-file-missing", lambda f, m: ["--train_file", str(f["dir"] / "trian.csv")], ("trian.csv' does not exist", "Check the path")),
    Case("train-file-extension", lambda f, m: ["--train_file", str(f["dir"] / "train.docx")], ("train.docx' has an unsupported extension", ".csv")),
    Case("missing-text-column", lambda f, m: ["--text_column_names", "sentence"], ("Text column 'sentence'", "its columns are: text, label", "--text_column_names")),
    Case("missing-label-column", lambda f, m: ["--label_column_name", "category"], ("Label column 'category'", "its columns are: text, label", "--label_column_name")),
    Case("validation-label-outside-training-labels", lambda f, m: ["--train_file", str(f["int_train"]), "--validation_file", str(f["int_validation_with_2"])], ("never uses: 2", "Training labels are: 0, 1")),
    Case("mixed-label-types", lambda f, m: ["--train_file", str(f["mixed_labels"]), "--validation_file", str(f["mixed_labels"])], ("mixes value types (int, str)", "all integers")),
    Case("empty-train-split", lambda f, m: ["--train_file", str(f["header_only"])], ("training data", "is empty")),
    Case("empty-validation-split", lambda f, m: ["--validation_file", str(f["header_only"])], ("validation data", "is empty")),
    Case("ragged-csv", lambda f, m: ["--train_file", str(f["ragged"])], ("ragged.csv", "line 3", "header")),
    Case("malformed-jsonl", lambda f, m: ["--train_file", str(f["malformed"]), "--validation_file", str(f["malformed"])], ("malformed.jsonl", "one JSON object")),
    Case("a-single-class", lambda f, m: ["--train_file", str(f["one_class"])], ("1 distinct label", "at least 2")),
    # the model
    Case("max-seq-length-above-the-model", lambda f, m: ["--max_seq_length", "512"], ("max_seq_length 512", "--max_seq_length 128 or less")),
    Case("model-not-found-offline", lambda f, m: ["--model_name_or_path", "no-such-org/no-such-bert"], ("'no-such-org/no-such-bert'", "HF_HUB_OFFLINE", "local directory")),
    Case("model-is-not-a-text-encoder", _image_model, ("image-model' cannot be fine-tuned", "'vit' model", "no sequence-classification model", "recipes-lib families")),
    Case("model-dir-without-model-files", lambda f, m: ["--model_name_or_path", str(f["empty_dir"])], ("Could not load model", "config.json")),
    # the output directory and resuming
    Case("output-dir-holds-a-run", lambda f, m: [], ("already holds a run", "--resume_from_checkpoint last", "--overwrite_output_dir"), "previous-no-overwrite"),
    Case("resume-false-in-yaml-into-a-run", _config("resume_from_checkpoint: false\n"), ("already holds a run",), "previous-no-overwrite"),
    Case("output-dir-is-a-file", lambda f, m: ["--output_dir", str(f["ragged"])], ("is a file, not a directory",)),
    Case("resume-with-no-checkpoint", lambda f, m: ["--resume_from_checkpoint", "last"], ("no complete checkpoint", "it does not exist"), "fresh"),
    Case("resume-a-finished-run", lambda f, m: ["--resume_from_checkpoint", "last"], ("already finished", "nothing to resume"), "previous-no-overwrite"),
    Case("resume-from-a-missing-path", lambda f, m: ["--resume_from_checkpoint", str(f["dir"] / "checkpoint-5")], ("checkpoint-5' is not a checkpoint directory", "'last'"), "fresh"),
]  # fmt: skip

# The process variant of these runs by default: one per stage (data, model). The other two stages
# already run as processes by default in test_end_to_end.py (an unknown argument; a second run into
# an output directory that holds one), so theirs are slow here: each process costs ~10 s on 2 cores.
PROCESS_BY_DEFAULT = {
    "missing-label-column",
    "model-not-found-offline",
}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("bad-input")
    (directory / "empty-model").mkdir()
    (directory / "train.docx").write_text("text,label\na red cat,warm\n")
    (directory / "malformed.jsonl").write_text('{"text": "a red cat", "label": "warm"}\n{"text": "a blue\n')
    (directory / "mixed.jsonl").write_text(
        '{"text": "a red cat", "label": "warm"}\n{"text": "a blue dog", "label": 1}\n'
    )
    (directory / "ragged.csv").write_text("text,label\na red cat,warm\na blue dog,cool,extra,fields\n")
    return {
        "dir": directory,
        "empty_dir": directory / "empty-model",
        "malformed": directory / "malformed.jsonl",
        "mixed_labels": directory / "mixed.jsonl",
        "ragged": directory / "ragged.csv",
        "header_only": write_csv(directory / "header-only.csv", []),
        "one_class": write_csv(
            directory / "one-class.csv", [("a red cat", "warm"), ("a yellow dog", "warm")]
        ),
        "int_train": write_csv(directory / "int-train.csv", [("a red cat", 1), ("a blue dog", 0)]),
        "int_validation_with_2": write_csv(
            directory / "int-validation.csv", [("a red cat", 1), ("a blue dog", 0), ("a grey cat", 2)]
        ),
    }


def write_previous_run(output_dir: Path) -> None:
    """What an earlier, finished run leaves behind (contents need not be loadable: nothing may read them)."""
    checkpoint = output_dir / "checkpoint-3"
    checkpoint.mkdir(parents=True)
    (output_dir / "results.json").write_text(json.dumps({"recipe": "full_ft", "eval_accuracy": 0.9}))
    (output_dir / "model.safetensors").write_bytes(b"weights of the previous run")
    (checkpoint / "optimizer.pt").write_bytes(b"optimizer state of the previous run")


def snapshot(directory: Path) -> dict[str, bytes]:
    if not directory.exists():
        return {}
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


def prepare(case: Case, files, tiny_bert, learnable_data, tmp_path) -> tuple[list[str], Path]:
    output_dir = tmp_path / "output"
    argv = run_args(tiny_bert, learnable_data, output_dir)
    if case.output_dir.startswith("previous"):
        write_previous_run(output_dir)
    if case.output_dir == "previous":
        argv.append("--overwrite_output_dir")
    return [*argv, *case.argv(files, tiny_bert)], output_dir


def check_report(case: Case, exit_code: int, stderr: str) -> None:
    assert exit_code == 2, (exit_code, stderr[-2000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "\nerror: " in stderr, stderr[-2000:]
    # The recipe's paragraph is the last thing on stderr; libraries may log above it.
    paragraph = stderr.rsplit("\nerror: ", 1)[1].split("\n(run again with --debug", 1)[0]
    assert "\n" not in paragraph.strip(), paragraph  # one paragraph
    for expected in case.expected:
        assert expected in paragraph, (expected, paragraph)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_bad_input_in_process(case, files, tiny_bert, learnable_data, tmp_path, capsys, monkeypatch):
    from recipes_lib.run import preparation, run_main

    argv, output_dir = prepare(case, files, tiny_bert, learnable_data, tmp_path)
    before = snapshot(output_dir)
    recipe = load_recipe("full_ft")

    def too_late(*args, **kwargs):
        raise AssertionError(f"{case.name}: the error should come before tokenization and the model weights")

    # Anything that can be checked on the raw data or config.json is checked before these run.
    monkeypatch.setattr(preparation, "tokenize", too_late)
    monkeypatch.setattr(recipe, "load_model", too_late)
    # Log handlers hold the stream that was sys.stdout/stderr when they were made: in one pytest
    # process, an earlier test's closed capture. Point them at this test's (the recipe's
    # logging.basicConfig then adds its own root handler afresh).
    # (pytest's own capture handlers are subclasses and stay.)
    plain = [h for h in logging.root.handlers if type(h) is logging.StreamHandler]
    monkeypatch.setattr(logging.root, "handlers", [h for h in logging.root.handlers if h not in plain])
    for library in ("datasets", "transformers"):
        for handler in logging.getLogger(library).handlers:
            if type(handler) is logging.StreamHandler:
                monkeypatch.setattr(handler, "stream", sys.stderr)
    with pytest.raises(SystemExit) as exited:
        run_main(recipe.main, argv)
    check_report(case, exited.value.code, capsys.readouterr().err)
    assert snapshot(output_dir) == before
    assert output_dir.exists() == bool(before)  # a fresh output_dir is not even created


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=() if c.name in PROCESS_BY_DEFAULT else pytest.mark.slow) for c in CASES],
    ids=lambda case: case.name,
)
def test_bad_input_as_a_separate_process(case, files, tiny_bert, learnable_data, tmp_path):
    argv, output_dir = prepare(case, files, tiny_bert, learnable_data, tmp_path)
    before = snapshot(output_dir)
    command = [sys.executable, str(REPO_ROOT / "recipes" / "full_ft.py"), *argv]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    completed = subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=environment
    )
    check_report(case, completed.returncode, completed.stderr)
    assert snapshot(output_dir) == before


def test_debug_flag_shows_the_traceback_of_the_same_error(files, tiny_bert, learnable_data, tmp_path):
    from recipes_lib.errors import DataError
    from recipes_lib.run import run_main

    argv = run_args(tiny_bert, learnable_data, tmp_path / "output", "--label_column_name", "category")
    with pytest.raises(DataError, match="Label column 'category'"):
        run_main(load_recipe("full_ft").main, [*argv, "--debug"])


def test_qlora_where_4bit_cannot_run_fails_before_data_and_weights(
    tiny_bert, learnable_data, tmp_path, capsys, monkeypatch
):
    """This machine runs 4-bit (bitsandbytes 0.50 has CPU kernels), so the failure is simulated: the
    NF4 quantization kernel raises as it does on a device bitsandbytes has no 4-bit backend for."""
    import bitsandbytes.functional

    from recipes_lib.run import preparation, run_main

    def no_backend(*args, **kwargs):
        raise NotImplementedError("No 4-bit NF4 kernel is registered for device type 'cpu'")

    def too_late(*args, **kwargs):
        raise AssertionError("the 4-bit check should come before the data and the model")

    monkeypatch.setattr(bitsandbytes.functional, "quantize_4bit", no_backend)
    monkeypatch.setattr(preparation, "load_classification_data", too_late)
    output_dir = tmp_path / "output"
    with pytest.raises(SystemExit) as exited:
        run_main(load_recipe("qlora").main, run_args(tiny_bert, learnable_data, output_dir))
    stderr = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in stderr
    assert "QLoRA needs bitsandbytes' 4-bit NF4 on cpu, and it fails here: No 4-bit NF4 kernel" in stderr
    assert "recipes/lora.py" in stderr and "pip install -U bitsandbytes" in stderr
    assert not output_dir.exists()


def test_qlora_8bit_preflight_failure_is_one_paragraph(monkeypatch):
    """--base_bits 8's preflight has its own paragraph (issue 56 folded the 4- and 8-bit checks into one)."""
    import bitsandbytes.nn
    import torch

    from recipes_lib.errors import ModelError
    from recipes_lib.modeling.adapters import check_base_support

    def no_backend(*args, **kwargs):
        raise RuntimeError("No int8 kernel\nfor cpu")

    monkeypatch.setattr(bitsandbytes.nn, "Linear8bitLt", no_backend)
    with pytest.raises(ModelError) as refused:
        check_base_support(torch.device("cpu"), bits=8)
    assert str(refused.value) == (
        "--base_bits 8 needs bitsandbytes' 8-bit LLM.int8 layers on cpu, and they fail here: No int8 kernel. "
        "Install a bitsandbytes built for this machine (pip install -U bitsandbytes; 0.50 runs LLM.int8 "
        "on CUDA and CPU), or leave --base_bits at 4 (the NF4 base, less memory)."
    )
