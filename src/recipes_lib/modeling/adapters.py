"""LoRA adapters (peft) and QLoRA's quantized base (4-bit NF4, or 8-bit LLM.int8 with --base_bits 8),
shared by recipes/lora.py and recipes/qlora.py (recipes/README.md, "LoRA" and "QLoRA")."""

from __future__ import annotations

import json
import logging
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from recipes_lib.config.arguments import ModelArguments
from recipes_lib.config.bitsandbytes_import import import_bitsandbytes, kernels_line_dropped
from recipes_lib.config.precision import TORCH_DTYPES
from recipes_lib.config.recipe_options import MERGED_SUBDIR, LoraArguments
from recipes_lib.config.recipe_spec import LoraShape
from recipes_lib.errors import ConfigError, ModelError
from recipes_lib.modeling.families import default_lora_targets, meta_model, profile_for
from recipes_lib.modeling.loading import HeldLoadReport, load_model, reset_wrong_shaped_linears
from recipes_lib.modeling.score_head import score_head_in_fp32
from recipes_lib.modeling.sources import resolve_model_path
from recipes_lib.modeling.weight_files import check_model_files

logger = logging.getLogger(__name__)

ADAPTER_CONFIG_FILE = "adapter_config.json"
# QLoRA: the 4-bit settings of the base the adapter was trained on (save_adapter_extras).
BASE_QUANTIZATION_FILE = "base_quantization_config.json"


def resolve_lora_targets(shape: LoraShape, model_type: str) -> LoraShape:
    """'auto' replaced by the family's query and value projections (families.py); other targets as given."""
    if shape.target_modules != "auto":
        return shape
    targets, _ = default_lora_targets(model_type)
    if not targets:
        raise ConfigError(
            f"There are no default LoRA targets for {model_type} models. Name the attention projections "
            "with --lora_target_modules (or use all-linear)."
        )
    return replace(shape, target_modules=targets)


def check_lora_targets(shape: LoraShape, model_config) -> LoraShape:
    """The resolved adapters, after checking on config.json alone (before data or weights load; peft would
    find out only when wrapping the loaded model) that each target names a linear layer."""
    shape = resolve_lora_targets(shape, model_config.model_type)
    if shape.target_modules == "all-linear":
        return shape
    linear = linear_layer_names(meta_model(model_config))  # on the meta device: no weights
    unknown = [name for name in shape.target_modules if name not in linear]
    if unknown:
        raise ConfigError(
            f"lora_target_modules names {', '.join(unknown)}, which this {model_config.model_type} model has no "
            f"linear layer called. Its linear layers are called: {', '.join(linear)}. Name some of those "
            "(or use all-linear, or leave the option out for the family's query and value projections)."
        )
    return shape


def lora_config(shape: LoraShape, train_in_full: tuple[str, ...] = ()):
    """peft's LoraConfig for resolved adapters; `train_in_full`: modules trained and saved whole."""
    from peft import LoraConfig, TaskType

    targets = shape.target_modules
    in_full = [*train_in_full, *(["pooler"] if shape.train_pooler else [])]
    return LoraConfig(
        # SEQ_CLS makes peft add the head ('classifier' or 'score') to modules_to_save: trained in
        # full and saved with the adapter, so a reloaded model does not get a random head.
        task_type=TaskType.SEQ_CLS,
        r=shape.r,
        lora_alpha=shape.alpha,
        lora_dropout=shape.dropout,
        target_modules=targets if isinstance(targets, str) else list(targets),
        modules_to_save=in_full or None,
    )


@contextmanager
def peft_wrapping():
    """Around peft's wrapping of a model: bitsandbytes' kernels line dropped (peft's LoRA dispatch runs its
    code the first time), and peft 0.21's FutureWarning for reading `model.is_gradient_checkpointing`, which
    transformers 5 deprecated: it asks the user for a change only peft can make."""
    with warnings.catch_warnings(), kernels_line_dropped():
        warnings.filterwarnings(
            "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        yield


def linear_layer_names(model: nn.Module) -> list[str]:
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, nn.Linear)})


def linears_outside_layers(config) -> list[str]:
    """Module paths of the linear layers outside the repeated encoder layers (heads, poolers, projections):
    they stay in full precision under a quantized base, small as they are, since the ones the checkpoint
    lacks (a new head, DeBERTa's pooler) must train."""
    inside = tuple(f"{path}." for path in profile_for(config).layer_modules)
    return sorted(
        name
        for name, module in meta_model(config).named_modules()
        if isinstance(module, nn.Linear) and not name.startswith(inside)
    )


# peft's SEQ_CLS task trains and saves the head under these names itself.
PEFT_HEAD_NAMES = ("classifier", "score")


def _new_modules_outside_the_head(model) -> tuple[str, ...]:
    """The outermost newly initialised modules, less the head peft already trains (a wrapper inside a
    wrapper would not reload: RoBERTa's head is classifier.dense + classifier.out_proj)."""
    paths = sorted(getattr(model, "newly_initialized_modules", ()))
    outermost = [p for p in paths if not any(p.startswith(f"{other}.") for other in paths if other != p)]
    return tuple(path for path in outermost if not any(part in PEFT_HEAD_NAMES for part in path.split(".")))


def add_lora(model, lora: LoraShape | LoraArguments):
    """Freeze `model` and wrap it in a peft model with LoRA adapters and a trainable head. `lora`: options, or
    a shape (`Prepared.adapters`). Every module the checkpoint did not provide (`newly_initialized_modules`:
    the head, DeBERTa's pooler...) trains in full and is saved with the adapter: frozen, it would stay random.
    """
    from peft import get_peft_model

    shape = lora.shape() if isinstance(lora, LoraArguments) else lora
    shape = resolve_lora_targets(shape, model.config.model_type)
    config = lora_config(shape, train_in_full=_new_modules_outside_the_head(model))
    if shape.train_pooler and not any(name.endswith("pooler") for name, _ in model.named_modules()):
        raise ConfigError(
            f"lora_train_pooler is on, but this {model.config.model_type} model has no module named 'pooler'. "
            "Leave the option off for it."
        )
    try:
        with peft_wrapping():
            peft_model = get_peft_model(model, config)
    except ValueError as error:
        # peft 0.21 raises NoMatchingPeftModuleError (a ValueError); older versions a plain ValueError.
        message = f"{type(error).__name__}: {error}"
        if "NoMatchingPeftModuleError" not in message and "not found in the base model" not in message:
            raise
        raise ConfigError(
            f"lora_target_modules {shape.target_modules} names no layer of this {model.config.model_type} "
            f"model. Its linear layers are called: {', '.join(linear_layer_names(model))} (or use all-linear)."
        ) from None
    return saving_embeddings_only_if_adapted(peft_model)


def saving_embeddings_only_if_adapted(peft_model):
    """`peft_model`, whose saves no longer ask the Hub whether the vocabulary was resized: peft's
    `save_embedding_layers="auto"` looks a Hub id's config.json up at every save (offline: a warning each
    time). The recipes never resize it, so the embeddings change only where LoRA adapts them."""
    from functools import partial

    from peft.tuners.tuners_utils import BaseTunerLayer

    adapted_embeddings = any(
        isinstance(module.get_base_layer(), nn.Embedding)
        for module in peft_model.modules()
        if isinstance(module, BaseTunerLayer)
    )
    # On the instance, so the Trainer's own call (model.save_pretrained(output_dir, state_dict=...,
    # is_main_process=...)) gets it: no Trainer argument reaches peft's save_embedding_layers.
    peft_model.save_pretrained = partial(
        peft_model.save_pretrained, save_embedding_layers="auto" if adapted_embeddings else False
    )
    return peft_model


def nf4_quantization_config(model_config, precision: str):
    """QLoRA's 4-bit base: NF4 weights, double quantization (4.127 bits per weight: recipes/README.md,
    "Memory before activations"), matmuls in the run's `precision` (on CPUs fp32: bf16 is tens of times
    slower there without AVX-512 BF16). Only the encoder layers' linears are quantized (linears_outside_layers).
    """
    from transformers import BitsAndBytesConfig

    keep = linears_outside_layers(model_config)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=TORCH_DTYPES[precision],
        llm_int8_skip_modules=keep,
    )


def int8_quantization_config(model_config):
    """The 8-bit base (`--base_bits 8`): bitsandbytes' LLM.int8 linear layers (Dettmers et al., 2022), on the
    same linears as the 4-bit base; docs/planner.md's "LoRA on an 8-bit base" row gives its bytes and kernels.
    llm_int8_threshold 6.0 is bitsandbytes' default (outlier input columns run in fp16 on CUDA)."""
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_8bit=True, llm_int8_threshold=6.0, llm_int8_skip_modules=linears_outside_layers(model_config)
    )


def base_quantization_config(model_config, precision: str, bits: int = 4):
    if bits == 8:
        return int8_quantization_config(model_config)
    if bits == 4:
        return nf4_quantization_config(model_config, precision)
    raise ConfigError(f"base_bits is {bits}; the quantized base is 4-bit NF4 (4) or 8-bit LLM.int8 (8).")


def check_base_support(device: torch.device, bits: int = 4) -> None:
    """The qlora recipe's preflight: fail in seconds, before data or weights load, where the `bits`-bit base
    cannot run. One NF4 quantize-dequantize (4) or one LLM.int8 layer's forward and backward (8) on the
    training device, through the kernels the model will use (a missing or mismatched native library, or a
    device bitsandbytes has no backend for, fails here)."""
    try:
        if bits == 8:
            bnb = import_bitsandbytes("nn")
            layer = bnb.nn.Linear8bitLt(64, 64, bias=False, has_fp16_weights=False, threshold=6.0).to(device)
            layer(torch.randn(2, 64, device=device, requires_grad=True)).sum().backward()
        else:
            bnb_functional = import_bitsandbytes("functional").functional
            probe = torch.linspace(-1, 1, 64, device=device)
            bnb_functional.dequantize_4bit(*bnb_functional.quantize_4bit(probe, quant_type="nf4"))
    except Exception as error:  # ImportError, RuntimeError, NotImplementedError: all mean "not here"
        said = str(error).strip()
        detail = said.splitlines()[0] if said else type(error).__name__
        if bits == 8:
            raise ModelError(
                f"--base_bits 8 needs bitsandbytes' 8-bit LLM.int8 layers on {device}, and they fail here: {detail}. "
                "Install a bitsandbytes built for this machine (pip install -U bitsandbytes; 0.50 runs LLM.int8 "
                "on CUDA and CPU), or leave --base_bits at 4 (the NF4 base, less memory)."
            ) from None
        raise ModelError(
            f"QLoRA needs bitsandbytes' 4-bit NF4 on {device}, and it fails here: {detail}. "
            "Install a bitsandbytes built for this machine (pip install -U bitsandbytes; 0.45+ runs 4-bit on CUDA "
            "and CPU), or run recipes/lora.py: the same adapters on a full-precision base, with more memory."
        ) from None


def _in_autocast_dtype(module, inputs, output):
    """A quantized linear's output in autocast's dtype while autocast is on, as nn.Linear's is (bitsandbytes
    casts it back to the input's: fp32 after a LayerNorm, and DeBERTa-v2/v3 then masks its bf16 attention
    scores with fp32's minimum and fails, tests/test_cpu_bf16.py). A 4-bit layer computes in the run's
    precision, so this cast loses nothing."""
    device_type = output.device.type
    if torch.is_autocast_enabled(device_type) and output.is_floating_point():
        return output.to(torch.get_autocast_dtype(device_type))
    return None


def prepare_4bit_model(model):
    from peft import prepare_model_for_kbit_training

    if next(model.parameters()).device.type == "cpu":
        # bitsandbytes 0.50 repacks a 4-bit weight for its CPU inference kernel the first time the
        # layer runs in eval mode and keeps that layout when training resumes, where the next
        # forward fails ("a view of a leaf Variable that requires grad ..."). Evaluation runs
        # between epochs, so keep the training layout throughout.
        for module in model.modules():
            if hasattr(module, "support_avx512bf16_for_cpu"):
                module.support_avx512bf16_for_cpu = False
    for module in model.modules():
        if isinstance(module, nn.Linear) and type(module).__module__.startswith("bitsandbytes"):
            module.register_forward_hook(_in_autocast_dtype)
    # Freezes the base and casts its remaining fp16/bf16 parameters (LayerNorm, embeddings) to fp32.
    # Checkpointing follows --activation_checkpointing, as in every other recipe, so the
    # recipes differ only in what makes them that recipe.
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)


def save_adapter_extras(
    arguments, model_config, tokenizer, lora: LoraArguments, quantization_config=None
) -> MergedModel | None:
    """After the adapter is saved (main process only): what a reload needs next to it (config.json's label
    names; QLoRA's base quantization, so `load_trained_model` rebuilds the base it was evaluated on) and, if
    asked, the merged model, returned for the record to score (else None)."""
    output_dir = Path(arguments.training.output_dir)
    model_config.save_pretrained(output_dir)
    quantization_path = output_dir / BASE_QUANTIZATION_FILE
    if quantization_config is not None:
        quantization_path.write_text(quantization_config.to_json_string(use_diff=False))
    else:
        quantization_path.unlink(missing_ok=True)  # a LoRA run over an old QLoRA run's output_dir
    if not lora.merge_adapter:
        return None
    merged_dir = output_dir / MERGED_SUBDIR
    merged = merged_model(arguments.model, model_config, output_dir, device=arguments.training.device)
    merged.model.save_pretrained(merged_dir)
    tokenizer.save_pretrained(merged_dir)
    logger.info("Merged model saved in %s: %s", merged_dir, merged.description)
    return merged


def read_base_quantization(adapter_dir: str | Path):
    """The BitsAndBytesConfig of the quantized base an adapter was trained on (QLoRA), or None (LoRA)."""
    path = Path(adapter_dir) / BASE_QUANTIZATION_FILE
    if not path.is_file():
        return None
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig.from_dict(json.loads(path.read_text()))


@dataclass(frozen=True)
class MergedModel:
    model: Any
    description: str


def merged_model(model_args: ModelArguments, model_config, adapter_dir, device=None) -> MergedModel:
    """Fold the adapter into an fp32 copy of the base, W + (alpha / r) B A: a plain model. QLoRA's base is
    loaded quantized as in training (on `device`) and dequantized to fp32, so the adapter is folded into
    the weights it was trained on (merging into the 4-bit weights would re-quantize them)."""
    from peft import PeftModel

    quantization = read_base_quantization(adapter_dir)
    if quantization is None:
        base = load_model(model_args, model_config)
    else:
        quantized = load_model(
            model_args, model_config, quantization_config=quantization, device_map={"": device or "cpu"}
        )
        base = quantized.dequantize(dtype=torch.float32)
    with peft_wrapping():
        merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    return MergedModel(merged, describe_merged_model(quantization))


def merge_adapter(model_args: ModelArguments, model_config, adapter_dir, merged_dir, device=None) -> str:
    merged = merged_model(model_args, model_config, adapter_dir, device)
    merged.model.save_pretrained(merged_dir)
    return merged.description


def describe_merged_model(quantization) -> str:
    if quantization is None:
        return (
            "a plain fp32 model, the adapter folded into the base's weights (same outputs to float rounding)"
        )
    if quantization.load_in_8bit:
        base, matmuls = "8-bit LLM.int8", "int8 matmuls (fp16 for outlier columns; dequantized on CPU)"
    else:
        compute_dtype = str(quantization.bnb_4bit_compute_dtype).removeprefix("torch.")
        base, matmuls = "4-bit NF4", f"4-bit matmuls in {compute_dtype}"
    return (
        f"a plain fp32 model, the adapter folded into the base's {base} "
        "weights dequantized to fp32 (the weights QLoRA trained on, not the original full-precision ones). "
        f"It is not the evaluated model, which ran its {matmuls} through bitsandbytes: "
        "its outputs differ from eval_predictions.jsonl by rounding (more under bf16/fp16). "
        "recipes-lib predict OUTPUT_DIR runs the evaluated model itself"
    )


def load_trained_model(output_dir: str | Path, device: str | torch.device | None = None):
    """The model a recipe saved, as it was evaluated: a plain model, or the base (QLoRA: quantized with
    the saved settings, prepared as in training) with its adapter. `device`: default CPU."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    output_dir = Path(output_dir)
    check_model_files(output_dir)  # a damaged file: one paragraph naming it (weight_files.py)
    adapter_config_path = output_dir / ADAPTER_CONFIG_FILE
    if not adapter_config_path.is_file():
        model = score_head_in_fp32(AutoModelForSequenceClassification.from_pretrained(output_dir))
        return model.to(device) if device is not None else model
    from peft import PeftModel

    base_path = json.loads(adapter_config_path.read_text())["base_model_name_or_path"]
    config = AutoConfig.from_pretrained(output_dir)
    quantization = read_base_quantization(output_dir)
    placement = {}
    if quantization is not None:
        import_bitsandbytes()  # transformers' quantizer runs it as the base loads
        # A 4-bit base is quantized as its weights land on the device: it cannot be moved afterwards.
        placement = {"quantization_config": quantization, "device_map": {"": device or "cpu"}}
    try:
        # The head comes from the adapter (modules_to_save); a base that is a classifier of other labels
        # has one of another shape, replaced as in training (modeling.load_model).
        # transformers reports the head it had to initialise; the adapter brings the trained one.
        with HeldLoadReport() as load_report:
            base, loading = AutoModelForSequenceClassification.from_pretrained(
                resolve_model_path(base_path),
                config=config,
                ignore_mismatched_sizes=True,
                output_loading_info=True,
                **placement,
            )
        load_report.release_if_the_body_is_affected(loading)
    except OSError as error:
        raise ModelError(
            f"The adapter in '{output_dir}' was trained on the base model '{base_path}', which cannot be "
            f"loaded here ({error}). Make that model available, or use the merged model in "
            f"{output_dir / MERGED_SUBDIR} (saved with --merge_adapter)."
        ) from None
    reset_wrong_shaped_linears(base)  # transformers 5.6 keeps such a head under a quantization config
    score_head_in_fp32(base)  # as in training: a regression score computed in fp32
    if quantization is not None:
        base = prepare_4bit_model(base)
    elif device is not None:
        base = base.to(device)
    with peft_wrapping():
        return PeftModel.from_pretrained(base, str(output_dir))
