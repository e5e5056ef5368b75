"""Every accelerate config is read by accelerate's own code, as `accelerate launch` reads it.

No GPU and no DeepSpeed needed: `accelerate launch` runs for real up to the point where it would
start the processes (the launcher functions are replaced by ones that record what they were given),
and the FSDP / DeepSpeed plugins are then built from the environment the launcher would pass on.
"""

from __future__ import annotations

import configparser
import os
from unittest import mock

import pytest
import yaml

from recipes_lib.config.family_registry import FAMILIES as FAMILY_ENTRIES
from tests.helpers.repo import REPO_ROOT

CONFIG_DIR = REPO_ROOT / "accelerate_configs"
CONFIGS = sorted(path.name for path in CONFIG_DIR.glob("*.yaml"))
REQUIRED = {"cpu.yaml", "single_gpu.yaml", "multi_cpu.yaml", "multi_gpu.yaml", "fsdp.yaml"}
REQUIRED |= {
    "deepspeed_zero2.yaml",
    "deepspeed_zero3.yaml",
    "deepspeed_zero2_offload.yaml",
    "multi_node.yaml",
}


def launch_without_starting(config: str, *options: str) -> dict:
    """Run `accelerate launch --config_file CONFIG OPTIONS script.py`; return the launcher and its env."""
    import accelerate.commands.launch as launch
    from accelerate.utils.launch import (
        prepare_deepspeed_cmd_env,
        prepare_multi_gpu_env,
        prepare_simple_launcher_cmd_env,
    )

    captured = {}

    def recorder(name, prepare):
        def record(args):
            environment = prepare(args)
            captured.update(
                launcher=name, args=args, env=environment[1] if name != "torchrun" else environment
            )

        return record

    argv = ["--config_file", str(CONFIG_DIR / config), *options, "script.py"]
    with (
        mock.patch.object(launch, "simple_launcher", recorder("simple", prepare_simple_launcher_cmd_env)),
        mock.patch.object(launch, "multi_gpu_launcher", recorder("torchrun", prepare_multi_gpu_env)),
        mock.patch.object(launch, "deepspeed_launcher", recorder("deepspeed", prepare_deepspeed_cmd_env)),
    ):
        launch.launch_command(launch.launch_command_parser().parse_args(argv))
    return captured


def accelerate_variables(environment: dict) -> dict:
    return {k: v for k, v in environment.items() if k.startswith(("ACCELERATE_", "FSDP_"))}


def test_every_config_the_readme_and_issue_name_is_shipped():
    assert set(CONFIGS) >= REQUIRED


@pytest.mark.parametrize("config", CONFIGS)
def test_every_config_starts_with_when_to_use_it_and_how_to_launch_it(config):
    text = (CONFIG_DIR / config).read_text()
    header = text[: text.index("\n" + next(line for line in text.splitlines() if not line.startswith("#")))]
    assert header.startswith("# ") and len(header.splitlines()) >= 2
    assert f"accelerate launch -q --config_file accelerate_configs/{config}" in header
    yaml.safe_load(text)


@pytest.mark.parametrize("config", CONFIGS)
def test_every_config_loads_with_accelerates_config_class(config):
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file

    loaded = load_config_from_file(str(CONFIG_DIR / config))
    assert isinstance(loaded, ClusterConfig)
    assert loaded.num_processes >= 1 and loaded.num_processes % loaded.num_machines == 0


@pytest.mark.parametrize(
    "config, launcher, processes",
    [
        ("cpu.yaml", "simple", 1),
        ("single_gpu.yaml", "simple", 1),
        ("multi_cpu.yaml", "torchrun", 2),
        ("multi_gpu.yaml", "torchrun", 2),
        ("fsdp.yaml", "torchrun", 2),
        ("deepspeed_zero2.yaml", "deepspeed", 2),
        ("deepspeed_zero3.yaml", "deepspeed", 2),
        ("deepspeed_zero2_offload.yaml", "deepspeed", 1),
    ],
)
def test_accelerate_launch_picks_the_launcher_and_process_count_the_config_says(config, launcher, processes):
    launched = launch_without_starting(config, "--main_process_port", "0")
    assert launched["launcher"] == launcher
    assert launched["args"].num_processes == processes
    sharding = accelerate_variables(launched["env"])
    assert ("ACCELERATE_USE_FSDP" in sharding) == (config == "fsdp.yaml")
    assert ("ACCELERATE_USE_DEEPSPEED" in sharding) == config.startswith("deepspeed")


@pytest.mark.parametrize("config, section", [("fsdp.yaml", "fsdp_config")] + [
    (name, "deepspeed_config")
    for name in ("deepspeed_zero2.yaml", "deepspeed_zero3.yaml", "deepspeed_zero2_offload.yaml")
])  # fmt: skip
def test_every_sharding_key_is_an_option_accelerate_launch_knows(config, section):
    """accelerate copies unknown keys onto its arguments and ignores them: a typo would silently fall back."""
    import accelerate.commands.launch as launch

    options = {action.dest for action in launch.launch_command_parser()._actions}
    keys = yaml.safe_load((CONFIG_DIR / config).read_text())[section]
    assert keys and set(keys) <= options, set(keys) - options


FAMILIES = tuple(family.model_type for family in FAMILY_ENTRIES)  # every family the project supports


@pytest.mark.parametrize("model_type", FAMILIES)
def test_fsdp_config_gives_full_shard_fsdp2_wrapping_each_layer_of_every_family(model_type):
    from accelerate.utils import FullyShardedDataParallelPlugin
    from torch.distributed.fsdp import StateDictType
    from transformers import AutoConfig

    from recipes_lib.modeling.families import meta_model, profile_for
    from recipes_lib.modeling.loading import declare_layer_classes

    environment = accelerate_variables(
        launch_without_starting("fsdp.yaml", "--main_process_port", "0")["env"]
    )
    config = AutoConfig.for_model(model_type, num_hidden_layers=2)
    with mock.patch.dict(os.environ, environment):
        plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2
    assert plugin.reshard_after_forward is True  # full shard: parameters freed after each forward
    assert plugin.state_dict_type == StateDictType.FULL_STATE_DICT  # one model.safetensors at the end
    assert environment["ACCELERATE_MIXED_PRECISION"] == "no"  # the recipe picks from the hardware

    model = meta_model(config)
    declare_layer_classes(model)  # what load_model does
    plugin.set_auto_wrap_policy(model)
    wrapped = [name for name, module in model.named_modules() if plugin.auto_wrap_policy(module, False, 0)]
    layers = profile_for(config).layer_modules[0]
    expected_layers = len(model.get_submodule(layers))
    assert [name for name in wrapped if name.startswith(layers + ".")] == [
        f"{layers}.{i}" for i in range(expected_layers)
    ]
    # and nothing but the profile's classes (ModernBERT's class declares its embeddings too; BERT's does not)
    classes = profile_for(config).layer_classes
    assert wrapped == [name for name, module in model.named_modules() if type(module).__name__ in classes]


def test_an_fsdp_layer_class_named_in_the_accelerate_config_wins():
    from accelerate.utils import FullyShardedDataParallelPlugin
    from transformers import AutoConfig

    from recipes_lib.modeling.families import meta_model
    from recipes_lib.modeling.loading import declare_layer_classes

    environment = accelerate_variables(
        launch_without_starting("fsdp.yaml", "--main_process_port", "0")["env"]
    )
    model = meta_model(AutoConfig.for_model("bert", num_hidden_layers=2))
    declare_layer_classes(model)
    assert model._no_split_modules == {"BertLayer"}
    with mock.patch.dict(os.environ, {**environment, "FSDP_TRANSFORMER_CLS_TO_WRAP": "BertAttention"}):
        plugin = FullyShardedDataParallelPlugin()
    plugin.set_auto_wrap_policy(model)
    wrapped = [name for name, module in model.named_modules() if plugin.auto_wrap_policy(module, False, 0)]
    assert wrapped and all(name.endswith(".attention") for name in wrapped), wrapped


@pytest.mark.parametrize("config, stage", [("deepspeed_zero2.yaml", 2), ("deepspeed_zero3.yaml", 3)])
def test_deepspeed_configs_give_their_zero_stage_and_leave_batch_and_clipping_to_the_recipe(config, stage):
    """Values the Trainer fills from the recipe's arguments must stay "auto", or they would disagree."""
    from accelerate.utils import DeepSpeedPlugin

    environment = accelerate_variables(launch_without_starting(config, "--main_process_port", "0")["env"])
    with mock.patch.dict(os.environ, environment):
        plugin = DeepSpeedPlugin()  # reads the ACCELERATE_DEEPSPEED_* variables; needs no DeepSpeed
    settings = plugin.deepspeed_config
    assert settings["zero_optimization"]["stage"] == stage
    assert settings["zero_optimization"]["offload_optimizer"]["device"] == "none"
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        assert settings[key] == "auto", key
    assert settings.get("gradient_clipping", "auto") == "auto"
    assert environment["ACCELERATE_MIXED_PRECISION"] == "no"  # the recipe picks from the hardware
    if stage == 3:
        # The recipe saves one model.safetensors: ZeRO-3 must gather the shards for it.
        assert settings["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
        assert plugin.zero3_init_flag is True


def test_zero_offload_config_is_one_process_of_zero2_with_the_optimizer_on_the_cpu_and_the_planners_figure():
    """accelerate parses deepspeed_zero2_offload.yaml into ZeRO-2 with offload_optimizer cpu on one process
    (no DeepSpeed or GPU needed), and the planner's figure for it: no optimizer state on the GPU."""
    from accelerate.utils import DeepSpeedPlugin

    from recipes_workbench.planner import Setup, load_config, plan_memory

    launched = launch_without_starting("deepspeed_zero2_offload.yaml", "--main_process_port", "0")
    assert (launched["launcher"], launched["args"].num_processes) == ("deepspeed", 1)
    environment = accelerate_variables(launched["env"])
    with mock.patch.dict(os.environ, environment):
        settings = DeepSpeedPlugin().deepspeed_config
    zero = settings["zero_optimization"]
    assert zero["stage"] == 2 and zero["offload_optimizer"]["device"] == "cpu"
    assert zero["offload_param"]["device"] == "none"  # ZeRO-Offload: the weights stay on the GPU
    assert "reduce_bucket_size" not in zero  # so DeepSpeed's 5e8 default, as the planner assumes
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        assert settings[key] == "auto", key
    assert environment["ACCELERATE_MIXED_PRECISION"] == "no"  # the recipe picks from the hardware

    config = load_config("bert-large-uncased")
    offloaded = plan_memory(config, Setup(bf16=True, optimizer_offload=True))
    on_gpu = plan_memory(config, Setup(bf16=True))
    assert offloaded.optimizer_state == 0 and offloaded.host >= 16 * offloaded.params_trainable
    assert offloaded.weights < on_gpu.weights * 0.51  # bf16 weights: DeepSpeed's bf16 mode casts the model
    # AdamW's 2.5 GiB leave the GPU; DeepSpeed's 0.93 GiB reduce bucket comes in.
    assert offloaded.total < on_gpu.total - on_gpu.optimizer_state + offloaded.gradients
    assert offloaded.total < on_gpu.total


def test_adamw_8bit_under_optimizer_offload_is_refused_before_anything_loads(monkeypatch):
    """accelerate would swap its 8-bit AdamW for DeepSpeed's CPU Adam: the run would not be adamw_8bit.

    adamw_8bit's options refuse it as they are parsed, before TrainingArguments is built (which needs
    DeepSpeed installed under a DeepSpeed launch, so the options are built here directly)."""
    from recipes_lib.config.adamw_8bit_options import Adam8bitArguments
    from recipes_lib.config.recipe_options import LoraArguments
    from recipes_lib.errors import ConfigError

    environment = accelerate_variables(
        launch_without_starting("deepspeed_zero2_offload.yaml", "--main_process_port", "0")["env"]
    )
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    with pytest.raises(
        ConfigError, match="adamw_8bit was launched with DeepSpeed's optimizer offload.*full_ft"
    ):
        Adam8bitArguments()
    LoraArguments()  # another recipe's options: nothing to refuse (full_ft, what the config is for, has none)
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "none")  # deepspeed_zero2.yaml
    Adam8bitArguments()


def test_deepspeed_is_an_optional_extra():
    setup = configparser.ConfigParser()
    setup.read(REPO_ROOT / "setup.cfg")
    extra = setup["options.extras_require"]["deepspeed"].split()
    assert any(requirement.startswith("deepspeed") for requirement in extra)
    assert not any("deepspeed" in line for line in setup["options"]["install_requires"].splitlines())
    for extra in ("test", "dev"):  # CI installs these: DeepSpeed stays out of them
        assert "deepspeed" not in setup["options.extras_require"][extra], extra


def test_multi_node_template_marks_what_to_fill_in_and_splits_processes_per_machine():
    lines = (CONFIG_DIR / "multi_node.yaml").read_text().splitlines()
    to_fill = {
        lines[i + 1].split(":")[0]
        for i, line in enumerate(lines[:-1])
        if line.startswith("# FILL IN") and not lines[i + 1].startswith("#")
    }
    assert to_fill == {
        "num_machines",
        "num_processes",
        "machine_rank",
        "main_process_ip",
        "main_process_port",
    }

    launched = launch_without_starting("multi_node.yaml", "--machine_rank", "1")
    args = launched["args"]
    # 16 processes over 2 machines: torchrun starts 8 on this one, which is node 1 of 2.
    assert (args.nnodes, args.nproc_per_node, args.node_rank) == ("2", "8", 1)
    assert args.rdzv_endpoint == "10.0.0.1:29500"


@pytest.mark.parametrize(
    "variable, name", [("ACCELERATE_USE_FSDP", "FSDP"), ("ACCELERATE_USE_DEEPSPEED", "DeepSpeed")]
)
def test_fsdp_or_deepspeed_without_a_gpu_is_refused_before_anything_loads(
    monkeypatch, tmp_path, variable, name
):
    """accelerate runs CPU processes as plain DDP whatever the config says: the recipe says so and stops."""
    import torch

    from recipes_lib.config.parsing import parse_arguments
    from recipes_lib.config.recipe_spec import RecipeSpec
    from recipes_lib.errors import ConfigError

    monkeypatch.setenv(variable, "true")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=f"launched with {name}.*multi_cpu.yaml"):
        parse_arguments(RecipeSpec("full_ft"), ["--output_dir", str(tmp_path)])


def test_a_loaded_model_that_declares_no_layer_class_gets_its_familys(tmp_path):
    """DistilBERT declares no _no_split_modules: load_model names its TransformerBlock, which FSDP then wraps."""
    from transformers import AutoConfig, DistilBertForSequenceClassification

    from recipes_lib.config.arguments import ModelArguments
    from recipes_lib.modeling.loading import load_model

    config = AutoConfig.for_model("distilbert", n_layers=2, dim=32, hidden_dim=64, n_heads=2, vocab_size=100)
    DistilBertForSequenceClassification(config).save_pretrained(tmp_path)
    model = load_model(ModelArguments(str(tmp_path)), config)
    assert model._no_split_modules == {"TransformerBlock"}
