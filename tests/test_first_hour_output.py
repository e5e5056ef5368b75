"""What a new user sees from the README's command on a bad input (issue #42), through a real `accelerate launch`.

The recipe says what is wrong in one paragraph and exits 2. The launcher then exits 1 and, unless it is
given -q, prints a traceback of its own whose first exception holds the tail of the recipe's stderr, so
the paragraph shows twice (accelerate 1.16; docs/troubleshooting.md and the README say to use -q).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.output import project_lines
from tests.helpers.repo import ACCELERATE_CONFIGS, REPO_ROOT, recipe_script
from tests.helpers.runs import run_args

ACCELERATE = Path(sys.executable).with_name("accelerate")
HINT = "(run again with --debug for the traceback)"  # run_main's (run/recipe_run.py), under the paragraph


def launch(launcher_options: list[str], argv: list[str]) -> subprocess.CompletedProcess:
    command = [str(ACCELERATE), "launch", *launcher_options, "--config_file", str(ACCELERATE_CONFIGS / "cpu.yaml"),
               str(recipe_script("full_ft")), *argv]  # fmt: skip
    # As a user types the command: transformers prints "[INFO] Running in WANDB offline mode" at import
    # whenever WANDB_MODE=offline (as `make demo` sets it), a line of its own this test does not count.
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    environment.pop("WANDB_MODE", None)
    return subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT, env=environment
    )


def test_a_bad_training_file_through_accelerate_launch_q_is_one_paragraph_and_nothing_else(
    tiny_bert, learnable_data, tmp_path
):
    argv = run_args(tiny_bert, learnable_data, tmp_path / "run", "--train_file", str(tmp_path / "trian.csv"))
    quiet = launch(["-q"], argv)
    assert quiet.returncode == 1, quiet.stderr[-3000:]
    (paragraph,) = project_lines(quiet.stderr)  # and no traceback
    assert paragraph.startswith("error: ") and "trian.csv' does not exist" in paragraph
    seen = [line for line in (quiet.stdout + quiet.stderr).splitlines() if line.strip()]
    assert seen in ([paragraph], [paragraph, HINT]), seen  # every line the user sees
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # two launches of about 20 s each on 2 cores
def test_without_q_accelerate_launch_repeats_the_paragraph_in_its_traceback(
    tiny_bert, learnable_data, tmp_path
):
    """What docs/troubleshooting.md describes, so that the page is checked against the accelerate installed."""
    argv = run_args(tiny_bert, learnable_data, tmp_path / "run", "--train_file", str(tmp_path / "trian.csv"))
    (paragraph,) = project_lines(launch(["-q"], argv).stderr)
    loud = launch([], argv)
    assert loud.returncode == 1
    assert loud.stderr.count(paragraph) == 2 and "CalledProcessError" in loud.stderr, loud.stderr[-3000:]
