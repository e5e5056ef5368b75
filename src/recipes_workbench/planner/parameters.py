"""What the model a recipe trains holds, counted on PyTorch's meta device (shapes, no memory).

With adapters, the model is wrapped with the same `adapters.add_lora` the recipes train with, so the
counts are exact: what `modeling.count_parameters` gives for the real model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from recipes_lib.config.recipe_spec import TrainingShape


@dataclass
class Parameters:
    """Parameter counts of the model a recipe trains, from the meta device."""

    total: int
    trainable: int
    trainable_tensors: list[tuple[int, bool]]  # (elements, is an nn.Embedding weight)
    buffer_bytes: int
    quantized_linears: list[int] = field(default_factory=list)  # a quantized base: elements of each weight
    quantized_rows: list[int] = field(default_factory=list)  # and its output rows (int8: one fp32 scale each)


def count_parameters_on_meta(config, shape: TrainingShape | None = None) -> Parameters:
    """Build the model a recipe of this shape trains on the meta device and count what it holds, by
    kind: adapters wrap what `add_lora` wraps ("auto": the family's own) and what the checkpoint lacks
    trains in full, as in a recipe (a 4-bit base holds the same number of parameters, packed)."""
    from recipes_lib.modeling.families import meta_model

    shape = shape or TrainingShape()
    model = meta_model(config)
    quantized = _quantized_linears(config, model) if shape.quantized_base else []
    if shape.adapters is not None:
        from recipes_lib.modeling.adapters import add_lora

        model.newly_initialized_modules = modules_the_checkpoint_lacks(config, model)
        model = add_lora(model, shape.adapters)
    counted = _count(model, [n for n, _ in quantized])
    counted.quantized_rows = [rows for _, rows in quantized]
    return counted


def _quantized_linears(config, model) -> list[tuple[int, int]]:
    """(elements, output rows) of each linear weight a quantized base stores in NF4 or int8: those of
    the repeated encoder layers; the head, the pooler and other projections stay in full precision,
    as adapters.nf4_quantization_config and int8_quantization_config keep them."""
    from torch import nn

    from recipes_lib.modeling.adapters import linears_outside_layers

    keep = set(linears_outside_layers(config))
    return [
        (module.weight.numel(), module.weight.shape[0])
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and name not in keep
    ]


def _count(model, quantized: list[int]) -> Parameters:
    """Every parameter once (tied weights are one), the trainable ones by tensor, and the buffers."""
    from torch import nn

    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    seen, total, trainable, tensors = set(), 0, 0, []
    for parameter in model.parameters():
        if id(parameter) in seen:
            continue
        seen.add(id(parameter))
        total += parameter.numel()
        if parameter.requires_grad:
            trainable += parameter.numel()
            tensors.append((parameter.numel(), id(parameter) in embedding_ids))
    buffer_bytes = sum(buffer.numel() * buffer.element_size() for buffer in model.buffers())
    return Parameters(total, trainable, tensors, buffer_bytes, quantized)


def modules_the_checkpoint_lacks(config, model) -> tuple[str, ...]:
    """The modules of the classification model that a checkpoint with this config has no weights for.

    What `modeling.load_model` reads from the loading report, told from config.json alone: the
    modules outside the base model (the head; DeBERTa's pooler; DistilBERT's pre_classifier) less
    those the class config.json names (`architectures`) has too: ModernBertForMaskedLM brings the
    head's dense layer and norm, a ...ForSequenceClassification checkpoint everything. A config
    that names no class (or the base model) is a base model's: everything outside it is new, and so
    is what the classifier's base model adds to the base class's default (GTE's and NomicBERT's
    pooler, which GteModel and NomicBertModel build only when asked).
    """
    import torch
    import transformers

    prefix = model.base_model_prefix
    base = model.get_submodule(prefix)
    checkpoint = None
    for name in getattr(config, "architectures", None) or ():
        checkpoint_class = getattr(transformers, name, None)
        if checkpoint_class is None or not hasattr(checkpoint_class, "base_model_prefix"):
            continue
        try:
            with torch.device("meta"):
                checkpoint = checkpoint_class(config)
        except Exception:  # a class that cannot be built from this config: assume a base model's weights
            checkpoint = None
        break
    lacking = _outside_base(model)
    if checkpoint is not None:
        lacking -= _outside_base(checkpoint)
    if checkpoint is not None and type(checkpoint) is not type(base):
        return tuple(sorted(lacking))  # a task model's checkpoint: its base is whole
    try:
        with torch.device("meta"):
            published = type(base)(config)  # the base class as published: its own defaults
    except Exception:
        return tuple(sorted(lacking))
    lacking |= {f"{prefix}.{path}" for path in _with_parameters(base) - _with_parameters(published)}
    return tuple(sorted(lacking))


def _with_parameters(network) -> set[str]:
    return {
        path
        for path, module in network.named_modules()
        if any(True for _ in module.parameters(recurse=False))
    }


def _outside_base(network) -> set[str]:
    prefix = network.base_model_prefix
    return {
        path
        for path in _with_parameters(network)
        if path and path != prefix and not path.startswith(f"{prefix}.")
    }
