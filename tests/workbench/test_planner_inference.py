"""distill's teacher pass in the planner: a no-grad forward (weights + one layer's moment + the batch),
checked against a measured forward of every family's tiny model and of all-MiniLM-L6-v2, and
`plan --recipe distill --teacher` showing the teacher pass and the student's training apart."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from recipes_lib.config.distill_options import TEACHER_BATCH_SIZE
from recipes_lib.config.recipe_spec import TrainingShape
from recipes_lib.units import GIB
from recipes_workbench.cli.main import main
from recipes_workbench.planner import Setup, load_config
from recipes_workbench.planner.inference import plan_inference
from tests.helpers.models import FAMILIES, build_tiny_family

pytestmark = pytest.mark.usefixtures("one_thread")
# The no-grad forward is fitted on MiniLM (within 2%); the tiny models' S x S terms weigh more.
TOLERANCE = {"minilm": 0.05, "tiny": 0.25}


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("inference-families")
    return {family: build_tiny_family(family, root / family) for family in FAMILIES}


def measured_forward(model_dir: Path, rows: int, length: int, attention: str) -> dict:
    """Weights and the activation peak of one forward under torch.inference_mode, as the teacher runs."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from recipes_lib.memory.tensors import TensorMemoryTracker

    model = AutoModelForSequenceClassification.from_pretrained(
        model_dir, num_labels=2, attn_implementation=attention
    ).eval()
    generator = torch.Generator().manual_seed(0)
    batch = {
        "input_ids": torch.randint(5, 40, (rows, length), generator=generator),
        "attention_mask": torch.ones(rows, length, dtype=torch.long),
    }
    batch["attention_mask"][0, length // 2 :] = 0  # padded, as a teacher's batches are
    if "token_type_ids" in AutoTokenizer.from_pretrained(model_dir).model_input_names:
        batch["token_type_ids"] = torch.zeros(rows, length, dtype=torch.long)
    tracker = TensorMemoryTracker(model, None, batch)
    with torch.inference_mode(), tracker:
        model(**batch)
    return {"weights": tracker.peak["weights"], "activations": tracker.peak["activations"]}


def check_inference_plan(model_dir: Path, rows: int, length: int, attention: str, tolerance: float):
    measured = measured_forward(model_dir, rows, length, attention)
    setup = Setup(batch_size=rows, seq_length=length, device="cpu", attention=attention)
    plan = plan_inference(load_config(str(model_dir)), setup)
    assert plan.weights == measured["weights"]
    ratio = plan.activations / measured["activations"]
    assert abs(ratio - 1) <= tolerance, (ratio, plan.activation_terms, measured)
    assert plan.total == plan.weights + plan.activations + plan.other  # CPU: no CUDA context


def _attentions(family: str) -> list[str]:
    """DeBERTa and MPNet have eager attention only."""
    return ["sdpa", "eager"] if family not in ("deberta", "deberta-v2", "mpnet") else ["eager"]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_no_grad_forward_of_every_family_is_planned(family, family_dirs):
    for attention in _attentions(family):
        check_inference_plan(family_dirs[family], rows=16, length=64, attention=attention,
                             tolerance=TOLERANCE["tiny"])  # fmt: skip


@pytest.mark.parametrize("rows, length", [(64, 64), (8, 256)])
def test_the_no_grad_forward_of_minilm_is_planned(rows, length, minilm_dir):
    check_inference_plan(minilm_dir, rows, length, "sdpa", TOLERANCE["minilm"])


def _teacher_run(directory: Path, model_dir: Path, recipe: str = "full_ft", max_seq_length: int = 64) -> Path:
    """A finished run's output_dir as the planner reads it: config.json and results.json."""
    directory.mkdir()
    (directory / "config.json").write_text((model_dir / "config.json").read_text())
    results = {"recipe": recipe, "config": {"max_seq_length": max_seq_length}}
    (directory / "results.json").write_text(json.dumps(results))
    return directory


def _figures(output: str) -> dict[str, float]:
    """The GiB at the end of each line of the distill block."""
    lines = output.split("distill: two phases")[1].splitlines()[1:4]
    return {line.split("  ")[1].strip(): float(re.findall(r"([\d.]+) GiB", line)[0]) for line in lines}


def test_plan_distill_shows_the_teacher_pass_and_the_student_and_the_peak_is_the_larger(
    family_dirs, tmp_path, capsys
):
    teacher = _teacher_run(tmp_path / "teacher", family_dirs["bert"], max_seq_length=96)
    code = main(["plan", "--model", str(family_dirs["distilbert"]), "--recipe", "distill", "--teacher", str(teacher),
                 "--device", "cpu", "--max_seq_length", "128", "--no_family"])  # fmt: skip
    output = capsys.readouterr().out
    assert code == 0
    assert f"the full_ft run in {teacher}" in output
    # The teacher reads at its own run's max_seq_length, in batches of TEACHER_BATCH_SIZE.
    assert f"inference only (no gradients, no optimizer), batch {TEACHER_BATCH_SIZE} x 96" in output
    assert "full fine-tuning, batch 32 x 128" in output
    teacher_gib, student_gib, peak_gib = _figures(output).values()
    assert peak_gib == max(teacher_gib, student_gib)
    expected = plan_inference(
        load_config(str(teacher)), Setup(batch_size=TEACHER_BATCH_SIZE, seq_length=96, device="cpu")
    )
    assert teacher_gib == round(expected.total / GIB, 2)


def test_a_teacher_bigger_than_its_student_sets_the_peak(tmp_path, capsys):
    """deberta-v3-large teaching MiniLM on a GPU: the teacher pass is the run's peak."""
    code = main(["plan", "--model", "sentence-transformers/all-MiniLM-L6-v2", "--recipe", "distill",
                 "--teacher", "microsoft/deberta-v3-large", "--no_family"])  # fmt: skip
    output = capsys.readouterr().out
    assert code == 0
    teacher_gib, student_gib, peak_gib = _figures(output).values()
    assert teacher_gib > student_gib and peak_gib == teacher_gib and "(the teacher pass)" in output
    assert "+ CUDA context 0.50" in output


def test_a_qlora_teacher_is_planned_on_its_4bit_base(family_dirs, tmp_path):
    from recipes_workbench.planner.inference import load_teacher
    from recipes_workbench.recipes import RECIPES

    shapes = {name: spec.default_shape() for name, spec in RECIPES.items()}
    qlora = load_teacher(str(_teacher_run(tmp_path / "q", family_dirs["bert"], "qlora")), 2, shapes)
    full = load_teacher(str(_teacher_run(tmp_path / "f", family_dirs["bert"], "full_ft")), 2, shapes)
    assert qlora.shape.quantized_base and qlora.shape.adapters is None and full.shape == TrainingShape()
    setup = Setup(batch_size=8, seq_length=32, device="cpu")
    config = load_config(str(family_dirs["bert"]))
    assert plan_inference(config, Setup(**{**setup.__dict__, "shape": qlora.shape})).weights < (
        plan_inference(config, setup).weights
    )


def test_plan_distill_without_a_teacher_says_what_to_pass(capsys):
    assert main(["plan", "--model", "bert-base-uncased", "--recipe", "distill"]) == 2
    assert "plan --recipe distill needs --teacher" in capsys.readouterr().err
