"""The memory planner under several processes: ZeRO stages and FSDP strategies divide what they shard."""

from __future__ import annotations

import dataclasses
import math

import pytest

from recipes_lib.config.recipe_spec import LoraShape, TrainingShape
from recipes_workbench.cli.main import main
from recipes_workbench.planner import SHARDED_PARTS, Setup, load_config, plan_memory
from recipes_workbench.planner.catalogue import catalogue_entry

# bert-base: 12 layers of 4 x (768 x 768 + 768) + 2 x 768 x 3072 + 3072 + 768 + 2 x 2 x 768 parameters.
BERT_BASE_LAYER_PARAMETERS = 7_087_872
PARTS = ("weights", "gradients", "optimizer_state")


@pytest.fixture(scope="module")
def bert_base():
    from transformers import BertConfig

    values = catalogue_entry("bert-base-uncased").values
    return BertConfig(**{key: value for key, value in values.items() if key != "model_type"}, num_labels=2)


@pytest.mark.parametrize("sharding", list(SHARDED_PARTS))
@pytest.mark.parametrize(
    "shape", [TrainingShape(), TrainingShape(adapters=LoraShape())], ids=["full_ft", "lora"]
)
def test_each_process_holds_one_nth_of_what_its_strategy_shards(bert_base, sharding, shape):
    alone = plan_memory(bert_base, Setup(shape=shape))
    four = plan_memory(bert_base, Setup(shape=shape, num_processes=4, sharding=sharding))
    for part in PARTS:
        whole = getattr(alone, part)
        if part not in SHARDED_PARTS[sharding]:
            assert getattr(four, part) == whole, part
        elif part == "weights":  # plus the one layer being computed, gathered in full (fp32 here)
            assert four.weights == math.ceil(whole / 4) + 4 * BERT_BASE_LAYER_PARAMETERS
        else:
            assert getattr(four, part) == math.ceil(whole / 4), part
    # Every process computes on its own batch: activations and the input do not divide.
    assert (four.activations, four.other) == (alone.activations, alone.other)


def test_what_each_strategy_shards(bert_base):
    assert SHARDED_PARTS["none"] == ()
    assert set(SHARDED_PARTS["zero1"]) == {"optimizer_state"}
    assert (
        set(SHARDED_PARTS["zero2"])
        == set(SHARDED_PARTS["fsdp_shard_grad_op"])
        == {"optimizer_state", "gradients"}
    )
    assert set(SHARDED_PARTS["zero3"]) == set(SHARDED_PARTS["fsdp_full_shard"]) == set(PARTS)
    # Full fine-tuning of bert-base on 8 GPUs: no stage adds memory; ZeRO-1 and ZeRO-3 take some off.
    # (ZeRO-2's smaller gradients lower the peak only where they, not the activations, set it.)
    none, zero1, zero2, zero3 = (
        plan_memory(bert_base, Setup(num_processes=8, sharding=name)).total
        for name in ("none", "zero1", "zero2", "zero3")
    )
    assert none > zero1 >= zero2 > zero3


def test_bf16_gathers_the_computed_layer_in_two_bytes_per_weight(bert_base):
    setup = Setup(bf16=True, num_processes=8, sharding="fsdp_full_shard")
    whole = plan_memory(bert_base, dataclasses.replace(setup, num_processes=1)).weights
    assert plan_memory(bert_base, setup).weights == math.ceil(whole / 8) + 2 * BERT_BASE_LAYER_PARAMETERS


def test_one_process_shards_nothing(bert_base):
    one, plain = (
        plan_memory(bert_base, Setup(num_processes=1, sharding="zero3")),
        plan_memory(bert_base, Setup()),
    )
    assert one.breakdown_gib() == plain.breakdown_gib()


def test_unknown_sharding_is_refused(bert_base):
    with pytest.raises(ValueError, match="sharding must be one of none, zero1"):
        plan_memory(bert_base, Setup(num_processes=2, sharding="zero4"))


def test_plan_command_says_what_is_sharded_in_its_breakdown(tiny_bert, capsys):
    argv = ["plan", "--model", str(tiny_bert), "--recipe", "full_ft", "--no_family", "--num_processes", "4"]
    assert main([*argv, "--sharding", "zero2"]) == 0
    output = capsys.readouterr().out
    assert "4 processes, zero2: each holds 1/4 of the optimizer state and gradients" in output
    assert "gradients (1/4)" in output and "optimizer state (1/4)" in output
    assert "weights (1/4" not in output  # ZeRO-2 keeps the full weights on every process

    assert main([*argv, "--sharding", "fsdp_full_shard"]) == 0
    assert "weights (1/4 + 1 layer)" in capsys.readouterr().out


def test_plan_command_refuses_zero_processes(tiny_bert, capsys):
    assert main(["plan", "--model", str(tiny_bert), "--num_processes", "0", "--no_family"]) == 2
    assert "--num_processes is 0" in capsys.readouterr().err


def test_plan_for_a_tiny_model_matches_its_config(tiny_bert):
    """load_config reads the tiny test model's directory: the planner sees its real sizes."""
    import math

    from transformers import AutoModelForSequenceClassification

    config = load_config(str(tiny_bert))
    model = AutoModelForSequenceClassification.from_pretrained(tiny_bert)  # the real model, fp32
    weight_bytes = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    layer_bytes = sum(p.numel() * p.element_size() for p in model.base_model.encoder.layer[0].parameters())
    alone = plan_memory(config, Setup(shape=TrainingShape()))
    assert alone.params_total == sum(p.numel() for p in model.parameters())
    assert alone.weights == weight_bytes
    # ZeRO-3 on 2 processes: half the weights each, plus the one layer a process gathers to compute.
    sharded = plan_memory(config, Setup(shape=TrainingShape(), num_processes=2, sharding="zero3"))
    assert sharded.params_total == alone.params_total
    assert sharded.weights == math.ceil(weight_bytes / 2) + layer_bytes
