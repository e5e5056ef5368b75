"""What differs between encoder families, as one profile per model config (`profile_for(config)`): the
libraries that know (peft, the model class) are asked first, the family's entry (config/family_registry.py)
says the rest; all from config.json alone, so every check runs before data or weights load (docs/families.md).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import torch
from torch import nn

from recipes_lib.config.family_registry import family_for
from recipes_lib.errors import ModelError


@dataclass(frozen=True)
class ArchitectureProfile:
    model_type: str
    family: str
    lora_targets: tuple[str, ...]  # the attention query and value projections (or the fused QKV one)
    lora_targets_source: str  # "peft" or "hand-written"
    attention_implementations: tuple[str, ...]  # what the class supports, best first (usable_attention)
    max_length: int | None  # tokens a sequence may hold, position offset included
    layer_classes: tuple[str, ...]  # what FSDP wraps as one unit
    layer_modules: tuple[str, ...]  # where the repeated layers live, e.g. ("bert.encoder.layer",)

    @property
    def default_attention(self) -> str:
        return usable_attention(self.attention_implementations)


def sequence_classification_class(config) -> type:
    """The class AutoModelForSequenceClassification builds for `config`; a ModelError for a model it has none for."""
    from transformers import AutoModelForSequenceClassification

    try:
        return AutoModelForSequenceClassification._model_mapping[type(config)]
    except KeyError:
        # An image, audio or speech model (ViT, Whisper, ...): transformers has no text classifier for it.
        raise ModelError(
            f"A '{config.model_type}' model ({type(config).__name__}) has no sequence-classification model in "
            "transformers (AutoModelForSequenceClassification does not take it): the recipes fine-tune text "
            "encoders such as bert-base-uncased, and `recipes-lib families` lists the families they support."
        ) from None


FLASH_ATTENTION = "flash_attention_2"


def _attention_implementations(model_class: type) -> tuple[str, ...]:
    # FlashAttention 2 first (CUDA with the flash-attn package only), then PyTorch's fused SDPA kernel
    # (every device); eager always works.
    supported = [FLASH_ATTENTION] if getattr(model_class, "_supports_flash_attn", False) else []
    if getattr(model_class, "_supports_sdpa", False):
        supported.append("sdpa")
    return (*supported, "eager")


def cuda_available() -> bool:
    return torch.cuda.is_available()


def flash_attention_available() -> bool:
    """Whether this machine runs FlashAttention 2: transformers' own check (the flash-attn package,
    2.3.3 or newer, and a CUDA GPU), on a GPU flash-attn 2 has kernels for (Ampere or newer: compute
    capability 8.0; a T4 or V100 is refused at the first forward)."""
    from transformers.utils import is_flash_attn_2_available

    return is_flash_attn_2_available() and torch.cuda.get_device_capability()[0] >= 8


def usable_attention(supported: tuple[str, ...]) -> str:
    """The first of `supported` (best first) that this machine runs: flash_attention_2 needs
    `flash_attention_available()`; sdpa and eager run everywhere."""
    return next(kernel for kernel in supported if kernel != FLASH_ATTENTION or flash_attention_available())


def default_lora_targets(model_type: str) -> tuple[tuple[str, ...], str]:
    """(the family's attention query and value projections, or its fused QKV one; "peft" or "hand-written")."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as MAPPING

    targets = MAPPING.get(model_type) or MAPPING.get(model_type.replace("-", "_"))
    if targets:
        return tuple(targets), "peft"
    family = family_for(model_type)
    return (family.lora_targets if family else ()), "hand-written"


def meta_model(config) -> nn.Module:
    """Modules and shapes, no memory."""
    with torch.device("meta"):
        return sequence_classification_class(config)(config)


def _repeated_layers(model: nn.Module) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(module paths, class names) of the model's stack of layers: its longest ModuleList of one class."""
    best_path, best = None, None
    for path, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) > 0:
            classes = {type(child).__name__ for child in module}
            if len(classes) == 1 and (best is None or len(module) > len(best)):
                best_path, best = path, module
    if best is None:
        return (), ()
    return (best_path,), (type(best[0]).__name__,)


@functools.lru_cache(maxsize=32)
def _profile(config_json: str, config_class: type) -> ArchitectureProfile:
    config = config_class.from_dict(json.loads(config_json))
    model_type = config.model_type
    model_class = sequence_classification_class(config)
    targets, targets_source = default_lora_targets(model_type)
    model = meta_model(config)
    layer_modules, layer_classes = _repeated_layers(model)
    declared = tuple(getattr(model_class, "_no_split_modules", None) or ())
    positions = getattr(config, "max_position_embeddings", None)
    family = family_for(model_type)
    offset = (config.pad_token_id or 0) + 1 if family and family.positions_after_padding else 0
    return ArchitectureProfile(
        model_type=model_type,
        family=family.name if family else model_type,
        lora_targets=targets,
        lora_targets_source=targets_source,
        attention_implementations=_attention_implementations(model_class),
        max_length=positions - offset if positions is not None else None,
        layer_classes=declared or layer_classes,
        layer_modules=layer_modules,
    )


def check_transformers_knows(model_type: str) -> None:
    """Refuse, in one paragraph, a family's model type that the installed transformers predates (GTE before
    its `transformers_since`); anything else is left to transformers' own message."""
    from transformers import __version__
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    family = family_for(model_type)
    if family is None or family.transformers_since is None or model_type in CONFIG_MAPPING:
        return
    raise ModelError(
        f"{family.name} models (model_type '{model_type}') need transformers {family.transformers_since} or newer, "
        f"the first release that ships them, and this environment has transformers {__version__}. Upgrade it: "
        f'pip install -U "transformers>={family.transformers_since}".'
    )


def check_sequence_length(config, max_seq_length: int) -> None:
    """Refuse a max_seq_length longer than the positions a sequence of this model can use (a recipe's
    check before anything loads, and the planner's: `plan --max_seq_length 8192` on a 512-token BERT)."""
    limit = profile_for(config).max_length
    if limit is None or max_seq_length <= limit:
        return
    offset = config.max_position_embeddings - limit
    why = (
        f"{config.max_position_embeddings} position embeddings less {offset} below its first position, "
        "which starts after the padding index"
        if offset
        else f"max_position_embeddings of {config.model_type}"
    )
    raise ModelError(
        f"max_seq_length {max_seq_length} is longer than this model accepts: {limit} tokens ({why}). "
        f"Use --max_seq_length {limit} or less."
    )


def profile_for(config) -> ArchitectureProfile:
    """The profile of the model `config` describes (cached per config: building it instantiates on meta)."""
    return _profile(config.to_json_string(use_diff=False), type(config))
