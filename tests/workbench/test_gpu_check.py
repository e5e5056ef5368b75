"""The GPU check (issue 34): one command under one deadline, rows kept as they come, hung rows cut off,
packages and carried wheels checked before anything runs, and its CPU rehearsal on the GPU machine's
versions (the slow test at the end runs benchmarks/gpu_check.sh itself, in `make gpu-rehearsal-venv`'s
virtual environment)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.helpers.repo import REPO_ROOT, load_benchmark


def test_a_child_past_its_timeout_is_killed_with_what_it_started_and_says_why(tmp_path):
    gpu_check = load_benchmark("gpu_check")
    marker = tmp_path / "grandchild-alive"
    # The grandchild would write the marker after 3 s, if it were still alive then.
    script = f"echo started; (sleep 3; touch {marker}) & sleep 1000"
    started = time.monotonic()
    outcome = gpu_check.run_child(["sh", "-c", script], 1.0, tmp_path / "child.log")
    assert time.monotonic() - started < 10
    assert outcome["status"] == "timed out"
    assert "its limit: 1 s" in outcome["reason"] and "started" in outcome["reason"]
    time.sleep(3.5)
    assert not marker.exists()


def test_a_failed_child_reports_the_end_of_its_output(tmp_path):
    gpu_check = load_benchmark("gpu_check")
    outcome = gpu_check.run_child(["sh", "-c", "echo the reason >&2; exit 4"], 30, tmp_path / "child.log")
    assert outcome["status"] == "failed" and outcome["reason"] == "exit 4: the reason"
    assert gpu_check.run_child(["true"], 30, tmp_path / "ok.log")["status"] == "ok"


def test_a_row_named_in_gpu_check_hang_sleeps_instead_of_running(monkeypatch):
    gpu_check = load_benchmark("gpu_check")
    monkeypatch.setenv("GPU_CHECK_HANG", "bert-base/lora, step_profile")
    assert gpu_check.with_hang(["run", "it"], "bert-base/full_ft") == ["run", "it"]
    hung = gpu_check.with_hang(["run", "it"], "bert-base/lora")
    assert hung[0] == sys.executable and "time.sleep" in hung[-1]


def test_the_report_is_replaced_whole_and_its_table_says_why_a_row_did_not_run(tmp_path):
    gpu_check = load_benchmark("gpu_check")
    report = gpu_check.Report(tmp_path, "gpu_check", {"budget_s": 60})
    report.data["recipes"].append(
        {"model": "bert-base", "recipe": "lora", "status": "timed out", "note": "slept"}
    )
    report.save(gpu_check.Deadline(60))
    assert json.loads((tmp_path / "gpu_check.json").read_text())["recipes"][0]["status"] == "timed out"
    assert "timed out: slept" in (tmp_path / "gpu_check.txt").read_text()
    assert not list(tmp_path.glob("*.tmp"))


def fake_wheel(
    directory: Path, name: str, version: str, requires: list[str], files: dict | None = None
) -> Path:
    path = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    with zipfile.ZipFile(path, "w") as archive:
        for file, data in (files or {}).items():
            archive.writestr(file, data)
        archive.writestr(f"{info}/METADATA", metadata)
        archive.writestr(f"{info}/RECORD", "")
    return path


def test_a_carried_wheel_is_installed_unless_this_python_has_a_version_every_carried_wheel_accepts(tmp_path):
    preflight = load_benchmark("gpu_preflight")
    import packaging

    installed = packaging.__version__
    wheels = [
        fake_wheel(
            tmp_path, "needs_things", "1.0", [f"packaging>={installed}", "absent_thing>=2", 'x; extra == "y"']
        ),
        fake_wheel(tmp_path, "packaging", "1.0", []),  # this Python's packaging is accepted: kept
        fake_wheel(tmp_path, "absent_thing", "2.0", []),  # not installed here
    ]
    chosen, lines = preflight.wheels_to_install(wheels)
    assert sorted(path.name.split("-")[0] for path in chosen) == ["absent_thing", "needs_things"]
    assert any(line.startswith(f"  packaging: this Python has {installed}") for line in lines)


def test_the_bitsandbytes_wheel_keeps_only_the_named_native_libraries_with_a_true_record(tmp_path):
    preflight = load_benchmark("gpu_preflight")
    libraries = {
        f"bitsandbytes/libbitsandbytes_{name}.so": name.encode() * 1000
        for name in ("cpu", "cuda118", "cuda130")
    }
    path = fake_wheel(
        tmp_path, "bitsandbytes", "0.50.2", [], {"bitsandbytes/__init__.py": "x = 1\n", **libraries}
    )
    assert preflight.slim_bitsandbytes(tmp_path, ["cpu", "cuda130"]) == 0
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
        assert "bitsandbytes/libbitsandbytes_cuda118.so" not in names
        assert {"bitsandbytes/libbitsandbytes_cpu.so", "bitsandbytes/libbitsandbytes_cuda130.so"} <= names
        record = archive.read("bitsandbytes-0.50.2.dist-info/RECORD").decode().splitlines()
        for line in record:
            file, digest, size = line.rsplit(",", 2)
            if digest:
                data = archive.read(file)
                expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                assert digest == f"sha256={expected}" and int(size) == len(data)
    assert (
        preflight.slim_bitsandbytes(tmp_path, ["cuda999"]) == 2
    )  # a build the wheel lacks: said, not guessed


def test_preflight_stops_with_one_line_naming_what_is_missing_and_how_to_carry_it(monkeypatch, capsys):
    preflight = load_benchmark("gpu_preflight")
    monkeypatch.setattr(
        preflight, "NEEDED", [("packaging", "packaging"), ("no_such_module_here", "datasets")]
    )
    assert preflight.check(cpu=True, matmul_size=8, json_path=None) == 3
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("gpu_check cannot run: missing datasets (not installed).")
    assert 'carry [".whl"]' in last and "benchmarks/gpu_wheels.sh" in last


def test_preflight_names_a_carried_package_whose_requirement_this_python_does_not_meet(monkeypatch):
    pytest.importorskip("datasets")
    preflight = load_benchmark("gpu_preflight")
    real = preflight.installed_version
    monkeypatch.setattr(
        preflight, "installed_version", lambda name: "1.0.0" if name == "pyarrow" else real(name)
    )
    unmet = preflight.unmet_requirements(("datasets",))
    assert any(
        line.startswith("datasets ") and "needs pyarrow>=" in line and "found 1.0.0" in line for line in unmet
    )


def test_step_profile_reports_bad_input_without_exiting_the_caller(tmp_path, capsys):
    step_profile = load_benchmark("step_profile")
    argv = ["--recipes", "no_such_recipe", "--train_file", "x.csv", "--report_dir", str(tmp_path)]
    assert step_profile.main(argv) == 2  # returned: a SystemExit would end whoever imported it
    assert "no_such_recipe" in capsys.readouterr().err


# --- the rehearsal -------------------------------------------------------------------------------------

GPU_VENV = Path(os.environ.get("GPU_VENV", REPO_ROOT / ".venv-gpu"))


def image_pins() -> dict[str, str]:
    pins = {}
    for line in (REPO_ROOT / "benchmarks" / "gpu_image_requirements.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


@pytest.mark.slow
# The environment's first build: 2.5 min on 2026-12-03, 13 min in an earlier session (it is download);
# the check: 2 min 47 s on idle cores, about 15 min on busy ones. The limit leaves room for a slow PyPI.
@pytest.mark.timeout(4800)
def test_the_gpu_check_script_runs_on_the_gpu_machines_versions_and_cuts_off_a_hung_row(tmp_path):
    """`bash benchmarks/gpu_check.sh --cpu --tiny` in the virtual environment pinned to the GPU machine's
    image, the carried wheels installed as there; one catalogue row hangs (GPU_CHECK_HANG), is cut off
    at its limit, and every other row is kept."""
    built = subprocess.run(
        ["make", "gpu-rehearsal-venv", "gpu-wheels", f"GPU_VENV={GPU_VENV}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    if built.returncode != 0:
        # Skipped where PyPI or a Python 3.12 is missing; CI (.ci/run) builds the environment first and
        # sets GPU_REHEARSAL_REQUIRED, so that there a build that fails fails the test.
        outcome = pytest.fail if os.environ.get("GPU_REHEARSAL_REQUIRED") else pytest.skip
        outcome(
            f"the rehearsal's virtual environment could not be built: {(built.stdout + built.stderr)[-800:]}"
        )
    hung_row = "catalogue/distilbert/distilbert-base-uncased/lora"
    env = {
        **os.environ,
        "GPU_CHECK_PYTHON": str(GPU_VENV / "bin" / "python"),
        "GPU_CHECK_SITE": str(tmp_path / "site"),
        "GPU_CHECK_HANG": hung_row,
        "OMP_NUM_THREADS": "1",
    }
    env.pop("PYTHONPATH", None)
    env.pop("OUT", None)
    # The check measures this CPU's bf16 matmul rate, as it measures the GPU's: conftest's cap of oneDNN
    # at AVX2 (for the recipes' figures) would make that probe ~60x slow here, and the MFU over 1.
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    out = tmp_path / "out"
    command = [
        "bash", "benchmarks/gpu_check.sh", "--cpu", "--tiny", "--budget_s", "1800",
        "--catalogue_models", "bert-base-uncased", "distilbert-base-uncased", "--catalogue_row_timeout_s", "20",
        "--work_dir", str(tmp_path / "work"), "--output", str(out),
    ]  # fmt: skip
    log = tmp_path / "gpu_check.log"
    with log.open("w") as output:
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
        try:
            returncode = process.wait(timeout=2400)
        finally:  # SIGTERM: gpu_check.py kills its children's groups before it goes
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=30)
    stdout = log.read_text()
    print(stdout[-6000:])
    assert returncode == 1, stdout[-3000:]  # 1: a row (the hung one) did not run

    report = json.loads((out / "gpu_check-cpu-tiny.json").read_text())
    versions, pins = report["preflight"]["versions"], image_pins()
    assert report["preflight"]["python"].startswith("3.12")
    for name in (
        "torch",
        "transformers",
        "accelerate",
        "huggingface-hub",
        "numpy",
        "tokenizers",
        "safetensors",
    ):
        assert versions[name].split("+")[0] == pins[name], name
    # From the carried wheels: datasets, and pyarrow installed over the image's older one (23.0.1).
    assert versions["datasets"] == "5.2.0" and versions["bitsandbytes"] == "0.50.2"
    assert versions["pyarrow"] == "24.0.0"
    assert "pyarrow: has 23.0.1, needed >=24.0.0: installing" in stdout
    assert report["preflight"]["matmul"]["flops"] > 0

    assert [(row["recipe"], row["status"]) for row in report["recipes"]] == [
        (recipe, "ok") for recipe in ("full_ft", "adamw_8bit", "lora", "qlora")
    ]
    assert all(row["predicted_peak_gib"] and row["train_peak_allocated_gib"] for row in report["recipes"])
    profile = report["step_profile"]
    assert [row["recipe"] for row in profile] == ["full_ft", "adamw_8bit", "lora", "qlora"]
    for row in profile:
        assert row["status"] == "ok" and row["steady_step_ms"] > 0 and 0 < row["mfu_measured_matmul"] < 1, row
        assert row["mfu_datasheet"] is None  # a CPU has no datasheet bf16 rate here

    catalogue = {(row["model"], row["recipe"]): row for row in report["catalogue"]}
    hung = catalogue.pop(("distilbert/distilbert-base-uncased", "lora"))
    assert hung["status"] == "timed out" and "over its 20 s limit" in hung["note"]
    assert "GPU_CHECK_HANG" in hung["note"]
    # Every other row ran, the rows after the hung one too (distilbert's qlora, then bert-base's).
    assert set(catalogue) == {
        (model, recipe)
        for model in ("distilbert/distilbert-base-uncased", "google-bert/bert-base-uncased")
        for recipe in ("full_ft", "adamw_8bit", "lora", "qlora")
    } - {("distilbert/distilbert-base-uncased", "lora")}
    assert all(row["status"] == "ok" for row in catalogue.values())
    assert report["catalogue_not_reached"] == []
    assert "timed out" in (out / "gpu_check-cpu-tiny.txt").read_text()


def test_issue_47_parts_name_catalogue_models_and_their_rows_reach_the_table():
    """The parts the next GPU run adds (history, deberta, fill24, fits24, padding_free): every model they
    name is a catalogue entry (the GPU machine builds it from there, no Hub), and the text table shows
    their rows, fill24's with its MFU against the measured matmul rate."""
    from recipes_workbench.planner.catalogue import catalogue_entry

    gpu_check = load_benchmark("gpu_check")
    for part, (models, recipes, _, _) in gpu_check.CATALOGUE_PARTS.items():
        assert all(catalogue_entry(model) is not None for model in models), part
        assert recipes
    data = {
        "args": {"tiny": False},
        "preflight": {"matmul": {"flops": 7.9e14}},
        "fill24": [{"model": "google-bert/bert-base-uncased", "recipe": "lora", "batch": 512, "ratio": 0.97,
                    "measured_peak_gib": 21.5, "step_ms": 250.0, "status": "ok"}],
        "fits24": [{"model": "FacebookAI/roberta-large", "recipe": "full_ft", "batch": 32, "status": "failed",
                    "note": "OutOfMemoryError: CUDA out of memory"}],
        "padding_free": [{"model": "answerdotai/ModernBERT-base", "real_tokens_per_s": {"padded": 1e5, "packed": 2e5},
                          "packed_over_padded": 2.0, "max_logit_difference": 0.01, "status": "ok"}],
    }  # fmt: skip
    text = gpu_check.table(data)
    rate = 512 * 128 * gpu_check.flops_per_token("bert-base", 128) / 0.25 / 7.9e14
    assert f"MFU {rate:.1%}" in text and "21.50" in text
    assert "fits24: README's 24 GB rows" in text and "OutOfMemoryError" in text
    assert "(2.00x), largest logit difference 1.00e-02" in text
