"""One command at a time per output directory (issue #49): a lock taken before the "already holds a run"
check and held until the command ends (src/recipes_lib/locking.py).

Fast: the lock itself (refused while held, gone once released, a killed holder's lock said and not
taken over in silence), and each command that takes it refused while another holds it: a recipe run,
a sweep, a crossval, an export. Slow: two real launches started at once into one output_dir.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from recipes_lib.errors import OutputDirError
from recipes_lib.locking import LOCK_FILE, lock_directory
from recipes_workbench.cli.main import main as cli_main
from tests.helpers.repo import ACCELERATE_CONFIGS, REPO_ROOT, load_recipe, recipe_script
from tests.helpers.runs import QUICK, accelerate_launch_command, run_args


def snapshot(directory: Path) -> dict[str, str]:
    """Every file under `directory` (the lock file too): its SHA-256."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def killed_holder(directory: Path, command: str = "run", writing: str = "") -> int:
    """A process that takes the directory's lock as `command` and is killed with SIGKILL while holding it
    (in the middle of writing the file `writing` whole, when given); its pid."""
    code = (
        "import os, signal, sys\n"
        "from recipes_lib.locking import lock_directory\n"
        "from recipes_lib.whole_files import written_whole\n"
        "held = lock_directory(sys.argv[1], sys.argv[2])\n"
        "if sys.argv[3]:\n"
        "    with written_whole(os.path.join(sys.argv[1], sys.argv[3]), 'wb') as half:\n"
        "        half.write(b'half a file'); half.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code, str(directory), command, writing], capture_output=True, text=True
    )
    assert completed.returncode == -signal.SIGKILL, completed.stderr
    return json.loads((directory / LOCK_FILE).read_text())["pid"]


# --- the lock --------------------------------------------------------------------------------------------


def test_a_held_directory_is_refused_naming_its_holder_and_nothing_changes(tmp_path):
    (tmp_path / "notes.txt").write_text("the first command's file")
    with lock_directory(tmp_path, "run"):
        before = snapshot(tmp_path)
        with pytest.raises(OutputDirError) as refused:
            lock_directory(tmp_path, "export")
        assert f"is in use by a run (process {os.getpid()} on host" in str(refused.value)
        assert "Nothing was changed" in str(refused.value)
        assert snapshot(tmp_path) == before  # the holder's record included
    assert not (tmp_path / LOCK_FILE).exists()  # released: the file goes with it
    lock_directory(tmp_path, "run").release()  # and the directory is free again


def test_a_lock_left_by_a_killed_command_is_said_and_refused_until_taken_over_on_purpose(tmp_path, caplog):
    pid = killed_holder(tmp_path)
    left = (tmp_path / LOCK_FILE).read_text()
    with pytest.raises(OutputDirError) as refused:
        lock_directory(tmp_path, "export", stale_advice="Continue that run first. ")
    message = str(refused.value)
    assert f"was locked by a run (process {pid} on host" in message and "stopped without ending" in message
    assert "Continue that run first." in message and str(tmp_path / LOCK_FILE) in message
    assert (tmp_path / LOCK_FILE).read_text() == left  # refused: the record stays for the next to see
    with lock_directory(tmp_path, "export", take_over_stale=True):
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert f"process {pid}" in caplog.text and "takes its lock over" in caplog.text


# --- each command that takes it -----------------------------------------------------------------------------


def test_a_second_run_is_refused_before_the_check_in_one_paragraph(
    tmp_path, tiny_bert, learnable_data, capsys
):
    """The directory holds no run yet, so the old "already holds a run" check alone lets both in; the lock
    refuses the second, before it reads a byte of data, and leaves the first's files as they were."""
    output_dir = tmp_path / "run"
    args = run_args(tiny_bert, learnable_data, output_dir, **QUICK)
    with lock_directory(output_dir, "run"):
        (output_dir / "checkpoint-1").mkdir()  # what the first run has written so far
        before = snapshot(output_dir)
        with pytest.raises(SystemExit) as exited:
            from recipes_lib.run import run_main

            run_main(load_recipe("full_ft").main, args)
        assert exited.value.code == 2
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "is in use by a run" in errors[0], errors
        assert snapshot(output_dir) == before


def test_resuming_takes_over_a_killed_runs_lock_and_a_new_run_is_told_how_to_proceed(
    tmp_path, tiny_bert, learnable_data
):
    from recipes_lib.config.parsing import parse_arguments
    from recipes_lib.config.validation import claim_output_dir
    from recipes_workbench.recipes import RECIPES

    output_dir = tmp_path / "run"
    output_dir.mkdir()
    killed_holder(output_dir)
    plain = parse_arguments(
        RECIPES["full_ft"], run_args(tiny_bert, learnable_data, output_dir, **{**QUICK, "overwrite": False})
    )
    with pytest.raises(
        OutputDirError, match="--resume_from_checkpoint last, or replace it with --overwrite_output_dir"
    ):
        claim_output_dir(plain.training, main_process=True)
    overwriting = parse_arguments(
        RECIPES["full_ft"], run_args(tiny_bert, learnable_data, output_dir, **QUICK)
    )
    claim_output_dir(overwriting.training, main_process=True).close()
    assert not (output_dir / LOCK_FILE).exists()


@pytest.mark.workbench
def test_a_sweep_a_crossval_and_an_export_are_refused_while_the_directory_is_held(tmp_path, capsys):
    from recipes_workbench.sweep.runner import run_sweep  # the sweep extra (optuna)
    from tests.helpers.crossval_stand_ins import single_label_file
    from tests.helpers.sweep_stand_ins import SweepStandIn, make_config, no_budget

    config = make_config(tmp_path)
    with lock_directory(config.output_dir, "run"), pytest.raises(OutputDirError, match="is in use by a run"):
        run_sweep(config, launch=SweepStandIn(), preflight=no_budget, draw=False)

    train = single_label_file(tmp_path)
    crossval_dir = tmp_path / "cv"
    with lock_directory(crossval_dir, "crossval"):
        before = snapshot(crossval_dir)
        code = cli_main(["crossval", "full_ft", "--output_dir", str(crossval_dir), "--train_file", str(train),
                         "--accelerate_config", str(ACCELERATE_CONFIGS / "cpu.yaml")])  # fmt: skip
        assert code == 2 and "is in use by a crossval" in capsys.readouterr().err
        assert snapshot(crossval_dir) == before  # no folds written, no study opened

    run_dir = tmp_path / "finished"
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps({"config": {}}))
    (run_dir / "model.safetensors").write_bytes(b"")
    with lock_directory(run_dir, "run"):
        code = cli_main(["export", str(run_dir)])
        assert code == 2 and "is in use by a run" in capsys.readouterr().err
        assert not list(run_dir.glob(".export-*"))


# --- two real launches at once ----------------------------------------------------------------------------

# The recipe script, its training held back SECONDS (outside Trainer.train's own clock): the first launch is
# still running when the second reaches its lock, however long the second takes to import torch.
SLOW_TO_TRAIN = """\
import runpy, sys, time
import transformers
seconds, script = float(sys.argv[1]), sys.argv[2]
train = transformers.Trainer.train
def held_back(self, *args, **kwargs):
    time.sleep(seconds)
    return train(self, *args, **kwargs)
transformers.Trainer.train = held_back
sys.argv = [script, *sys.argv[3:]]
runpy.run_path(script, run_name="__main__")
"""
# What two runs of the same command write differently (one thread: the weights are bit for bit the same):
# results.json's clock and memory figures (measured on the shared 2-core test machine: created_at,
# train_runtime_s, train_samples_per_s, train_tokens_per_s, peak_memory_gib and each phase's peak_rss_gib),
# and the model card, which shows them.
CLOCK_FILES = {"results.json", "README.md"}
MEASURED = ("created_at", "runtime", "_per_s", "memory", "rss")


def differing_keys(first: Path, second: Path) -> set[str]:
    """The dotted keys whose values differ between two results.json files."""

    def flat(value, prefix=""):
        if isinstance(value, dict):
            for key, item in value.items():
                yield from flat(item, f"{prefix}.{key}" if prefix else key)
        else:
            yield prefix, value

    a, b = dict(flat(json.loads(first.read_text()))), dict(flat(json.loads(second.read_text())))
    return {key for key in a.keys() | b.keys() if a.get(key) != b.get(key)}


def launch(script: Path, seconds: float, args: list[str], env: dict[str, str]) -> subprocess.Popen:
    command = accelerate_launch_command(script, [str(seconds), str(recipe_script("full_ft")), *args])
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT, env=env
    )


@pytest.mark.slow
@pytest.mark.timeout(1800)  # three launches on a busy machine
def test_two_runs_started_at_once_into_one_directory_one_runs_one_is_refused(
    tmp_path, tiny_bert, learnable_data
):
    script = tmp_path / "slow_to_train.py"
    script.write_text(SLOW_TO_TRAIN)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    output_dir = tmp_path / "run"
    # --overwrite_output_dir: the "already holds a run" check lets both in, whenever each arrives.
    args = run_args(tiny_bert, learnable_data, output_dir, "--save_steps", "4", steps=8, epochs=None,
                    batch_size=8, max_eval_samples=16, save_strategy="steps", overwrite=True)  # fmt: skip
    solo = launch(script, 0, args, env)
    assert solo.wait(timeout=900) == 0, solo.stderr.read()[-3000:]
    solo_files = snapshot(output_dir)
    output_dir.rename(tmp_path / "solo")

    started = time.monotonic()
    first, second = launch(script, 30, args, env), launch(script, 30, args, env)
    codes = [first.wait(timeout=900), second.wait(timeout=900)]
    outputs = [process.stderr.read() for process in (first, second)]
    assert sorted(codes) == [0, 1], outputs  # accelerate launch exits 1 when its recipe exits 2
    # One paragraph (accelerate's launcher repeats the recipe's stderr in its own error).
    errors = {line for line in outputs[codes.index(1)].splitlines() if line.startswith("error: ")}
    assert len(errors) == 1 and "is in use by a run (process" in errors.pop(), outputs[codes.index(1)][-3000:]
    assert time.monotonic() - started > 30  # the winner was held back while the other was refused

    pair_files = snapshot(output_dir)
    assert set(pair_files) == set(solo_files)  # the same files: none of the refused run's, no lock left
    differing = {name for name in solo_files if pair_files[name] != solo_files[name]}
    assert differing == CLOCK_FILES, differing
    measured = differing_keys(tmp_path / "solo" / "results.json", output_dir / "results.json")
    print("results.json keys that differ from the solo run's:", sorted(measured))
    assert measured and all(any(word in key for word in MEASURED) for key in measured), measured


@pytest.mark.slow
@pytest.mark.timeout(1800)  # two two-process launches
def test_under_two_processes_the_main_one_locks_for_both(tmp_path, tiny_bert, learnable_data):
    """Only the main process takes the lock (the other writes nothing in output_dir): a two-process run
    goes through and leaves no lock; one started while the directory is held is refused by its main
    process, and `accelerate launch` stops the other one instead of leaving it waiting."""
    output_dir = tmp_path / "run"
    args = run_args(tiny_bert, learnable_data, output_dir, **QUICK)
    two = ("multi_cpu.yaml", "--num_processes", "2", "--main_process_port", "0")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}

    def launch_two() -> subprocess.CompletedProcess:
        command = accelerate_launch_command(recipe_script("full_ft"), args, *two)
        return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT, env=env)

    completed = launch_two()
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert (output_dir / "results.json").is_file() and not (output_dir / LOCK_FILE).exists()
    with lock_directory(output_dir, "export"):
        before = snapshot(output_dir)
        refused = launch_two()
        assert refused.returncode != 0
        errors = {line for line in refused.stderr.splitlines() if line.startswith("error: ")}
        assert len(errors) == 1 and "is in use by an export (process" in errors.pop(), refused.stderr[-3000:]
        assert snapshot(output_dir) == before


# --- issue #54: every command, another's stale lock, a killed writer's leftovers, a disk it cannot write ---


@pytest.mark.workbench
def test_a_sweep_and_a_crossval_take_over_only_their_own_killed_lock(tmp_path, capsys):
    """Rerunning a killed sweep (crossval) is how it resumes, so its own stale lock is taken over; another
    command's (a recipe run killed there, an export) is refused as the recipes refuse it without a flag."""
    from recipes_workbench.sweep.runner import run_sweep  # the sweep extra (optuna)
    from tests.helpers.crossval_stand_ins import single_label_file
    from tests.helpers.sweep_stand_ins import SweepStandIn, make_config, no_budget

    config = make_config(tmp_path)
    Path(config.output_dir).mkdir(parents=True)
    killed_holder(Path(config.output_dir), "run")
    with pytest.raises(OutputDirError, match="was locked by a run .* stopped without ending"):
        run_sweep(config, launch=SweepStandIn(), preflight=no_budget, draw=False)
    (Path(config.output_dir) / LOCK_FILE).unlink()
    killed_holder(Path(config.output_dir), "sweep")
    run_sweep(config, launch=SweepStandIn(), preflight=no_budget, draw=False)  # its own: resumed

    train = single_label_file(tmp_path)
    crossval_dir = tmp_path / "cv"
    crossval_dir.mkdir()
    argv = ["crossval", "full_ft", "--output_dir", str(crossval_dir), "--train_file", str(train),
            "--accelerate_config", str(ACCELERATE_CONFIGS / "cpu.yaml")]  # fmt: skip
    for other in ("run", "export", "sweep"):
        killed_holder(crossval_dir, other)
        before = snapshot(crossval_dir)
        assert cli_main(argv) == 2
        err = capsys.readouterr().err
        assert (
            f"was locked by a{'n' if other == 'export' else ''} {other}" in err and "stopped without" in err
        ), err
        assert snapshot(crossval_dir) == before
        (crossval_dir / LOCK_FILE).unlink()


@pytest.mark.workbench  # label-issues (the data-quality extra: cleanlab)
def test_label_issues_is_refused_while_the_directory_is_held(tmp_path, capsys):
    run_dir = tmp_path / "run"
    with lock_directory(run_dir, "crossval"):
        before = snapshot(run_dir)
        assert cli_main(["label-issues", str(run_dir)]) == 2
        assert "is in use by a crossval" in capsys.readouterr().err
        assert snapshot(run_dir) == before
    killed_holder(run_dir, "crossval")
    assert cli_main(["label-issues", str(run_dir)]) == 2
    assert "stopped without ending" in capsys.readouterr().err


LEFTOVERS = [
    ".results.json.1a2b3c4d.tmp",
    ".confusion_matrix.png.deadbeef.tmp",
    ".export-k2j_x9q1",
    ".export-old-abcd1234",
]
NOT_LEFTOVERS = [".gitignore", "notes.tmp", ".results.json.tmp", "export.failed", "export"]


def test_a_killed_writer_s_temporaries_are_removed_when_the_directory_is_next_held_and_nothing_else(
    tmp_path, caplog
):
    """Only the lock's holder writes there, so what a dead holder left half-written belongs to nobody:
    the next command to hold the lock (a resume, an export, a push) deletes it, and keeps the rest."""
    killed_holder(tmp_path, "run", writing="confusion_matrix.png")
    [half] = [path.name for path in tmp_path.iterdir() if path.name.startswith(".confusion_matrix.png.")]
    for name in LEFTOVERS + NOT_LEFTOVERS:
        (tmp_path / name).mkdir() if "export" in name else (tmp_path / name).write_text("x")
    with lock_directory(tmp_path, "run", take_over_stale=True):
        left = sorted(path.name for path in tmp_path.iterdir())
    assert left == sorted([*NOT_LEFTOVERS, LOCK_FILE]), left
    assert half in caplog.text and "half-written" in caplog.text


def _unwritable_under(monkeypatch, directory: Path, call: str) -> None:
    """Make `call` ("mkdir", "open": filelock's, "write": the holder's record) fail under `directory` as a
    read-only mount does (root ignores permissions, so chmod cannot stand in for one)."""
    import errno

    def failing(original, index=0):
        def wrapper(*args, **kwargs):
            if str(args[index]).startswith(str(directory)):
                raise OSError(errno.EROFS, "Read-only file system")
            return original(*args, **kwargs)

        return wrapper

    if call == "mkdir":
        monkeypatch.setattr(os, "mkdir", failing(os.mkdir))
    elif call == "open":
        monkeypatch.setattr(os, "open", failing(os.open))
    else:  # the record: Path.write_text, through io.open in a writing mode
        original = io.open
        writing = failing(original)
        monkeypatch.setattr(
            io,
            "open",
            lambda file, mode="r", *a, **k: (writing if "w" in mode else original)(file, mode, *a, **k),
        )


@pytest.mark.parametrize("call", ["mkdir", "open", "write"])
def test_a_directory_that_cannot_be_written_is_one_paragraph_and_leaves_nothing(tmp_path, monkeypatch, call):
    target = tmp_path / "readonly" / "run"
    if call != "mkdir":
        target.mkdir(parents=True)
    before = snapshot(tmp_path)
    _unwritable_under(monkeypatch, target if call != "mkdir" else tmp_path / "readonly", call)
    with pytest.raises(OutputDirError) as refused:
        lock_directory(target, "export")
    message = str(refused.value)
    assert (
        f"Cannot write in '{target}' (Read-only file system)" in message and "Nothing was changed" in message
    )
    monkeypatch.undo()
    assert snapshot(tmp_path) == before
    lock_directory(target, "run").release()  # the lock was not left held


@pytest.mark.workbench
def test_every_command_that_writes_into_a_run_says_a_read_only_directory_in_one_paragraph(
    tmp_path, monkeypatch, capsys, tiny_bert, learnable_data
):
    """A recipe run, export, crossval, sweep and label-issues on a directory whose writes fail: the lock's
    paragraph, once, no traceback (a 30-line OSError from locking.py before)."""
    from recipes_lib.run import run_main
    from recipes_workbench.sweep.runner import run_sweep  # the sweep extra (optuna)
    from tests.helpers.crossval_stand_ins import single_label_file
    from tests.helpers.sweep_stand_ins import SweepStandIn, make_config, no_budget

    train = single_label_file(tmp_path)
    readonly = tmp_path / "readonly"
    run_dir = readonly / "finished"
    run_dir.mkdir(parents=True)
    (run_dir / "results.json").write_text(json.dumps({"config": {}}))
    (run_dir / "model.safetensors").write_bytes(b"")
    sweep = make_config(tmp_path)
    sweep_dir = readonly / "sweep"
    sweep_dir.mkdir()
    _unwritable_under(monkeypatch, readonly, "open")
    commands = {
        "export": lambda: cli_main(["export", str(run_dir)]),
        "label-issues": lambda: cli_main(["label-issues", str(run_dir)]),
        "crossval": lambda: cli_main(["crossval", "full_ft", "--output_dir", str(readonly / "cv"), "--train_file",
                                      str(train), "--accelerate_config", str(ACCELERATE_CONFIGS / "cpu.yaml")]),
    }  # fmt: skip
    for name, command in commands.items():
        assert command() == 2, name
        err = capsys.readouterr().err
        assert err.count("error: ") == 1 and "(Read-only file system)" in err and "Traceback" not in err, err
    with pytest.raises(OutputDirError, match="Read-only file system"):
        run_sweep(
            dataclasses.replace(sweep, output_dir=str(sweep_dir)),
            launch=SweepStandIn(), preflight=no_budget, draw=False,
        )  # fmt: skip
    with pytest.raises(SystemExit) as exited:
        run_main(load_recipe("full_ft").main, run_args(tiny_bert, learnable_data, readonly / "run", **QUICK))
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("error: ") == 1 and "(Read-only file system)" in err, err
