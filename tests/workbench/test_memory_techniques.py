"""The memory techniques the largest encoders need on one GPU (issue #23), as the planner models them and
as far as a CPU can check them: paged 8-bit AdamW (adamw_8bit --paged_optimizer), DeepSpeed
ZeRO-Offload (accelerate_configs/deepspeed_zero2_offload.yaml; its config is checked in
test_accelerate_configs.py) and LoRA on an 8-bit LLM.int8 base (qlora --base_bits 8).

On CPU: bitsandbytes 0.50 runs LLM.int8 layers (MatMul8bitFp while training), so the 8-bit base
trains, saves, reloads and merges here and its plan is checked against the measured run; its paged
optimizer falls back to ordinary buffers, so the paged run's measured state is 8-bit AdamW's, as
planned. The paging itself and the offload are GPU-only (arithmetic checked here, not measured).
"""

from __future__ import annotations

import json

import pytest

from recipes_lib.config.recipe_spec import LoraShape, TrainingShape
from recipes_lib.errors import ConfigError
from recipes_lib.units import GIB
from recipes_workbench.cli.main import main
from recipes_workbench.planner import Setup, count_parameters_on_meta, load_config, plan_memory
from recipes_workbench.planner.arithmetic import PAGED_MIN_ELEMENTS, paged_optimizer_bytes
from recipes_workbench.planner.fits import TECHNIQUES, fits_columns, with_techniques
from recipes_workbench.recipes import RECIPES
from tests.helpers.runs import INTO_SECOND_EPOCH, QUICK, run_args, run_in_process

TOLERANCE = 0.10  # as tests/workbench/test_planner.py: each part and the peak within 10% of the measured run
TENSOR_PARTS = ("weights", "gradients", "optimizer_state", "activations")
ADAMW_8BIT = TrainingShape(optimizer_bits=8)
PAGED = TrainingShape(optimizer_bits=8, paged_optimizer=True)
INT8_BASE = TrainingShape(adapters=LoraShape(), quantized_base=True, base_bits=8)
NF4_BASE = TrainingShape(adapters=LoraShape(), quantized_base=True)


@pytest.fixture(scope="module")
def bert_large():
    return load_config("bert-large-uncased")


# --- measured on CPU ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "recipe, options",
    [("adamw_8bit", ["--paged_optimizer", "true"]), ("qlora", ["--base_bits", "8"])],
    ids=["paged_adamw_8bit", "qlora_int8_base"],
)
# MiniLM slow (a real 22.7M-parameter run, ~10 s each on 2 cores): the tiny BERT checks every technique by
# default, and test_planner_families.py checks MiniLM's plan against a measured step by default.
@pytest.mark.parametrize("model_kind", ["tiny", pytest.param("minilm", marks=pytest.mark.slow)])
def test_planner_predicts_the_measured_memory_of_each_technique_that_runs_on_cpu(
    recipe, options, model_kind, tiny_bert, minilm_dir, learnable_data, tmp_path
):
    """A run on CPU into its second epoch, planned for the batch that set the activation peak (as test_planner.py)."""
    from recipes_lib.config.parsing import parse_arguments

    model = tiny_bert if model_kind == "tiny" else minilm_dir
    results = run_in_process(
        recipe, run_args(model, learnable_data, tmp_path / "run", *options, *INTO_SECOND_EPOCH, **QUICK)
    )
    spec = RECIPES[recipe]
    parsed = parse_arguments(spec, ["--output_dir", str(tmp_path / "parsed"), *options])
    shape = spec.shape(parsed.options(spec.options))
    batch = results["memory_peak_batch"]
    setup = Setup(
        shape=shape,
        batch_size=batch["rows"],
        seq_length=batch["length"],
        padded=batch["padded"],
        device="cpu",
    )
    plan = plan_memory(load_config(str(model), num_labels=results["num_labels"]), setup)
    measured = {part: results["memory_breakdown_gib"][part] * GIB for part in TENSOR_PARTS}
    for part in TENSOR_PARTS:
        assert getattr(plan, part) == pytest.approx(measured[part], rel=TOLERANCE), (part, plan, measured)
    assert plan.peak_tensors == pytest.approx(results["tensor_peak_gib"] * GIB, rel=TOLERANCE)
    assert plan.paged_optimizer_state == 0  # bitsandbytes pages CUDA memory only


def test_qlora_on_an_8bit_base_trains_saves_reloads_and_merges(tiny_bert, learnable_data, tmp_path):
    from recipes_lib.modeling.adapters import BASE_QUANTIZATION_FILE, load_trained_model
    from recipes_workbench.tools.predict import predict

    output_dir = tmp_path / "run"
    arguments = run_args(
        tiny_bert, learnable_data, output_dir, "--base_bits", "8", "--merge_adapter", "true", **QUICK
    )
    results = run_in_process("qlora", arguments)
    assert results["quantized_base_bits"] == 8 and results["config"]["base_bits"] == 8
    saved = json.loads((output_dir / BASE_QUANTIZATION_FILE).read_text())
    assert saved["load_in_8bit"] is True and saved["load_in_4bit"] is False
    assert saved["llm_int8_skip_modules"] == ["bert.pooler.dense", "classifier"]  # head stays fp32
    model = load_trained_model(output_dir)
    query = model.base_model.model.bert.encoder.layer[0].attention.self.query.base_layer
    assert type(query).__name__ == "Linear8bitLt" and str(query.weight.dtype) == "torch.int8"
    # The reloaded adapter on its rebuilt int8 base predicts what was evaluated; the merged model
    # (the int8 weights dequantized to fp32, the adapter folded in) to rounding.
    evaluated = [
        json.loads(line) for line in (output_dir / "eval_predictions.jsonl").read_text().splitlines()
    ]
    for directory, tolerance in ((output_dir, 1e-5), (output_dir / "merged", 2e-2)):
        rows = predict(str(directory), str(learnable_data["validation"]))[: len(evaluated)]
        for row, expected in zip(rows, evaluated, strict=True):
            for label, probability in expected["probabilities"].items():
                assert row["probabilities"][label] == pytest.approx(probability, abs=tolerance), directory
    assert "8-bit LLM.int8" in results["merged_model"]


def test_base_bits_other_than_4_or_8_is_refused_naming_the_flag(tiny_bert, learnable_data, tmp_path):
    from recipes_lib.config.parsing import parse_arguments

    with pytest.raises(ConfigError, match="base_bits"):
        parse_arguments(RECIPES["qlora"], ["--output_dir", str(tmp_path), "--base_bits", "2"])


def test_an_8bit_base_that_bitsandbytes_cannot_run_is_refused_in_one_paragraph(monkeypatch):
    import bitsandbytes as bnb
    import torch

    from recipes_lib.errors import ModelError
    from recipes_lib.modeling.adapters import check_base_support

    check_base_support(torch.device("cpu"), 8)  # bitsandbytes 0.50 runs LLM.int8 on CPU

    def broken(*args, **kwargs):
        raise RuntimeError("no int8 kernel for this device")

    monkeypatch.setattr(bnb.nn, "Linear8bitLt", broken)
    with pytest.raises(ModelError, match=r"--base_bits 8 needs .*no int8 kernel.*leave --base_bits at 4"):
        check_base_support(torch.device("cpu"), 8)


# --- the arithmetic (GPU-only effects) ----------------------------------------------------------------


def test_int8_base_weights_are_one_byte_plus_a_row_scale_between_nf4_and_fp32(bert_large):
    parameters = count_parameters_on_meta(bert_large, INT8_BASE)
    int8, nf4 = (plan_memory(bert_large, Setup(shape=s, bf16=True)) for s in (INT8_BASE, NF4_BASE))
    lora = plan_memory(bert_large, Setup(shape=TrainingShape(adapters=LoraShape()), bf16=True))
    quantized = sum(parameters.quantized_linears)
    expected = 4 * (parameters.total - quantized) + quantized + 4 * sum(parameters.quantized_rows)
    assert int8.weights == expected + parameters.buffer_bytes
    assert nf4.weights < int8.weights < lora.weights
    assert int8.gradients == nf4.gradients and int8.optimizer_state == nf4.optimizer_state
    # bitsandbytes keeps every frozen int8 linear's input (a frozen fp32 or NF4 linear keeps none).
    assert int8.activation_terms["encoder layers"] > nf4.activation_terms["encoder layers"]


def test_paged_state_is_the_moments_of_tensors_of_100k_elements_and_leaves_room_for_activations(bert_large):
    parameters = count_parameters_on_meta(bert_large, PAGED)
    eight_bit, paged = (plan_memory(bert_large, Setup(shape=s, bf16=True)) for s in (ADAMW_8BIT, PAGED))
    large = [(n, embedding) for n, embedding in parameters.trainable_tensors if n >= PAGED_MIN_ELEMENTS]
    assert paged.paged_optimizer_state == sum(8 * n if embedding else 2 * n for n, embedding in large)
    assert paged.optimizer_state == eight_bit.optimizer_state  # the same state, in other memory
    # Forward and backward without the paged state, the optimizer step with all of it: the larger.
    resident = paged.optimizer_state - paged.paged_optimizer_state
    forward_backward = paged.weights + resident + max(paged.activations, paged.gradients) + paged.other
    step = paged.weights + paged.gradients + paged.optimizer_state + paged.other
    assert paged.peak_tensors == max(forward_backward, step) < eight_bit.peak_tensors
    # Never below what the optimizer step needs at once: paging is not oversubscription.
    tiny_batch = plan_memory(bert_large, Setup(shape=PAGED, bf16=True, batch_size=1))
    assert tiny_batch.peak_tensors == step - paged.other + tiny_batch.other
    assert paged_optimizer_bytes(parameters, Setup(shape=PAGED, device="cpu")) == 0  # no paging on CPU


def test_offload_moves_the_optimizer_state_and_master_weights_to_the_cpu(bert_large):
    parameters = count_parameters_on_meta(bert_large)
    offloaded = plan_memory(bert_large, Setup(bf16=True, optimizer_offload=True))
    largest = max(n for n, _ in parameters.trainable_tensors)
    assert offloaded.optimizer_state == 0
    assert offloaded.host == 16 * parameters.trainable + 2 * largest  # master + moments + fp32 grads
    assert offloaded.weights == 2 * parameters.total + parameters.buffer_bytes  # bf16 on the GPU
    assert offloaded.gradients == 2 * (2 * largest + 500_000_000)  # DeepSpeed's buffers only
    # DeepSpeed's buffers are there from the start of backward, with every activation.
    assert (
        offloaded.peak_tensors
        == offloaded.weights + offloaded.activations + offloaded.gradients + offloaded.other
    )
    fp32 = plan_memory(bert_large, Setup(optimizer_offload=True))
    assert fp32.weights == 4 * parameters.total + parameters.buffer_bytes


@pytest.mark.parametrize(
    "setup, message",
    [
        (
            Setup(shape=ADAMW_8BIT, optimizer_offload=True),
            "8-bit .*cannot be offloaded.*DeepSpeed's CPU Adam",
        ),
        (Setup(shape=PAGED, optimizer_offload=True), "8-bit .*cannot be offloaded"),
        (Setup(optimizer_offload=True, device="cpu"), "needs a CUDA GPU"),
        (Setup(optimizer_offload=True, num_processes=2, sharding="fsdp_full_shard"), "--sharding zero"),
        (
            Setup(shape=TrainingShape(adapters=LoraShape(), quantized_base=True, base_bits=2)),
            "base_bits is 2",
        ),
    ],
)
def test_combinations_that_cannot_work_are_refused_naming_the_fix(bert_large, setup, message):
    with pytest.raises(ConfigError, match=message):
        plan_memory(bert_large, setup)


def test_plan_command_plans_each_technique_and_refuses_an_impossible_one(capsys):
    base = ["plan", "--model", "bert-base-uncased", "--bf16", "--no_family"]
    assert main([*base, "--recipe", "adamw_8bit", "--paged_optimizer"]) == 0
    out = capsys.readouterr().out
    assert "optimizer state, paged" in out and "is paged (CUDA unified memory)" in out
    assert main([*base, "--recipe", "full_ft", "--optimizer_offload"]) == 0
    out = capsys.readouterr().out
    assert "DeepSpeed ZeRO-Offload" in out and "in CPU memory (ZeRO-Offload)" in out
    assert main([*base, "--recipe", "qlora", "--base_bits", "8"]) == 0
    assert "int8 linears' inputs" in capsys.readouterr().out
    assert main([*base, "--recipe", "adamw_8bit", "--optimizer_offload"]) == 2
    assert "cannot be offloaded" in capsys.readouterr().err


def test_fits_plans_every_technique_beside_its_recipe_in_the_cheapest_order():
    # As plan --fits: distill's student is full_ft's column again, so it is left out (tools/plan.py).
    shapes = {name: spec.default_shape() for name, spec in RECIPES.items() if name != "distill"}
    columns = fits_columns(shapes)
    assert columns == [
        "full_ft", "full_ft+offload", "adamw_8bit", "adamw_8bit+paged", "lora", "qlora+int8", "qlora",
    ]  # fmt: skip
    assert fits_columns(columns) == columns  # an expanded list stays as it is
    expanded = with_techniques(shapes)
    assert expanded["adamw_8bit+paged"][0] == PAGED
    assert expanded["qlora+int8"][0].base_bits == 8
    assert expanded["full_ft+offload"] == (shapes["full_ft"], {"optimizer_offload": True})
    assert set(TECHNIQUES) <= set(expanded)


def test_plan_fits_prints_the_technique_columns(capsys):
    assert main(["plan", "--fits", "--bf16", "--model", "bert-base-uncased", "facebook/xlm-roberta-xl"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("model"))
    assert header.split()[6:13] == [
        "full_ft", "full_ft+offload", "adamw_8bit", "adamw_8bit+paged", "lora", "qlora+int8", "qlora",
    ]  # fmt: skip
    assert (
        "Techniques: full_ft+offload is full_ft under accelerate_configs/deepspeed_zero2_offload.yaml" in out
    )
    xl = next(line for line in out.splitlines() if line.startswith("facebook/xlm-roberta-xl"))
    assert xl.split()[2].startswith("full_ft+offload")  # full fine-tuning of 3.5B fits, with offload
