"""The four recipes side by side: swapping the script, round trips, the 8-bit state, parameter arithmetic.

The swap test runs every recipe through `accelerate launch` with identical arguments on a BERT
large enough for the comparisons to mean something: hidden 256, 2 layers, so its weight matrices
(256 x 256 = 65,536 elements and up) are above bitsandbytes' min_8bit_size of 4,096, and LoRA's
share of the parameters is what it is on real encoders (~1.4% here, 0.27% on bert-base).
"""

from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path
from unittest import mock

import pytest
import torch
from safetensors.torch import load_file

from recipes_lib.modeling.adamw_8bit import create_adamw_8bit, decay_parameter_groups
from recipes_lib.modeling.optimizers import MIN_8BIT_SIZE
from tests.helpers.models import build_tiny_bert
from tests.helpers.repo import RECIPES, REPO_ROOT, load_recipe
from tests.helpers.runs import run_args, run_recipe_process

CPU_RECIPES = RECIPES  # every recipe runs on CPU
# Identical for every recipe. 256 examples / 32 = 8 steps per epoch, 48 steps in all.
SWAP_ARGS = ("--per_device_train_batch_size", "32", "--num_train_epochs", "6", "--eval_strategy", "no")
PROBE_TEXTS = ["the red cat sat", "a blue dog ran today", "it was very yellow", "green chair under the table"]


@pytest.fixture(scope="module")
def bert256(tmp_path_factory) -> Path:
    return build_tiny_bert(
        tmp_path_factory.mktemp("bert256"), hidden_size=256, layers=2, intermediate_size=512
    )


def probe_logits(model, tokenizer) -> torch.Tensor:
    batch = tokenizer(PROBE_TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model.eval()(**batch).logits.float()


# --- swapping recipes ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def swap_runs(bert256, learnable_data, tmp_path_factory, one_thread) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("swap")
    results = {}
    for recipe in CPU_RECIPES:  # full_ft first: distill learns from its run
        teacher = ["--teacher", str(root / "full_ft")] if recipe == "distill" else []
        completed = run_recipe_process(
            recipe, [*run_args(bert256, learnable_data, root / recipe, *SWAP_ARGS), *teacher]
        )
        assert completed.returncode == 0, recipe + completed.stdout[-3000:] + completed.stderr[-3000:]
        results[recipe] = json.loads((root / recipe / "results.json").read_text())
    return results


def test_every_recipe_learns_the_task_with_the_same_command_line(swap_runs):
    for recipe, results in swap_runs.items():
        assert results["recipe"] == recipe
        assert results["eval_accuracy"] >= 0.9, (recipe, results["eval_accuracy"])
        assert results["config"]["learning_rate"] == pytest.approx(2e-3)  # the command line wins


def test_lora_trains_under_two_percent_of_the_parameters_and_qlora_counts_its_packed_weights(swap_runs):
    full, lora, qlora = swap_runs["full_ft"], swap_runs["lora"], swap_runs["qlora"]
    assert full["params_trainable"] == full["params_total"]
    # Adapters: 2 layers x (query + value) x (256 x 8 + 8 x 256); head: 256 x 2 + 2.
    expected_trainable = 2 * 2 * (256 * 8 + 8 * 256) + (256 * 2 + 2)
    assert lora["params_trainable"] == qlora["params_trainable"] == expected_trainable
    assert lora["params_trainable"] / lora["params_total"] < 0.02
    # peft adds the adapters and keeps the original head next to the trained copy.
    assert lora["params_total"] == full["params_total"] + expected_trainable
    # The 4-bit weights are stored two per byte; counted from their original shapes, nothing is lost.
    assert qlora["params_total"] == lora["params_total"]


def test_8bit_optimizer_state_is_under_0_3_of_adamw_for_the_parameters_bitsandbytes_quantizes(swap_runs):
    full, eight = swap_runs["full_ft"], swap_runs["adamw_8bit"]
    ratio = (
        eight["optimizer_state_bytes_by_parameter_kind"]["large"]
        / full["optimizer_state_bytes_by_parameter_kind"]["large"]
    )
    # Expected: (2 x 1 B + 2 x 4 B / 256) / (2 x 4 B) = 0.254.
    assert ratio <= 0.3, ratio
    assert (
        eight["optimizer_state_bytes_by_dtype"]["uint8"] > 0
        and "uint8" not in full["optimizer_state_bytes_by_dtype"]
    )
    # Embeddings keep 32-bit state by default: the same bytes as torch's AdamW, less its step counters.
    embedding_full = full["optimizer_state_bytes_by_parameter_kind"]["embedding"]
    assert (
        0.99 * embedding_full
        < eight["optimizer_state_bytes_by_parameter_kind"]["embedding"]
        <= embedding_full
    )
    assert eight["optimizer_state_bytes"] < full["optimizer_state_bytes"]
    # LoRA's state covers only its trainable parameters: 2 x 4 B each, plus a step counter per tensor.
    lora = swap_runs["lora"]
    assert 8 * lora["params_trainable"] <= lora["optimizer_state_bytes"] < 8 * lora["params_trainable"] + 4096


def test_optimizer_state_figures_add_up_in_every_results_file(swap_runs):
    for recipe, results in swap_runs.items():
        total = results["optimizer_state_bytes"]
        assert total > 0, recipe
        assert sum(results["optimizer_state_bytes_by_dtype"].values()) == total
        assert sum(results["optimizer_state_bytes_by_parameter_kind"].values()) == total


# --- LoRA: save -> load, merge ----------------------------------------------------------------------


# The models --merge_adapter built, the models the record scored as the merged one, the run's
# attributes as it writes its results, and the classes whose forward pre-hooks are left on the
# trained model then (lora_run fills all four).
MERGED, SCORED_AS_MERGED, RUN_ATTRIBUTES, HOOKS_LEFT = [], [], [], []


@pytest.fixture(scope="module")
def lora_run(bert256, learnable_data, tmp_path_factory, one_thread) -> Path:
    from recipes_lib.evaluation import inference
    from recipes_lib.modeling import adapters
    from recipes_lib.run import RecipeRun, run_main

    output_dir = tmp_path_factory.mktemp("lora-merge")
    args = run_args(bert256, learnable_data, output_dir, "--max_steps", "8", "--eval_strategy", "no")
    merge, score, write_results = adapters.merged_model, inference.batch_logits, RecipeRun.write_results

    def merging(*args, **kwargs):
        merged = merge(*args, **kwargs)
        MERGED.append(merged.model)
        return merged

    def scoring(model, *args, **kwargs):
        SCORED_AS_MERGED.append(model)
        return score(model, *args, **kwargs)

    def writing(run, trainer, *args):
        RUN_ATTRIBUTES.extend(vars(run))
        hooks = (hook for module in trainer.model.modules() for hook in module._forward_pre_hooks.values())
        HOOKS_LEFT.extend(type(getattr(hook, "__self__", None)).__name__ for hook in hooks)
        return write_results(run, trainer, *args)

    with (
        mock.patch.object(adapters, "merged_model", merging),
        mock.patch.object(inference, "batch_logits", scoring),
        mock.patch.object(RecipeRun, "write_results", writing),
    ):
        run_main(load_recipe("lora").main, [*args, "--merge_adapter", "true"])
    return output_dir


def test_the_record_scores_the_merged_model_in_memory(lora_run):
    """The model --merge_adapter built is the one scored: not the adapter model, not a reload from disk."""
    (merged,), (scored,) = MERGED, SCORED_AS_MERGED
    assert scored is merged and not hasattr(scored, "peft_config")
    assert "merged_eval_accuracy" in json.loads((lora_run / "results.json").read_text())


def test_a_run_ends_holding_at_most_ten_attributes(lora_run):
    """What a run is (arguments, spec, output and resume, tokenizer, data, config, tracking), counted on
    the object itself at its end (tests/test_code_shape.py counts the assignments in its class)."""
    assert 0 < len(RUN_ATTRIBUTES) <= 10, sorted(RUN_ATTRIBUTES)


def test_the_runs_callbacks_leave_no_hook_on_the_model_once_training_ends(lora_run):
    """The token counter and the precision probe watch training forwards only; the merged model and
    any later use of the model run without them (the memory phases keep theirs)."""
    assert {"TokenCounter", "PrecisionProbe"}.isdisjoint(HOOKS_LEFT), HOOKS_LEFT


def test_lora_output_dir_holds_the_adapter_and_the_head_and_reloads_to_the_same_logits(lora_run, bert256):
    from peft import get_peft_model_state_dict
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from recipes_lib.modeling.adapters import load_trained_model

    assert (lora_run / "adapter_model.safetensors").is_file() and (lora_run / "tokenizer.json").is_file()
    assert not (lora_run / "model.safetensors").exists()
    saved = load_file(lora_run / "adapter_model.safetensors")
    head = [key for key in saved if "classifier" in key]
    assert head, sorted(saved)  # the trained head travels with the adapter
    base_head = AutoModelForSequenceClassification.from_pretrained(bert256).classifier.weight
    saved_head = saved[next(key for key in head if key.endswith("classifier.weight"))]
    assert not torch.equal(saved_head, base_head)

    tokenizer = AutoTokenizer.from_pretrained(lora_run)
    first, second = load_trained_model(lora_run), load_trained_model(lora_run)
    torch.testing.assert_close(
        probe_logits(first, tokenizer), probe_logits(second, tokenizer), rtol=0, atol=0
    )
    # What was loaded is what was saved, adapter and head.
    reloaded = get_peft_model_state_dict(first)
    assert reloaded.keys() == saved.keys()
    for key, value in saved.items():
        assert torch.equal(reloaded[key], value), key


def test_merged_model_is_a_plain_model_with_the_adapter_models_logits(lora_run):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from recipes_lib.modeling.adapters import load_trained_model

    merged_dir = lora_run / "merged"
    assert (merged_dir / "model.safetensors").is_file() and not (merged_dir / "adapter_config.json").exists()
    merged = AutoModelForSequenceClassification.from_pretrained(merged_dir)
    tokenizer = AutoTokenizer.from_pretrained(merged_dir)
    assert merged.config.id2label == {0: "cool", 1: "warm"}
    adapter_logits = probe_logits(load_trained_model(lora_run), tokenizer)
    torch.testing.assert_close(probe_logits(merged, tokenizer), adapter_logits, rtol=0, atol=1e-4)


# --- checkpoint and resume --------------------------------------------------------------------------


@pytest.mark.parametrize("recipe", ["full_ft", "adamw_8bit", "lora"])
def test_a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(
    recipe, bert256, learnable_data, tmp_path, one_thread
):
    from recipes_lib.run import run_main

    # Dropout off everywhere (the tiny BERT has none; LoRA's is an option) so runs are repeatable.
    extra = ["--lora_dropout", "0"] if recipe == "lora" else []
    common = ["--max_steps", "6", "--save_strategy", "steps", "--save_steps", "3", "--eval_strategy", "no",
              "--save_total_limit", "2"]  # fmt: skip
    uninterrupted, resumed = tmp_path / "uninterrupted", tmp_path / "resumed"
    run_main(load_recipe(recipe).main, run_args(bert256, learnable_data, uninterrupted, *common, *extra))

    # An interrupted run: only the checkpoint at step 3 survived. Resume it in its own output_dir.
    shutil.copytree(uninterrupted / "checkpoint-3", resumed / "checkpoint-3")
    resume = ["--resume_from_checkpoint", "last"]
    run_main(load_recipe(recipe).main, run_args(bert256, learnable_data, resumed, *common, *extra, *resume))

    weights_file = "adapter_model.safetensors" if recipe == "lora" else "model.safetensors"
    expected, actual = load_file(uninterrupted / weights_file), load_file(resumed / weights_file)
    assert expected.keys() == actual.keys()
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], rtol=0, atol=0, msg=key)
    results = json.loads((resumed / "results.json").read_text())
    assert results["train_steps"] == 6

    # The optimizer state written at step 6 is the same too; for 8-bit AdamW it is still uint8.
    expected_state = torch.load(uninterrupted / "checkpoint-6" / "optimizer.pt", weights_only=False)["state"]
    actual_state = torch.load(resumed / "checkpoint-6" / "optimizer.pt", weights_only=False)["state"]
    flat_expected, flat_actual = _flatten(expected_state), _flatten(actual_state)
    assert flat_expected.keys() == flat_actual.keys()
    for key, value in flat_expected.items():
        assert torch.equal(flat_actual[key], value), key
    dtypes = {value.dtype for key, value in flat_expected.items() if key.endswith(("state1", "state2"))}
    assert dtypes == ({torch.uint8, torch.float32} if recipe == "adamw_8bit" else set())


def _flatten(state: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    flat = {}
    for key, value in state.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}."))
        elif isinstance(value, torch.Tensor):
            flat[name] = value
    return flat


# --- 8-bit AdamW in detail --------------------------------------------------------------------------


def _small_bert(hidden: int = 64):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=100, hidden_size=hidden, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=2 * hidden, max_position_embeddings=64, num_labels=2,
    )  # fmt: skip
    return BertForSequenceClassification(config)


def _one_step(model, optimizer):
    inputs = torch.randint(0, 100, (4, 16))
    model(input_ids=inputs, labels=torch.tensor([0, 1, 0, 1])).loss.backward()
    optimizer.step()


@pytest.mark.parametrize("embedding_bits", [32, 8])
def test_every_large_parameter_gets_uint8_adam_states_and_embeddings_follow_the_switch(
    embedding_bits, tmp_path
):
    from transformers import TrainingArguments

    model = _small_bert()
    training = TrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, learning_rate=1e-3, weight_decay=0.01
    )
    optimizer = create_adamw_8bit(model, training, embedding_optimizer_bits=embedding_bits)
    _one_step(model, optimizer)

    embedding_weights = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    large = 0
    for name, parameter in model.named_parameters():
        state = optimizer.state[parameter]
        kept_32bit = parameter.numel() < MIN_8BIT_SIZE or (
            embedding_bits == 32 and id(parameter) in embedding_weights
        )
        expected = torch.float32 if kept_32bit else torch.uint8
        assert state["state1"].dtype == state["state2"].dtype == expected, name
        large += parameter.numel() >= MIN_8BIT_SIZE and id(parameter) not in embedding_weights
    assert large >= 4  # the test model does exercise the 8-bit path (64 x 64 and larger matrices)
    assert optimizer.state[model.bert.embeddings.word_embeddings.weight]["state1"].dtype == (
        torch.float32 if embedding_bits == 32 else torch.uint8
    )


def test_8bit_optimizer_uses_the_trainers_weight_decay_groups(tmp_path):
    from transformers import Trainer, TrainingArguments

    model = _small_bert()
    training = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, weight_decay=0.01, report_to="none")
    stock = Trainer(model=model, args=training).create_optimizer()
    ours = create_adamw_8bit(model, training)
    as_ids = lambda groups: [({id(p) for p in g["params"]}, g["weight_decay"]) for g in groups]  # noqa: E731
    assert as_ids(ours.param_groups) == as_ids(stock.param_groups)
    no_decay = {id(p) for p in decay_parameter_groups(model, 0.01)[1]["params"]}
    assert id(model.bert.embeddings.LayerNorm.weight) in no_decay and id(model.classifier.bias) in no_decay
    assert id(model.classifier.weight) not in no_decay


def test_min_8bit_size_matches_the_installed_bitsandbytes():
    import bitsandbytes as bnb

    default = inspect.signature(bnb.optim.AdamW8bit.__init__).parameters["min_8bit_size"].default
    assert default == MIN_8BIT_SIZE


def test_optimizer_state_summary_counts_each_tensor_once_through_accelerates_wrapper(tmp_path):
    from accelerate.optimizer import AcceleratedOptimizer
    from transformers import TrainingArguments

    from recipes_lib.modeling.optimizers import optimizer_state_summary

    model = _small_bert()
    torch_adamw = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _one_step(model, torch_adamw)
    summary = optimizer_state_summary(AcceleratedOptimizer(torch_adamw, device_placement=False), model)
    parameters = list(model.parameters())
    # exp_avg + exp_avg_sq in fp32 per element, and one fp32 step counter per tensor.
    assert summary["optimizer_state_bytes"] == 8 * sum(p.numel() for p in parameters) + 4 * len(parameters)

    training = TrainingArguments(output_dir=str(tmp_path), use_cpu=True)
    eight_bit = create_adamw_8bit(model, training, embedding_optimizer_bits=8)
    _one_step(model, eight_bit)
    by_dtype = optimizer_state_summary(eight_bit, model)["optimizer_state_bytes_by_dtype"]
    large = sum(p.numel() for p in parameters if p.numel() >= MIN_8BIT_SIZE)
    assert by_dtype["uint8"] == 2 * large
    # fp32: the small tensors' two moments, two absmax per 256-element block, the two shared 256-entry maps.
    small = sum(p.numel() for p in parameters if p.numel() < MIN_8BIT_SIZE)
    blocks = sum(-(-p.numel() // 256) for p in parameters if p.numel() >= MIN_8BIT_SIZE)
    assert by_dtype["float32"] == 4 * (2 * small + 2 * blocks + 2 * 256)


# --- parameter arithmetic without weights -----------------------------------------------------------

BERT_BASE = {}
BERT_LARGE = {
    "hidden_size": 1024,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
}


@pytest.mark.parametrize(
    ("shape", "total", "lora_trainable"),
    [(BERT_BASE, 109_483_778, 296_450), (BERT_LARGE, 335_143_938, 788_482)],
    ids=["bert-base", "bert-large"],
)
def test_parameter_counts_of_bert_base_and_large_from_their_configs(shape, total, lora_trainable):
    from transformers import BertConfig

    from recipes_lib.config.recipe_spec import TrainingShape
    from recipes_lib.modeling.adapters import LoraArguments
    from recipes_workbench.planner import count_parameters_on_meta

    config = BertConfig(num_labels=2, **shape)
    full = count_parameters_on_meta(config)
    assert (full.total, full.trainable) == (total, total)
    lora = count_parameters_on_meta(config, TrainingShape(adapters=LoraArguments().shape()))
    lora_total, trainable = lora.total, lora.trainable
    assert trainable == lora_trainable
    assert lora_total == total + lora_trainable  # adapters + the trained copy of the head


# --- arguments ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("recipe", CPU_RECIPES)
def test_the_demo_config_works_for_every_recipe_and_gives_each_its_own_output_dir(recipe, monkeypatch):
    from recipes_lib.config.parsing import parse_arguments

    monkeypatch.chdir(REPO_ROOT)
    arguments = parse_arguments(load_recipe(recipe).SPEC, ["--config", "recipes/configs/demo.yaml"])
    assert arguments.training.output_dir == f"outputs/demo/{recipe}"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--lora_r", "0"], "lora_r is 0"),
        (["--lora_dropout", "1.5"], "lora_dropout is 1.5"),
        (["--lora_target_modules", ""], "lora_target_modules is empty"),
    ],
)
def test_bad_lora_arguments_fail_before_anything_loads(argv, expected):
    from recipes_lib.config.parsing import parse_arguments
    from recipes_lib.errors import ConfigError

    with pytest.raises(ConfigError, match=expected):
        parse_arguments(load_recipe("lora").SPEC, argv)


def test_lora_defaults_and_target_module_forms():
    from recipes_lib.modeling.adapters import LoraArguments, lora_config, resolve_lora_targets

    assert LoraArguments().shape().target_modules == "auto"  # the family's query and value projections
    config = lora_config(resolve_lora_targets(LoraArguments().shape(), "bert"))
    assert (config.r, config.lora_alpha, config.lora_dropout) == (8, 16, 0.1)
    assert set(config.target_modules) == {"query", "value"}
    assert resolve_lora_targets(LoraArguments().shape(), "deberta-v2").target_modules == (
        "query_proj",
        "value_proj",
    )
    assert (
        lora_config(LoraArguments(lora_target_modules=["all-linear"]).shape()).target_modules == "all-linear"
    )
    assert set(lora_config(LoraArguments(lora_target_modules=["query,key", "value"]).shape()).target_modules) == {
        "query", "key", "value",
    }  # fmt: skip
    assert lora_config(LoraArguments(lora_train_pooler=True).shape()).modules_to_save[0] == "pooler"
    assert load_recipe("lora").SPEC.training_defaults["learning_rate"] > 10 * 2e-5


def test_unknown_lora_target_names_the_layers_that_exist():
    from recipes_lib.errors import ConfigError
    from recipes_lib.modeling.adapters import LoraArguments, add_lora

    with pytest.raises(ConfigError, match="Its linear layers are called: .*query"):
        add_lora(_small_bert(), LoraArguments(lora_target_modules=["q_proj"]))


def test_all_linear_and_pooler_options_train_what_they_say():
    from recipes_lib.modeling.adapters import LoraArguments, add_lora

    model = add_lora(_small_bert(), LoraArguments(lora_target_modules=["all-linear"], lora_train_pooler=True))
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    for layer in ("query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"):
        assert any(f"{layer}.lora_A" in name for name in trainable), layer
    assert any("pooler" in name and "modules_to_save" in name for name in trainable)
    assert not any("classifier.lora" in name for name in trainable)  # the head trains in full, no adapter


def test_qlora_base_is_nf4_with_double_quantization_and_the_head_stays_full_precision(bert256):
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from recipes_lib.config.arguments import ModelArguments
    from recipes_lib.modeling.adapters import (
        LoraArguments,
        add_lora,
        nf4_quantization_config,
        prepare_4bit_model,
    )
    from recipes_lib.modeling.loading import count_parameters, load_model

    config = AutoConfig.from_pretrained(bert256, num_labels=2)
    lora = LoraArguments(lora_train_pooler=True)
    quantization = nf4_quantization_config(config, "fp32")  # the run's precision: fp32 on CPU
    base = load_model(
        ModelArguments(str(bert256)), config, quantization_config=quantization, device_map={"": "cpu"}
    )
    model = add_lora(prepare_4bit_model(base), lora)
    query = model.base_model.model.bert.encoder.layer[0].attention.self.query
    weight = query.base_layer.weight
    assert type(weight).__name__ == "Params4bit" and weight.dtype == torch.uint8
    assert weight.quant_state.quant_type == "nf4" and weight.quant_state.nested  # double quantization
    assert query.base_layer.compute_dtype == torch.float32  # the run's precision: fp32 on CPU
    assert weight.numel() * 2 == 256 * 256  # two 4-bit values per byte
    for name in ("classifier", "pooler"):
        trained = [p for n, p in model.named_parameters() if name in n and p.requires_grad]
        assert trained and all(p.dtype == torch.float32 for p in trained), name
    total, trainable = count_parameters(model)
    full_precision = add_lora(
        AutoModelForSequenceClassification.from_pretrained(bert256, config=config), lora
    )
    assert (total, trainable) == count_parameters(full_precision)
