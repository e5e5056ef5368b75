"""bitsandbytes loads only where a recipe uses it, and its kernels line on CPU is dropped.

peft imports bitsandbytes whenever it is installed, and transformers imports peft with
TrainingArguments, so every command used to load it and, on a CPU with AVX-512 BF16, print "Failed
to load CPU gemm_4bit_forward from kernels-community" (config/bitsandbytes_import.py). Each check
runs in a fresh interpreter: this test process has long loaded bitsandbytes for other tests.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import pytest

from recipes_lib.config.bitsandbytes_import import (
    KERNELS_HUB_LOGGER,
    KERNELS_LOGGER,
    KERNELS_MESSAGE,
    KERNELS_REPOSITORY,
    kernels_line_dropped,
)
from tests.helpers.repo import REPO_ROOT

# Each script's `loaded()`: bitsandbytes' code has run, its submodules imported (a deferred stub has none).
LOADED = """import sys
def loaded():
    return any(name.startswith("bitsandbytes.") for name in sys.modules)
"""
KERNELS_LINE = "gemm_4bit_forward"
# kernels 0.19's line when bitsandbytes looks its CPU kernel up with the Hub offline (as every test runs).
TRUST_CHECK_LINE = "publisher trust check"


def run_python(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)])}
    completed = subprocess.run(
        [sys.executable, "-c", LOADED + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO_ROOT,
        env=env,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed


def test_full_fts_imports_leave_bitsandbytes_unloaded_until_a_recipe_uses_it():
    """What the project controls, on either kind of CPU: full_ft's imports leave bitsandbytes' code unrun
    (transformers' Trainer imports peft, which imports bitsandbytes: a plain Trainer script prints the
    kernels line on a CPU with AVX-512 BF16), and adamw_8bit's own first use (`create_adamw_8bit`) runs it
    without the line. A direct `import bitsandbytes` outside the project prints what bitsandbytes prints
    on that CPU, which is not the project's to test. On an AVX2-only CPU no line comes either way; the slow
    test below checks there that the filter is on the logger whenever bitsandbytes' CPU backend starts."""
    completed = run_python(
        """
        import sys
        from tests.helpers.repo import load_recipe
        import recipes_lib.run, recipes_lib.training.trainer, recipes_lib.modeling.loading
        load_recipe("full_ft")
        print("after full_ft's imports:", loaded())
        import torch
        from transformers import TrainingArguments
        from recipes_lib.modeling.adamw_8bit import create_adamw_8bit
        training = TrainingArguments(output_dir="unused", report_to="none", use_cpu=True)
        create_adamw_8bit(torch.nn.Linear(64, 64), training)  # what the adamw_8bit recipe builds
        print("after adamw_8bit's use:", loaded())
        """
    )
    assert "after full_ft's imports: False" in completed.stdout, completed.stdout
    assert "after adamw_8bit's use: True" in completed.stdout, completed.stdout
    assert KERNELS_LINE not in completed.stderr and TRUST_CHECK_LINE not in completed.stderr


def test_plan_runs_bitsandbytes_only_for_peft_s_lora_and_silently():
    """plan counts a LoRA model's parameters with peft, whose LoRA dispatch asks bitsandbytes for its
    4-bit layers: that runs bitsandbytes' code (it is installed), with its kernels line dropped; the
    command line itself imports none of the heavy libraries, and `families` never runs bitsandbytes."""
    completed = run_python(
        """
        import sys
        from recipes_workbench.cli.main import main
        heavy = ("torch", "transformers", "datasets", "peft", "bitsandbytes")
        print("heavy modules of the command line:", sorted({m.split(".")[0] for m in sys.modules} & set(heavy)))
        main(["families"])
        print("after families:", loaded(), "peft" in sys.modules)
        meta_path = list(sys.meta_path)
        main(["plan", "--model", "bert-base-uncased", "--no_family"])
        print("after plan:", loaded(), sys.meta_path == meta_path)
        """
    )
    assert "heavy modules of the command line: []" in completed.stdout  # each command imports its own
    assert "after families: False True" in completed.stdout  # peft imported, bitsandbytes deferred
    assert "qlora" in completed.stdout
    assert "after plan: True True" in completed.stdout
    assert KERNELS_LINE not in completed.stderr and TRUST_CHECK_LINE not in completed.stderr


def test_the_deferral_is_undone_after_its_block_and_only_a_first_import_is_deferred():
    completed = run_python(
        """
        import sys
        from recipes_lib.config.bitsandbytes_import import deferred_bitsandbytes
        meta_path = list(sys.meta_path)
        with deferred_bitsandbytes():
            import bitsandbytes
        print("deferred:", not loaded(), sys.meta_path == meta_path)
        bitsandbytes.nn  # the first use runs it
        print("used:", loaded())
        """
    )
    assert "deferred: True True" in completed.stdout and "used: True" in completed.stdout


@pytest.mark.slow
def test_a_full_ft_run_neither_loads_bitsandbytes_nor_prints_its_kernels_line(tmp_path):
    completed = run_python(
        f"""
        from pathlib import Path
        from tests.helpers.data import learnable_rows, write_csv
        from tests.helpers.models import build_tiny_bert
        from tests.helpers.runs import QUICK, run_args, run_in_process
        root = Path({str(tmp_path)!r})
        data = {{split: write_csv(root / f"{{split}}.csv", learnable_rows(16, seed=1)) for split in ("train", "validation")}}
        run_in_process("full_ft", run_args(build_tiny_bert(root / "bert"), data, root / "run", **QUICK))
        print("bitsandbytes loaded:", loaded())
        """
    )
    assert "bitsandbytes loaded: False" in completed.stdout
    assert KERNELS_LINE not in completed.stderr
    assert (tmp_path / "run" / "results.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize(
    "recipe, report_to",
    [("full_ft", None), ("adamw_8bit", "none"), ("lora", "none"), ("qlora", "none")],
    ids=["full_ft-wandb", "adamw_8bit", "lora", "qlora"],
)
def test_wherever_a_run_first_runs_bitsandbytes_its_kernels_line_is_dropped(recipe, report_to, tmp_path):
    """Each first use runs the deferred bitsandbytes inside kernels_line_dropped: wandb's import (it
    reads every loaded module; a default run logs to W&B, offline here), 8-bit AdamW, peft's LoRA
    dispatch, QLoRA's preflight. This machine may lack AVX-512 BF16, so the line itself may never
    come: the check is that the filter is on the logger when bitsandbytes' CPU backend creates it."""
    completed = run_python(
        f"""
        import logging, sys
        from pathlib import Path
        from recipes_lib.config.bitsandbytes_import import KERNELS_LOGGER
        get_logger, filters_when_bitsandbytes_ran = logging.getLogger, []
        def recording_get_logger(name=None):
            if name == KERNELS_LOGGER and sys._getframe(1).f_code.co_filename.endswith("cpu/ops.py"):
                filters_when_bitsandbytes_ran.append([type(f).__name__ for f in get_logger(name).filters])
            return get_logger(name)
        logging.getLogger = recording_get_logger
        from tests.helpers.data import learnable_rows, write_csv
        from tests.helpers.models import build_tiny_bert
        from tests.helpers.runs import QUICK, run_args, run_in_process
        root = Path({str(tmp_path)!r})
        data = {{split: write_csv(root / f"{{split}}.csv", learnable_rows(16, seed=1)) for split in ("train", "validation")}}
        args = run_args(build_tiny_bert(root / "bert"), data, root / "run", report_to={report_to!r}, **QUICK)
        run_in_process({recipe!r}, args)
        print("filters when bitsandbytes ran:", filters_when_bitsandbytes_ran)
        """
    )
    assert "filters when bitsandbytes ran: [['_DropKernelsLine']]" in completed.stdout, completed.stdout[
        -2000:
    ]
    assert KERNELS_LINE not in completed.stderr


def test_the_kernels_line_is_dropped_in_the_block_only_and_every_other_bitsandbytes_warning_kept(caplog):
    caplog.set_level(logging.INFO)
    kernels_logger = logging.getLogger(KERNELS_LOGGER)
    # As bitsandbytes 0.50 words it (backends/cpu/ops.py).
    kernels_line = f"{KERNELS_MESSAGE}: %s. Please make sure ..."
    with kernels_line_dropped():
        kernels_logger.warning(kernels_line, "No module named 'kernels'")
        kernels_logger.warning("another bitsandbytes warning")
    assert [record.getMessage() for record in caplog.records] == ["another bitsandbytes warning"]
    assert kernels_logger.filters == []  # nothing left behind
    kernels_logger.warning(kernels_line, "outside the block")
    assert "outside the block" in caplog.records[-1].getMessage()


def test_kernels_offline_trust_check_line_for_bitsandbytes_kernel_is_dropped_and_others_kept(caplog):
    caplog.set_level(logging.INFO)
    hub_logger = logging.getLogger(KERNELS_HUB_LOGGER)
    # As kernels 0.19 words it (kernels/_internals/hf_hub.py), for the repository bitsandbytes asks for.
    with kernels_line_dropped():
        hub_logger.warning(
            f"Skipping publisher trust check for '{KERNELS_REPOSITORY}' because Hugging Face Hub is in offline mode."
        )
        hub_logger.warning(
            "Skipping publisher trust check for 'someone/else' because Hugging Face Hub is offline."
        )
    assert [record.getMessage() for record in caplog.records] == [
        "Skipping publisher trust check for 'someone/else' because Hugging Face Hub is offline."
    ]
