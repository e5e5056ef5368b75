"""bitsandbytes' 8-bit AdamW, built by recipes/adamw_8bit.py with the Trainer's own weight-decay groups
(every other recipe lets the Trainer build torch's AdamW)."""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn
from transformers import Trainer, TrainingArguments

from recipes_lib.config.bitsandbytes_import import import_bitsandbytes
from recipes_lib.errors import ConfigError
from recipes_lib.modeling.optimizers import MIN_8BIT_SIZE

logger = logging.getLogger(__name__)


def decay_parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """The Trainer's two AdamW groups (`Trainer.get_decay_parameter_names`, which reads no Trainer state),
    so a recipe that builds its own optimizer decays exactly what full fine-tuning decays."""
    decay_names = set(Trainer.get_decay_parameter_names(None, model))
    trainable = [(name, parameter) for name, parameter in model.named_parameters() if parameter.requires_grad]
    return [
        {"params": [p for name, p in trainable if name in decay_names], "weight_decay": weight_decay},
        {"params": [p for name, p in trainable if name not in decay_names], "weight_decay": 0.0},
    ]


def create_adamw_8bit(
    model: nn.Module, training: TrainingArguments, embedding_optimizer_bits: int = 32, paged: bool = False
) -> torch.optim.Optimizer:
    """bitsandbytes AdamW with 8-bit (block-wise quantized) moments, configured like the Trainer's AdamW;
    `embedding_optimizer_bits` and `paged` as recipes/README.md ("8-bit AdamW and the embeddings") says.
    PagedAdamW8bit keeps the moments of tensors of 100,000 elements or more in CUDA unified memory."""
    bnb = import_bitsandbytes("optim")

    if embedding_optimizer_bits not in (8, 32):
        raise ConfigError(
            f"embedding_optimizer_bits is {embedding_optimizer_bits}; use 32 (bitsandbytes' advice, the "
            "default) or 8."
        )
    if paged and training.device.type != "cuda":  # the model is still on the CPU here on every device
        logger.warning(
            "--paged_optimizer: bitsandbytes pages optimizer state in CUDA unified memory only; on %s it keeps "
            "ordinary buffers, the same state as without paging (paging is GPU-only).",
            training.device.type,
        )
    optimizer_class = bnb.optim.PagedAdamW8bit if paged else bnb.optim.AdamW8bit
    optimizer = optimizer_class(
        decay_parameter_groups(model, training.weight_decay),
        lr=training.learning_rate,
        betas=(training.adam_beta1, training.adam_beta2),
        eps=training.adam_epsilon,
        min_8bit_size=MIN_8BIT_SIZE,
    )
    # The manager is one per process and files overrides by (group, position) as well as by
    # parameter: an earlier optimizer's overrides would apply to this one's parameters at the same
    # positions. A run builds one optimizer, so start from a clean manager.
    manager = bnb.optim.GlobalOptimManager.get_instance()
    manager.initialize()
    if embedding_optimizer_bits == 32:
        # The optimizer looks these modules up on its first step.
        for module in model.modules():
            if isinstance(module, nn.Embedding):
                manager.register_module_override(module, "weight", {"optim_bits": 32})
    return optimizer
