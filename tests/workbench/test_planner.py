"""The memory planner: exact parameter arithmetic, and predictions checked against measured runs."""

from __future__ import annotations

import dataclasses

import pytest

from recipes_lib.config.recipe_spec import LoraShape, TrainingShape
from recipes_lib.units import GIB
from recipes_workbench.cli.main import main
from recipes_workbench.planner import (
    MIN_8BIT_SIZE,
    Encoder,
    Setup,
    count_parameters_on_meta,
    largest_batch,
    load_config,
    plan_memory,
)
from recipes_workbench.planner.catalogue import catalogue_entry
from recipes_workbench.recipes import RECIPES as RECIPE_SPECS
from tests.helpers.repo import RECIPES
from tests.helpers.runs import INTO_SECOND_EPOCH, QUICK, run_args, run_in_process

# Predicted tensor memory (weights + gradients + optimizer state + activations) must be within
# this fraction of what the run measured, in total and part by part.
TOLERANCE = 0.10
# The peak of all tensors, what decides whether a run fits, within this fraction of the run's own
# (tiny BERT, CPU: 0.973 to 0.985 of it for every recipe; the same run stopped after two steps under
# the wide length grouping, before its longest batch met the optimizer state, read 1.075).
PEAK_TOLERANCE = 0.05
TENSOR_PARTS = ("weights", "gradients", "optimizer_state", "activations")
# The four ways to train the planner knows, as data (the shipped recipes declare these by default).
FULL_FT = TrainingShape()
ADAMW_8BIT = TrainingShape(optimizer_bits=8)
LORA = TrainingShape(adapters=LoraShape())
QLORA = TrainingShape(adapters=LoraShape(), quantized_base=True)


def _bert_config(name: str):
    from transformers import BertConfig

    values = {key: value for key, value in catalogue_entry(name).values.items() if key != "model_type"}
    return BertConfig(**values, num_labels=2)


@pytest.mark.parametrize("recipe", list(RECIPES))
# MiniLM slow (a real 22.7M-parameter run, ~10 s each on 2 cores): the tiny BERT checks every recipe by
# default, and test_planner_families.py checks MiniLM's plan against a measured step by default.
@pytest.mark.parametrize("model_kind", ["tiny", pytest.param("minilm", marks=pytest.mark.slow)])
def test_planner_predicts_the_measured_tensor_memory_of_every_recipe(
    recipe, model_kind, tiny_bert, minilm_dir, learnable_data, tmp_path
):
    """A real run on CPU, with the recipe's own length grouping, into the second epoch, when its longest
    batch meets the optimizer state (INTO_SECOND_EPOCH); the plan for the batch that set the activation peak."""
    model = tiny_bert if model_kind == "tiny" else minilm_dir
    args = run_args(model, learnable_data, tmp_path / "run", *INTO_SECOND_EPOCH, **QUICK)
    results = run_in_process(recipe, args)
    measured = {part: results["memory_breakdown_gib"][part] * GIB for part in TENSOR_PARTS}
    batch = results["memory_peak_batch"]
    setup = Setup(
        shape=RECIPE_SPECS[recipe].default_shape(),  # the recipe's own, with the options it ran with
        label=recipe,
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
    assert plan.peak_tensors == pytest.approx(results["tensor_peak_gib"] * GIB, rel=PEAK_TOLERANCE)
    assert plan.params_trainable == results["params_trainable"]


def test_bert_parameter_counts_are_exact_from_the_config_alone():
    base, large = _bert_config("bert-base-uncased"), _bert_config("bert-large-uncased")
    assert count_parameters_on_meta(base, FULL_FT).total == 109_483_778
    assert count_parameters_on_meta(large, FULL_FT).total == 335_143_938
    assert count_parameters_on_meta(base, LORA).trainable == 296_450
    assert count_parameters_on_meta(large, QLORA).trainable == 788_482


def test_full_fine_tuning_costs_16_bytes_per_parameter_before_activations():
    """The published arithmetic: 4 B weights + 4 B gradients + 2 x 4 B AdamW moments."""
    plan = plan_memory(_bert_config("bert-base-uncased"), Setup(shape=FULL_FT))
    per_parameter = (plan.weights + plan.gradients + plan.optimizer_state) / plan.params_total
    assert per_parameter == pytest.approx(16, abs=0.01)
    assert plan.activations > 0 and plan.total > plan.tensor_bytes  # activations and the CUDA context on top


def test_8bit_adamw_saves_about_6_bytes_per_8bit_eligible_parameter():
    """2 x 4 B moments become 2 x 1 B + absmax per 256 values, for tensors of >= 4096 elements
    that are not embeddings (kept 32-bit by default)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    config = _bert_config("bert-base-uncased")
    full = plan_memory(config, Setup(shape=FULL_FT))
    eight_bit = plan_memory(config, Setup(shape=ADAMW_8BIT))
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
    shapes = {"full_ft": FULL_FT, "adamw_8bit": ADAMW_8BIT, "lora": LORA, "qlora": QLORA}
    plans = {recipe: plan_memory(config, Setup(shape=shape, bf16=True)) for recipe, shape in shapes.items()}
    assert plans["lora"].gradients < plans["full_ft"].gradients / 100
    assert plans["qlora"].weights < plans["lora"].weights / 3  # NF4 linears: ~0.52 B instead of 4 B
    assert plans["adamw_8bit"].optimizer_state < plans["full_ft"].optimizer_state / 2
    assert plans["qlora"].total < plans["lora"].total < plans["adamw_8bit"].total < plans["full_ft"].total


def test_gradient_checkpointing_keeps_only_layer_inputs():
    config = _bert_config("bert-base-uncased")
    plain = plan_memory(config, Setup(shape=FULL_FT, bf16=True))
    checkpointed = plan_memory(config, Setup(shape=FULL_FT, bf16=True, gradient_checkpointing=True))
    assert checkpointed.activations < plain.activations / 3


def test_largest_batch_is_the_edge_of_the_budget():
    config = _bert_config("bert-base-uncased")
    setup = Setup(shape=FULL_FT, bf16=True)
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
    recipes = list(RECIPE_SPECS)  # every script in recipes/
    assert set(recipes) >= {"full_ft", "adamw_8bit", "lora", "qlora"}
    table_rows = [line for line in output.splitlines() if line.split()[1:2] and line.split()[1] in recipes]
    assert len(table_rows) == 2 * len(recipes)
    assert "weights" in output and "optimizer" in output and "activations" in output and "CUDA ctx" in output
    family = output.split("Largest BERT-family configuration")[1]
    assert all(f"  {recipe} " in family for recipe in recipes)


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
    assert "a model of the catalogue" in capsys.readouterr().err


def test_all_linear_adapters_count_every_linear_layer():
    """12 layers x (Q, K, V, attention output: 4 x (768 x 8 + 8 x 768) + FFN in and out: 2 x (768 x 8 +
    8 x 3072)) + the pooler's adapter 768 x 8 + 8 x 768 + the head 768 x 2 + 2 = 1,340,930."""
    all_linear = TrainingShape(adapters=LoraShape(target_modules="all-linear"))
    assert count_parameters_on_meta(_bert_config("bert-base-uncased"), all_linear).trainable == 1_340_930
    # The attention projections the adapters wrap, read off the model: all three, or those named.
    for targets, adapted in (
        ("all-linear", {"query", "key", "value"}),
        (("query", "value"), {"query", "value"}),
    ):
        encoder = Encoder.from_config(_bert_config("bert-base-uncased"), LoraShape(target_modules=targets))
        assert encoder.adapted_projections == adapted


def test_the_label_names_a_plan_and_changes_none_of_its_numbers():
    from recipes_workbench.planner.report import format_plan

    config = _bert_config("bert-base-uncased")
    named, unnamed = (
        plan_memory(config, Setup(shape=QLORA, label="qlora"), model_name="bert-base-uncased"),
        plan_memory(config, Setup(shape=QLORA), model_name="bert-base-uncased"),
    )
    assert named.breakdown_gib() == unnamed.breakdown_gib()
    assert named.activation_terms == unnamed.activation_terms
    assert format_plan(named, 8, 24).startswith("bert-base-uncased, qlora: ")
    # Without a label, the report says what the shape trains.
    assert format_plan(unnamed, 8, 24).startswith("bert-base-uncased, LoRA r=8 on query, value, 4-bit base: ")


def test_plan_models_plans_every_row_it_can_and_says_why_not_for_the_others(tmp_path):
    from recipes_lib.errors import ConfigError
    from recipes_workbench.planner import plan_models

    shapes = {"full_ft": FULL_FT, "broken": ConfigError("lora_r is 0; the rank must be a positive integer.")}
    rows = plan_models(["bert-base-uncased", str(tmp_path / "missing")], shapes, Setup(bf16=True), 24)
    assert [(row.model, row.label) for row in rows] == [
        ("bert-base-uncased", "full_ft"),
        ("bert-base-uncased", "broken"),
        (str(tmp_path / "missing"), "full_ft"),
        (str(tmp_path / "missing"), "broken"),
    ]
    planned, broken, *missing = rows
    assert planned.error is None and planned.plan.params_total == 109_483_778 and planned.max_batch > 0
    assert broken.plan is None and broken.error == "lora_r is 0; the rank must be a positive integer."
    assert all(row.plan is None and row.error.startswith("No config for") for row in missing)


def test_plan_command_prints_every_row_it_can_and_why_the_others_have_none(capsys):
    code = main(
        ["plan", "--model", "bert-base-uncased", "--recipe", "all", "--lora_target_modules", "no_such_layer",
         "--no_family", "--bf16"]
    )  # fmt: skip
    output = capsys.readouterr().out
    assert code == 2  # not every row could be planned
    rows = {line.split()[1]: line for line in output.splitlines() if line.startswith("bert-base-uncased  ")}
    for name in ("full_ft", "adamw_8bit"):  # planned in full: bert-base at batch 32 x 128 fits 24 GiB
        assert rows[name].split()[-2] == "yes" and int(rows[name].split()[-1]) >= 32, rows[name]
    adapted = [name for name, spec in RECIPE_SPECS.items() if spec.default_shape().adapters is not None]
    assert set(adapted) >= {"lora", "qlora"}
    # One line per model and reason, naming the rows it stops.
    (reason,) = [line for line in output.splitlines() if ": not planned: " in line]
    assert reason.startswith(f"bert-base-uncased, {', '.join(adapted)}: not planned: ")
    assert "no_such_layer" in reason and "names no layer" in reason, reason
    assert all("not planned" in rows[name] for name in adapted)


def test_plan_command_refuses_an_unknown_recipe_and_lists_the_recipes(capsys):
    assert main(["plan", "--model", "bert-base-uncased", "--recipe", "lorra", "--no_family"]) == 2
    error = capsys.readouterr().err
    assert "--recipe lorra is not a recipe of recipes/" in error and "full_ft" in error and "qlora" in error


def test_cuda_autocast_keeps_albert_gelu_new_chain_in_fp32():
    """ALBERT's gelu_new, 0.5 x (1 + tanh(c (x + 0.044715 pow(x, 3)))), under bf16 autocast on CUDA, where
    pow is on autocast's fp32 list (CPU autocast's has no pow): pow gets an fp32 copy of x and everything
    after it is fp32. No GPU here, so CUDA's policy for pow is applied by hand (pow's input cast to fp32,
    as autocast would) and the bytes the activation keeps for backward are counted; the planner's CUDA
    term is what they keep beyond the 2 B per tensor its bf16 arithmetic already counts."""
    import torch
    from transformers import AlbertConfig
    from transformers.activations import ACT2FN

    from recipes_workbench.planner.arithmetic import layer_activation_terms
    from recipes_workbench.planner.encoder import Encoder

    class PowAsCudaAutocast(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.pow:
                args = (args[0].float(), *args[1:])
            return func(*args, **(kwargs or {}))

    def kept_bytes_per_element(cuda_policy: bool) -> int:
        kept = {}

        def pack(tensor):
            if tensor.numel() == 64:
                kept[tensor.untyped_storage().data_ptr()] = tensor.element_size()
            return tensor

        x = torch.linspace(-2, 2, 64, requires_grad=True).to(torch.bfloat16)  # a bf16 linear's output
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            if cuda_policy:
                with PowAsCudaAutocast():
                    ACT2FN["gelu_new"](x)
            else:
                ACT2FN["gelu_new"](x)
        return sum(kept.values())

    config = AlbertConfig(
        hidden_size=768, num_attention_heads=12, intermediate_size=3072, hidden_act="gelu_new"
    )
    encoder = Encoder.from_config(config)
    T, F = 32 * 128, 3072
    terms = {
        device: layer_activation_terms(encoder, Setup(shape=FULL_FT, bf16=True, device=device, batch_size=32))
        for device in ("cuda", "cpu")
    }
    extra = sum(terms["cuda"].values()) - sum(terms["cpu"].values())
    masks = sum(v for k, v in terms["cpu"].items() if "mask" in k) - sum(
        v for k, v in terms["cuda"].items() if "mask" in k
    )  # CPU dropout keeps float noise, CUDA a bool mask: a difference of its own
    assert kept_bytes_per_element(cuda_policy=False) == 4 * 2  # the planner's 4 kept tensors at 2 B
    assert extra + masks == T * F * (kept_bytes_per_element(cuda_policy=True) - 4 * 2)  # 14 - 8 B
